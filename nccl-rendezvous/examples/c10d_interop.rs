//! The Rust rank of the c10d interop test: a `C10dStore` client of a real
//! `torch.distributed.TCPStore` server, sharing keys with a Python rank.
//! `nccl-rendezvous/tests/torch/c10d_interop.py` starts the server (libuv and
//! legacy), the Python rank and this program; on the GPU machine the
//! bundle's `interop.sh` runs it all.
//!
//! ```text
//! c10d_interop --addr 127.0.0.1 --port 29500 --role exchange [--timeout SECS]
//! ```
//!
//! Roles:
//!
//! * `exchange`: sets, adds and compare-and-sets keys for the Python rank to
//!   read (`rust/...`, `shared/counter`), waits for the Python rank's keys
//!   (`py/...`) and checks their values, adds to its counter, swaps and
//!   deletes its keys, then waits for the Python rank's verdict on what it
//!   read (`py/verdict` = `ok`).
//! * `bounds`: against the same real server, alone: a `get` that times out
//!   within its bound (CANCEL_WAIT), a `wait` naming only its missing key,
//!   refused adds, what c10d's compare-and-set gives, a spurious wake-up
//!   ignored, and 8 threads adding at once. Leaves `b/count` = 160 and
//!   `b/text` = `hello` for the Python side to read.
//!
//! Every check prints `PASS: ...` or `FAIL: ...`, then one line
//! `c10d_interop ROLE: N passed, N failed`. Exit status: 0 when every check
//! passed, 1 when one failed or the store failed, 2 on a usage error.

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use nccl_rendezvous::{C10dStore, CompareSet, Store, StoreError};

/// What the Python rank writes (`c10d_interop.py` writes the same bytes).
const PY_HELLO: &[u8] = b"hello from python \x00\xff";
/// What this rank writes for the Python rank.
const RUST_HELLO: &[u8] = b"hello from rust";
const RUST_BINARY: &[u8] = &[0, 1, 2, 255];

struct Checks {
    passed: usize,
    failed: usize,
}

impl Checks {
    fn check(&mut self, what: &str, ok: bool, detail: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
            println!("PASS: {what}");
        } else {
            self.failed += 1;
            println!("FAIL: {what}: {}", detail());
        }
    }

    fn equal<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, got: T, expected: T) {
        self.check(what, got == expected, || {
            format!("got {got:?}, expected {expected:?}")
        });
    }
}

fn swapped(value: &[u8]) -> CompareSet {
    CompareSet {
        swapped: true,
        current: Some(value.to_vec()),
    }
}

fn exchange(store: &C10dStore, timeout: Duration, checks: &mut Checks) -> Result<(), StoreError> {
    // This rank's writes, for the Python rank.
    store.set("rust/hello", RUST_HELLO)?;
    store.set("rust/binary", RUST_BINARY)?;
    store.set("rust/empty", b"")?;
    let counted = store.add("shared/counter", 10)?;
    checks.check(
        "add 10 to shared/counter (Python adds 7)",
        counted == 10 || counted == 17,
        || format!("got {counted}, expected 10 or 17"),
    );
    checks.equal(
        "compare_set of an absent rust/cas",
        store.compare_set("rust/cas", None, b"first")?,
        swapped(b"first"),
    );
    checks.equal(
        "compare_set of rust/cas from first to second",
        store.compare_set("rust/cas", Some(b"first"), b"second")?,
        swapped(b"second"),
    );

    // The Python rank's writes: both ranks started at once, so wait first.
    store.wait(
        &["py/hello", "py/number", "py/cas", "py/delete-me"],
        timeout,
    )?;
    checks.equal(
        "get py/hello (binary)",
        store.get("py/hello", timeout)?,
        PY_HELLO.to_vec(),
    );
    checks.equal(
        "get py/number",
        store.get("py/number", timeout)?,
        b"42".to_vec(),
    );
    checks.equal(
        "add 1 to py/counter (Python added 5)",
        store.add("py/counter", 1)?,
        6,
    );
    checks.equal(
        "compare_set of py/cas from Python's old",
        store.compare_set("py/cas", Some(b"old"), b"new from rust")?,
        swapped(b"new from rust"),
    );
    checks.equal("delete py/delete-me", store.delete("py/delete-me")?, true);
    checks.equal(
        "try_get of deleted py/delete-me",
        store.try_get("py/delete-me")?,
        None,
    );
    store.set("rust/done", b"1")?;

    // The Python rank's verdict on what it read, then the final counter.
    checks.equal(
        "Python's verdict on Rust's keys",
        store.get("py/verdict", timeout)?,
        b"ok".to_vec(),
    );
    store.wait(&["py/added"], timeout)?;
    checks.equal(
        "get shared/counter after both adds",
        store.get("shared/counter", timeout)?,
        b"17".to_vec(),
    );
    Ok(())
}

