#!/usr/bin/env bash
# After the release moved off the heal's path (dc4851f) and the elastic example's grow fallback:
# the torchrun_elastic_trainer example at world sizes 2 and 4, then every GPU test of the failure
# and heal paths on NCCL 2.28.3 (one-process tests of nccl-group-gpu, fault processes, heal,
# sub-group loss, the lost-rank matrix with one run per cell and four exits, nccl-perf's).
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
RANKS_WORLDS="2 4" GPU_TEST_TIMEOUT=100 RANKS_TIMEOUT=90 timeout 120 "$B/run.sh" torchrun_elastic > /dev/null 2>&1
echo "elastic rc=$? $(( $(date +%s) - t0 ))s"
mv "$OUT/gpu-tests.log" "$R/elastic.log"
tail -1 "$R/elastic.log"; grep -E "^(PASS|FAIL)" "$R/elastic.log" | sed 's/^/  /'
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
export NCCL_TEST_REQUIRE_GPU=1
t() { # tag, limit, binary, args...
  local tag=$1 lim=$2 bin=$3; shift 3
  (( $(date +%s) - t0 > ${UNTIL:-540} )) && { echo "$tag: not run"; return; }
  timeout "$lim" "$BIN/$bin" --test-threads=1 --nocapture "$@" > "$R/$tag.log" 2>&1
  echo "$tag rc=$? $(grep -E '^test result' "$R/$tag.log" | tail -1) $(( $(date +%s) - t0 ))s"
}
t heal 90 nccl-group-gpu_heal
t subgroup-loss 40 nccl-group-gpu_subgroup_loss
t group 100 nccl-group-gpu --skip ranks_
t faults 120 nccl-group-gpu_group_faults_processes
LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 t lost-rank 120 nccl-group-gpu_lost_rank
t perf 40 nccl-perf-gpu
echo "lost-rank reports: $(grep -c 'lost-rank report:' "$R/lost-rank.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$R/lost-rank.log")"
grep -hE "^test .* FAILED|^failures:|panicked" "$R"/*.log | head -20
tar czf "$OUT/call43c.tgz" -C "$OUT" r
