#!/usr/bin/env python3
"""torch_heal_cost.py: heal-cost's measurement (benches/src/bin/heal-cost.rs)
for torch.distributed: from a rank's death to the survivors' first correct
all_reduce after torch.distributed.shrink_group, in the same way and on the
same machine.

Run it as every rank under nccl-launch, which sets torchrun's variables:

    nccl-launch -n 4 python3 benches/scripts/torch_heal_cost.py --json heal.jsonl

The last rank exits after --warmup all_reduces, writing the time of its
death in the launch folder (NCCL_LAUNCH_DIR); the others run all_reduces of
1024 float32 (each result read and checked) until one raises (blocking
waits with an operation timeout of --op-timeout-ms, and no teardown of the
process: TORCH_NCCL_BLOCKING_WAIT=1, TORCH_NCCL_ASYNC_ERROR_HANDLING=0),
then call shrink_group on the default group and time its first correct
all_reduce. Every rank prints each phase as it reaches it (so a hang
shows where it stopped); rank 0 prints heal-cost's fields; a torch without
shrink_group prints one line saying so and exits 0.
"""

import argparse
import datetime
import json
import os
import sys
import time

os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

LEN = 1024


def say(text):
    print(text, flush=True)


def now_us():
    return time.time_ns() // 1000


def all_reduce(x, value, total, group=None):
    x.fill_(value)
    dist.all_reduce(x, group=group)
    got = x.cpu()
    if not bool((got == total).all()):
        raise RuntimeError(f"all_reduce gave {got[:4].tolist()}, expected {total}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--op-timeout-ms", type=int, default=3000)
    parser.add_argument("--json")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    shrink = getattr(dist, "shrink_group", None)
    if shrink is None:
        if rank == 0:
            print(f"torch-heal-cost: torch {torch.__version__} has no torch.distributed.shrink_group", flush=True)
        return 0
    folder = os.environ["NCCL_LAUNCH_DIR"]
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(
        "nccl",
        timeout=datetime.timedelta(milliseconds=args.op_timeout_ms),
        device_id=torch.device("cuda", torch.cuda.current_device()),
    )
    x = torch.empty(LEN, device="cuda")
    total = world * (world + 1) / 2
    for _ in range(args.warmup):
        all_reduce(x, rank + 1, total)
    died_file = os.path.join(folder, "torch-heal-cost-died")
    if rank == world - 1:
        with open(died_file, "w") as f:
            f.write(str(now_us()))
        os._exit(0)
    say(f"rank {rank}: warm, rank {world - 1} is gone")
    while True:
        try:
            all_reduce(x, rank + 1, total)
        except Exception as error:  # the lost rank's error, as torch raises it
            failed = now_us()
            message = str(error).splitlines()[0][:160]
            break
    say(f"rank {rank}: failed: {message}; calling shrink_group([{world - 1}])")
    group = shrink([world - 1])
    healed = now_us()
    say(f"rank {rank}: shrink_group returned; first all_reduce")
    all_reduce(x, rank + 1, total - world, group=group)
    first = now_us()
    say(f"rank {rank}: first all_reduce correct")
    with open(died_file) as f:
        died = int(f.read().strip())
    ms = lambda a, b: (b - a) / 1000.0  # noqa: E731
    if rank == 0:
        line = {
            "tool": "torch-heal-cost",
            "mode": "torch-shrink_group",
            "world": world,
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "detect_ms": ms(died, failed),
            "heal_ms": ms(failed, healed),
            "first_ms": ms(healed, first),
            "total_ms": ms(died, first),
            "error": message,
        }
        print(
            f"torch-heal-cost shrink_group world {world} -> {world - 1}: detect {line['detect_ms']:.1f} ms, "
            f"heal {line['heal_ms']:.1f} ms, first all_reduce {line['first_ms']:.1f} ms, "
            f"total {line['total_ms']:.1f} ms",
            flush=True,
        )
        print(json.dumps(line), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(line) + "\n")
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
