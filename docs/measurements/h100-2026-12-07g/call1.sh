#!/usr/bin/env bash
# Session 15, call 1 (carry target/gpu-bundle with ab/: world-cost of main ce83cc4 built without
# LTO, as the GPU figures before were, and with it): the bundle of main c1116da (release builds
# whole-program optimised, run_one's common answers without a Result through the stack).
# world-cost at 1 alternated before / LTO alone / after, three times; world-cost at 1 (every
# layer), 2 and 4; run.sh's lifecycle, one_gpu, graphs, every operation and the default-options
# mismatches at 1, 2 and 4; nccl-perf's group layer with the mismatch check on and off at 4;
# run.sh's dumps and GPU times at 2 and 4; gpu_heal on 2.28.3. A second call of this script on
# the warm machine does what the first left (each step's marker stays in /tmp/s12/r). Run as
# docs/measurements/gpu-2026-12-07g/call1.sh: this folder, named so until the card was known.
UNTIL=${UNTIL:-530}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
L1=raw,tensor,tensor-capture-query,group-blocking-caller,group-nonblocking-caller,group-lean
for i in 1 2 3; do
  for v in before lto after; do
    bin=$WC; [[ $v != after ]] && bin=$B/ab/world-cost-$v
    step "ab-w1-$v-$i" 60 "$bin" --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-$v-$i.jsonl"
  done
done
pack call1
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-capture-query,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean,group-blocking-separate
LN=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
step world-cost-2 100 "$L" -n 2 --timeout 95 "$WC" --iters 100 --rounds 9 --warmup 20 --layers $LN --json "$R/world-cost-2.jsonl"
step world-cost-4 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LN --json "$R/world-cost-4.jsonl"
pack call1
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-main 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
pack call1
for c in on off; do for sizes in "-b 8 -e 8" "-b 1M -e 64M -f 64"; do
  step "perf-w4-check-$c-$(echo $sizes | tr -d ' -')" 60 "$L" -n 4 --timeout 55 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller $sizes -n 40 -w 10 --batches 3 --group-mismatch-check $c
done; done
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-main-2 150 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
t heal-2.28.3 200 nccl-group-gpu_heal
failures; pack call1
