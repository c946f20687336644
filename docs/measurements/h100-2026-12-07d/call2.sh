#!/usr/bin/env bash
# Session 12, call 2 (carry target/quick): world-cost of main e18891e (before) and 14ee4a6 (after:
# the tracker's spares), alternated on one machine: at world size 1 four times each, at 2 and 4
# (simulated hosts) twice each.
export NCCL_NVLS_ENABLE=0
Q=target/quick; R=$OUT/ab; mkdir -p $R
nvidia-smi -L > $R/gpu.txt
L1=raw,tensor,tensor-capture-query,group-blocking-caller,group-nonblocking-caller,group-lean
L1B=raw,tensor,group-blocking-caller,group-nonblocking-caller,group-lean
LN=raw,raw-nonblocking,tensor,group-blocking-caller,group-nonblocking-caller
for i in 1 2 3 4; do
  for v in before after; do
    l=$L1; [[ $v == before ]] && l=$L1B
    timeout 60 $Q/world-cost-$v --iters 1000 --rounds 15 --warmup 300 --layers $l --json $R/w1-$v-$i.jsonl > $R/w1-$v-$i.log 2>&1
    echo "w1 $v $i rc=$? $(grep -E '^\s+group-blocking-caller' $R/w1-$v-$i.log)"
  done
done
for w in 2 4; do
  for i in 1 2; do
    for v in before after; do
      timeout 80 $Q/nccl-launch -n $w --timeout 75 $Q/world-cost-$v --iters 100 --rounds 7 --warmup 20 --layers $LN --json $R/w$w-$v-$i.jsonl > $R/w$w-$v-$i.log 2>&1
      echo "w$w $v $i rc=$? $(grep -E '^\[rank 0\]\s+group-blocking-caller' $R/w$w-$v-$i.log)"
    done
  done
done
