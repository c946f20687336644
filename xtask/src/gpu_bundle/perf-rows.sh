# Sourced by perf-procs.sh and mpirun.sh: nccl-perf's table rows in a log,
# from process 0 (the lines may carry nccl-launch's "[rank N] " prefix).

# Table rows whose #wrong is a number above 0: the 9th and 13th fields,
# or with --compare's ratio column after each half's #wrong (15 fields),
# the 9th and 14th.
count_wrong_rows() {
    sed -E 's/^\[rank [0-9]+\] //' "$1" | awk '
        /^[[:space:]]*[0-9]+[[:space:]]/ && NF >= 13 {
            in_place = NF >= 15 ? $14 : $13
            if ($9 + 0 > 0 || in_place + 0 > 0) n++
        }
        END { print n + 0 }'
}

count_rows() {
    sed -E 's/^\[rank [0-9]+\] //' "$1" | grep -cE '^[[:space:]]*[0-9]+[[:space:]]' || true
}
