# Sourced by the bundle's scripts. The binaries travel packed as
# bin.tar.gz (the carry to the GPU machine is limited to 64 MiB; packed
# they take about a seventh of that): `bundle_bin HERE` prints the folder
# holding them, unpacking them once, into HERE/bin when the bundle's folder
# is writable, else into a folder of $TMPDIR named after the archive's
# checksum.
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
