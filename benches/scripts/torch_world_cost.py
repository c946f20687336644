#!/usr/bin/env python3
"""torch_world_cost.py: what one in-place all_reduce of a 2-element float32
CUDA tensor (8 bytes) costs the host through torch.distributed (NCCL
backend), in three forms side by side in one run, by the method of
world-cost (benches/src/bin/world-cost.rs), to compare with its layers:

    torch-sync        dist.all_reduce(x)
    torch-async-wait  dist.all_reduce(x, async_op=True).wait()
    torch-async       dist.all_reduce(x, async_op=True), no wait (the device
                      is synchronised after the loop, as for every form)

Run it as every rank under nccl-launch, which sets torchrun's variables:

    nccl-launch -n 2 python3 benches/scripts/torch_world_cost.py --json torch-2.jsonl

Alone (no RANK / WORLD_SIZE) it is world size 1 on a free local port. On
simulated hosts (every rank on GPU 0, NCCL over loopback sockets) only the
host cost per call means anything, not GPU time or bandwidth.

Method: every rank issues the same calls in the same order. --warmup calls
per form, then --rounds rounds in which every form in turn, after a barrier
of all ranks, makes --iters back-to-back calls; only that loop is timed,
the device is synchronised after it (sync_us: that wait per call). Rank 0
prints per form the median and min over rounds of its us per call, each
rank's medians when the ranks differ by more than 10%, and one JSON line
per form (also written to --json FILE) with world-cost's fields. With
--against FILE (world-cost's JSON lines, same world size) the ratios to its
raw and tensor layers are filled in; those come from another process, so
they are only as comparable as the two runs.

Needs only python3 with torch (2.11); prints are flushed as they are made.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

# Each form: its name and one call of it on the tensor.
FORMS = (
    ("torch-sync", lambda x: dist.all_reduce(x)),
    ("torch-async-wait", lambda x: dist.all_reduce(x, async_op=True).wait()),
    ("torch-async", lambda x: dist.all_reduce(x, async_op=True)),
)

# Ranks whose medians differ by more than this factor get a line each.
RANK_SPREAD = 1.10


def say(text=""):
    print(text, flush=True)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1; got {text!r}")
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0; got {text!r}")
    return value


def parse_args():
    parser = argparse.ArgumentParser(
        description="Host cost per call of torch.distributed's in-place all_reduce (NCCL), per form."
    )
    parser.add_argument("--iters", type=positive, default=500, help="timed calls per form and round")
    parser.add_argument("--rounds", type=positive, default=7, help="rounds, the forms interleaved")
    parser.add_argument("--warmup", type=non_negative, default=100, help="warm-up calls per form")
    parser.add_argument("--elements", type=positive, default=2, help="float32 elements (2 = 8 bytes)")
    parser.add_argument("--json", metavar="FILE", help="also write the JSON lines here (rank 0)")
    parser.add_argument(
        "--against",
        metavar="FILE",
        help="world-cost's JSON lines of the same world size, for the x raw and x tensor ratios",
    )
    return parser.parse_args()


def baselines(path, world_size):
    """world-cost's median_us per layer at `world_size`, from `path`."""
    if path is None:
        return {}
    found = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: expected a JSON line of world-cost; {error}") from None
            if row.get("bench") == "world-cost" and row.get("world_size") == world_size:
                found[row["layer"]] = row["median_us"]
    return found


def free_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return listener.getsockname()[1]


def init():
    """Joins the launch (or makes a world of one) on this rank's GPU."""
    if "WORLD_SIZE" not in os.environ and "RANK" not in os.environ:
        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl", device_id=device)
    return device


