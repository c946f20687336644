#!/usr/bin/env bash
# Session 13, call 1 (carry target/gpu-bundle, with ab/world-cost-before: world-cost of main
# 1cea8c1, the session's start): the hot path's bookkeeping (one recorder lock per reap, records
# written in place, one clock conversion, each thread's last communicator lookup, fewer atomic
# operations). world-cost at 1 with every layer, then before and after alternated at 1 (three
# times each) and at 2 and 4; then run.sh's lifecycle, one_gpu, graphs, every operation and the
# default-options mismatches at 1, 2 and 4, its dumps and GPU times, and gpu_heal (heals adopt
# communicators, which the per-thread lookup must never return stale) on 2.28.3.
UNTIL=${UNTIL:-540}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
WB=$B/ab/world-cost-before
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-capture-query,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean,group-blocking-separate
L1=raw,tensor,group-blocking-caller,group-nonblocking-caller,group-lean
for i in 1 2 3; do
  for v in before after; do
    bin=$WC; [[ $v == before ]] && bin=$WB
    step "ab-w1-$v-$i" 60 "$bin" --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-$v-$i.jsonl"
  done
done
LN=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller
for w in 2 4; do
  for v in before after; do
    bin=$WC; [[ $v == before ]] && bin=$WB
    step "ab-w$w-$v" 100 "$L" -n $w --timeout 95 "$bin" --iters 100 --rounds 7 --warmup 20 --layers $LN --json "$R/ab-w$w-$v.jsonl"
  done
done
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-hot 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
t heal-2.28.3 200 nccl-group-gpu_heal
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-hot-2 150 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
failures; pack call1
