#!/usr/bin/env bash
# Session 17, call 1 (carry target/gpu-bundle, the bundle of main 3b04989, with ab/: world-cost of
# main 9f666b2's library and of 3b04989's, both with the world-cost of the commit after it (its
# --gpu-behind with a time limit on the gate), as `cargo xtask
# host-profile` builds them, stripped, xz). world-cost at 1 alternated before / after, three
# times, with the GPU free and held behind each timed loop; every layer at 1, both ways; run.sh's
# lifecycle, one_gpu, graphs, every operation and the default-options mismatches at 1, 2 and 4;
# world-cost at 2 (after, before, after) and 4 (after, before). A second call on the warm machine
# does what the first left (each step's marker stays in /tmp/s12/r).
# Run as docs/measurements/h100-2026-12-07i/call1.sh.
UNTIL=${UNTIL:-530}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
for v in before after; do
  [[ -x /tmp/world-cost-$v ]] || { xz -dc "$B/ab/world-cost-$v.xz" > /tmp/world-cost-$v && chmod +x /tmp/world-cost-$v; }
done
L1=raw,tensor,tensor-capture-query,group-blocking-caller,group-nonblocking-caller,group-lean
for i in 1 2 3; do
  for v in before after; do
    step "ab-w1-$v-$i" 60 /tmp/world-cost-$v --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-$v-$i.jsonl"
    step "ab-w1-behind-$v-$i" 90 /tmp/world-cost-$v --gpu-behind --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-behind-$v-$i.jsonl"
  done
done
pack call1
ALL1=raw,raw-nonblocking,tensor,tensor-event,tensor-capture-query,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-small-recorder,group-lean,group-blocking-separate
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers $ALL1
# Held behind a gate, only layers that enqueue little on the caller's stream (no event or wait a
# call, which could fill its launch queue behind the gate).
BEHIND1=raw,raw-nonblocking,tensor,tensor-capture-query,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-small-recorder,group-lean
step world-cost-1-behind 120 "$L" -n 1 --timeout 110 /tmp/world-cost-after --gpu-behind --iters 1000 --rounds 15 --warmup 300 --layers $BEHIND1 --json "$R/world-cost-1-behind.jsonl"
pack call1
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-main 200 "$B/run.sh" \
  lifecycle one_gpu ranks_graphs ranks_ops ranks_mismatch_default_options
pack call1
LN=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean
for v in after-1 before after-2; do
  step "ab-w2-$v" 100 "$L" -n 2 --timeout 95 /tmp/world-cost-${v%-*} --iters 100 --rounds 15 --warmup 20 --layers $LN --json "$R/ab-w2-$v.jsonl"
done
pack call1
for v in after before; do
  step "ab-w4-$v" 130 "$L" -n 4 --timeout 125 /tmp/world-cost-$v --iters 60 --rounds 9 --warmup 10 --layers $LN --json "$R/ab-w4-$v.jsonl"
done
failures; pack call1
