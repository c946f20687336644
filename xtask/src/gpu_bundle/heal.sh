#!/usr/bin/env bash
# Recovery figures, on the GPU machine:
#   heal.sh [OUT_DIR]     (default: $OUT/heal, or ./heal)
# For each world size in WORLDS (default "4 8") and each mode in MODES
# (default "shrink recreate full"), REPEATS launches (default 3) of
# heal-cost: the last rank dies, and the survivors' time from its death to
# their first correct all_reduce is printed and appended to
# OUT_DIR/heal-cost.jsonl; then torch.distributed.shrink_group's figure
# for the same loss (scripts/torch_heal_cost.py), once per world size. The
# NCCL under test is NCCL_LIBRARY's (the loader's default without it).
# TELL=1 tells the survivors who is lost (heal-cost --tell); FAULT=stop
# stops the last rank instead of ending it (a hang: the shrink path);
# NO_RAS=1 does not ask NCCL's RAS in the failure (heal-cost --no-ras);
# TORCH=0 skips torch's figure.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bundle_start "$here" heal "${1:-}"
read -r -a worlds <<<"${WORLDS:-4 8}"
read -r -a modes <<<"${MODES:-shrink recreate full}"
failed=()
for world in "${worlds[@]}"; do
    for mode in "${modes[@]}"; do
        for repeat in $(seq "${REPEATS:-3}"); do
            echo "==> heal-cost --mode $mode, world size $world, run $repeat"
            "$launch" -n "$world" --timeout 120 "$bin/benches-heal-cost" --mode "$mode" --fault "${FAULT:-exit}" \
                ${TELL:+--tell} ${NO_RAS:+--no-ras} \
                --json "$out/heal-cost.jsonl" 2>&1 | grep -E '^nccl-launch|heal-cost' | tee -a "$out/heal-cost.txt" ||
                failed+=("heal-cost $mode $world")
        done
    done
    [[ "${TORCH:-1}" == 0 ]] && continue
    echo "==> torch.distributed.shrink_group, world size $world"
    "$launch" -n "$world" --timeout 120 "$python" "$here/scripts/torch_heal_cost.py" \
        --json "$out/heal-cost.jsonl" 2>&1 | tee -a "$out/torch-heal.txt" || failed+=("torch $world")
done
if ((${#failed[@]})); then
    echo "heal.sh: failed: ${failed[*]}"
    exit 1
fi
echo "heal.sh: every run passed; figures in $out/heal-cost.jsonl"
