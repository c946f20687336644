#!/usr/bin/env bash
# Session 16, call 1 (carry target/gpu-bundle with ab/: world-cost of main cada153 and of 0307516 as
# `cargo xtask host-profile` built them, stripped, xz): the bundle of main 0307516 (the flight
# recorder's ring written whole when it is made, a slot of plain values on three lines).
# world-cost at 1 alternated before / after in rounds of 100 calls (as at 2) and of 1000, three
# times; world-cost at 1 (every layer); at 2 and 4 before and after, alternated; run.sh's
# lifecycle, one_gpu, graphs, every operation and the default-options mismatches at 1, 2 and 4;
# nccl-perf's group layer with the mismatch check on and off at 4; run.sh's dumps and GPU times;
# gpu_heal on 2.28.3. A second call on the warm machine does what the first left (each step's
# marker stays in /tmp/s12/r). Run as docs/measurements/h100-2026-12-07h/call1.sh.
UNTIL=${UNTIL:-530}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
for v in before after; do
  [[ -x /tmp/world-cost-$v ]] || { xz -dc "$B/ab/world-cost-$v.xz" > /tmp/world-cost-$v && chmod +x /tmp/world-cost-$v; }
done
L1=raw,tensor,group-blocking-caller,group-nonblocking-caller,group-small-recorder,group-lean
for i in 1 2 3; do
  for v in before after; do
    step "ab-w1-short-$v-$i" 60 /tmp/world-cost-$v --iters 100 --rounds 9 --warmup 200 --layers $L1 --json "$R/ab-w1-short-$v-$i.jsonl"
    step "ab-w1-long-$v-$i" 60 /tmp/world-cost-$v --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-long-$v-$i.jsonl"
  done
done
pack call1
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-small-recorder,group-lean,group-blocking-separate
LN=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-small-recorder
for v in after before; do
  step "ab-w2-$v" 100 "$L" -n 2 --timeout 95 /tmp/world-cost-$v --iters 100 --rounds 9 --warmup 20 --layers $LN --json "$R/ab-w2-$v.jsonl"
done
step world-cost-4 130 "$L" -n 4 --timeout 125 "$WC" --iters 60 --rounds 7 --warmup 10 --layers $LN --json "$R/world-cost-4.jsonl"
step ab-w4-before 130 "$L" -n 4 --timeout 125 /tmp/world-cost-before --iters 60 --rounds 7 --warmup 10 --layers $LN --json "$R/ab-w4-before.jsonl"
pack call1
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-main 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
pack call1
for c in on off; do for sizes in "-b 8 -e 8" "-b 1M -e 64M -f 64"; do
  step "perf-w4-check-$c-$(echo $sizes | tr -d ' -')" 60 "$L" -n 4 --timeout 55 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller $sizes -n 40 -w 10 --batches 3 --group-mismatch-check $c
done; done
pack call1
mkdir -p "$R/run2"; OUT="$R/run2" RANKS_TIMEOUT=120 step run-main-2 150 "$B/run.sh" \
  ranks_dumps ranks_gpu_times
pack call1
t heal-2.28.3 200 nccl-group-gpu_heal
failures; pack call1
