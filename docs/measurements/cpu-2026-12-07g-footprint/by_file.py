#!/usr/bin/env python3
"""First-level data-cache read and write misses per call, by source file, of the difference of two
callgrind runs with --cache-sim=yes (the main thread's files, `...-01`, of a run of FEWER calls and
one of MORE): the fake NCCL's ncclAllReduce (its eviction) left out. Inlined code counts in the
file it was written in, so a move through the stack counts in core's ptr/result files.
usage: by_file.py FEWER-01 MORE-01 CALLS_BETWEEN"""
import collections
import re
import subprocess
import sys


def misses_by_file(path):
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--show=D1mr,D1mw", "--threshold=100", "--auto=no", path],
        capture_output=True, text=True, check=True).stdout
    by_file = collections.defaultdict(lambda: [0, 0])
    for line in text.splitlines():
        line = re.sub(r"\([^)]*\)", "", line).replace(",", "")
        row = re.match(r"\s*(\d+|\.)\s+(\d+|\.)\s+(\S.*)$", line)
        if not row or "PROGRAM TOTALS" in line or ":ncclAllReduce " in line:
            continue
        source = row.group(3).split(":")[0]
        source = re.sub(r"^/rustc/[0-9a-f]+/library/", "std:", source)
        source = re.sub(r"^.*/registry/src/[^/]+/", "", source)
        source = re.sub(r"^/work/main/", "", source)
        for i in (0, 1):
            by_file[source][i] += 0 if row.group(i + 1) == "." else int(row.group(i + 1))
    return by_file


fewer, more, calls = misses_by_file(sys.argv[1]), misses_by_file(sys.argv[2]), float(sys.argv[3])
rows = [((more[f][0] - fewer[f][0]) / calls, (more[f][1] - fewer[f][1]) / calls, f) for f in set(fewer) | set(more)]
rows.sort(key=lambda row: -(row[0] + row[1]))
print("  read  write  source file (misses per call)")
for reads, writes, source in rows:
    if reads + writes >= 0.5:
        print(f"{reads:6.1f} {writes:6.1f}  {source}")
print(f"{sum(r[0] for r in rows):6.1f} {sum(r[1] for r in rows):6.1f}  total")
