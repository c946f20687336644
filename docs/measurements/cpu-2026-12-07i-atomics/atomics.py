"""Atomic read-modify-writes per call of world-cost's issuing thread, from two callgrind runs.

    objdump -d --no-show-raw-insn -C BINARY > DISASSEMBLY
    valgrind --tool=callgrind --separate-threads=yes --dump-instr=yes --compress-pos=no \
        --compress-strings=no --callgrind-out-file=FEW BINARY ...   (and MANY, with more rounds)
    python3 atomics.py DISASSEMBLY BINARY_NAME FEW-01 MANY-01 CALLS

CALLS is how many more calls MANY timed than FEW. Prints, per locked instruction of BINARY (lock
prefix, or xchg with memory, which locks by itself), how many times a call executed it, with the
function it was inlined into, then the total.
"""
import collections
import re
import sys

disassembly, binary, few, many, calls = sys.argv[1:6]
locked = {}
for line in open(disassembly):
    m = re.match(r'^\s+([0-9a-f]+):\s+(.*)', line)
    if m and (m.group(2).startswith('lock ') or m.group(2).startswith('xchg')):
        locked[int(m.group(1), 16)] = m.group(2).strip()


def executed(path):
    counts = collections.Counter()
    ob = fn = None
    after_call = False
    for line in open(path):
        if line.startswith('ob='):
            ob = line[3:].strip()
        elif line.startswith('fn='):
            fn = line[3:].strip()
        elif line.startswith('calls='):
            after_call = True  # the next line is the call's inclusive cost
        elif line.startswith('0x'):
            if after_call:
                after_call = False
                continue
            address, _line, count = line.split()[:3]
            if ob and ob.endswith(binary) and int(address, 16) in locked:
                counts[(int(address, 16), fn)] += int(count)
    return counts


a, b = executed(few), executed(many)
rows = sorted(((b[k] - a[k]) / int(calls), k) for k in set(a) | set(b))
rows = [(per_call, k) for per_call, k in reversed(rows) if per_call > 0.01]
for per_call, (address, fn) in rows:
    print(f'{per_call:6.3f} {address:#x} {locked[address][:40]:40s} {fn[:110]}')
print(f'total atomic RMW per call {sum(per_call for per_call, _ in rows):.2f}')
