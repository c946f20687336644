#!/usr/bin/env bash
# Session 13, call 3 (carry target/gpu-bundle, with ab/world-cost-before: world-cost of main
# 1cea8c1): the bundle of the session's last code. world-cost before and after alternated at
# world size 1 (four times each), after at 2 and 4; run.sh's lifecycle, one_gpu, graphs, every
# operation and the default-options mismatches at 1, 2 and 4; gpu_heal on 2.28.3; run.sh's dumps
# and GPU times at 2 and 4.
UNTIL=${UNTIL:-540}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
WB=$B/ab/world-cost-before
L1=raw,tensor,tensor-capture-query,group-blocking-caller,group-nonblocking-caller,group-lean
for i in 1 2 3 4; do
  for v in before after; do
    bin=$WC; [[ $v == before ]] && bin=$WB
    step "ab3-w1-$v-$i" 60 "$bin" --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab3-w1-$v-$i.jsonl"
  done
done
LAYERS=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller
step world-cost-2 100 "$L" -n 2 --timeout 95 "$WC" --iters 100 --rounds 9 --warmup 20 --layers $LAYERS --json "$R/world-cost-2.jsonl"
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-final 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
t heal-2.28.3 200 nccl-group-gpu_heal
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-final-2 150 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
step world-cost-4 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LAYERS --json "$R/world-cost-4.jsonl"
failures; pack call3
