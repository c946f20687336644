#!/usr/bin/env bash
# 72c1cf5 (a heal's error waits for its aborts, heirs wait for inherited releases, no revoke after a
# lost peer, the killed fault rank's timing) on NCCL 2.28.3: heal, sub-group loss, fault processes,
# the lost-rank matrix (one run per cell, four exits), then nccl-perf --inject at world size 4 and 8.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
export NCCL_TEST_REQUIRE_GPU=1
t() { # tag, limit, binary, args...
  local tag=$1 lim=$2 bin=$3; shift 3
  (( $(date +%s) - t0 > ${UNTIL:-330} )) && { echo "$tag: not run"; return; }
  timeout "$lim" "$BIN/$bin" --test-threads=1 --nocapture "$@" > "$R/$tag.log" 2>&1
  echo "$tag rc=$? $(grep -E '^test result' "$R/$tag.log" | tail -1) $(( $(date +%s) - t0 ))s"
}
inject() { # world, spec...
  local w=$1; shift
  (( $(date +%s) - t0 > ${UNTIL:-330} )) && return
  timeout 40 "$BIN/nccl-launch-nccl-launch" -n "$w" --keep-going --timeout 35 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --inject "$@" --json "$R/recovery-2.28.3.jsonl" >> "$R/recovery-2.28.3.txt" 2>&1
  echo "inject w$w $* rc=$? $(( $(date +%s) - t0 ))s"
}
t heal 90 nccl-group-gpu_heal
t subgroup-loss 40 nccl-group-gpu_subgroup_loss
t faults 120 nccl-group-gpu_group_faults_processes
LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 t lost-rank 120 nccl-group-gpu_lost_rank
echo "lost-rank reports: $(grep -c 'lost-rank report:' "$R/lost-rank.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$R/lost-rank.log")"
grep -hE "^test .* FAILED|panicked|wait_status\((11|6|134|139)\)" "$R"/*.log | head -20
tar czf "$OUT/call43e.tgz" -C "$OUT" r
for i in 1 2; do
  inject 4 exit@3:20 --op-timeout-ms 60000
  inject 4 kill@3:20 --tell --op-timeout-ms 60000
  inject 4 stop@3:20 --op-timeout-ms 60000
done
grep -E "^\[rank 0\] +(exit|kill|stop) " "$R/recovery-2.28.3.txt"
grep -c "SIGSEGV\|signal 11\|Segmentation" "$R/recovery-2.28.3.txt"
tar czf "$OUT/call43e.tgz" -C "$OUT" r
