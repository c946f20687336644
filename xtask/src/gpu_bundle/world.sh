#!/usr/bin/env bash
# World-size-N figures, on the GPU machine:
#   world.sh [OUT_DIR]     (default: $OUT/world, or ./world)
# For each world size in WORLDS (default "1 2 4"): world-cost (the host cost
# of an 8-byte in-place all_reduce through every layer and group mode) and,
# right after it, torch.distributed's figure for the same call
# (scripts/torch_world_cost.py, with the ratios to world-cost's raw and
# tensor layers), each as every rank of an nccl-launch of that size; then
# group-soak at world size 2 (SOAK_OPS all-reduces, default 10000). With
# fewer GPUs than ranks the ranks are simulated hosts on GPU 0: only the
# host cost per call means anything there, and the GPU, time-sliced between
# the ranks' processes, takes milliseconds per collective, so COST_ARGS
# (default "--iters 100 --rounds 5 --warmup 20", for both programs) keeps
# the calls few.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bundle_start "$here" world "${1:-}"
read -r -a worlds <<<"${WORLDS:-1 2 4}"
failed=()
for world in "${worlds[@]}"; do
    echo "==> world-cost, world size $world"
    # shellcheck disable=SC2086 # COST_ARGS is a list of flags
    "$launch" -n "$world" --timeout 600 "$bin/benches-world-cost" ${COST_ARGS:---iters 100 --rounds 5 --warmup 20} \
        --json "$out/world-cost-$world.jsonl" 2>&1 | tee "$out/world-cost-$world.txt" ||
        failed+=("world-cost $world")
    echo "==> torch.distributed, world size $world"
    # shellcheck disable=SC2086
    "$launch" -n "$world" --timeout 600 "$python" "$here/scripts/torch_world_cost.py" ${COST_ARGS:---iters 100 --rounds 5 --warmup 20} \
        --json "$out/torch-$world.jsonl" --against "$out/world-cost-$world.jsonl" 2>&1 |
        tee "$out/torch-$world.txt" || failed+=("torch $world")
done
echo "==> group-soak, world size 2"
"$launch" -n 2 --timeout 600 "$bin/benches-group-soak" --ops "${SOAK_OPS:-10000}" --sync-every 500 \
    >"$out/soak-2.txt" 2>&1 || failed+=("group-soak 2")
grep -E 'grew|ranks' "$out/soak-2.txt"
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "world.sh: all ran; results in $out"
else
    echo "world.sh: failed: ${failed[*]}; results in $out"
    exit 1
fi
