#!/usr/bin/env bash
# The GPU suite's other half on main's tree: every test that is not a `ranks_*` one (one-GPU tests,
# fault processes, heal, the lost-rank matrix with one run per cell and four exits, the
# torchrun examples at world sizes 2 and 4).
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 RANKS_WORLDS="2 4" GPU_TEST_TIMEOUT=300 RANKS_TIMEOUT=150 \
  timeout 560 "$B/run.sh" --skip ranks_ > /dev/null 2>&1
echo "rc=$? $(( $(date +%s) - t0 ))s"
mv "$OUT/gpu-tests.log" "$R/suite-rest.log"
tail -1 "$R/suite-rest.log"
grep -E "^FAIL" "$R/suite-rest.log" | head -20
echo "lost-rank reports: $(grep -c 'lost-rank report:' "$R/suite-rest.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$R/suite-rest.log")"
# nccl-perf --inject's first launches, while the call has time left.
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
for spec in "exit@3:20" "kill@3:20 --tell" "exit@3:20 --heal full"; do
  (( $(date +%s) - t0 > 500 )) && break
  timeout 40 "$BIN/nccl-launch-nccl-launch" -n 4 --keep-going --timeout 35 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --op-timeout-ms 3000 --inject $spec --json "$R/recovery.jsonl" >> "$R/recovery.txt" 2>&1
  echo "inject $spec rc=$? $(( $(date +%s) - t0 ))s"
done
grep -E "^\[rank 0\] +(exit|kill|stop) " "$R/recovery.txt"
tar czf "$OUT/call41c.tgz" -C "$OUT" r
