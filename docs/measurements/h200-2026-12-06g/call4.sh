#!/usr/bin/env bash
# Call 4, as sent: the heal tests on NCCL 2.28.3, alone on the GPU.
UNTIL=100; source target/gpu-bundle/calls/lib.sh; unset NCCL_LIBRARY
t heal 100 nccl-group-gpu_heal; failures; pack callD
