#!/usr/bin/env bash
# Cache lines a layer misses per all_reduce + wait of the issuing thread when the fake NCCL of
# `cargo xtask host-profile` evicted KIB of the caches in the call before. Run `cargo xtask
# host-profile` first: it builds the fakes and world-cost into target/host-profile/; this script
# sets the eviction itself (HOST_PROFILE_EVICT_KIB). callgrind's cache simulation (--cache-sim=yes:
# a first-level data cache of 32 KiB here) counts read and write misses per function of the main
# thread (--separate-threads, its file ends in -01); those of the fake's ncclAllReduce (the
# eviction itself) are left out, the fake driver's and the rest of the fake NCCL's are counted.
# A run of 6000 calls less a run of 2000 is 4000 calls' worth. callgrind's files are kept in OUT
# (default /tmp/lines), named after the binary's checksum, KIB, the layer and the calls, for
# by_file.py.
# usage: lines.sh WORLD_COST_BINARY KIB LAYER...
set -eu
bin=$(realpath "$1"); kib=$2; shift 2
[[ $kib =~ ^[0-9]+$ ]] || { echo "lines.sh: KIB must be a whole number of KiB, got '$kib'" >&2; exit 2; }
out=${OUT:-/tmp/lines}; mkdir -p "$out"
tag="$(cksum < "$bin" | cut -d' ' -f1).$kib"
cd "$(git rev-parse --show-toplevel)/target/host-profile"
misses() { # layer, calls: "reads writes" outside ncclAllReduce
  local file="$out/$tag.$1.$2"
  rm -f "$file"*
  if ! HOST_PROFILE_EVICT_KIB=$kib LD_LIBRARY_PATH=$PWD NCCL_LIBRARY=$PWD/libnccl.so.2 \
    valgrind --tool=callgrind --log-file="$file.valgrind" --cache-sim=yes --separate-threads=yes \
    --callgrind-out-file="$file" "$bin" --layers "$1" --iters "$2" --rounds 1 --warmup 200 > "$file.log" 2>&1
  then
    echo "lines.sh: world-cost --layers $1 failed under valgrind:" >&2; tail -5 "$file.log" >&2; exit 1
  fi
  callgrind_annotate --inclusive=no --show=D1mr,D1mw --threshold=100 --auto=no "$file-01" | awk '
    { gsub(/,|\([^)]*\)/, "") }
    / PROGRAM TOTALS/ { r = $1; w = $2 }
    /:ncclAllReduce / { r -= ($1 == "." ? 0 : $1); w -= ($2 == "." ? 0 : $2) }
    END { print r, w }'
}
for layer in "$@"; do
  read -r r1 w1 < <(misses "$layer" 2000); read -r r2 w2 < <(misses "$layer" 6000)
  awk -v l="$layer" -v k="$kib" -v r=$((r2 - r1)) -v w=$((w2 - w1)) -v f="$out/$tag.$layer" \
    'BEGIN { printf "%s %.1f read, %.1f write misses per call (%s KiB evicted; %s.{2000,6000}-01)\n", l, r / 4000, w / 4000, k, f }'
done
