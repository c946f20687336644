#!/usr/bin/env bash
# Session 13, call 2 (carry target/gpu-bundle, the same bundle as call 1, with
# ab/world-cost-before): world-cost before (1cea8c1) and after (759076f) alternated at world size 1,
# four times each, on a second machine; then the heal tests on torch's NCCL 2.28.9 (heals adopt
# communicators: the per-thread lookup must never return the old ones) and the lost-rank matrix
# on 2.28.3 and 2.28.9 (failures clear the cache and drain a tracker that keeps spares).
UNTIL=${UNTIL:-520}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
WB=$B/ab/world-cost-before
L1=raw,tensor,tensor-capture-query,group-blocking-caller,group-nonblocking-caller,group-lean
for i in 1 2 3 4; do
  for v in before after; do
    bin=$WC; [[ $v == before ]] && bin=$WB
    step "ab2-w1-$v-$i" 60 "$bin" --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab2-w1-$v-$i.jsonl"
  done
done
export NCCL_LIBRARY=$W289
t heal-2.28.9 200 nccl-group-gpu_heal
unset NCCL_LIBRARY
lost_rank lost-rank-2.28.3-1
export NCCL_LIBRARY=$W289
lost_rank lost-rank-2.28.9-1
unset NCCL_LIBRARY
failures; pack call2
