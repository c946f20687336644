#!/usr/bin/env bash
# Session 12, call 3 (carry target/gpu-bundle): the review's fixes to the spares (one more kept, the
# whole record assigned in a spare). run.sh lifecycle and one_gpu at world size 1, graphs, every
# operation and the default-options mismatches at 2 and 4; world-cost at 1; gpu_heal if time is left.
UNTIL=${UNTIL:-240}; source target/gpu-bundle/calls/lib.sh
R=/tmp/s12/r3; mkdir -p "$R"
unset NCCL_LIBRARY
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-review 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,tensor,tensor-capture-query,group-blocking-caller,group-nonblocking-caller,group-lean,group-blocking-separate
t heal-2.28.3 120 nccl-group-gpu_heal
failures; tar czf "$OUT/call3.tgz" -C /tmp/s12 r3
