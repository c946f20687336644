#!/usr/bin/env bash
# The slow-rank soak, on the GPU machine:
#   soak.sh [OUT_DIR]     (default: $OUT/soak, or ./soak)
# `nccl-perf --soak SECS --stall RANK:MS` under `nccl-launch -n WORLD`:
# for SECS seconds (default 600), checked all_reduces through the group
# with its default liveness beat, rank RANK (default the last) sleeping MS
# (default 2000) before each; a live group must never fail. The table goes
# to OUT_DIR/soak.txt, rank 0's JSON line to OUT_DIR/soak.jsonl, and the
# verdict line ("soak.sh: passed" or "soak.sh: FAILED ...") to both the
# output and OUT_DIR/verdict.txt, so a run started in the background
# (setsid) can be read later. The NCCL under test is NCCL_LIBRARY's.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bundle_start "$here" soak "${1:-}"
world="${WORLD:-4}"
secs="${SECS:-600}"
stall="${STALL:-$((world - 1)):2000}"
echo "==> nccl-perf --soak $secs --stall $stall, world size $world ($(date -u +%T))" | tee "$out/soak.txt"
# The launch's own bound: the soak (its steps take up to SECS + MS), plus a
# minute for creation and shutdown.
"$launch" -n "$world" --timeout $((secs + ${stall#*:} / 1000 + 60)) "$bin/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --soak "$secs" --stall "$stall" \
    --json "$out/soak.jsonl" >>"$out/soak.txt" 2>&1
status=$?
if ((status == 0)); then
    verdict="soak.sh: passed: $secs s at world size $world, rank ${stall%%:*} stalling ${stall#*:} ms a step, no failure ($(date -u +%T))"
else
    verdict="soak.sh: FAILED (status $status): see $out/soak.txt ($(date -u +%T))"
fi
echo "$verdict" | tee "$out/verdict.txt"
exit "$status"
