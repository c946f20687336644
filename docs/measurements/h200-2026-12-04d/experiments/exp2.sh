#!/usr/bin/env bash
# Issue 30: which part of nccl-tests' check path slows its next measurement (-G).
source "$(dirname "$0")/prelude.sh" exp2
export NCCL_TESTS_BUILD=/tmp/ntb-exp2
nvidia-smi -q -d CLOCK,PERFORMANCE > $L/clocks-before.txt 2>&1
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -G 10 -c 1"
nt base      FLAGS="$F"
nt ntonce    FLAGS="$F" NT_HOSTALLOC_ONCE=1
nt ntnograph FLAGS="$F" NT_NO_CHECKGRAPH=1
nt ntboth    FLAGS="$F" NT_NO_CHECKGRAPH=1 NT_HOSTALLOC_ONCE=1
nt npfree    FLAGS="$F" NP_FREEHOST=1
nt npsync    FLAGS="$F" NP_DEVSYNC=1
nt npsleep   FLAGS="$F" NP_SLEEP_US=5000
nt npkeep    FLAGS="$F" NP_CHECK_AFTER=1 NP_KEEP_GRAPHS=1
nt c0pair    FLAGS="-b 2M -e 4M -f 2 -g 1 -w 20 -n 200 -G 10 -c 0"
nt c0one     FLAGS="-b 4M -e 4M -f 2 -g 1 -w 20 -n 200 -G 10 -c 0"
nt c0keep    FLAGS="-b 2M -e 4M -f 2 -g 1 -w 20 -n 200 -G 10 -c 0" NP_KEEP_GRAPHS=1 NP_CHECK_AFTER=1
nvidia-smi -q -d CLOCK,PERFORMANCE > $L/clocks-after.txt 2>&1
tar czf $OUT/exp2.tar.gz -C $OUT exp2
