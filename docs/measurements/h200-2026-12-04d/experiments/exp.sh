#!/usr/bin/env bash
# Issue 30: which of the candidates makes nccl-tests 0.35 us/call slower from 2 MiB with -G.
source "$(dirname "$0")/prelude.sh" exp
F="-g 1 -w 20 -n 200"
nt base   FLAGS="-b 1M -e 256M -f 2 $F -G 10 -c 1"
nt first2 FLAGS="-b 2M -e 256M -f 2 $F -G 10 -c 1"
nt g20    FLAGS="-b 1M -e 16M -f 2 $F -G 20 -c 1"
nt c0     FLAGS="-b 1M -e 256M -f 2 $F -G 10 -c 0"
nt T      FLAGS="-b 1M -e 256M -f 2 $F -G 10 -c 1" PERF_FLAGS="-T 1000"
nt upload FLAGS="-b 1M -e 256M -f 2 $F -G 10 -c 1" NT_UPLOAD=1 NP_UPLOAD=1
nt after  FLAGS="-b 1M -e 256M -f 2 $F -G 10 -c 1" NP_CHECK_AFTER=1
nt one4   FLAGS="-b 4M -e 4M -f 2 $F -G 10 -c 1"
nt base2  FLAGS="-b 1M -e 256M -f 2 $F -G 10 -c 1" FIRST=nccl-perf
tar czf $OUT/exp.tar.gz -C $OUT exp
