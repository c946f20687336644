#!/usr/bin/env bash
# Issue 30: the one-run comparison (graph mode, -c 0, all seven operations, two more runs), then the GPU tests not run on this tree.
set -u
H="$(cd "$(dirname "$0")" && pwd)"
export NCCL_NVLS_ENABLE=0
mkdir -p $OUT/fid
FLAGS="-b 1M -e 256M -f 2 -g 1 -w 20 -n 200 -G 10 -c 0" PIN=4-7 REPEAT=2 FIRST=nccl-perf bash $H/nccl-tests.sh $OUT/fid > $OUT/fid.log 2>&1
tail -1 $OUT/fid.log
tar czf $OUT/fid.tar.gz -C $OUT fid && rm -rf $OUT/fid
bash $H/run-sL.sh > $OUT/subgroup-loss.log 2>&1
tail -1 $OUT/subgroup-loss.log
bash $H/run-sR.sh ranks_mismatch_unchecked_timeout > $OUT/mismatch-unchecked.log 2>&1
tail -1 $OUT/mismatch-unchecked.log
