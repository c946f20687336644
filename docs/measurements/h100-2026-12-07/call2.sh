#!/usr/bin/env bash
# Session 9, call 2 (carrying target/nccl-2.30.7; the bundle stays): the rest of the correctness
# steps, 2.30.7 included (unpacked whole to /tmp), then the recovery rounds (lib.sh).
UNTIL=${UNTIL:-530}; source target/gpu-bundle/calls/lib.sh
with307 || { echo "2.30.7 archive missing: carry target/nccl-2.30.7"; exit 3; }
correctness
inject_rounds
failures; pack call2
