#!/usr/bin/env bash
# Recovery figures, on the GPU machine:
#   heal.sh [OUT_DIR]     (default: $OUT/heal, or ./heal)
# For each world size in WORLDS (default "4 8") and each way of going on
# in MODES (default "shrink recreate full"), REPEATS launches (default 3)
# of `nccl-perf --inject FAULT@LAST:20` under `nccl-launch --keep-going`:
# the last rank is lost after 20 all_reduces, and rank 0 prints the
# slowest survivor's detect, heal and first-correct times from the loss,
# appended as a JSON line to OUT_DIR/recovery.jsonl; then
# torch.distributed.shrink_group's figure for the same loss
# (scripts/torch_heal_cost.py), once per world size. The NCCL under test
# is NCCL_LIBRARY's (the loader's default without it).
# FAULT (default exit) is exit, kill or stop (a hang: give OP_TIMEOUT_MS,
# the group's operation timeout, default 3000 here); TELL=1 tells the
# survivors who is lost (--tell); TORCH=0 skips torch's figure.
# Then, per world size W, REPEATS launches of `nccl-perf --grow-spare 20`:
# a group of W - 1 grows by a warm spare to W, timed to its first correct
# all_reduce, appended to OUT_DIR/grow.jsonl (GROW=0 skips them).
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bundle_start "$here" heal "${1:-}"
read -r -a worlds <<<"${WORLDS:-4 8}"
read -r -a modes <<<"${MODES:-shrink recreate full}"
fault="${FAULT:-exit}"
failed=()
for world in "${worlds[@]}"; do
    for mode in "${modes[@]}"; do
        for repeat in $(seq "${REPEATS:-3}"); do
            echo "==> nccl-perf --inject $fault@$((world - 1)):20 --heal $mode, world size $world, run $repeat"
            # The launch's status is the lost rank's; the run passed when
            # rank 0 printed its JSON line.
            before=$(wc -l <"$out/recovery.jsonl" 2>/dev/null || echo 0)
            "$launch" -n "$world" --keep-going --timeout 180 "$bin/nccl-perf-nccl-perf" all_reduce \
                --layer group-caller -b 4K --inject "$fault@$((world - 1)):20" --heal "$mode" \
                --op-timeout-ms "${OP_TIMEOUT_MS:-3000}" ${TELL:+--tell} \
                --json "$out/recovery.jsonl" 2>&1 | grep -vE '^\[rank [0-9]+\] \{' | tee -a "$out/recovery.txt"
            after=$(wc -l <"$out/recovery.jsonl" 2>/dev/null || echo 0)
            ((after > before)) || failed+=("$fault $mode $world #$repeat")
        done
    done
    if [[ "${GROW:-1}" != 0 ]]; then
        for repeat in $(seq "${REPEATS:-3}"); do
            echo "==> nccl-perf --grow-spare 20, world size $((world - 1)) -> $world, run $repeat"
            before=$(wc -l <"$out/grow.jsonl" 2>/dev/null || echo 0)
            "$launch" -n "$world" --timeout 180 "$bin/nccl-perf-nccl-perf" all_reduce \
                --layer group-caller -b 4K --grow-spare 20 \
                --json "$out/grow.jsonl" 2>&1 | grep -vE '^\[rank [0-9]+\] \{' | tee -a "$out/grow.txt"
            after=$(wc -l <"$out/grow.jsonl" 2>/dev/null || echo 0)
            ((after > before)) || failed+=("grow $world #$repeat")
        done
    fi
    [[ "${TORCH:-1}" == 0 ]] && continue
    echo "==> torch.distributed.shrink_group, world size $world"
    "$launch" -n "$world" --timeout 120 "$python" "$here/scripts/torch_heal_cost.py" \
        --json "$out/torch-heal.jsonl" 2>&1 | tee -a "$out/torch-heal.txt" || failed+=("torch $world")
done
if ((${#failed[@]})); then
    echo "heal.sh: failed: ${failed[*]}"
    exit 1
fi
echo "heal.sh: every run passed; figures in $out/recovery.jsonl and $out/grow.jsonl"
