#!/usr/bin/env bash
# Session 8, call 2 (carrying target/nccl-2.30.7; the bundle stays from call 1): the rest of the
# correctness steps (lib.sh), 2.30.7 unpacked to /tmp for call 3, then the soak's verdict.
UNTIL=${UNTIL:-420}; source target/gpu-bundle/calls/lib.sh
with307 || exit 3
correctness
for _ in $(seq 90); do [[ -f /tmp/soak/stall0/verdict.txt ]] && break; sleep 1; done
failures; soak_state; cat /tmp/soak/stall0/verdict.txt; pack call2
