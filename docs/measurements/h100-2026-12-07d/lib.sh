# Sourced by session 12's call scripts (run from the repo root on the GPU machine). The results
# folder lives in /tmp while the machine stays warm, so a later call skips what an earlier one did
# (a step's log ends with a "done" marker) and every call packs the whole folder into $OUT.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R=/tmp/s12/r; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
[[ -f "$B/bundle-bin.sh" ]] || { echo "no bundle on this machine: carry target/gpu-bundle"; exit 3; }
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")" || exit 3
export NCCL_TEST_REQUIRE_GPU=1
W289=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
L307=/tmp/l307.so.2
UNTIL="${UNTIL:-540}"
left() { (( $(date +%s) - t0 < UNTIL )); }
done_already() { [[ -f "$R/$1.done" ]]; }
t() { # tag, limit, binary, args...
  local tag=$1 lim=$2 bin=$3; shift 3
  done_already "$tag" && return
  left || { echo "$tag: not run"; return; }
  local s; s=$(date +%s)
  timeout "$lim" "$BIN/$bin" --test-threads=1 --nocapture "$@" > "$R/$tag.log" 2>&1
  echo "$tag rc=$? $(grep -E '^test result' "$R/$tag.log" | tail -1) $(( $(date +%s) - s ))s (at $(( $(date +%s) - t0 ))s) NCCL_LIBRARY=${NCCL_LIBRARY:-default}" | tee "$R/$tag.done"
}
lost_rank() { # tag
  done_already "$1" && return
  LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 t "$1" 240 nccl-group-gpu_lost_rank
  [[ -f "$R/$1.log" ]] && echo "  $1 reports: $(grep -c 'lost-rank report:' "$R/$1.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$R/$1.log")" | tee -a "$R/$1.done"
}
inject() { # nccl tag, world, spec...
  local tag=$1 w=$2; shift 2
  left || return
  timeout 40 "$BIN/nccl-launch-nccl-launch" -n "$w" --keep-going --timeout 35 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --inject "$@" --json "$R/recovery-$tag.jsonl" >> "$R/recovery-$tag.txt" 2>&1
  echo "inject $tag w$w $* rc=$? $(( $(date +%s) - t0 ))s"
}
grow() { # nccl tag, world
  local tag=$1 w=$2
  left || return
  timeout 60 "$BIN/nccl-launch-nccl-launch" -n "$w" --timeout 55 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller -b 4K --grow-spare 20 --json "$R/grow-$tag.jsonl" >> "$R/grow-$tag.txt" 2>&1
  echo "grow $tag w$w rc=$? $(( $(date +%s) - t0 ))s"
}
# 2.30.7 unpacked once, whole or not at all (a failed unpack must leave no file behind).
with307() {
  [[ -s $L307 ]] && return 0
  [[ -f target/nccl-2.30.7/libnccl-2.30.7-sm90.so.2.xz ]] || return 1
  xz -dc target/nccl-2.30.7/libnccl-2.30.7-sm90.so.2.xz > $L307.part && mv $L307.part $L307
}
failures() { grep -hE "^test .* FAILED|^failures:|panicked|wait_status\((11|6|134|139)\)|SIGSEGV" "$R"/*.log 2>/dev/null | head -20; }
soak_state() {
  for d in /tmp/soak/stall*; do
    [[ -d "$d" ]] || continue
    echo "soak $d: $(cat "$d/verdict.txt" 2>/dev/null || echo running) $(ps -eo args | grep -c '[-]-soak ')"
  done
}
# A step of any command, run once (its log ends with a "done" marker line in $R/TAG.done).
step() { # tag, limit, command...
  local tag=$1 lim=$2; shift 2
  done_already "$tag" && return
  left || { echo "$tag: not run"; return; }
  local s; s=$(date +%s)
  timeout "$lim" "$@" > "$R/$tag.log" 2>&1
  echo "$tag rc=$? $(( $(date +%s) - s ))s (at $(( $(date +%s) - t0 ))s) NCCL_LIBRARY=${NCCL_LIBRARY:-default} | $(grep -vE '^\s*$' "$R/$tag.log" | tail -1 | cut -c1-160)" | tee "$R/$tag.done"
}
L="$BIN/nccl-launch-nccl-launch"
WC="$BIN/benches-world-cost"
# world-cost at world size W, every layer, then torch.distributed's figure for the same call.
world_cost() { # world, cost args
  local w=$1; shift
  step "world-cost-$w" 150 "$L" -n "$w" --timeout 140 "$WC" "$@" --json "$R/world-cost-$w.jsonl"
}
torch_cost() { # world
  local w=$1
  step "torch-$w" 120 "$L" -n "$w" --timeout 110 python3 "$B/scripts/torch_world_cost.py" \
    --iters 100 --rounds 5 --warmup 20 --json "$R/torch-$w.jsonl" --against "$R/world-cost-$w.jsonl"
}
# One round of recovery launches on one release, once (a marker per round and release).
inject_round() { # library, tag, round
  local lib=$1 g=$2 i=$3
  done_already "round-$g-$i" && return
  left || return
  export NCCL_LIBRARY=$lib
  inject $g 4 exit@3:20 --op-timeout-ms 60000; inject $g 4 kill@3:20 --op-timeout-ms 60000
  inject $g 4 exit@3:20 --tell --op-timeout-ms 60000; inject $g 4 stop@3:20 --op-timeout-ms 60000
  inject $g 8 exit@7:20 --op-timeout-ms 60000; inject $g 8 kill@7:20 --op-timeout-ms 60000
  inject $g 8 stop@7:20 --op-timeout-ms 60000; grow $g 4
  left && echo "round $g $i at $(( $(date +%s) - t0 ))s" > "$R/round-$g-$i.done"
  unset NCCL_LIBRARY
}
inject_rounds() { for i in 1 2 3 4 5; do inject_round $W289 2.28.9 $i; with307 && inject_round $L307 2.30.7 $i; done; }
pack() { rm -rf "$R/soak"; [[ -d /tmp/soak ]] && cp -r /tmp/soak "$R/soak"; tar czf "$OUT/$1.tgz" -C /tmp/s12 r; }
# The correctness steps, in order: heal tests and the lost-rank matrix twice, per release.
correctness() {
  unset NCCL_LIBRARY
  t heal-2.28.3 200 nccl-group-gpu_heal; lost_rank lost-rank-2.28.3-1; lost_rank lost-rank-2.28.3-2
  export NCCL_LIBRARY=$W289
  t heal-2.28.9 200 nccl-group-gpu_heal; lost_rank lost-rank-2.28.9-1; lost_rank lost-rank-2.28.9-2
  if with307; then
    export NCCL_LIBRARY=$L307
    t heal-2.30.7 200 nccl-group-gpu_heal; lost_rank lost-rank-2.30.7-1; lost_rank lost-rank-2.30.7-2
  else
    echo "2.30.7 not here yet (carry target/nccl-2.30.7)"
  fi
  unset NCCL_LIBRARY
}
