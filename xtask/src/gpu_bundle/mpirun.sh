#!/usr/bin/env bash
# Open MPI's mpirun on the GPU machine, which has no network and may have
# no Open MPI (or another one, which this leaves alone):
#   mpirun.sh [--cpu] [OUT_DIR]     (default: $OUT/mpirun, or ./mpirun)
# The bundle's openmpi/*.deb (Debian's mpirun and the libraries it loads,
# fetched by `cargo xtask gpu-bundle`) are unpacked once with `dpkg -x` into
# a folder of their own (openmpi/root, or $TMPDIR/nccl-rs-openmpi.<sum> when
# the bundle is read-only); nothing is installed. mpirun runs from there
# with PATH and LD_LIBRARY_PATH, OPAL_PREFIX and OPAL_SYSCONFDIR (Open MPI's
# components, help texts and settings), PMIX_PKGLIBDIR and PMIX_DATADIR
# (PMIx's) and HWLOC_PLUGINS_PATH (none: hwloc's are not carried) pointing
# into it, so that nothing of an Open MPI, PMIx or hwloc the machine has
# is loaded (a PMIx 5 component in our PMIx 4 fails). Every launch
# is `mpirun --allow-run-as-root --oversubscribe --mca plm isolated
# --mca reachable ^netlink -x MASTER_ADDR=127.0.0.1 -np W` (isolated: this
# host only, never ssh; netlink: the one component that wants libnl).
# 1. nccl-rendezvous's launch_check example at W = 4 (CPU only): the ranks
#    meet through RendezvousConfig and agree on the launch. `--cpu` runs
#    this step alone, on any x86_64 Linux with dpkg.
# 2. nccl-group's torchrun_all_reduce example at each W in WORLDS (default
#    "2 4"): every rank must print its all_reduce ok (every element's sum
#    checked).
# 3. nccl-perf --layer L -b 8 -e 1M -f 4 -w 1 -n 2 for L in raw and group,
#    at each W: exit 0, table rows, none with #wrong > 0.
# In 2 and 3 every rank is a simulated host on GPU 0, set by a wrapper:
# NCCL_HOSTID=simhost<rank>, OMPI_COMM_WORLD_LOCAL_RANK=0 and
# OMPI_COMM_WORLD_LOCAL_SIZE=1 (a host of its own, as mpirun across hosts
# gives; hence MASTER_ADDR, which RendezvousConfig then asks for),
# CUDA_VISIBLE_DEVICES=0, NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1,
# NCCL_NVLS_ENABLE=0 (always) and NCCL_LAUNCH_SIMULATED_HOSTS=1. Every rank
# gets the caller's LD_LIBRARY_PATH back.
# STEP_TIMEOUT (seconds, default 300) bounds each launch. Logs:
# OUT_DIR/<name>.log. Ends with one line `mpirun.sh: N passed, N failed`;
# the exit status is non-zero if a step failed.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
# shellcheck source=perf-rows.sh
source "$here/perf-rows.sh"
# shellcheck source=steps.sh
source "$here/steps.sh"
cpu_only=0
if [[ "${1:-}" == --cpu ]]; then
    cpu_only=1
    shift
fi
bundle_start "$here" mpirun "${1:-}"
limit="${STEP_TIMEOUT:-300}"
read -r -a worlds <<<"${WORLDS:-2 4}"
export NCCL_RS_STORE_TIMEOUT_SECS="${NCCL_RS_STORE_TIMEOUT_SECS:-120}"

