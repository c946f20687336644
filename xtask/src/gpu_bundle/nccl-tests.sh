#!/usr/bin/env bash
# nccl-tests next to nccl-perf, in the same run, on the GPU machine:
#   nccl-tests.sh [OUT_DIR]     (default: $OUT/nccl-tests, or ./nccl-tests)
# Builds nccl-tests from the bundle's nccl-tests-src/ (make -j, MPI=0,
# sm_90) against the NCCL found on the machine: the library in $NCCL_LIBRARY
# (a full path), else libnccl.so.2 in /usr/lib/x86_64-linux-gnu, /usr/lib64,
# /usr/local/lib or python's nvidia/nccl package; nccl.h in $NCCL_INCLUDE,
# else /usr/include, /usr/local/include, $CUDA_HOME/include or that package.
# Both programs then load that one library (LD_LIBRARY_PATH for nccl-tests,
# NCCL_LIBRARY for nccl-perf). Then, for each OP in OPS (default
# "all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv",
# nccl-tests' binary names), runs nccl-tests' OP_perf and, right after it,
# nccl-perf --layer raw (bin/nccl-perf-nccl-perf) with the same FLAGS
# (default "-b 8 -e 1G -f 4 -g 1 -w 20 -n 200 -c 1"), and PERF_FLAGS after
# them for nccl-perf alone (e.g. PERF_FLAGS="--alloc nccl"), each writing
# its JSON document with -J.
# Writes build.txt (what was built, against what) and per OP
# OP.nccl-tests.json and OP.nccl-perf.json (the results) with
# OP.nccl-tests.txt and OP.nccl-perf.txt (the text tables, as logs), and
# ends with one line naming the runs that failed.
# To compare, fetch OUT_DIR to a checkout of the workspace and run
#   cargo xtask nccl-tests-compare OUT_DIR [--target-percent 3] [--from 1M]
# which prints, per OP and size, both times out of place and in place,
# their ratio (nccl-perf / nccl-tests) and whether it is within the target
# percent from that many bytes on, and a summary line.
# NCCL_TESTS_BUILD: where nccl-tests is built, and an earlier build there is
# reused (default: $TMPDIR/nccl-tests-build, outside OUT_DIR).
# PIN: the CPUs both programs run on (taskset -c), the same for both, so
# that neither runs on cores or a NUMA node the other did not: "gpu" (the
# default) for the GPU's local CPUs (sysfs local_cpulist of nvidia-smi's
# GPU ${CUDA_VISIBLE_DEVICES:-0}), a taskset list such as "8-15", or "none".
# Where a list cannot be found or taskset is missing, both run unpinned and
# build.txt says so; a VM without NUMA lists every CPU as the GPU's, so give
# a short list there. From 1 to 8 MiB at world size 1 each call is one
# launch-bound copy whose time depends on the host: unpinned runs of either
# program differed by up to 60 % from run to run there.
# To compare from 1 MiB at world size 1 give FLAGS="-b 1M -e 256M -f 2 -g 1 -w 20
# -n 200 -G 10 -c 0": -G takes the host's enqueue out of the time, and -c 0 turns
# off nccl-tests' check, whose set-up slows every later copy of its process
# (docs/nccl-perf.md, "Comparing with nccl-tests").
# FIRST: which program runs first for each OP, nccl-tests (the default) or
# nccl-perf.
# REPEAT: how many times to run every pair (default 1). With more than 1,
# run K writes OUT_DIR/runK/ (each a folder the compare reads) and the
# order alternates, FIRST's in odd runs and the other in even ones; give
# every folder to the compare at once to see each program's own spread
# from process to process next to the ratios (a launch-bound row cannot
# match more closely than either program matches itself).
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bundle_start "$here" nccl-tests "${1:-}"
out="$(cd -- "$out" && pwd)"
src="$here/nccl-tests-src"
read -r -a ops <<<"${OPS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}"
read -r -a flags <<<"${FLAGS:--b 8 -e 1G -f 4 -g 1 -w 20 -n 200 -c 1}"
read -r -a perf_flags <<<"${PERF_FLAGS:-}"
pin="${PIN:-gpu}"
first="${FIRST:-nccl-tests}"
[[ "$first" == nccl-tests || "$first" == nccl-perf ]] || {
    echo "nccl-tests.sh: error: FIRST is nccl-tests or nccl-perf, not $first" >&2
    exit 2
}
repeat="${REPEAT:-1}"
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || {
    echo "nccl-tests.sh: error: REPEAT is a count of runs, 1 or more, not $repeat" >&2
    exit 2
}

