#!/usr/bin/env bash
# Session 7, call A (NCCL 2.28.3, bundle 1df36c4+): two 10-minute slow-rank soaks started in the
# background (world size 4, rank 3 and rank 0 stalling 2 s a step; setsid, they outlive the call),
# then the heal tests and the lost-rank matrix twice.
UNTIL=200; source target/gpu-bundle/calls/lib.sh
mkdir -p /tmp/soak
for s in 3 0; do
  WORLD=4 SECS=600 STALL="$s:2000" setsid nohup "$B/soak.sh" "/tmp/soak/stall$s" > "/tmp/soak/stall$s.log" 2>&1 < /dev/null &
done
sleep 8
soak_state; head -3 /tmp/soak/stall*/soak.txt
t heal 120 nccl-group-gpu_heal
lost_rank lost-rank-1
lost_rank lost-rank-2
failures
soak_state
pack callA
