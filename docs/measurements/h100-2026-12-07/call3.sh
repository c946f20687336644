#!/usr/bin/env bash
# Session 9, call 3 (nothing carried; run again while anything is left: every step runs once):
# whatever calls 1 and 2 left, then issue 40's GPU tests
# (run.sh: the mismatch tests with default options, GPU times and dumps read by torchfrtrace, at
# world sizes 1, 2 and 4), torch.distributed's cost at 1, 2 and 4, nccl-perf with the mismatch
# check on and off at world size 4.
UNTIL=${UNTIL:-530}; source target/gpu-bundle/calls/lib.sh
with307 || exit 3
correctness; inject_rounds
unset NCCL_LIBRARY
mkdir -p "$R/run"; OUT="$R/run" step run-issue40 240 "$B/run.sh" ranks_mismatch_default_options ranks_gpu_times ranks_dumps torchfrtrace
for w in 1 2 4; do torch_cost $w; done
for c in on off; do
  for sizes in "-b 8 -e 8" "-b 1M -e 64M -f 64"; do
    step "perf-w4-check-$c-$(echo $sizes | tr -d ' -')" 60 "$L" -n 4 --timeout 55 "$BIN/nccl-perf-nccl-perf" all_reduce \
      --layer group-caller $sizes -n 40 -w 10 --batches 3 --group-mismatch-check $c
  done
done
for f in $R/recovery-*.txt $R/grow-*.txt; do grep -hE "^\[rank 0\] +(exit|kill|stop) |^\[rank 0\] +[0-9]+ +[0-9]+->" $f | cut -c1-100; done
failures; pack call3