fn bounds(store: &C10dStore, checks: &mut Checks) -> Result<(), StoreError> {
    checks.equal("try_get of an absent key", store.try_get("b/absent")?, None);
    let limit = Duration::from_secs(1);
    let t0 = Instant::now();
    let result = store.get("b/absent", limit);
    let took = t0.elapsed();
    checks.check(
        "get of an absent key times out naming it, within 1 to 3 s",
        matches!(&result, Err(StoreError::Timeout { keys, .. }) if keys == &["b/absent"])
            && took >= limit
            && took < limit * 3,
        || format!("{result:?} after {took:?}"),
    );
    store.set("b/set", b"here")?;
    let result = store.wait(&["b/set", "b/absent"], Duration::from_millis(500));
    checks.check(
        "wait names only its missing key",
        matches!(&result, Err(StoreError::Timeout { keys, .. }) if keys == &["b/absent"]),
        || format!("{result:?}"),
    );
    checks.equal("delete of an absent key", store.delete("b/absent")?, false);
    checks.equal(
        "the connection works after timeouts",
        store.get("b/set", limit)?,
        b"here".to_vec(),
    );

    store.set("b/text", b"hello")?;
    let result = store.add("b/text", 1);
    checks.check(
        "add to text is NotAnInteger",
        matches!(result, Err(StoreError::NotAnInteger { .. })),
        || format!("{result:?}"),
    );
    store.set("b/max", i64::MAX.to_string().as_bytes())?;
    let result = store.add("b/max", 1);
    checks.check(
        "add past i64::MAX is Overflow",
        matches!(result, Err(StoreError::Overflow { .. })),
        || format!("{result:?}"),
    );
    checks.equal(
        "a refused add changes nothing",
        store.get("b/max", limit)?,
        i64::MAX.to_string().into_bytes(),
    );

    // c10d's compare-and-set, as the module docs describe it.
    store.set("b/empty", b"")?;
    checks.equal(
        "compare_set counts an empty value as absent",
        store.compare_set("b/empty", None, b"x")?,
        swapped(b"x"),
    );
    checks.equal(
        "compare_set expecting a value of an absent key",
        store.compare_set("b/none", Some(b"e"), b"n")?,
        CompareSet {
            swapped: false,
            current: None,
        },
    );
    checks.equal("that key stays absent", store.try_get("b/none")?, None);

    // The libuv server wakes a waiter of a key that compare_set leaves
    // absent: the get must go on waiting.
    let got = thread::scope(|s| {
        let getter = s.spawn(|| store.get("b/late", Duration::from_secs(5)));
        thread::sleep(Duration::from_millis(200));
        let swap = store.compare_set("b/late", Some(b"x"), b"y");
        thread::sleep(Duration::from_millis(200));
        let set = store.set("b/late", b"value");
        (getter.join(), swap, set)
    });
    checks.check(
        "get outlives a spurious wake-up",
        matches!(&got, (Ok(Ok(v)), Ok(_), Ok(())) if v == b"value"),
        || format!("{got:?}"),
    );

    let adders_ok = thread::scope(|s| {
        let adders: Vec<_> = (0..8)
            .map(|_| s.spawn(|| (0..20).try_for_each(|_| store.add("b/count", 1).map(drop))))
            .collect();
        adders
            .into_iter()
            .map(|adder| matches!(adder.join(), Ok(Ok(()))))
            .collect::<Vec<bool>>()
    });
    checks.equal(
        "8 threads adding at once all succeed",
        adders_ok,
        vec![true; 8],
    );
    checks.equal("8 threads adding 20 times", store.add("b/count", 0)?, 160);
    store.set("b/done", b"1")?;
    Ok(())
}

struct Args {
    addr: String,
    port: u16,
    role: String,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut addr, mut port, mut role) = (None, None, None);
    let mut timeout = Duration::from_secs(60);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--addr" => addr = Some(value("--addr")?),
            "--port" => {
                let raw = value("--port")?;
                port = Some(
                    raw.parse::<u16>()
                        .map_err(|_| format!("--port {raw:?} is not a port"))?,
                );
            }
            "--role" => role = Some(value("--role")?),
            "--timeout" => {
                let raw = value("--timeout")?;
                let secs: u64 = raw
                    .parse()
                    .map_err(|_| format!("--timeout {raw:?} is not whole seconds"))?;
                timeout = Duration::from_secs(secs);
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(Args {
        addr: addr.ok_or("--addr is required")?,
        port: port.ok_or("--port is required")?,
        role: role.ok_or("--role is required (exchange or bounds)")?,
        timeout,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}");
            eprintln!(
                "usage: c10d_interop --addr HOST --port PORT --role exchange|bounds [--timeout SECS]"
            );
            return ExitCode::from(2);
        }
    };
    let store = match C10dStore::connect(&args.addr, args.port, args.timeout) {
        Ok(store) => store,
        Err(error) => {
            eprintln!(
                "error: connecting to the c10d store at {}:{}: {error}",
                args.addr, args.port
            );
            return ExitCode::FAILURE;
        }
    };
    let mut checks = Checks {
        passed: 0,
        failed: 0,
    };
    let outcome = match args.role.as_str() {
        "exchange" => exchange(&store, args.timeout, &mut checks),
        "bounds" => bounds(&store, &mut checks),
        other => {
            eprintln!("error: unknown role {other:?}; expected exchange or bounds");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = outcome {
        checks.failed += 1;
        println!("FAIL: role {}: {error}", args.role);
    }
    println!(
        "c10d_interop {}: {} passed, {} failed",
        args.role, checks.passed, checks.failed
    );
    if checks.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
