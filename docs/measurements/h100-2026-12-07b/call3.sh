#!/usr/bin/env bash
# Session 10, call 3 (carry target/gpu-bundle): world-cost at 2 and 4 again with fewer calls (call 1's
# 15 rounds of 300 ran past the 140 s bound: at 2 each call waits about 4.5 ms for the GPU, four
# processes time-sharing it), then torch.distributed's figure at 2 against it.
UNTIL=${UNTIL:-300}; source target/gpu-bundle/calls/lib.sh
unset NCCL_LIBRARY
LAYERS=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
step world-cost-2c 100 "$L" -n 2 --timeout 95 "$WC" --iters 100 --rounds 9 --warmup 20 --layers $LAYERS --json "$R/world-cost-2c.jsonl"
step world-cost-4c 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LAYERS --json "$R/world-cost-4c.jsonl"
step torch-2c 60 "$L" -n 2 --timeout 55 python3 "$B/scripts/torch_world_cost.py" \
  --iters 100 --rounds 5 --warmup 20 --json "$R/torch-2c.jsonl" --against "$R/world-cost-2c.jsonl"
failures; pack call3
