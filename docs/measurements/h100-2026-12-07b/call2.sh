#!/usr/bin/env bash
# Session 10, call 2 (the bundle stays on the warm machine): what call 1 left; torch.distributed's
# figure at 1 and 2 against world-cost's; five untold-exit heals at 4 on 2.28.9 (the release of the
# ninth session's 559 ms outlier, which 3e9bef8 answers); the heal tests on 2.28.3.
UNTIL=${UNTIL:-530}; source target/gpu-bundle/calls/lib.sh
source target/gpu-bundle/calls/call1-steps.sh
torch_cost 1; torch_cost 2
for i in 1 2 3 4 5; do
  done_already "exit-2.28.9-$i" && continue; left || break
  NCCL_LIBRARY=$W289 inject 2.28.9 4 exit@3:20 --op-timeout-ms 60000
  echo "exit $i" > "$R/exit-2.28.9-$i.done"
done
t heal-2.28.3 200 nccl-group-gpu_heal
failures; pack call2
