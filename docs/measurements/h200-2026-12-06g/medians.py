#!/usr/bin/env python3
"""Medians of nccl-perf --inject and --grow-spare JSON lines: one row per
(NCCL, world, fault, told, heal) or per (NCCL, world) for grows."""
import json, statistics, sys, collections
rows = collections.defaultdict(list)
grows = collections.defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if not line.startswith('{'):
            continue
        o = json.loads(line)
        if 'inject' in o:
            k = (o['nccl'], o['world'], o['inject']['fault'], o['told'], o['heal'])
            rows[k].append(o)
        elif 'grow_spare' in o:
            grows[(o['nccl'], o['world'])].append(o)
med = lambda xs: statistics.median(xs)
print("| NCCL | world | loss | told | heal | n | detect | heal | first | total (median) | min-max | path |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(rows):
    v = rows[k]
    tot = [o['total_ms'] for o in v]
    paths = sorted({o['path'].split(' ')[0] for o in v})
    print(f"| {k[0]} | {k[1]}->{k[1]-1} | {k[2]} | {'yes' if k[3] else 'no'} | {k[4]} | {len(v)} | "
          f"{med([o['detect_ms'] for o in v]):.0f} | {med([o['heal_ms'] for o in v]):.0f} | "
          f"{med([o['first_ms'] for o in v]):.0f} | **{med(tot):.0f}** | {min(tot):.0f}-{max(tot):.0f} | {', '.join(paths)} |")
if grows:
    print()
    print("| NCCL | world | n | grow | first | total (median) | min-max | path |")
    print("|---|---|---|---|---|---|---|---|")
    for k in sorted(grows):
        v = grows[k]
        tot = [o['total_ms'] for o in v]
        paths = sorted({o['path'].split(' ')[0] for o in v})
        print(f"| {k[0]} | {k[1]-1}->{k[1]} | {len(v)} | {med([o['grow_ms'] for o in v]):.0f} | "
              f"{med([o['first_ms'] for o in v]):.0f} | **{med(tot):.0f}** | {min(tot):.0f}-{max(tot):.0f} | {', '.join(paths)} |")