# Prints the folder the packages are unpacked in, unpacking them once.
openmpi_root() {
    local debs=("$here/openmpi"/*.deb) dest sum staging deb
    if [[ ! -e "${debs[0]}" ]]; then
        echo "mpirun.sh: no openmpi/*.deb in this bundle: build it where apt-get is (cargo xtask gpu-bundle)" >&2
        return 1
    fi
    if ! command -v dpkg >/dev/null 2>&1; then
        echo "mpirun.sh: dpkg is not here to unpack openmpi/*.deb" >&2
        return 1
    fi
    dest="$here/openmpi/root"
    if [[ ! -w "$here/openmpi" ]]; then
        sum="$(cat "${debs[@]}" | cksum | cut -d' ' -f1)"
        dest="${TMPDIR:-/tmp}/nccl-rs-openmpi.$sum"
    fi
    if [[ ! -d "$dest" ]]; then
        staging="$(mktemp -d "${TMPDIR:-/tmp}/nccl-rs-openmpi-unpack.XXXXXX")" || return 1
        for deb in "${debs[@]}"; do
            dpkg -x "$deb" "$staging" || {
                echo "mpirun.sh: dpkg -x $deb failed" >&2
                rm -rf -- "$staging"
                return 1
            }
        done
        mkdir -p -- "$(dirname -- "$dest")"
        mv -- "$staging" "$dest" 2>/dev/null || [[ -d "$dest" ]] || {
            echo "mpirun.sh: could not move the unpacked packages to $dest" >&2
            return 1
        }
    fi
    echo "$dest"
}

root="$(openmpi_root)" || {
    fail "Open MPI: nothing to run mpirun from"
    echo "mpirun.sh: $passed passed, $failed failed"
    exit 1
}
usr="$root/usr"
lib="$usr/lib/x86_64-linux-gnu"
caller_ld_set="${LD_LIBRARY_PATH+1}"
caller_ld="${LD_LIBRARY_PATH:-}"
mpirun_env=(
    PATH="$usr/bin:$PATH"
    LD_LIBRARY_PATH="$lib:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    OPAL_PREFIX="$usr"
    OPAL_SYSCONFDIR="$root/etc/openmpi"
    PMIX_PKGLIBDIR="$lib/pmix2/lib/pmix"
    PMIX_DATADIR="$lib/pmix2/share"
    HWLOC_PLUGINS_PATH="$lib/hwloc"
    NCCL_RS_CALLER_LD_SET="$caller_ld_set"
    NCCL_RS_CALLER_LD="$caller_ld"
)
mpirun=(env "${mpirun_env[@]}" "$usr/bin/orterun" --allow-run-as-root --oversubscribe
    --mca plm isolated --mca reachable ^netlink -x MASTER_ADDR=127.0.0.1)

# The wrappers each rank runs before becoming "$0" "$@": the caller's
# LD_LIBRARY_PATH back; with `simulate`, a simulated host on GPU 0 too.
# shellcheck disable=SC2016 # expanded by each rank's shell
restore='if [ -n "$NCCL_RS_CALLER_LD_SET" ]; then export LD_LIBRARY_PATH="$NCCL_RS_CALLER_LD"; else unset LD_LIBRARY_PATH; fi'
# shellcheck disable=SC2016
simulate="$restore"'
export NCCL_HOSTID="simhost$OMPI_COMM_WORLD_RANK" OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1
export CUDA_VISIBLE_DEVICES=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_LAUNCH_SIMULATED_HOSTS=1'

# Runs mpirun -np $2 with the wrapper $3 around "${@:4}", logged as $1.log;
# leaves the exit status in `rc`.
launch() {
    local name="$1" world="$2" wrapper="$3"
    shift 3
    echo
    echo "==> mpirun -np $world $(basename -- "$1") ${*:2}"
    timeout --kill-after=10 "$limit" "${mpirun[@]}" -np "$world" \
        sh -c "$wrapper"'
exec "$0" "$@"' "$@" >"$out/$name.log" 2>&1
    rc=$?
    sed 's/^/    /' "$out/$name.log" | tail -n 30
}

echo "==> $(date -u +%FT%TZ) $(hostname): Open MPI from $root"
env "${mpirun_env[@]}" "$usr/bin/orterun" --version 2>&1 | head -n 1

launch launch_check-4 4 "$restore" "$bin/nccl-rendezvous-launch_check" --launcher mpirun --world-size 4 --nodes 1
if ((rc == 0)) && grep -q 'launch_check mpirun: 4 ranks agree' "$out/launch_check-4.log"; then
    pass "launch_check at 4 ranks: they agree on the launch"
else
    fail "launch_check at 4 ranks: exit status $rc; see $out/launch_check-4.log"
fi

if ((!cpu_only)); then
    for world in "${worlds[@]}"; do
        name="torchrun_all_reduce-$world"
        launch "$name" "$world" "$simulate" "$bin/nccl-group-torchrun_all_reduce"
        ok=$(grep -c 'all_reduce of .* ok' "$out/$name.log" || true)
        if ((rc == 0 && ok == world)); then
            pass "torchrun_all_reduce at $world simulated hosts: every rank's sums are right"
        else
            fail "torchrun_all_reduce at $world simulated hosts: exit status $rc, $ok of $world ranks right; see $out/$name.log"
        fi
        for layer in raw group; do
            name="nccl-perf-$layer-$world"
            launch "$name" "$world" "$simulate" "$bin/nccl-perf-nccl-perf" --layer "$layer" -b 8 -e 1M -f 4 -w 1 -n 2
            rows=$(count_rows "$out/$name.log")
            wrong=$(count_wrong_rows "$out/$name.log")
            if ((rc == 0 && rows > 0 && wrong == 0)); then
                pass "nccl-perf --layer $layer at $world simulated hosts: $rows rows, none wrong"
            else
                fail "nccl-perf --layer $layer at $world simulated hosts: exit status $rc, $rows rows, $wrong with #wrong > 0; see $out/$name.log"
            fi
        done
    done
fi

echo
echo "mpirun.sh: $passed passed, $failed failed"
((failed == 0))
