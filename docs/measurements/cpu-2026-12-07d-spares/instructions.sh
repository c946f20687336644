#!/usr/bin/env bash
# Instructions per all_reduce + wait of the issuing thread, per world-cost layer, on the do-nothing
# driver and NCCL of `cargo xtask host-profile` (run that first: it builds them and world-cost
# into target/host-profile/). callgrind counts every thread's instructions in a file each
# (--separate-threads); the main thread's (-01) of a run of 15000 calls less a run of 5000 is
# 10000 calls' worth, set-up and warm-up cancelled out.
# usage: instructions.sh WORLD_COST_BINARY LAYER...
set -eu
bin=$(realpath "$1"); shift
cd "$(git rev-parse --show-toplevel)/target/host-profile"
count() { # layer, calls
  local out=/tmp/instructions.$1.$2
  rm -f "$out"*
  LD_LIBRARY_PATH=$PWD NCCL_LIBRARY=$PWD/libnccl.so.2 valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$out" "$bin" --layers "$1" --iters "$2" --rounds 1 --warmup 500 > /dev/null 2>&1
  awk '/^(summary|totals):/ {print $2; exit}' "$out-01"
}
for layer in "$@"; do
  a=$(count "$layer" 5000); b=$(count "$layer" 15000)
  echo "$layer $(( (b - a) / 10000 )) instructions per call"
done
