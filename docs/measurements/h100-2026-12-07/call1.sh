#!/usr/bin/env bash
# Session 9, call 1 (carrying the bundle): world-cost at 1, 2 and 4 with every layer (issue 40's
# ablations), then the correctness steps (lib.sh) on 2.28.3 and 2.28.9, as far as the time goes.
UNTIL=${UNTIL:-530}; source target/gpu-bundle/calls/lib.sh
unset NCCL_LIBRARY
world_cost 1 --iters 300 --rounds 7 --warmup 50
world_cost 2 --iters 200 --rounds 7 --warmup 30
world_cost 4 --iters 100 --rounds 5 --warmup 20
for w in 1 2 4; do echo "== ws$w"; grep -E "^\s*(raw|core|tensor|group)" "$R/world-cost-$w.log" | cut -c1-110 | head -20; done
correctness
failures; pack call1
