#!/usr/bin/env bash
# Prepared in session 19 for the next GPU machine (none was lent then: not run yet). Carry
# target/gpu-bundle, a bundle of main. The machine; world-cost at 1 three times with the GPU free
# and twice held behind, in 31 rounds of 1000; run.sh's lifecycle, one_gpu, every operation, the
# default-options mismatches and the dumps at 1, 2 and 4; world-cost at 2, nccl-tensor and the
# default group on a tensor and on borrowed memory alone, in 81 rounds of 100 (2.6 times
# h100-2026-12-07j's rounds, half its layers, so that the paired interval narrows by about 1.6).
# gpu-call2.sh does world size 4 and the rest on the warm machine.
# Run as docs/measurements/cpu-2026-12-08-moves/gpu-call1.sh.
UNTIL=${UNTIL:-540}; source docs/measurements/h100-2026-12-07d/lib.sh
unset NCCL_LIBRARY
{ nvidia-smi -L; lscpu; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; uname -a; } > "$R/machine.txt" 2>&1
L1=raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-borrowed,group-nonblocking-caller
for i in 1 2 3; do
  step "w1-$i" 60 "$WC" --iters 1000 --rounds 31 --warmup 300 --layers $L1 --json "$R/w1-$i.jsonl"
done
for i in 1 2; do
  step "w1-behind-$i" 90 "$WC" --gpu-behind --iters 1000 --rounds 31 --warmup 300 \
    --layers tensor,group-blocking-caller,group-borrowed --json "$R/w1-behind-$i.jsonl"
done
pack call1
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-main 240 "$B/run.sh" \
  lifecycle one_gpu ranks_ops ranks_mismatch_default_options ranks_dumps
pack call1
step w2 150 "$L" -n 2 --timeout 145 "$WC" --iters 100 --rounds 81 --warmup 20 \
  --layers tensor,group-blocking-caller,group-borrowed --json "$R/w2.jsonl"
failures; pack call1
