#!/usr/bin/env bash
# Session 9, call 3 as it ran (the machine had gone back; 457 s of device time left, so the bundle
# is carried again and only issue 40's GPU tests run): run.sh with the mismatch test with default
# options, the GPU times and dumps read by torchfrtrace, at world sizes 1, 2 and 4; its log in $OUT.
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
RANKS_TIMEOUT=110 GPU_TEST_TIMEOUT=150 timeout 300 target/gpu-bundle/run.sh \
  ranks_mismatch_default_options ranks_gpu_times ranks_dumps torchfrtrace > "$OUT/run-issue40.log" 2>&1
echo "run.sh rc=$?"; grep -E "^(test |==>|.*passed.*failed)" "$OUT/run-issue40.log" | tail -25
