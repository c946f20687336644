#!/usr/bin/env bash
# Issue 30: is nccl-tests' extra cost after its check once per measurement or per call, persistent, the verify kernel?
source "$(dirname "$0")/prelude.sh" exp3
export NCCL_TESTS_BUILD=/tmp/ntb-exp3
F="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -c 1"
nt base      FLAGS="$F -G 10"
nt g20       FLAGS="$F -G 20"
nt g5        FLAGS="$F -G 5"
nt first     FLAGS="$F -G 10" NT_CHECK_FIRST_ONLY=1
nt noverify  FLAGS="$F -G 10" NT_NO_VERIFY=1
nt vstream   FLAGS="$F -G 10" NT_VERIFY_STREAM=1
nt warm      FLAGS="$F -G 10" NT_WARM_REPLAY=1 NP_WARM_REPLAY=1
nt n400      FLAGS="-b 1M -e 256M -f 2 -g 1 -w 20 -n 400 -c 1 -G 10"
tar czf $OUT/exp3.tar.gz -C $OUT exp3
