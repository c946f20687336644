#!/usr/bin/env bash
# Issue 30: what in nccl-tests' first check slows every later graph memcpy by 0.36 us; can one kernel do it to nccl-perf?
source "$(dirname "$0")/prelude.sh" exp4
export NCCL_TESTS_BUILD=/tmp/ntb-exp4
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -c 1 -G 10"
nt base      FLAGS="$F"
nt npk2      FLAGS="$F" NP_KERNEL_AT=2
nt npk0      FLAGS="$F" NP_KERNEL_AT=0
nt npk2leg   FLAGS="$F" NP_KERNEL_AT=2 NP_KERNEL_LEGACY=1
nt npm2      FLAGS="$F" NP_MEMSET_AT=2
nt ntnoinit  FLAGS="$F" NT_NO_INITDATA_AFTER=1
nt ntnoall   FLAGS="$F" NT_NO_INITDATA_AFTER=1 NT_NO_VERIFY=1 NT_NO_CHECKGRAPH=1
tar czf $OUT/exp4.tar.gz -C $OUT exp4
