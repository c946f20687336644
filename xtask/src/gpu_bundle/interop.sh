#!/usr/bin/env bash
# torch interop and real torchrun launches, on the GPU machine:
#   interop.sh [OUT_DIR]     (default: $OUT/interop, or ./interop)
# 1. scripts/c10d_interop.py: a torch.distributed.TCPStore server (libuv,
#    then legacy) shared by a Python rank and bin/nccl-rendezvous-c10d_interop
#    (nccl-rendezvous's C10dStore), each setting, adding, compare-and-setting and
#    waiting on the other's keys; then the Rust client's bounds. Log:
#    c10d_interop.log.
# 2. torchrun --nproc-per-node 2 --no-python bin/nccl-group-torchrun_all_reduce:
#    torchrun's agent serves a c10d TCPStore on MASTER_PORT and sets
#    TORCHELASTIC_USE_AGENT_STORE=True, so every rank joins it. Once with
#    torchrun's default (static) rendezvous on a free port, where the
#    variable must be True, and once with --standalone (c10d rendezvous).
#    With fewer than 2 GPUs each worker is a simulated host on GPU 0
#    (NCCL_HOSTID=simhost$RANK, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, NCCL over
#    loopback sockets), set by a bash wrapper around the example. Logs:
#    torchrun-static.log, torchrun-standalone.log.
# Each step prints PASS: or FAIL:, then one line
# `interop.sh: N passed, N failed`; the exit status is non-zero if a step
# failed. PYTHON (default python3) runs the script; TORCHRUN (default
# torchrun, else `$PYTHON -m torch.distributed.run`) launches;
# STEP_TIMEOUT (seconds, default 300) bounds each step.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
# shellcheck source=steps.sh
source "$here/steps.sh"
bundle_start "$here" interop "${1:-}"
limit="${STEP_TIMEOUT:-300}"
example="$bin/nccl-group-torchrun_all_reduce"
export NCCL_RS_STORE_TIMEOUT_SECS="${NCCL_RS_STORE_TIMEOUT_SECS:-120}"

if [[ -n "${TORCHRUN:-}" ]]; then
    read -r -a torchrun <<<"$TORCHRUN"
elif command -v torchrun >/dev/null 2>&1; then
    torchrun=(torchrun)
else
    torchrun=("$python" -m torch.distributed.run)
fi

ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi

echo "==> c10d interop: a torch TCPStore server, a Python rank and a Rust rank"
timeout --kill-after=10 "$limit" "$python" "$here/scripts/c10d_interop.py" \
    --binary "$bin/nccl-rendezvous-c10d_interop" 2>&1 | tee "$out/c10d_interop.log"
rc=${PIPESTATUS[0]}
summary=$(grep -E '^c10d_interop.py: ' "$out/c10d_interop.log" | tail -n 1)
if ((rc == 0)); then
    pass "c10d interop ($summary)"
else
    fail "c10d interop exited with status $rc (${summary:-no summary line})"
fi

# The wrapper every torchrun worker runs: it logs what torchrun set, makes
# the worker a simulated host when the GPUs are fewer than the workers,
# then becomes the example.
simulate=$((ngpu < 2 ? 1 : 0))
worker='echo "worker RANK=$RANK LOCAL_RANK=$LOCAL_RANK TORCHELASTIC_USE_AGENT_STORE=${TORCHELASTIC_USE_AGENT_STORE:-unset} MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"
if [[ "$SIMULATE" == 1 ]]; then
    export NCCL_HOSTID="simhost$RANK" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
    export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_IB_DISABLE="${NCCL_IB_DISABLE:-1}"
fi
exec "$0" "$@"'

# Runs torchrun with $2... around the example, logged as torchrun-$1.log;
# $agent_required=1: every worker must have seen TORCHELASTIC_USE_AGENT_STORE=True.
launch() {
    local name="$1" log="$out/torchrun-$1.log" rc ok agent
    shift
    echo
    echo "==> torchrun ($name): ${torchrun[*]} --nproc-per-node 2 $* --no-python <example>, $ngpu GPU(s)"
    SIMULATE=$simulate timeout --kill-after=10 "$limit" "${torchrun[@]}" --nproc-per-node 2 "$@" \
        --no-python bash -c "$worker" "$example" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    ok=$(grep -c 'all_reduce of .* ok' "$log" || true)
    agent=$(grep -c 'TORCHELASTIC_USE_AGENT_STORE=True ' "$log" || true)
    if ((rc != 0)); then
        fail "torchrun ($name) exited with status $rc"
    elif ((ok != 2)); then
        fail "torchrun ($name): $ok of 2 ranks reported a correct all_reduce"
    elif ((agent_required && agent != 2)); then
        fail "torchrun ($name): $agent of 2 workers had TORCHELASTIC_USE_AGENT_STORE=True: the agent store was not used"
    else
        pass "torchrun ($name): 2 ranks, all_reduce ok; $agent of 2 workers joined the agent store"
    fi
}

if [[ ! -x "$example" ]]; then
    fail "torchrun: $example is not in the bundle"
else
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    agent_required=1
    launch static --master-addr 127.0.0.1 --master-port "$port"
    agent_required=0
    launch standalone --standalone
fi

echo
echo "interop.sh: $passed passed, $failed failed (logs in $out)"
((failed == 0))
