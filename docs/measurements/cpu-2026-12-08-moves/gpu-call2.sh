#!/usr/bin/env bash
# Prepared in session 19 for the next GPU machine (not run yet): the same carry as gpu-call1.sh,
# on the machine it left warm or a fresh one. What gpu-call1.sh left (150 s at most); world-cost
# at 4, nccl-tensor and the default group on a tensor and on borrowed memory alone, in 51 rounds
# of 60 (2.4 times h100-2026-12-07j's rounds); at 2, the nonblocking layers alone in 61 rounds of 100; run.sh's GPU
# times (the GPU tests built with nvtx) and gpu_heal on 2.28.3.
# Run as docs/measurements/cpu-2026-12-08-moves/gpu-call2.sh.
UNTIL=${UNTIL:-540}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
UNTIL=150 bash docs/measurements/cpu-2026-12-08-moves/gpu-call1.sh > "$OUT/call1-rest.out" 2>&1 || true
step w4 210 "$L" -n 4 --timeout 205 "$WC" --iters 60 --rounds 51 --warmup 10 \
  --layers tensor,group-blocking-caller,group-borrowed --json "$R/w4.jsonl"
pack call2
step w2-nb 130 "$L" -n 2 --timeout 125 "$WC" --iters 100 --rounds 61 --warmup 20 \
  --layers raw-nonblocking,tensor-nonblocking,group-nonblocking-caller --json "$R/w2-nb.jsonl"
pack call2
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=280 step run-gpu-times 150 "$B/run.sh" ranks_gpu_times
pack call2
t heal-2.28.3 120 nccl-group-gpu_heal
failures; pack call2
