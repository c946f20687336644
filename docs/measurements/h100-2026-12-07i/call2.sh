#!/usr/bin/env bash
# Session 17, call 2 (the same carry, on the machine call 1 left warm or a fresh one): what call 1
# left, then run.sh's dumps and GPU times (the GPU tests built with `nvtx`) with a launch limit
# that lets the GPU-times test at 4 finish, and gpu_heal on 2.28.3.
# Run as docs/measurements/h100-2026-12-07i/call2.sh.
UNTIL=${UNTIL:-530}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=280 step run-main-2 300 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
pack call2
t heal-2.28.3 200 nccl-group-gpu_heal
failures; pack call2
