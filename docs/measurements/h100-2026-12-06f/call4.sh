#!/usr/bin/env bash
# NCCL 2.30.7 (built for sm_90, carried as .xz) on the bundle the last call left: the heal tests, the
# sub-group loss, the lost-rank matrix (one run per cell, four exits), then nccl-perf --inject at
# world size 4 (exit: re-created; stop: revoked and shrunk).
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
xz -dc target/nccl-2.30.7/libnccl-2.30.7-sm90.so.2.xz > /tmp/libnccl-2.30.7.so.2 || exit 3
export NCCL_LIBRARY=/tmp/libnccl-2.30.7.so.2
echo "unpacked $(( $(date +%s) - t0 ))s"
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
export NCCL_TEST_REQUIRE_GPU=1
t() { # tag, limit, binary, args...
  local tag=$1 lim=$2 bin=$3; shift 3
  (( $(date +%s) - t0 > ${UNTIL:-520} )) && { echo "$tag: not run"; return; }
  timeout "$lim" "$BIN/$bin" --test-threads=1 --nocapture "$@" > "$R/$tag.log" 2>&1
  echo "$tag rc=$? $(grep -E '^test result' "$R/$tag.log" | tail -1) $(( $(date +%s) - t0 ))s"
}
inject() { # world, spec...
  local w=$1; shift
  (( $(date +%s) - t0 > ${UNTIL:-520} )) && return
  timeout 40 "$BIN/nccl-launch-nccl-launch" -n "$w" --keep-going --timeout 35 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --inject "$@" --json "$R/recovery-2.30.7.jsonl" >> "$R/recovery-2.30.7.txt" 2>&1
  echo "inject w$w $* rc=$? $(( $(date +%s) - t0 ))s"
}
for i in 1 2 3; do
  inject 4 exit@3:20 --op-timeout-ms 60000
  inject 4 stop@3:20 --op-timeout-ms 60000
done
grep -E "^\[rank 0\] +(exit|kill|stop) " "$R/recovery-2.30.7.txt"
t heal 120 nccl-group-gpu_heal
t subgroup-loss 40 nccl-group-gpu_subgroup_loss
LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 t lost-rank 200 nccl-group-gpu_lost_rank
echo "lost-rank reports: $(grep -c 'lost-rank report:' "$R/lost-rank.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$R/lost-rank.log")"
grep -hE "^test .* FAILED|^failures:|panicked" "$R"/*.log | head -20
tar czf "$OUT/call43d.tgz" -C "$OUT" r
