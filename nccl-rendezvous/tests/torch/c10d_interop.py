#!/usr/bin/env python3
"""c10d_interop.py: nccl-rendezvous's C10dStore against a real
torch.distributed.TCPStore, both directions, on each of torch's servers
(libuv, the default, and the legacy one).

For each server kind this starts a TCPStore server in this process, then:

  exchange  a Python rank (a second TCPStore, as a client) and a Rust rank
            (the c10d_interop example, --role exchange) run at once: each
            sets, adds, compare-and-sets and waits for keys of the other,
            reads the other's values and checks them; the Python rank's
            verdict on Rust's keys goes back to the Rust rank (py/verdict).
  bounds    the Rust rank alone (--role bounds): timeouts within their
            bounds, refused adds, c10d's compare-and-set, a spurious
            wake-up, 8 threads at once; then Python reads what it left.

Every check prints PASS: or FAIL:, then one line
`c10d_interop.py: N passed, N failed`; the exit status is non-zero when a
check failed. Every wait is bounded (--timeout, default 60 s).

    python3 c10d_interop.py [--binary PATH] [--timeout SECS] [--backends libuv,legacy]

The binary defaults to the GPU bundle's bin/nccl-rendezvous-c10d_interop next to
this script's folder, else target/release/examples/c10d_interop. Needs only
python3 with torch (2.11 on the GPU machine); no GPU.
"""

import argparse
import os
import subprocess
import sys
import time
from datetime import timedelta

from torch.distributed import TCPStore

HOST = "127.0.0.1"
# The bytes each side writes; the Rust example writes and expects the same.
PY_HELLO = b"hello from python \x00\xff"
RUST_HELLO = b"hello from rust"
RUST_BINARY = bytes([0, 1, 2, 255])


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS: {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL: {what}: {detail}", flush=True)
        return ok

    def equal(self, what, got, expected):
        return self.check(what, got == expected, f"got {got!r}, expected {expected!r}")


def default_binary():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (
        os.path.join(here, "..", "bin", "nccl-rendezvous-c10d_interop"),
        os.path.join(here, "..", "..", "..", "target", "release", "examples", "c10d_interop"),
    ):
        if os.path.exists(candidate):
            return os.path.normpath(candidate)
    return "c10d_interop"


def wait_keys(store, keys, proc, deadline):
    """True once every key is set; False when the Rust rank exited first or
    the deadline passed (TCPStore.check never blocks)."""
    while time.monotonic() < deadline:
        if store.check(keys):
            return True
        if proc.poll() is not None:
            return store.check(keys)
        time.sleep(0.02)
    return False


def finish(proc, label, timeout, checks):
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "killed after the timeout"
    checks.equal(f"{label}: the Rust rank's exit status", rc, 0)


def exchange(binary, port, kind, timeout, checks):
    label = f"{kind} exchange"
    t = timedelta(seconds=timeout)
    py = TCPStore(HOST, port, is_master=False, timeout=t, wait_for_workers=False)
    cmd = [binary, "--addr", HOST, "--port", str(port), "--role", "exchange",
           "--timeout", str(timeout)]
    print(f"==> {label}: {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + timeout
    try:
        # The Python rank's writes, for the Rust rank.
        py.set("py/number", "42")
        py.set("py/cas", "old")
        py.set("py/delete-me", "x")
        checks.equal(f"{label}: add 5 to py/counter", py.add("py/counter", 5), 5)
        py.set("py/hello", PY_HELLO)
        added = py.add("shared/counter", 7)
        checks.check(f"{label}: add 7 to shared/counter (Rust adds 10)", added in (7, 17),
                     f"got {added}")
        py.set("py/added", "1")

        # The Rust rank's writes: a real TCPStore.wait, then a wait that
        # also watches the Rust process.
        py.wait(["rust/hello"], t)
        done = wait_keys(py, ["rust/done"], proc, deadline)
        checks.check(f"{label}: the Rust rank finished its part", done, "rust/done never set")
        ok = done
        if done:
            ok &= checks.equal(f"{label}: get rust/hello", py.get("rust/hello"), RUST_HELLO)
            ok &= checks.equal(f"{label}: get rust/binary", py.get("rust/binary"), RUST_BINARY)
            ok &= checks.equal(f"{label}: get rust/empty", py.get("rust/empty"), b"")
            ok &= checks.equal(f"{label}: get rust/cas", py.get("rust/cas"), b"second")
            ok &= checks.equal(f"{label}: compare_set of Rust's rust/cas",
                               py.compare_set("rust/cas", "second", "third"), b"third")
            ok &= checks.equal(f"{label}: py/cas swapped by Rust", py.get("py/cas"),
                               b"new from rust")
            ok &= checks.equal(f"{label}: py/counter after Rust's add", py.get("py/counter"),
                               b"6")
            ok &= checks.equal(f"{label}: py/delete-me deleted by Rust",
                               py.check(["py/delete-me"]), False)
            ok &= checks.equal(f"{label}: shared/counter after both adds",
                               py.get("shared/counter"), b"17")
        py.set("py/verdict", "ok" if ok else "fail")
    except Exception as error:  # a store error fails this case, not the run
        checks.check(f"{label}: the Python rank", False, repr(error))
        proc.kill()
    finish(proc, label, timeout, checks)


def bounds(binary, port, kind, timeout, checks):
    label = f"{kind} bounds"
    cmd = [binary, "--addr", HOST, "--port", str(port), "--role", "bounds",
           "--timeout", str(timeout)]
    print(f"==> {label}: {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd)
    finish(proc, label, timeout, checks)
    try:
        py = TCPStore(HOST, port, is_master=False, timeout=timedelta(seconds=timeout),
                      wait_for_workers=False)
        if checks.check(f"{label}: the Rust rank left b/done", py.check(["b/done"])):
            checks.equal(f"{label}: Python reads b/count", py.get("b/count"), b"160")
            checks.equal(f"{label}: Python reads b/text", py.get("b/text"), b"hello")
            checks.equal(f"{label}: Python adds to Rust's counter", py.add("b/count", 1), 161)
    except Exception as error:
        checks.check(f"{label}: the Python side", False, repr(error))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=default_binary())
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--backends", default="libuv,legacy")
    args = parser.parse_args()
    checks = Checks()
    for kind in args.backends.split(","):
        if kind not in ("libuv", "legacy"):
            parser.error(f"--backends: {kind!r} is not libuv or legacy")
        use_libuv = kind == "libuv"
        print(f"==> torch.distributed.TCPStore server, use_libuv={use_libuv}", flush=True)
        try:
            server = TCPStore(HOST, 0, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=args.timeout), use_libuv=use_libuv)
        except Exception as error:
            checks.check(f"{kind}: start the server", False, repr(error))
            continue
        # TCPStore.libuvBackend says which server really runs (a torch built
        # without libuv falls back to the legacy one).
        checks.equal(f"{kind}: the server's backend", getattr(server, "libuvBackend", None),
                     use_libuv)
        exchange(args.binary, server.port, kind, args.timeout, checks)
        bounds(args.binary, server.port, kind, args.timeout, checks)
        del server
    print(f"c10d_interop.py: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 0 if checks.failed == 0 and checks.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
