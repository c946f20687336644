#!/usr/bin/env bash
# Issue 30: the SM clock during each program's run, and whether SM load before timing slows nccl-perf's graph memcpys.
source "$(dirname "$0")/prelude.sh" exp8
export NCCL_TESTS_BUILD=/tmp/ntb-exp8
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -G 10"
# The prelude's nt, with start and end marks to place each run on the clock trace.
nt() { local name=$1; shift; echo "mark $name start $(date +%H:%M:%S.%N)" >> $L/marks.txt; env "$@" OPS=all_reduce PIN=4-7 bash $H/nccl-tests.sh $L/$name > $L/$name.log 2>&1; echo "mark $name end $(date +%H:%M:%S.%N)" >> $L/marks.txt; echo "$name: $(tail -1 $L/$name.log)"; }
nt build FLAGS="-b 1M -e 1M -g 1 -w 1 -n 1 -c 0"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 20 > $L/clocks.csv 2>&1 &
smi=$!
sleep 2
nt base    FLAGS="$F -c 1"
sleep 2
nt c0      FLAGS="$F -c 0"
sleep 2
nt spin0   FLAGS="$F -c 1" NP_SPIN_AT=0
sleep 2
nt spin2   FLAGS="$F -c 1" NP_SPIN_AT=2
kill $smi
tar czf $OUT/exp8.tar.gz -C $OUT exp8
