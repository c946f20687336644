#!/usr/bin/env python3
"""The ablation of call1.sh as one table: for each ABLATE mask, the default group's cost over
nccl-tensor (paired by round, µs per call) in each of the three alternated runs, and how much less
it is than with nothing ablated in the same repetition; tensor-clock's and tensor-capture-query's
cost over nccl-tensor (one clock read, one capture query) across all runs.
usage: ablation.py LOGS_DIR (holding ablate-MASK-REP.jsonl)"""
import json
import pathlib
import statistics
import sys

NAMES = {0: "nothing", 1: "capture query", 2: "clock read", 4: "recorder's record",
         8: "enqueue watch", 15: "all four"}
logs = pathlib.Path(sys.argv[1])
over = {}
for path in sorted(logs.glob("ablate-*-*.jsonl")):
    _, mask, rep = path.stem.split("-")
    for line in path.read_text().splitlines():
        row = json.loads(line)
        over[(int(mask), int(rep), row["layer"])] = row["over_tensor_us"]
reps = sorted({rep for _, rep, _ in over})
print("| ablated | " + " | ".join(f"run {r}" for r in reps) + " | less than nothing ablated (median) |")
print("|---|" + "---|" * (len(reps) + 1))
for mask, name in NAMES.items():
    cells, saved = [], []
    for rep in reps:
        value = over.get((mask, rep, "group-blocking-caller"))
        base = over.get((0, rep, "group-blocking-caller"))
        cells.append("-" if value is None else f"+ {value:.2f}")
        if value is not None and base is not None:
            saved.append(base - value)
    shown = f"{statistics.median(saved):.2f}" if saved and mask else "-"
    print(f"| {name} ({mask}) | " + " | ".join(cells) + f" | {shown} |")
for layer in ("tensor-clock", "tensor-capture-query"):
    values = [v for (m, r, l), v in over.items() if l == layer and v is not None]
    if values:
        print(f"{layer}: + {statistics.median(values):.3f} µs over nccl-tensor (median of {len(values)} runs,"
              f" {min(values):+.3f} to {max(values):+.3f})")
