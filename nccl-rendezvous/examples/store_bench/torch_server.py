"""torch's c10d TCPStore server (libuv backend) for store_bench.

Prints the port it listens on, then serves until its stdin closes. The
bench starts it with `python3 -c` (this file is compiled into the bench),
so it needs nothing but an importable torch.
"""
import sys
from datetime import timedelta

import torch.distributed as dist

server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                       timeout=timedelta(seconds=300), use_libuv=True)
if not getattr(server, "libuvBackend", True):
    print("store_bench: this torch has no libuv TCPStore backend", file=sys.stderr)
    sys.exit(3)
print(server.port, flush=True)
sys.stdin.read()
