# Sourced by this session's call scripts (run from the repo root on the GPU machine).
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
t0=$(date +%s)
[[ -f "$B/bundle-bin.sh" ]] || { echo "no bundle on this machine: carry target/gpu-bundle"; exit 3; }
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")" || exit 3
export NCCL_TEST_REQUIRE_GPU=1
UNTIL="${UNTIL:-540}"
left() { (( $(date +%s) - t0 < UNTIL )); }
t() { # tag, limit, binary, args...
  local tag=$1 lim=$2 bin=$3; shift 3
  left || { echo "$tag: not run"; return; }
  timeout "$lim" "$BIN/$bin" --test-threads=1 --nocapture "$@" > "$R/$tag.log" 2>&1
  echo "$tag rc=$? $(grep -E '^test result' "$R/$tag.log" | tail -1) $(( $(date +%s) - t0 ))s"
}
lost_rank() { # tag
  LOST_RANK_RUNS=1 LOST_RANK_EXIT_RUNS=4 t "$1" 240 nccl-group-gpu_lost_rank
  echo "  $1 reports: $(grep -c 'lost-rank report:' "$R/$1.log") silent_wrong>0: $(grep -c 'silent_wrong=[1-9]' "$R/$1.log")"
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
matrix() { # nccl tag: medians of 5 at 4 and 8
  local tag=$1
  for i in 1 2 3 4 5; do
    inject "$tag" 4 exit@3:20 --op-timeout-ms 60000
    inject "$tag" 4 kill@3:20 --op-timeout-ms 60000
    inject "$tag" 4 exit@3:20 --tell --op-timeout-ms 60000
    inject "$tag" 4 stop@3:20 --op-timeout-ms 60000
  done
  for i in 1 2 3 4 5; do
    inject "$tag" 8 exit@7:20 --op-timeout-ms 60000
    inject "$tag" 8 kill@7:20 --op-timeout-ms 60000
    inject "$tag" 8 stop@7:20 --op-timeout-ms 60000
  done
  for i in 1 2 3 4 5; do grow "$tag" 4; done
  inject "$tag" 4 exit@3:20 --heal full --op-timeout-ms 60000
}
failures() { grep -hE "^test .* FAILED|^failures:|panicked|wait_status\((11|6|134|139)\)" "$R"/*.log 2>/dev/null | head -20; }
soak_state() {
  for d in /tmp/soak/stall*; do
    [[ -d "$d" ]] || continue
    echo "soak $d: $(cat "$d/verdict.txt" 2>/dev/null || echo running) $(ps -eo pid,etimes,args | grep -c '[s]oak ')"
  done
}
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" r; }
