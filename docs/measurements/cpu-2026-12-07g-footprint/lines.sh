#!/usr/bin/env bash
# Cache lines a layer misses per all_reduce + wait of the issuing thread when the fake NCCL of
# `cargo xtask host-profile --evict-kib KIB` evicted the caches in the call before (run that
# first: it builds the fakes and world-cost into target/host-profile/ and sets the eviction's
# size for this script's runs too, HOST_PROFILE_EVICT_KIB). callgrind's cache simulation
# (--cache-sim=yes: its first-level data cache, 32 KiB here) counts read and write misses per
# function of the main thread (--separate-threads); those of the fake's ncclAllReduce (the
# eviction itself) are left out, and a run of 6000 calls less a run of 2000 is 4000 calls' worth.
# usage: lines.sh WORLD_COST_BINARY KIB LAYER...
set -eu
bin=$(realpath "$1"); kib=$2; shift 2
cd "$(git rev-parse --show-toplevel)/target/host-profile"
misses() { # layer, calls: "reads writes" outside ncclAllReduce
  local out=/tmp/lines.$1.$2
  rm -f "$out"*
  HOST_PROFILE_EVICT_KIB=$kib LD_LIBRARY_PATH=$PWD NCCL_LIBRARY=$PWD/libnccl.so.2 valgrind --tool=callgrind \
    --cache-sim=yes --separate-threads=yes --callgrind-out-file="$out" "$bin" --layers "$1" --iters "$2" \
    --rounds 1 --warmup 200 > /dev/null 2>&1
  callgrind_annotate --inclusive=no --show=D1mr,D1mw --threshold=100 --auto=no "$out-01" | awk '
    { gsub(/,|\([^)]*\)/, "") }
    / PROGRAM TOTALS/ { r = $1; w = $2 }
    /:ncclAllReduce / { r -= ($1 == "." ? 0 : $1); w -= ($2 == "." ? 0 : $2) }
    END { print r, w }'
}
for layer in "$@"; do
  read -r r1 w1 < <(misses "$layer" 2000); read -r r2 w2 < <(misses "$layer" 6000)
  echo "$layer $(( (r2 - r1) / 4000 )) read, $(( (w2 - w1) / 4000 )) write misses per call (${kib} KiB evicted)"
done
