#!/usr/bin/env bash
# Issue 39's last two GPU tests (ranks_ras_view_of_a_stopped_rank, the torchrun_elastic_trainer
# example) at world sizes 1, 2 and 4; then issue 41's recovery figures with the releases off the
# heal's path: nccl-perf --inject at world sizes 4 and 8 on NCCL 2.28.3, and at 4 on 2.30.7.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
RANKS_WORLDS="2 4" GPU_TEST_TIMEOUT=150 RANKS_TIMEOUT=90 timeout "${SUITE_LIMIT:-170}" "$B/run.sh" \
  ranks_ras_view torchrun_elastic > /dev/null 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 ))s"
mv "$OUT/gpu-tests.log" "$R/suite.log"
tail -1 "$R/suite.log"
grep -E "^(PASS|FAIL)" "$R/suite.log" | sed 's/^/  /'
tar czf "$OUT/call43a.tgz" -C "$OUT" r
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
inject() { # tag, world, spec...
  local tag=$1 w=$2; shift 2
  (( $(date +%s) - t0 > ${INJECT_UNTIL:-520} )) && return
  timeout 40 "$BIN/nccl-launch-nccl-launch" -n "$w" --keep-going --timeout 35 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --inject "$@" --json "$R/recovery-$tag.jsonl" >> "$R/recovery-$tag.txt" 2>&1
  echo "inject $tag w$w $* rc=$? $(( $(date +%s) - t0 ))s"
}
for i in 1 2 3 4 5; do
  inject 2.28.3 4 exit@3:20 --op-timeout-ms 60000
  inject 2.28.3 4 kill@3:20 --tell --op-timeout-ms 60000
  inject 2.28.3 4 stop@3:20 --op-timeout-ms 60000
done
for i in 1 2 3; do
  inject 2.28.3 4 kill@3:20 --op-timeout-ms 60000
  inject 2.28.3 8 exit@7:20 --op-timeout-ms 60000
  inject 2.28.3 8 stop@7:20 --op-timeout-ms 60000
done
tar czf "$OUT/call43a.tgz" -C "$OUT" r
if [[ -f "$B/libnccl-2.30.7-sm90.so.2.xz" ]]; then
  xz -dc "$B/libnccl-2.30.7-sm90.so.2.xz" > /tmp/libnccl-2.30.7.so.2 && export NCCL_LIBRARY=/tmp/libnccl-2.30.7.so.2
  for i in 1 2 3; do
    inject 2.30.7 4 exit@3:20 --op-timeout-ms 60000
    inject 2.30.7 4 stop@3:20 --op-timeout-ms 60000
  done
  unset NCCL_LIBRARY
fi
for f in "$R"/recovery-*.txt; do echo "== $f"; grep -E "^\[rank 0\] +(exit|kill|stop) " "$f"; done
tar czf "$OUT/call43a.tgz" -C "$OUT" r
