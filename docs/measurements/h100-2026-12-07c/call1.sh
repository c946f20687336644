#!/usr/bin/env bash
# Session 11, call 1 (carry target/gpu-bundle): operations on the caller's stream sharing end events.
# run.sh: the Work lifecycle at world size 1 (the new shared-ends test among them), one_gpu, CUDA
# graphs (a capture begun outside the group while an end is unrecorded) and every operation at
# 1, 2 and 4, the default-options mismatches at 2 and 4; then world-cost at 1 and torch's figure.
UNTIL=${UNTIL:-540}; source target/gpu-bundle/calls/lib.sh
unset NCCL_LIBRARY
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-shared-ends 330 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean,group-blocking-separate
torch_cost 1
failures; pack call1
