#!/usr/bin/env bash
# Issue 30: a kernel and a mapped pinned allocation, together, slow later graph memcpys? Then the one-run comparison with -c 0.
source "$(dirname "$0")/prelude.sh" exp6
export NCCL_TESTS_BUILD=/tmp/ntb-exp6
B="$H/../gpu-bundle"
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -G 10"
nt k0h0    FLAGS="$F -c 1" NP_KERNEL_AT=0 NP_HOSTALLOC_AT=0
nt k0h2    FLAGS="$F -c 1" NP_KERNEL_AT=0 NP_HOSTALLOC_AT=2
nt h0k2    FLAGS="$F -c 1" NP_HOSTALLOC_AT=0 NP_KERNEL_AT=2
nt h0      FLAGS="$F -c 1" NP_HOSTALLOC_AT=0
nt nthost  FLAGS="$F -c 1" NT_NO_INITDATA_BEFORE=1 NT_NO_INITDATA_AFTER=1 NT_NO_VERIFY=1 NT_NO_CHECKGRAPH=1
NCCL_TESTS_BUILD=/tmp/ntb-main FLAGS="$F -c 0" PIN=4-7 REPEAT=2 bash $B/nccl-tests.sh $L/oneRun > $L/oneRun.log 2>&1
echo "oneRun: $(tail -1 $L/oneRun.log)"
tar czf $OUT/exp6.tar.gz -C $OUT exp6
