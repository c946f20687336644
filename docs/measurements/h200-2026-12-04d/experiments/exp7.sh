#!/usr/bin/env bash
# Issue 30: which CUDA call of nccl-tests' check path (memset, kernels, mapped alloc) sets the slower state.
source "$(dirname "$0")/prelude.sh" exp7
export NCCL_TESTS_BUILD=/tmp/ntb-exp7
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -G 10 -c 1"
nt nohost   FLAGS="$F" NT_NO_HOSTALLOC=1 NT_NO_VERIFY=1
nt nomemset FLAGS="$F" NT_NO_MEMSET=1
nt before   FLAGS="$F" NT_NO_INITDATA_AFTER=1 NT_NO_VERIFY=1 NT_NO_CHECKGRAPH=1 NT_NO_HOSTALLOC=1
nt kbefore  FLAGS="$F" NT_NO_INITDATA_AFTER=1 NT_NO_VERIFY=1 NT_NO_CHECKGRAPH=1 NT_NO_HOSTALLOC=1 NT_NO_MEMSET=1
nt memsets  FLAGS="$F" NT_NO_KERNELS=1 NT_NO_VERIFY=1 NT_NO_HOSTALLOC=1 NT_NO_CHECKGRAPH=1
tar czf $OUT/exp7.tar.gz -C $OUT exp7
