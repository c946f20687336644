# Session 10: the steps of call 1 (sourced by call1.sh and, for what call 1 left, call2.sh).
unset NCCL_LIBRARY
mkdir -p "$R/run"; OUT="$R/run" RANKS_TIMEOUT=120 step run-issue40 300 "$B/run.sh" \
  ranks_mismatch_default_options ranks_gpu_times ranks_dumps torchfrtrace torchrun_elastic_trainer
lost_rank lost-rank-2.28.3-1
world_cost 1 --iters 1000 --rounds 15 --warmup 300 --layers raw,raw-nonblocking,tensor,tensor-event,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked,group-lean
world_cost 2 --iters 300 --rounds 15 --warmup 50 --layers raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
world_cost 4 --iters 300 --rounds 15 --warmup 50 --layers raw,raw-nonblocking,tensor,tensor-nonblocking,group-blocking-caller,group-nonblocking-caller,group-unchecked
for c in on off; do for sizes in "-b 8 -e 8" "-b 1M -e 64M -f 64"; do
  step "perf-w4-check-$c-$(echo $sizes | tr -d ' -')" 60 "$L" -n 4 --timeout 55 "$BIN/nccl-perf-nccl-perf" all_reduce \
    --layer group-caller $sizes -n 40 -w 10 --batches 3 --group-mismatch-check $c
done; done
