#!/usr/bin/env bash
# The CPU suite (what `cargo xtask ci` runs: cargo test --workspace), 5 times
# in a row next to two busy-loop processes, each run's time and result.
cd /work/main
cargo test --workspace --no-run > /tmp/loaded-build.log 2>&1 || { echo "build failed"; exit 1; }
sh -c 'while :; do :; done' & b1=$!
sh -c 'while :; do :; done' & b2=$!
trap 'kill $b1 $b2' EXIT
for i in 1 2 3 4 5; do
  start=$(date +%s)
  cargo test --workspace --no-fail-fast > /tmp/loaded-run-$i.log 2>&1
  rc=$?
  end=$(date +%s)
  passed=$(grep -h "^test result" /tmp/loaded-run-$i.log | awk '{p+=$4; f+=$6} END {print p" passed, "f" failed"}')
  echo "run $i: rc=$rc $((end-start)) s, $passed, load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
