"""Records the bytes torch's own TCPStore client and server exchange, for
nccl-rendezvous's c10d wire tests (src/c10d/wire/torch_wire.txt).

A forwarding proxy sits between a torch TCPStore client and a torch
TCPStore server (libuv and legacy backends) and logs every chunk with its
direction, under a label naming the client call that caused it.

    python3 record_c10d_wire.py > ../../src/store/c10d/wire/torch_wire.txt
"""
import datetime
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

lock = threading.Lock()
records = []
label = ["connect"]


def pump(src, dst, direction, backend):
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        with lock:
            records.append((backend, label[0], direction, data.hex()))
        dst.sendall(data)


def serve_proxy(listener, target_port, backend):
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", target_port))
        threading.Thread(target=pump, args=(client, server, "c2s", backend), daemon=True).start()
        threading.Thread(target=pump, args=(server, client, "s2c", backend), daemon=True).start()


def record(backend, use_libuv):
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           use_libuv=use_libuv)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    threading.Thread(target=serve_proxy, args=(listener, server.port, backend),
                     daemon=True).start()
    label[0] = "connect"
    client = dist.TCPStore("127.0.0.1", listener.getsockname()[1], is_master=False,
                           use_libuv=use_libuv, timeout=datetime.timedelta(seconds=10))
    second = datetime.timedelta(seconds=1)
    steps = [
        ("set k1 v1", lambda: client.set("k1", "v1")),
        ("get k1", lambda: client.get("k1")),
        ("add ctr 5", lambda: client.add("ctr", 5)),
        ("add ctr -2", lambda: client.add("ctr", -2)),
        ("compare_set k1 v1 v2", lambda: client.compare_set("k1", "v1", "v2")),
        ("compare_set k1 zz v3", lambda: client.compare_set("k1", "zz", "v3")),
        ("compare_set missing (absent) new", lambda: client.compare_set("missing", "", "new")),
        ("check k1 nope", lambda: client.check(["k1", "nope"])),
        ("check k1", lambda: client.check(["k1"])),
        ("wait k1", lambda: client.wait(["k1"])),
        ("wait never 1s", lambda: client.wait(["never"], second)),
        ("delete k1", lambda: client.delete_key("k1")),
        ("delete k1 again", lambda: client.delete_key("k1")),
        ("set bin 0..255", lambda: client.set("bin", bytes(range(256)))),
    ]
    for name, step in steps:
        time.sleep(0.1)
        label[0] = name
        try:
            step()
        except Exception as error:  # a timeout is one of the recorded replies
            print(f"# {backend}: {name}: {type(error).__name__}", file=sys.stderr)
    time.sleep(0.3)


record("libuv", True)
record("legacy", False)
print(f"# Recorded by nccl-rendezvous/tests/torch/record_c10d_wire.py from torch {torch.__version__}:")
print("# backend <TAB> the client call <TAB> c2s (client to server) or s2c <TAB> the bytes, hex")
for row in records:
    print("\t".join(row))
