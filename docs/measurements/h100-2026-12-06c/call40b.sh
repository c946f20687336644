#!/usr/bin/env bash
# Issue 40's correctness on the GPU machine, mismatch check on by default: the mismatch tests
# and GPU times at world sizes 1, 2 and 4, the everyday group tests, heal and the lost-rank matrix.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
s=$(date +%s)
GPU_TEST_TIMEOUT=300 RANKS_TIMEOUT=200 "$B/run.sh" ranks_mismatch_default ranks_mismatch_checked_every_16 ranks_gpu_times ranks_ops one_gpu gpu_heal > /dev/null 2>&1
mv "$OUT/gpu-tests.log" "$OUT/suite.log"
echo "suite $(( $(date +%s) - s ))s: $(tail -1 "$OUT/suite.log")"
s=$(date +%s)
LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 GPU_TEST_TIMEOUT=200 "$B/run.sh" gpu_lost_rank > /dev/null 2>&1
mv "$OUT/gpu-tests.log" "$OUT/lost-rank.log"
echo "lost_rank $(( $(date +%s) - s ))s: $(tail -1 "$OUT/lost-rank.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$OUT/lost-rank.log")"
