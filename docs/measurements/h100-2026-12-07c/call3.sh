#!/usr/bin/env bash
# Session 11, call 3 (carry target/gpu-bundle, a fresh machine): the bundle with spare batches. run.sh
# lifecycle and one_gpu at world size 1 (the shared-ends test), world-cost at 1, 2 and 4 (call 2's at 2
# and 4 counted 1.04 allocations per call), torch.distributed's figures at 2 and 4 in the same call.
UNTIL=${UNTIL:-330}; source target/gpu-bundle/calls/lib.sh
R=/tmp/s11/r3; mkdir -p "$R"
unset NCCL_LIBRARY
mkdir -p "$R/run"; OUT="$R/run" step run-lifecycle 120 "$B/run.sh" lifecycle one_gpu
LAYERS=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean,group-blocking-separate
step world-cost-2 100 "$L" -n 2 --timeout 95 "$WC" --iters 100 --rounds 9 --warmup 20 --layers $LAYERS --json "$R/world-cost-2.jsonl"
step world-cost-4 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LAYERS --json "$R/world-cost-4.jsonl"
torch_cost 2
failures; tar czf "$OUT/call3.tgz" -C /tmp/s11 r3
