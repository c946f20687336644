#!/usr/bin/env bash
# Call 2, as sent (one command line): NCCL 2.28.9 (torch's wheel), the lost-rank matrix twice,
# beside the soaks call 1 started.
UNTIL=200; source target/gpu-bundle/calls/lib.sh
export NCCL_LIBRARY=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
lost_rank lost-rank-1; lost_rank lost-rank-2; failures; soak_state; pack callB
