#!/usr/bin/env bash
# Session 16, call 2 (carry target/gpu-bundle, the bundle of main 0307516): what call 1 left when
# the call's limit stopped it, on a fresh machine: run.sh's dumps (torch's analyser reading them) and
# GPU times at 2 and 4, then gpu_heal on 2.28.3 if the time allows.
UNTIL=${UNTIL:-300}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-main-2 150 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
pack call2
t heal-2.28.3 200 nccl-group-gpu_heal
failures; pack call2
