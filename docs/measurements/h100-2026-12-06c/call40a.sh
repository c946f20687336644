#!/usr/bin/env bash
# Issue 40's figures on the GPU machine: world-cost and torch at world sizes 1, 2 and 4 (host cost
# per 8-byte all_reduce + wait, every layer, the group's mismatch check on by default), nccl-perf's
# group layer with the check on and off at 8 B, 1 MiB and 64 MiB, raw against the in-band
# fingerprint, and host_cost's GPU-timing rows.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
L="$BIN/nccl-launch-nccl-launch"
t0=$(date +%s)
WORLDS="1 2 4" SOAK_OPS=2000 COST_ARGS="--iters 200 --rounds 5 --warmup 30" "$B/world.sh" "$OUT/world" > "$OUT/world.log" 2>&1
echo "world.sh rc=$? $(( $(date +%s) - t0 ))s"
for w in 1 2 4; do
  for c in on off; do
    for sizes in "-b 8 -e 8" "-b 1M -e 64M -f 64"; do
      tag="perf-w$w-check-$c-$(echo $sizes | tr -d ' -')"
      timeout 100 "$L" -n $w --timeout 90 "$BIN/nccl-perf-nccl-perf" all_reduce --layer group-caller $sizes -n 40 -w 10 --batches 3 \
        --group-mismatch-check $c > "$OUT/$tag.txt" 2>&1
      echo "$tag rc=$? $(( $(date +%s) - t0 ))s"
    done
  done
done
