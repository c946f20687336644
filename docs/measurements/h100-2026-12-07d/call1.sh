#!/usr/bin/env bash
# Session 12, call 1 (carry target/gpu-bundle): operation records made in finished operations'
# allocations (the tracker's spares). world-cost first (world size 1 with the new capture-query
# layer, then 2 and 4), then run.sh's lifecycle, one_gpu, graphs, every operation and the
# default-options mismatches at 1, 2 and 4, its dumps and GPU times, gpu_heal and the lost-rank
# matrix on 2.28.3 (failures drain the tracker that now keeps spares).
UNTIL=${UNTIL:-540}; source target/gpu-bundle/calls/lib.sh
unset NCCL_LIBRARY
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-capture-query,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean,group-blocking-separate
LAYERS=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
step world-cost-2 100 "$L" -n 2 --timeout 95 "$WC" --iters 100 --rounds 9 --warmup 20 --layers $LAYERS --json "$R/world-cost-2.jsonl"
step world-cost-4 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LAYERS --json "$R/world-cost-4.jsonl"
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-spares 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-spares-2 150 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
t heal-2.28.3 200 nccl-group-gpu_heal
lost_rank lost-rank-2.28.3-1
failures; pack call1
