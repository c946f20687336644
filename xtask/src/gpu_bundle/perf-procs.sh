#!/usr/bin/env bash
# nccl-perf across processes, on the GPU machine (a few minutes at most):
#   perf-procs.sh [OUT_DIR]      (default: $OUT/perf-procs, or ./perf-procs)
# * Every layer (raw, core, tensor, group, group-caller), every collective,
#   -b 8 -e 1M -f 4 -w 1 -n 2, as every process of `nccl-launch -n W` for W
#   in WORLDS (default "2 4"); with fewer GPUs than processes they are
#   simulated hosts on GPU 0 (only the #wrong columns and the exit status
#   mean anything there).
# * --compare raw,group --json at world size 2: process 0 writes the JSON.
# * A launch whose processes were given different flags (-n 1 and -n 2):
#   each must exit 2 with a line naming the difference, within seconds.
# * The same sweep under real torchrun (`torchrun --nproc-per-node 2
#   --no-python`, or TORCHRUN), each worker a simulated host of its own on
#   one GPU. torchrun's agent serves the store on MASTER_PORT and the
#   workers join it (TORCHELASTIC_USE_AGENT_STORE); a process that binds
#   that port itself instead fails, and this step says why.
# Logs: OUT_DIR/<name>.txt. Ends with one line: runs passed and failed, and
# the table rows with #wrong > 0.
set -uo pipefail
here="$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bundle-bin.sh
source "$here/bundle-bin.sh"
# shellcheck source=perf-rows.sh
source "$here/perf-rows.sh"
bundle_start "$here" perf-procs "${1:-}"
perf="$bin/nccl-perf-nccl-perf"
read -r -a worlds <<<"${WORLDS:-2 4}"
layers=(raw core tensor group group-caller)
sweep=(-b 8 -e 1M -f 4 -w 1 -n 2)
passed=0 failed=0 wrong_rows=0
failures=()

# Records run $1 (log $2) with exit status $3: passed when the status is 0,
# process 0 printed table rows and none has #wrong > 0.
record() {
    local name="$1" log="$2" rc="$3" rows wrong
    rows=$(count_rows "$log")
    wrong=$(count_wrong_rows "$log")
    wrong_rows=$((wrong_rows + wrong))
    if ((rc == 0 && rows > 0 && wrong == 0)); then
        echo "PASS: $name ($rows rows)"
        passed=$((passed + 1))
    else
        echo "FAIL: $name: exit status $rc, $rows rows, $wrong with #wrong > 0; see $log"
        tail -n 5 "$log" | sed 's/^/    /'
        failed=$((failed + 1))
        failures+=("$name")
    fi
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
echo "==> $(date -u +%FT%TZ) $(hostname): ${gpus:-0} GPU(s); NCCL_NVLS_ENABLE=0"

for world in "${worlds[@]}"; do
    for layer in "${layers[@]}"; do
        name="launch-$world-$layer"
        echo "==> nccl-launch -n $world nccl-perf --layer $layer ${sweep[*]}"
        "$launch" -n "$world" --timeout 120 "$perf" --layer "$layer" "${sweep[@]}" >"$out/$name.txt" 2>&1
        record "$name" "$out/$name.txt" $?
    done
done

name="launch-2-compare-json"
echo "==> nccl-launch -n 2 nccl-perf --compare raw,group --json ${sweep[*]} all_reduce"
rm -f -- "$out/$name.jsonl"
"$launch" -n 2 --timeout 120 "$perf" --compare raw,group --json "$out/$name.jsonl" "${sweep[@]}" all_reduce \
    >"$out/$name.txt" 2>&1
rc=$?
# Both layers' rows, 9 sizes each, from process 0 alone.
json_rows=$(wc -l <"$out/$name.jsonl" 2>/dev/null || echo 0)
if ((rc == 0 && json_rows != 18)); then
    echo "    --json has $json_rows lines, 18 expected"
    rc=1
fi
record "$name" "$out/$name.txt" "$rc"

name="launch-2-mismatch"
echo "==> nccl-launch -n 2 with -n 1 on process 0 and -n 2 on process 1 (must exit 2 within seconds)"
start=$SECONDS
"$launch" -n 2 --timeout 120 bash -c 'exec "$0" -n $((RANK + 1)) -b 8 -e 8 all_reduce' "$perf" \
    >"$out/$name.txt" 2>&1
rc=$?
if ((rc == 2)) && grep -q 'start every process with the same flags' "$out/$name.txt" && ((SECONDS - start < 60)); then
    echo "PASS: $name (exit 2 after $((SECONDS - start)) s)"
    passed=$((passed + 1))
else
    echo "FAIL: $name: exit status $rc after $((SECONDS - start)) s; see $out/$name.txt"
    failed=$((failed + 1))
    failures+=("$name")
fi

torchrun_cmd=()
if [[ -n "${TORCHRUN:-}" ]]; then
    read -r -a torchrun_cmd <<<"$TORCHRUN"
elif command -v torchrun >/dev/null 2>&1; then
    torchrun_cmd=(torchrun)
elif python3 -c 'import torch.distributed.run' >/dev/null 2>&1; then
    torchrun_cmd=(python3 -m torch.distributed.run)
fi
if ((${#torchrun_cmd[@]} == 0)); then
    echo "FAIL: torchrun: neither torchrun nor python3 -m torch.distributed.run is here"
    failed=$((failed + 1))
    failures+=("torchrun")
else
    # One GPU: each worker a simulated host on GPU 0, as nccl-launch does it.
    simulate=""
    if ((${gpus:-0} < 2)); then
        # shellcheck disable=SC2016 # $RANK is each worker's, expanded by its bash
        simulate='NCCL_HOSTID=simhost$RANK NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_LAUNCH_SIMULATED_HOSTS=1'
    fi
    for layer in "${layers[@]}"; do
        name="torchrun-2-$layer"
        echo "==> ${torchrun_cmd[*]} --nproc-per-node 2 --no-python nccl-perf --layer $layer ${sweep[*]}"
        timeout --kill-after=10 120 "${torchrun_cmd[@]}" --nproc-per-node 2 --master-port "${TORCHRUN_PORT:-29533}" \
            --no-python bash -c "$simulate exec \"\$0\" \"\$@\"" "$perf" --layer "$layer" "${sweep[@]}" \
            >"$out/$name.txt" 2>&1
        rc=$?
        if grep -q 'Address already in use' "$out/$name.txt"; then
            echo "    torchrun's agent serves the store on MASTER_PORT and a process tried to bind it:"
            echo "    the workers did not join the agent's store (is TORCHELASTIC_USE_AGENT_STORE=True set?)"
        fi
        record "$name" "$out/$name.txt" "$rc"
    done
fi

echo "perf-procs.sh: $passed passed, $failed failed, $wrong_rows row(s) with #wrong > 0${failures[*]:+ (failed: ${failures[*]})}; logs in $out"
((failed == 0 && wrong_rows == 0))
