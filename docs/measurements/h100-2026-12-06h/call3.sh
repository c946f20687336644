#!/usr/bin/env bash
# Session 8, call 3 (nothing carried), alone on the GPU: NCCL 2.28.9 and 2.30.7 interleaved,
# nccl-perf --inject at world sizes 4 and 8 and --grow-spare 3 -> 4, five rounds; then world-cost at
# world size 1 (issue 40: the group's parts turned off in turn) and run.sh's RAS view test.
UNTIL=${UNTIL:-500}; source target/gpu-bundle/calls/lib.sh
with307 || exit 3
soak_state
one() {
  export NCCL_LIBRARY=$1; local g=$2
  inject $g 4 exit@3:20 --op-timeout-ms 60000; inject $g 4 kill@3:20 --op-timeout-ms 60000
  inject $g 4 exit@3:20 --tell --op-timeout-ms 60000; inject $g 4 stop@3:20 --op-timeout-ms 60000
  inject $g 8 exit@7:20 --op-timeout-ms 60000; inject $g 8 kill@7:20 --op-timeout-ms 60000
  inject $g 8 stop@7:20 --op-timeout-ms 60000; grow $g 4
}
for i in 1 2 3 4 5; do one $W289 2.28.9; one $L307 2.30.7; pack call3; done
unset NCCL_LIBRARY
timeout 60 "$BIN/benches-world-cost" --layers tensor,tensor-event,group-blocking-caller,group-unchecked,group-lean \
  --iters 300 --rounds 7 --warmup 50 --json "$R/world-cost-1.jsonl" > "$R/world-cost-1.txt" 2>&1; echo "world-cost rc=$?"; grep -v '^{' "$R/world-cost-1.txt"
if left; then OUT="$R" timeout 150 "$B/run.sh" ranks_ras_view > "$R/run-ras-view.log" 2>&1; echo "run.sh ranks_ras_view rc=$? $(tail -1 "$R/run-ras-view.log")"; fi
for f in $R/recovery-*.txt $R/grow-*.txt; do grep -hE "^\[rank 0\] +(exit|kill|stop) |^\[rank 0\] +[0-9]+ +[0-9]+->" $f | cut -c1-100; done; pack call3