die() {
    echo "nccl-tests.sh: error: $*" >&2
    exit 2
}

# The folder of python's nvidia/nccl package, if there is one.
python_nccl() {
    "$python" -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])' 2>/dev/null
}

# The CPUs local to the GPU both programs use (nvidia-smi's GPU
# ${CUDA_VISIBLE_DEVICES:-0}, its first entry), from sysfs; nothing when
# either does not say.
gpu_cpus() {
    local gpu="${CUDA_VISIBLE_DEVICES:-0}" bus
    bus="$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "${gpu%%,*}" 2>/dev/null | head -1)"
    # nvidia-smi's 00000000:1B:00.0 is sysfs' 0000:1b:00.0.
    bus="${bus: -12}"
    [[ -n "$bus" ]] && cat "/sys/bus/pci/devices/${bus,,}/local_cpulist" 2>/dev/null
}

# The first existing file among the arguments.
first_file() {
    local candidate
    for candidate in "$@"; do
        if [[ -n "$candidate" && -f "$candidate" ]]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

[[ -f "$src/Makefile" ]] ||
    die "no nccl-tests source in $src: build the bundle with a nccl-tests snapshot (cargo xtask gpu-bundle --nccl-tests GIT_DIR)"
nvcc="$(command -v nvcc || true)"
[[ -n "$nvcc" ]] || nvcc="$(first_file "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" || true)"
[[ -n "$nvcc" ]] || die "nvcc not found on PATH nor in \${CUDA_HOME:-/usr/local/cuda}/bin"
cuda_home="${CUDA_HOME:-$(dirname -- "$(dirname -- "$(readlink -f -- "$nvcc")")")}"
pynccl="$(python_nccl || true)"
library="$(first_file "${NCCL_LIBRARY:-}" /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib64/libnccl.so.2 \
    /usr/local/lib/libnccl.so.2 "${pynccl:+$pynccl/lib/libnccl.so.2}" || true)"
[[ -n "$library" ]] ||
    die "no libnccl.so.2 found (searched \$NCCL_LIBRARY, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/local/lib and python's nvidia/nccl package); set NCCL_LIBRARY to its full path"
header="$(first_file "${NCCL_INCLUDE:+$NCCL_INCLUDE/nccl.h}" /usr/include/nccl.h /usr/local/include/nccl.h \
    "$cuda_home/include/nccl.h" "${pynccl:+$pynccl/include/nccl.h}" || true)"
[[ -n "$header" ]] ||
    die "no nccl.h found (searched \$NCCL_INCLUDE, /usr/include, /usr/local/include, $cuda_home/include and python's nvidia/nccl package); set NCCL_INCLUDE to its folder"
library="$(readlink -f -- "$library")"
header_version="$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$header")"

build="${NCCL_TESTS_BUILD:-${TMPDIR:-/tmp}/nccl-tests-build}"
{
    echo "nccl-tests source: $(cat "$src/COMMIT" 2>/dev/null || echo 'unknown commit')"
    echo "nvcc: $nvcc ($("$nvcc" --version | grep release))"
    echo "nccl.h: $header (NCCL $header_version)"
    echo "libnccl: $library"
    nvidia-smi -L 2>&1
} | tee "$out/build.txt"

# Both programs on the same CPUs (PIN), and what the host's timing depends on.
pin_cmd=()
case "$pin" in
none) pinned="none (PIN=none)" ;;
*)
    cpus="$pin"
    [[ "$pin" == gpu ]] && cpus="$(gpu_cpus || true)"
    if [[ -z "$cpus" ]]; then
        pinned="none (no local_cpulist found for the GPU)"
    elif ! command -v taskset >/dev/null; then
        pinned="none (no taskset)"
    else
        pin_cmd=(taskset -c "$cpus")
        pinned="taskset -c $cpus (PIN=$pin)"
    fi
    ;;
