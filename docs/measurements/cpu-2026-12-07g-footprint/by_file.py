#!/usr/bin/env python3
"""First-level data-cache read and write misses per call, by source file, of the difference of two
callgrind runs with --cache-sim=yes (the main thread's files, `...-01`, of a run of FEWER calls and
one of MORE): the fake NCCL's ncclAllReduce (its eviction) left out. Inlined code counts in the
file it was written in, so a move through the stack counts in core's ptr/result files. With
--total, only the two sums per call ("reads writes"), which lines.sh prints.
usage: by_file.py [--total] FEWER-01 MORE-01 CALLS_BETWEEN"""
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


total_only = sys.argv[1:2] == ["--total"]
fewer_file, more_file, calls = sys.argv[1 + total_only:4 + total_only]
fewer, more, calls = misses_by_file(fewer_file), misses_by_file(more_file), float(calls)
rows = [((more[f][0] - fewer[f][0]) / calls, (more[f][1] - fewer[f][1]) / calls, f) for f in set(fewer) | set(more)]
reads, writes = sum(r[0] for r in rows), sum(r[1] for r in rows)
if total_only:
    print(f"{reads:.1f} {writes:.1f}")
    sys.exit()
rows.sort(key=lambda row: -(row[0] + row[1]))
print("  read  write  source file (misses per call)")
for row_reads, row_writes, source in rows:
    if row_reads + row_writes >= 0.5:
        print(f"{row_reads:6.1f} {row_writes:6.1f}  {source}")
print(f"{reads:6.1f} {writes:6.1f}  total")
