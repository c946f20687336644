#!/usr/bin/env bash
# Issue 39's remaining GPU runs: the lost-rank matrix, the fault processes, the mismatch tests at 1/2/4, and the sys/core/perf/consumer binaries.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > $OUT/gpu.txt 2>&1
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
for t in nccl-sys-gpu nccl-core-gpu nccl-perf-gpu consumer-candle-like-gpu nccl-tensor-gpu_alloc nccl-group-gpu_group_multi; do
  s=$(date +%s); NCCL_TEST_REQUIRE_GPU=1 timeout 150 "$BIN/$t" --test-threads=1 > "$OUT/$t.log" 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s: $(grep '^test result' "$OUT/$t.log" | tail -1)"
done
s=$(date +%s)
GPU_TEST_TIMEOUT=400 "$B/run.sh" gpu_lost_rank gpu_group_faults > /dev/null 2>&1
mv $OUT/gpu-tests.log $OUT/lost-rank-faults.log
echo "lost_rank+faults $(( $(date +%s) - s ))s: $(tail -1 $OUT/lost-rank-faults.log)"
