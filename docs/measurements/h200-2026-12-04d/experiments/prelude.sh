# Sourced by every exp*.sh with the experiment's name: unset variables are
# errors, NVLS is off, $H is this folder, $L the experiment's log folder
# under $OUT, and `nt NAME VAR=VALUE...` runs nccl-tests.sh once with those
# variables set, logging to $L/NAME.log and echoing its last line.
set -u
H="$(cd "$(dirname "$0")" && pwd)"
export NCCL_NVLS_ENABLE=0
L=$OUT/$1; mkdir -p $L
nt() { local name=$1; shift; env "$@" OPS=all_reduce PIN=4-7 bash $H/nccl-tests.sh $L/$name > $L/$name.log 2>&1; echo "$name: $(tail -1 $L/$name.log)"; }