def nccl_version():
    version = torch.cuda.nccl.version()
    if isinstance(version, int):  # older torch: NCCL_VERSION_CODE
        version = (version // 10000, version // 100 % 100, version % 100)
    return ".".join(str(part) for part in version)


def timed(call, x, calls, device):
    """`calls` calls, then a synchronisation: us per call of each."""
    start = time.perf_counter()
    for _ in range(calls):
        call(x)
    host = time.perf_counter() - start
    torch.cuda.synchronize(device)
    waited = time.perf_counter() - start - host
    return host * 1e6 / max(calls, 1), waited * 1e6 / max(calls, 1)


def measure(args, device):
    """Every form's (host, sync) us per call in each round, on this rank."""
    x = torch.zeros(args.elements, dtype=torch.float32, device=device)
    for _, call in FORMS:
        timed(call, x, args.warmup, device)
    rounds = [[] for _ in FORMS]
    for _ in range(args.rounds):
        for (_, call), times in zip(FORMS, rounds):
            dist.barrier()
            torch.cuda.synchronize(device)
            times.append(timed(call, x, args.iters, device))
    return rounds


def report(args, device, rounds, per_rank, against):
    world = dist.get_world_size()
    simulated = os.environ.get("NCCL_LAUNCH_SIMULATED_HOSTS") == "1"
    hosts = "simulated hosts on one GPU: only host cost per call means anything" if simulated else "a GPU per rank"
    nccl, gpu = nccl_version(), torch.cuda.get_device_name(device)
    say(
        f"# torch_world_cost: in-place all_reduce of {args.elements} x f32 ({args.elements * 4} B), "
        f"world size {world} ({hosts}), NCCL {nccl}, {gpu}, torch {torch.__version__}"
    )
    say(
        f"# {args.warmup} warm-up calls per form, then {args.rounds} rounds of {args.iters} timed calls per form, "
        "interleaved; us per call"
    )
    say("# of the host loop (median and min over rounds) and of the synchronisation after it (median)")
    if args.against and not against:
        say(f"# {args.against} has no world-cost line of world size {world}: no ratios")
    say(f"# {'layer':<26} {'median_us':>10} {'min_us':>10} {'sync_us':>10} {'x raw':>8} {'x tensor':>9}")
    raw, tensor = against.get("raw"), against.get("tensor")
    lines = []
    for index, ((name, _), times) in enumerate(zip(FORMS, rounds)):
        host = [t[0] for t in times]
        median, low, sync = statistics.median(host), min(host), statistics.median(t[1] for t in times)
        vs_raw = median / raw if raw else None
        vs_tensor = median / tensor if tensor else None
        shown = [f"{r:.2f}" if r is not None else "-" for r in (vs_raw, vs_tensor)]
        say(f"  {name:<26} {median:>10.2f} {low:>10.2f} {sync:>10.2f} {shown[0]:>8} {shown[1]:>9}")
        lines.append(
            json.dumps(
                {
                    "bench": "torch",
                    "world_size": world,
                    "simulated_hosts": simulated,
                    "layer": name,
                    "median_us": median,
                    "min_us": low,
                    "sync_us": sync,
                    "rank_medians_us": [medians[index] for medians in per_rank],
                    "vs_raw": vs_raw,
                    "vs_tensor": vs_tensor,
                    "elements": args.elements,
                    "iters": args.iters,
                    "rounds": args.rounds,
                    "warmup": args.warmup,
                    "nccl_version": nccl,
                    "gpu": gpu,
                    "torch_version": torch.__version__,
                }
            )
        )
    spread = any(
        max(medians[i] for medians in per_rank) > min(medians[i] for medians in per_rank) * RANK_SPREAD
        for i in range(len(FORMS))
    )
    if spread:
        say(f"# the ranks' medians differ by more than {(RANK_SPREAD - 1) * 100:.0f}% (us per call):")
        for rank, medians in enumerate(per_rank):
            cells = ", ".join(f"{name} {m:.2f}" for (name, _), m in zip(FORMS, medians))
            say(f"rank {rank}: {cells}")
    for line in lines:
        say(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")


def main():
    sys.stdout.reconfigure(line_buffering=True)
    args = parse_args()
    try:
        against = baselines(args.against, int(os.environ.get("WORLD_SIZE", "1")))
        device = init()
        rounds = measure(args, device)
        medians = [statistics.median(t[0] for t in times) for times in rounds]
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, medians)
        if dist.get_rank() == 0:
            report(args, device, rounds, per_rank, against)
    except Exception as error:  # a clear line and a failed status, not a traceback
        print(f"torch_world_cost: error: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
