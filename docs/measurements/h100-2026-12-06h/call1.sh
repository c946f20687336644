#!/usr/bin/env bash
# Session 8, call 1 (carrying the bundle): a 10-minute slow-rank soak started in the background
# (NCCL 2.28.3, world size 4, rank 0, the liveness watcher, stalling 2 s a step; setsid, it outlives
# the call), then the correctness steps (lib.sh) as far as the time goes.
UNTIL=${UNTIL:-330}; source target/gpu-bundle/calls/lib.sh
mkdir -p /tmp/soak
if [[ ! -d /tmp/soak/stall0 ]]; then
  WORLD=4 SECS=600 STALL="0:2000" setsid nohup "$B/soak.sh" /tmp/soak/stall0 > /tmp/soak/stall0.log 2>&1 < /dev/null &
  sleep 5
fi
soak_state; head -3 /tmp/soak/stall*/soak.txt
correctness
failures; soak_state; pack call1
