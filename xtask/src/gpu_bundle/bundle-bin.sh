# Sourced by the bundle's scripts: where the binaries are (bundle_bin) and
# how a script that writes results starts (bundle_start). The binaries
# travel packed as bin.tar.gz (the carry to the GPU machine is limited to
# 64 MiB; packed they take about a seventh of that): `bundle_bin HERE`
# prints the folder holding them, unpacking them once, into HERE/bin when
# the bundle's folder is writable, else into a folder of $TMPDIR named
# after the archive's checksum.
bundle_bin() {
    local here="$1" dest sum staging
    if [[ -d "$here/bin" ]]; then
        echo "$here/bin"
        return 0
    fi
    [[ -f "$here/bin.tar.gz" ]] || {
        echo "bundle: neither $here/bin nor $here/bin.tar.gz exists: rebuild the bundle (cargo xtask gpu-bundle)" >&2
        return 1
    }
    dest="$here"
    if [[ ! -w "$here" ]]; then
        sum="$(cksum <"$here/bin.tar.gz" | cut -d' ' -f1)"
        dest="${TMPDIR:-/tmp}/nccl-rs-bundle.$sum"
    fi
    if [[ ! -d "$dest/bin" ]]; then
        staging="$(mktemp -d "${TMPDIR:-/tmp}/nccl-rs-unpack.XXXXXX")" &&
            tar xzf "$here/bin.tar.gz" -C "$staging" &&
            mkdir -p "$dest" &&
            { mv "$staging/bin" "$dest/bin" 2>/dev/null || [[ -d "$dest/bin" ]]; } ||
            {
                echo "bundle: could not unpack $here/bin.tar.gz into $dest" >&2
                return 1
            }
        rm -rf "$staging"
    fi
    echo "$dest/bin"
}

# `bundle_start HERE NAME [OUT_DIR]`, at the start of a script that writes
# results: sets bin (bundle_bin HERE), out (OUT_DIR, else $OUT/NAME, else
# ./NAME), launch (the bundle's nccl-launch) and python (PYTHON, else
# python3), makes out, and turns NVLS off (NCCL_NVLS_ENABLE=0) as every run
# of the bundle does; exits 2 where the binaries cannot be had.
bundle_start() {
    bin="$(bundle_bin "$1")" || exit 2
    out="${3:-${OUT:-.}/$2}"
    launch="$bin/nccl-launch-nccl-launch"
    python="${PYTHON:-python3}"
    mkdir -p -- "$out"
    export NCCL_NVLS_ENABLE=0
}
