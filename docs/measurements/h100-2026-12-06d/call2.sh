#!/usr/bin/env bash
# The GPU suite's multi-rank half on main's tree: every `ranks_*` test of every binary at world
# sizes 1, 2 and 4 (simulated hosts on GPU 0).
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
RANKS_WORLDS="2 4" GPU_TEST_TIMEOUT=520 RANKS_TIMEOUT=150 timeout 560 "$B/run.sh" ranks_ > /dev/null 2>&1
echo "rc=$? $(( $(date +%s) - t0 ))s"
mv "$OUT/gpu-tests.log" "$R/suite-ranks.log"
tail -1 "$R/suite-ranks.log"
grep -E "^FAIL" "$R/suite-ranks.log" | head -20
tar czf "$OUT/call41b.tgz" -C "$OUT" r
