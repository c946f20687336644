#!/usr/bin/env bash
# Session 10, call 1 (carry target/gpu-bundle): issue 40's GPU tests through run.sh (a summary
# line: default-options mismatches, GPU times read by torchfrtrace, dumps) and the elastic example;
# the lost-rank matrix on 2.28.3; world-cost at 1, 2 and 4; nccl-perf with the check on and off at 4.
UNTIL=${UNTIL:-530}; source target/gpu-bundle/calls/lib.sh
source target/gpu-bundle/calls/call1-steps.sh
failures; pack call1
