#!/usr/bin/env bash
# Issue 30: nccl-tests' expected buffer (allocation) or its initData before timing?
source "$(dirname "$0")/prelude.sh" exp5
export NCCL_TESTS_BUILD=/tmp/ntb-exp5
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -G 10"
nt base      FLAGS="$F -c 1"
nt ntbare    FLAGS="$F -c 1" NT_NO_INITDATA_BEFORE=1 NT_NO_INITDATA_AFTER=1 NT_NO_VERIFY=1 NT_NO_CHECKGRAPH=1 NT_NO_HOSTALLOC=1
nt ntc0exp   FLAGS="$F -c 0" NT_ALLOC_EXPECTED=1
nt npextra   FLAGS="$F -c 1" NP_EXTRA_ALLOC=1
nt ntnobef   FLAGS="$F -c 1" NT_NO_INITDATA_BEFORE=1
nt c0        FLAGS="$F -c 0"
tar czf $OUT/exp5.tar.gz -C $OUT exp5