esac
{
    echo "pinned: $pinned"
    echo "order: $first first$([[ "$repeat" -gt 1 ]] && echo " in odd runs, the other in even ones ($repeat runs)")"
    echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
    echo "cpu: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null) ($(nproc) online)"
} | tee -a "$out/build.txt"
if [[ ! -x "$build/all_reduce_perf" ]]; then
    # nccl-tests links -lnccl from NCCL_HOME/lib and includes NCCL_HOME/include:
    # a folder of links to the header and library found above.
    home="$build/nccl-home"
    mkdir -p -- "$home/include" "$home/lib"
    ln -sf -- "$header" "$home/include/nccl.h"
    ln -sf -- "$library" "$home/lib/libnccl.so"
    echo "==> make -j MPI=0 (sm_90) in $build"
    if ! make -C "$src" -j "$(nproc)" MPI=0 NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
        CUDA_HOME="$cuda_home" NVCC="$nvcc" NCCL_HOME="$home" BUILDDIR="$build" >>"$out/build.txt" 2>&1; then
        tail -20 "$out/build.txt"
        die "building nccl-tests failed; the log is $out/build.txt"
    fi
fi

perf="$bin/nccl-perf-nccl-perf"
failed=()
# nccl-tests' OP_perf for one OP, into folder DIR.
run_nccl_tests() {
    local op="$1" dir="$2"
    echo "==> $op: nccl-tests ${op}_perf ${flags[*]} -J $dir/$op.nccl-tests.json"
    LD_LIBRARY_PATH="$(dirname -- "$library"):$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "${pin_cmd[@]}" "$build/${op}_perf" "${flags[@]}" -J "$dir/$op.nccl-tests.json" \
        >"$dir/$op.nccl-tests.txt" 2>&1 || failed+=("${op}_perf in $dir")
}
# nccl-perf's raw layer for one OP, into folder DIR.
run_nccl_perf() {
    local op="$1" dir="$2"
    # nccl-perf names alltoall all_to_all.
    local collective="${op/alltoall/all_to_all}"
    echo "==> $op: nccl-perf --layer raw ${flags[*]} ${perf_flags[*]} -J $dir/$op.nccl-perf.json $collective"
    NCCL_LIBRARY="$library" "${pin_cmd[@]}" "$perf" --layer raw "${flags[@]}" "${perf_flags[@]}" \
        -J "$dir/$op.nccl-perf.json" "$collective" >"$dir/$op.nccl-perf.txt" 2>&1 ||
        failed+=("nccl-perf $collective in $dir")
}
other=nccl-perf
[[ "$first" == nccl-perf ]] && other=nccl-tests
for run in $(seq 1 "$repeat"); do
    dir="$out"
    order="$first"
    if [[ "$repeat" -gt 1 ]]; then
        dir="$out/run$run"
        mkdir -p -- "$dir"
        ((run % 2 == 0)) && order="$other"
    fi
    for op in "${ops[@]}"; do
        # -J never replaces a file (both tools write FILE.0 instead): clear the last run's.
        rm -f -- "$dir/$op.nccl-tests.json" "$dir/$op.nccl-perf.json"
        if [[ "$order" == nccl-perf ]]; then
            run_nccl_perf "$op" "$dir"
            run_nccl_tests "$op" "$dir"
        else
            run_nccl_tests "$op" "$dir"
            run_nccl_perf "$op" "$dir"
        fi
    done
done
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "nccl-tests.sh: every run passed; results in $out (compare: cargo xtask nccl-tests-compare OUT_DIR$([[ "$repeat" -gt 1 ]] && echo "/run*"))"
else
    echo "nccl-tests.sh: failed: ${failed[*]}; results in $out"
fi
[[ ${#failed[@]} -eq 0 ]]
