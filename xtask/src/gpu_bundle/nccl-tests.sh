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
# nccl-perf --layer raw with the same FLAGS (default "-b 8 -e 1G -f 4 -g 1
# -w 20 -n 200 -c 1"), and prints both times side by side per size, out of
# place and in place, with their ratio (nccl-perf / nccl-tests) and whether
# it is within TARGET percent (default 3) from FROM bytes (default 1M) on
# (bin/benches-nccl-tests-compare).
# Writes build.txt (what was built, against what), OP.nccl-tests.txt,
# OP.nccl-perf.txt and OP.compare.txt per OP, and ends with one line naming
# the OPs whose rows missed the target and the runs that failed.
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

perf="$bin/benches-nccl-perf"
compare="$bin/benches-nccl-tests-compare"
missed=()
failed=()
for op in "${ops[@]}"; do
    # nccl-perf names alltoall all_to_all.
    collective="${op/alltoall/all_to_all}"
    echo "==> $op: nccl-tests ${op}_perf ${flags[*]}"
    LD_LIBRARY_PATH="$(dirname -- "$library"):$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$build/${op}_perf" "${flags[@]}" >"$out/$op.nccl-tests.txt" 2>&1 || failed+=("${op}_perf")
    echo "==> $op: nccl-perf --layer raw ${flags[*]} $collective"
    NCCL_LIBRARY="$library" "$perf" --layer raw "${flags[@]}" "$collective" \
        >"$out/$op.nccl-perf.txt" 2>&1 || failed+=("nccl-perf $collective")
    "$compare" --nccl-tests "$out/$op.nccl-tests.txt" --nccl-perf "$out/$op.nccl-perf.txt" \
        --target-percent "${TARGET:-3}" --from "${FROM:-1M}" 2>&1 |
        tee "$out/$op.compare.txt"
    case "${PIPESTATUS[0]}" in
    0) ;;
    1) missed+=("$op") ;;
    *) failed+=("compare $op") ;;
    esac
done
summary="nccl-tests.sh: target ${TARGET:-3} % from ${FROM:-1M}: "
if [[ ${#missed[@]} -eq 0 ]]; then summary+="met by every op"; else summary+="missed by ${missed[*]}"; fi
if [[ ${#failed[@]} -gt 0 ]]; then summary+="; failed: ${failed[*]}"; fi
echo "$summary; results in $out"
[[ ${#failed[@]} -eq 0 ]]
