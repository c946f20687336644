#!/usr/bin/env bash
# Cache lines a layer misses per all_reduce + wait of the issuing thread when the fake NCCL of
# `cargo xtask host-profile` evicted KIB of the caches in the call before. Run `cargo xtask
# host-profile` first: it builds the fakes and world-cost into target/host-profile/; this script
# sets the eviction itself (HOST_PROFILE_EVICT_KIB). callgrind's cache simulation (--cache-sim=yes:
# a first-level data cache of 32 KiB here) counts read and write misses per function of the main
# thread (--separate-threads, its file ends in -01); those of the fake's ncclAllReduce (the
# eviction itself) are left out, the fake driver's and the rest of the fake NCCL's are counted
# (by_file.py --total sums them).
# A run of 6000 calls less a run of 2000 is 4000 calls' worth. callgrind's files are kept in OUT
# (default /tmp/lines), named after the binary's checksum, KIB, the layer and the calls, for
# by_file.py.
# usage: lines.sh WORLD_COST_BINARY KIB LAYER...
set -eu
bin=$(realpath "$1"); kib=$2; shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $kib =~ ^[0-9]+$ ]] || { echo "lines.sh: KIB must be a whole number of KiB, got '$kib'" >&2; exit 2; }
out=${OUT:-/tmp/lines}; mkdir -p "$out"
tag="$(cksum < "$bin" | cut -d' ' -f1).$kib"
cd "$(git rev-parse --show-toplevel)/target/host-profile"
run() { # layer, calls: callgrind's files of that run, in $out
  local file="$out/$tag.$1.$2"
  rm -f "$file"*
  if ! HOST_PROFILE_EVICT_KIB=$kib LD_LIBRARY_PATH=$PWD NCCL_LIBRARY=$PWD/libnccl.so.2 \
    valgrind --tool=callgrind --log-file="$file.valgrind" --cache-sim=yes --separate-threads=yes \
    --callgrind-out-file="$file" "$bin" --layers "$1" --iters "$2" --rounds 1 --warmup 200 > "$file.log" 2>&1
  then
    echo "lines.sh: world-cost --layers $1 failed under valgrind:" >&2; tail -5 "$file.log" >&2; exit 1
  fi
}
for layer in "$@"; do
  run "$layer" 2000; run "$layer" 6000
  f="$out/$tag.$layer"
  read -r reads writes < <(python3 "$here/by_file.py" --total "$f.2000-01" "$f.6000-01" 4000)
  echo "$layer $reads read, $writes write misses per call (${kib} KiB evicted; $f.{2000,6000}-01)"
done
