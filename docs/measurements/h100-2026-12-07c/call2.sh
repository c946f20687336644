#!/usr/bin/env bash
# Session 11, call 2 (carry target/gpu-bundle): what call 1 left, then the failure paths with shared
# ends (gpu_heal and the lost-rank matrix on 2.28.3), run.sh's dumps, GPU times and suspend/resume
# tests (suspend waits for ends it records itself), world-cost at 2 and 4.
UNTIL=${UNTIL:-540}; source target/gpu-bundle/calls/lib.sh
unset NCCL_LIBRARY
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-shared-ends 330 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-shared-ends-2 200 "$B/run.sh" \
  ranks_dumps ranks_gpu_times ranks_suspend_resume
t heal-2.28.3 200 nccl-group-gpu_heal
lost_rank lost-rank-2.28.3-1
LAYERS=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
step world-cost-2 100 "$L" -n 2 --timeout 95 "$WC" --iters 100 --rounds 9 --warmup 20 --layers $LAYERS --json "$R/world-cost-2.jsonl"
step world-cost-4 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LAYERS --json "$R/world-cost-4.jsonl"
failures; pack call2
