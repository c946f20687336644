#!/usr/bin/env python3
"""Prints world-cost's JSON lines of the given files as one table: per file, each layer's median
µs per call and its cost over tensor (and over raw-nonblocking, for a layer on a nonblocking
communicator), paired by round, with 95% intervals; allocations per call (the most of any round).
usage: summary.py FILE.jsonl..."""
import json
import sys


def paired(row, prefix):
    value = row.get(f"{prefix}_us")
    if value is None:
        return "-"
    interval = row.get(f"{prefix}_interval_us")
    shown = f"{value:+.2f}"
    return shown + (f" [{interval[0]:+.2f},{interval[1]:+.2f}]" if interval else "")


for path in sys.argv[1:]:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    first = rows[0]
    print(f"# {path}: world size {first['world_size']}, {first['rounds']} rounds of {first['iters']},"
          f" behind {first.get('gpu_behind')}, {first['gpu']}")
    for row in rows:
        print(f"  {row['layer']:<26} {row['median_us']:8.2f}  {paired(row, 'over_tensor'):>22}"
              f"  {paired(row, 'over_raw_nonblocking'):>22}  {row['allocations_per_call']:.3f}")
