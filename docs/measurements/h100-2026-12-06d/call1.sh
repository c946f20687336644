#!/usr/bin/env bash
# Issue 40 diagnosis and issue 39's last test: world-cost at 1, 2 and 4 with the nonblocking wait
# variants (nccl-core's new wait policy against a plain spin and a plain yield), group_parts' driver
# calls, then the mismatch tests with default options and without any check at world sizes 2 and 4.
set -u
B=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
R="$OUT/r"; mkdir -p "$R"
nvidia-smi -L > "$R/gpu.txt" 2>&1
source "$B/bundle-bin.sh"
BIN="$(bundle_bin "$B")"
L="$BIN/nccl-launch-nccl-launch"
t0=$(date +%s)
WC="$BIN/benches-world-cost"
timeout 80 "$WC" --iters 200 --rounds 5 --warmup 30 --json "$R/world-cost-1.jsonl" > "$R/world-cost-1.txt" 2>&1
echo "wc1 rc=$? $(( $(date +%s) - t0 ))s"
timeout 130 "$L" -n 2 --timeout 120 "$WC" --iters 200 --rounds 5 --warmup 30 --json "$R/world-cost-2.jsonl" > "$R/world-cost-2.txt" 2>&1
echo "wc2 rc=$? $(( $(date +%s) - t0 ))s"
timeout 110 "$L" -n 4 --timeout 100 "$WC" --iters 60 --rounds 3 --warmup 10 \
  --layers raw,raw-nonblocking,tensor,tensor-nonblocking,tensor-nonblocking-spin,tensor-nonblocking-yield,group-blocking-caller,group-nonblocking-caller \
  --json "$R/world-cost-4.jsonl" > "$R/world-cost-4.txt" 2>&1
echo "wc4 rc=$? $(( $(date +%s) - t0 ))s"
timeout 60 "$BIN/benches-group_cost" --bench group_parts --warm-up-time 0.5 --measurement-time 1 > "$R/group-parts.txt" 2>&1
echo "group_parts rc=$? $(( $(date +%s) - t0 ))s"
RANKS_WORLDS="2 4" GPU_TEST_TIMEOUT=200 RANKS_TIMEOUT=150 "$B/run.sh" ranks_mismatch_default ranks_mismatch_unchecked > /dev/null 2>&1
mv "$OUT/gpu-tests.log" "$R/mismatch.log"
echo "mismatch $(( $(date +%s) - t0 ))s: $(tail -1 "$R/mismatch.log")"
grep -E "^(PASS|FAIL)" "$R/mismatch.log" | head -20
for w in 1 2 4; do echo "== ws$w"; grep -E "^\s*(raw|core|tensor|group)" "$R/world-cost-$w.txt" | head -14; done
grep -A1 "^group_parts" "$R/group-parts.txt" | grep time
tar czf "$OUT/call41a.tgz" -C "$OUT" r
