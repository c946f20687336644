#!/usr/bin/env bash
# Call 3, as sent (one command line, carrying target/nccl-2.30.7): the soaks' verdicts, then
# nccl-perf --inject at world sizes 4 and 8 and --grow-spare at 4, NCCL 2.28.9 and 2.30.7
# interleaved, five rounds.
UNTIL=515; source target/gpu-bundle/calls/lib.sh
xz -dc target/nccl-2.30.7/libnccl-2.30.7-sm90.so.2.xz > /tmp/l307.so.2
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
for _ in $(seq 120); do (( $(ls /tmp/soak/stall*/verdict.txt 2>/dev/null | wc -l) == 2 )) && break; sleep 1; done
echo "soak waited $(( $(date +%s) - t0 ))s"; soak_state; cp -r /tmp/soak "$R/soak"; cat /tmp/soak/stall*/verdict.txt; pack callC
one() {
  export NCCL_LIBRARY=$1; local g=$2
  inject $g 4 exit@3:20 --op-timeout-ms 60000; inject $g 4 kill@3:20 --op-timeout-ms 60000
  inject $g 4 exit@3:20 --tell --op-timeout-ms 60000; inject $g 4 stop@3:20 --op-timeout-ms 60000
  inject $g 8 exit@7:20 --op-timeout-ms 60000; inject $g 8 kill@7:20 --op-timeout-ms 60000
  inject $g 8 stop@7:20 --op-timeout-ms 60000; grow $g 4
}
for i in 1 2 3 4 5; do one $W 2.28.9; one /tmp/l307.so.2 2.30.7; pack callC; done
for f in $R/recovery-*.txt $R/grow-*.txt; do grep -hE "^\[rank 0\] +(exit|kill|stop) |^\[rank 0\] +[0-9]+ +[0-9]+->" $f | cut -c1-100; done; pack callC
