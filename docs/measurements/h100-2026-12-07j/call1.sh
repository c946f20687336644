#!/usr/bin/env bash
# Session 18, call 1 (carry target/gpu-bundle, the bundle of main e5756c4, with ab/: world-cost-ablate,
# main fd16f87's world-cost and library with switches read from ABLATE, a bit mask: 1 no capture
# query, 2 no clock read (one fixed instant), 4 no flight-recorder record, 8 no enqueue watch, and a
# tensor-clock layer (tensor with one Instant::now a call); world-cost-{before,after}: 3ed69ee's
# world-cost (95% intervals, nonblocking layers paired with raw-nonblocking, each round's
# allocations) over fd16f87's library and over e5756c4's (the tracker's spares up to the longest
# backlog), as `cargo build --release` with line tables builds them, stripped, xz).
# The machine's CPU and clock source; world-cost at 1 for each mask, alternated three times;
# run.sh's lifecycle, one_gpu, every operation, the default-options mismatches and the dumps (read
# by torchfrtrace) at 1, 2 and 4;
# world-cost at 1 before / after alternated three times, the GPU free and held behind; at 2 and 4
# (after) in 31 and 21 rounds. call2.sh does the rest on the warm machine.
# Run as docs/measurements/h100-2026-12-07j/call1.sh.
UNTIL=${UNTIL:-540}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
{ lscpu; echo; cat /sys/devices/system/clocksource/clocksource0/current_clocksource /sys/devices/system/clocksource/clocksource0/available_clocksource; grep -o 'constant_tsc\|nonstop_tsc\|tsc_known_freq' /proc/cpuinfo | sort | uniq -c; uname -a; } > "$R/machine.txt" 2>&1
for v in ablate before after; do
  [[ -x /tmp/world-cost-$v ]] || { xz -dc "$B/ab/world-cost-$v.xz" > /tmp/world-cost-$v && chmod +x /tmp/world-cost-$v; }
done
LA=tensor,tensor-clock,tensor-capture-query,group-blocking-caller
for i in 1 2 3; do
  for m in 0 1 2 4 8 15; do
    ABLATE=$m step "ablate-$m-$i" 60 /tmp/world-cost-ablate --iters 1000 --rounds 15 --warmup 300 --layers $LA --json "$R/ablate-$m-$i.jsonl"
  done
done
pack call1
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-main 240 "$B/run.sh" \
  lifecycle one_gpu ranks_ops ranks_mismatch_default_options ranks_dumps
pack call1
L1=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-lean
for i in 1 2 3; do
  for v in before after; do
    step "ab-w1-$v-$i" 60 /tmp/world-cost-$v --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-$v-$i.jsonl"
    step "ab-w1-behind-$v-$i" 90 /tmp/world-cost-$v --gpu-behind --iters 1000 --rounds 15 --warmup 300 --layers $L1 --json "$R/ab-w1-behind-$v-$i.jsonl"
  done
done
pack call1
LN=raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller
step ab-w2-after 150 "$L" -n 2 --timeout 145 /tmp/world-cost-after --iters 100 --rounds 31 --warmup 20 --layers $LN --json "$R/ab-w2-after.jsonl"
pack call1
step ab-w4-after 190 "$L" -n 4 --timeout 185 /tmp/world-cost-after --iters 60 --rounds 21 --warmup 10 --layers $LN --json "$R/ab-w4-after.jsonl"
failures; pack call1
