#!/usr/bin/env bash
# The measurement run, on the GPU machine:
#   perf.sh [OUT_DIR]      (default: $OUT/perf, or ./perf)
# Writes topology.txt; raw-group, raw-group-caller, raw-group-nonblocking (the
# group on nonblocking communicators), raw-tensor and raw-raw-fingerprint (an
# in-band fingerprint all_reduce grouped with every operation) as .txt, .jsonl
# and .svg; and soak.txt. Ends with one line naming what failed, if anything.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bundle_start "$here" perf "${1:-}"
{ nvidia-smi -L; nvidia-smi topo -m; } >"$out/topology.txt" 2>&1
failed=()
for run in raw,group: raw,group-caller: raw,group:nonblocking raw,tensor: raw,raw-fingerprint:; do
    layers="${run%%:*}"
    comms="${run#*:}"
    name="${layers/,/-}${comms:+-$comms}"
    echo "==> nccl-perf --compare $layers ${comms:+--group-comms $comms }-b 8 -e 4G -f 2 -c 1"
    "$bin/nccl-perf-nccl-perf" --compare "$layers" ${comms:+--group-comms "$comms"} \
        -b 8 -e 4G -f 2 -c 1 --json "$out/$name.jsonl" --plot "$out/$name.svg" \
        >"$out/$name.txt" 2>&1 || failed+=("nccl-perf $name")
    grep -E '^# (Collective|Median ratio|Out of bounds)' "$out/$name.txt"
done
echo "==> group-soak"
"$bin/benches-group-soak" >"$out/soak.txt" 2>&1 || failed+=("group-soak")
tail -1 "$out/soak.txt"
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "perf.sh: all ran; results in $out"
else
    echo "perf.sh: failed: ${failed[*]}; results in $out"
    exit 1
fi
