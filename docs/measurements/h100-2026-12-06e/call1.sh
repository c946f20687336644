#!/usr/bin/env bash
# Issue 39's suite: the multi-rank tests of nccl-group and nccl-tensor that call 41b did not reach
# (or that failed there) at world sizes 1, 2 and 4 (simulated hosts on GPU 0), with the
# torchrun_elastic_trainer example; then nccl-perf --inject launches at world size 4 (issue 41's
# recovery figures) while the call has time.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
RANKS_WORLDS="2 4" GPU_TEST_TIMEOUT=300 RANKS_TIMEOUT=90 timeout "${SUITE_LIMIT:-420}" "$B/run.sh" \
  ranks_bare_communicator ranks_subgroups ranks_mismatch_checked_every_collective \
  ranks_mismatch_unchecked ranks_ras_view ranks_eight_threads ranks_group_registered \
  ranks_group_registration ranks_suspend_resume torchrun_elastic \
  ranks_every_op ranks_batch_send_recv ranks_all_to_all_uneven ranks_registered_collectives \
  ranks_registration_refusals ranks_split ranks_nonblocking_init > /dev/null 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 ))s"
mv "$OUT/gpu-tests.log" "$R/suite.log"
tail -1 "$R/suite.log"
grep -E "^(PASS|FAIL)" "$R/suite.log" | sed 's/^/  /'
tar czf "$OUT/call42ab.tgz" -C "$OUT" r
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
inject() { # world, spec...
  local w=$1; shift
  (( $(date +%s) - t0 > ${INJECT_UNTIL:-540} )) && return
  timeout 25 "$BIN/nccl-launch-nccl-launch" -n "$w" --keep-going --timeout 22 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --inject "$@" --json "$R/recovery.jsonl" >> "$R/recovery.txt" 2>&1
  echo "inject w$w $* rc=$? $(( $(date +%s) - t0 ))s"
}
for i in 1 2 3 4 5; do
  inject 4 exit@3:20 --op-timeout-ms 60000
  inject 4 kill@3:20 --tell --op-timeout-ms 60000
  inject 4 stop@3:20 --op-timeout-ms 60000
done
grep -E "^\[rank 0\] +(exit|kill|stop) " "$R/recovery.txt"
tar czf "$OUT/call42ab.tgz" -C "$OUT" r
