#!/usr/bin/env bash
# Session 18, call 2 (the same carry, on the machine call 1 left warm or a fresh one): what call 1
# left (200 s at most); run.sh's GPU times (the GPU tests built with nvtx) with a launch limit that
# lets the test at 4 finish; gpu_heal on 2.28.3; world-cost at 2 before (fd16f87's
# library) as call 1 ran after.
# Run as docs/measurements/h100-2026-12-07j/call2.sh.
UNTIL=${UNTIL:-540}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
UNTIL=200 bash docs/measurements/h100-2026-12-07j/call1.sh > "$OUT/call1-rest.out" 2>&1 || true
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=280 step run-gpu-times 300 "$B/run.sh" ranks_gpu_times
pack call2
t heal-2.28.3 120 nccl-group-gpu_heal
pack call2
LN=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller
step ab-w2-before 150 "$L" -n 2 --timeout 145 /tmp/world-cost-before --iters 100 --rounds 31 --warmup 20 --layers $LN --json "$R/ab-w2-before.jsonl"
failures; pack call2
