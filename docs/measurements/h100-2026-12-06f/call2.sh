#!/usr/bin/env bash
# Issue 40's figures in one run: world-cost at world sizes 1, 2 and 4 (the tensor layer, raw NCCL on
# a nonblocking communicator, the group's modes), then nccl-perf through the group layer with the
# mismatch check on and off at 8 B and 1 MiB to 64 MiB.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
L="$BIN/nccl-launch-nccl-launch"
t0=$(date +%s)
WC="$BIN/benches-world-cost"
LAYERS=raw,raw-nonblocking,tensor,tensor-nonblocking,tensor-event,group-blocking-caller,group-nonblocking-caller,group-blocking-separate
timeout 80 "$WC" --iters 200 --rounds 7 --warmup 30 --layers $LAYERS --json "$R/world-cost-1.jsonl" > "$R/world-cost-1.txt" 2>&1
echo "wc1 rc=$? $(( $(date +%s) - t0 ))s"
timeout 130 "$L" -n 2 --timeout 120 "$WC" --iters 200 --rounds 7 --warmup 30 --layers $LAYERS --json "$R/world-cost-2.jsonl" > "$R/world-cost-2.txt" 2>&1
echo "wc2 rc=$? $(( $(date +%s) - t0 ))s"
timeout 130 "$L" -n 4 --timeout 120 "$WC" --iters 100 --rounds 5 --warmup 20 --layers $LAYERS --json "$R/world-cost-4.jsonl" > "$R/world-cost-4.txt" 2>&1
echo "wc4 rc=$? $(( $(date +%s) - t0 ))s"
for w in 1 2 4; do echo "== ws$w"; grep -E "^\s*(raw|core|tensor|group)" "$R/world-cost-$w.txt" | head -14; done
for w in 4 2 1; do
  for c in on off; do
    for sizes in "-b 8 -e 8" "-b 1M -e 64M -f 64"; do
      (( $(date +%s) - t0 > 540 )) && break
      tag="perf-w$w-check-$c-$(echo $sizes | tr -d ' -')"
      timeout 60 "$L" -n $w --timeout 55 "$BIN/nccl-perf-nccl-perf" all_reduce --layer group-caller $sizes -n 40 -w 10 --batches 3 \
        --group-mismatch-check $c > "$R/$tag.txt" 2>&1
      echo "$tag rc=$? $(( $(date +%s) - t0 ))s"
    done
  done
done
tar czf "$OUT/call42c.tgz" -C "$OUT" r
