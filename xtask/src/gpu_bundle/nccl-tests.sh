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
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
bin="$(bundle_bin "$here")" || exit 2
out="${1:-${OUT:-.}/nccl-tests}"
mkdir -p -- "$out"
out="$(cd -- "$out" && pwd)"
export NCCL_NVLS_ENABLE=0
src="$here/nccl-tests-src"
read -r -a ops <<<"${OPS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv}"
read -r -a flags <<<"${FLAGS:--b 8 -e 1G -f 4 -g 1 -w 20 -n 200 -c 1}"
read -r -a perf_flags <<<"${PERF_FLAGS:-}"
python="${PYTHON:-python3}"

die() {
    echo "nccl-tests.sh: error: $*" >&2
    exit 2
}

# The folder of python's nvidia/nccl package, if there is one.
python_nccl() {
    "$python" -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])' 2>/dev/null
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
for op in "${ops[@]}"; do
    # nccl-perf names alltoall all_to_all.
    collective="${op/alltoall/all_to_all}"
    # -J never replaces a file (both tools write FILE.0 instead): clear the last run's.
    rm -f -- "$out/$op.nccl-tests.json" "$out/$op.nccl-perf.json"
    echo "==> $op: nccl-tests ${op}_perf ${flags[*]} -J $op.nccl-tests.json"
    LD_LIBRARY_PATH="$(dirname -- "$library"):$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$build/${op}_perf" "${flags[@]}" -J "$out/$op.nccl-tests.json" >"$out/$op.nccl-tests.txt" 2>&1 ||
        failed+=("${op}_perf")
    echo "==> $op: nccl-perf --layer raw ${flags[*]} ${perf_flags[*]} -J $op.nccl-perf.json $collective"
    NCCL_LIBRARY="$library" "$perf" --layer raw "${flags[@]}" "${perf_flags[@]}" -J "$out/$op.nccl-perf.json" \
        "$collective" >"$out/$op.nccl-perf.txt" 2>&1 || failed+=("nccl-perf $collective")
done
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "nccl-tests.sh: every run passed; results in $out (compare: cargo xtask nccl-tests-compare OUT_DIR)"
else
    echo "nccl-tests.sh: failed: ${failed[*]}; results in $out"
fi
[[ ${#failed[@]} -eq 0 ]]
