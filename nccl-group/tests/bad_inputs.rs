//! One table of bad inputs across the whole CPU-reachable API: every
//! argument check of every operation (`nccl_tensor::checks`), the core
//! types (`Config`, `UniqueId`, `scalar_bytes`, the library loader), the
//! group's keys, membership and stores, and every launch environment
//! variable `RendezvousConfig` reads. Each row runs one bad call and checks
//! that the error names both what was expected and what was given.
//!
//! The table is also written to `docs/bad-inputs.md`: run with
//! `NCCL_UPDATE_BAD_INPUTS=1` to regenerate it; otherwise the test fails
//! when the committed file differs from what it would write.

use std::ffi::OsString;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use nccl_core::nccl_sys;
use nccl_core::{Config, DataType, ReduceOp, Reduction, UniqueId, Version, scalar_bytes};
use nccl_group::testing::{DeviceList, Membership};
use nccl_group::{InProcessStore, PrefixStore, RendezvousConfig, StoreSpec};
use nccl_tensor::BufferDesc;
use nccl_tensor::checks::{self, CommInfo};

const F32: DataType = DataType::Float32;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::Bfloat16;
const E4M3: DataType = DataType::Float8E4M3;
const SUM: Reduction<'static> = Reduction::Builtin(ReduceOp::Sum);
const AVG: Reduction<'static> = Reduction::Builtin(ReduceOp::Avg);
const MAX: Reduction<'static> = Reduction::Builtin(ReduceOp::Max);

/// Where the Markdown table lives, relative to the workspace root.
const DOC: &str = "docs/bad-inputs.md";
/// Set to 1 to rewrite [`DOC`] instead of checking it.
const UPDATE_VAR: &str = "NCCL_UPDATE_BAD_INPUTS";
/// A library path that does not exist, as `NCCL_LIBRARY` might name it.
const MISSING_LIBRARY: &str = "/nonexistent/libnccl.so.2";
/// The shape and strides of a transposed 2 x 4 `f32` matrix.
const SHAPE: [usize; 2] = [2, 4];
const STRIDES: [usize; 2] = [1, 2];

/// One bad input: where, which call, what is wrong with it, the substrings
/// the message must contain (what was expected and what was given), and
/// the call itself, returning the error's text.
struct Row {
    area: &'static str,
    call: &'static str,
    input: &'static str,
    expect: &'static [&'static str],
    run: fn() -> String,
}

/// The error's text, or a marker that fails every expectation.
fn err<T, E: Display>(result: Result<T, E>) -> String {
    match result {
        Ok(_) => "<accepted: no error was returned>".to_string(),
        Err(error) => error.to_string(),
    }
}

/// Rank 0 of 4 on device 0, NCCL 2.28.3, compute capability 9.0, no group.
fn info() -> CommInfo {
    CommInfo {
        rank: 0,
        world_size: 4,
        device: 0,
        nccl_version: Version::new(2, 28, 3),
        compute_capability: (9, 0),
        in_group: false,
    }
}

/// [`info`] on an older NCCL.
fn nccl(major: u32, minor: u32, patch: u32) -> CommInfo {
    CommInfo {
        nccl_version: Version::new(major, minor, patch),
        ..info()
    }
}

/// [`info`] on a GPU of compute capability 8.0.
fn ampere() -> CommInfo {
    CommInfo {
        compute_capability: (8, 0),
        ..info()
    }
}

/// A contiguous buffer on device 0.
fn buf(dtype: DataType, len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(dtype, len, 0)
}

/// A contiguous `f32` buffer on device 0.
fn f32s(len: usize) -> BufferDesc<'static> {
    buf(F32, len)
}

/// A contiguous `f32` buffer on device 1 (the communicator is on 0).
fn on_device_1(len: usize) -> BufferDesc<'static> {
    BufferDesc::contiguous(F32, len, 1)
}

/// A transposed (non-contiguous) 2 x 4 `f32` matrix on device 0.
fn strided() -> BufferDesc<'static> {
    BufferDesc {
        dtype: F32,
        len: 8,
        device: 0,
        strided: Some((&SHAPE, &STRIDES)),
    }
}

/// `RendezvousConfig::from_vars` over a valid torchrun environment (rank 1
/// of 4, TCP store at node0:29500) with `changes` applied: `Some` sets a
/// variable, `None` removes it.
fn launch(changes: &[(&str, Option<&str>)]) -> String {
    let mut vars: Vec<(String, String)> = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (name, value) in changes {
        vars.retain(|(k, _)| k != name);
        if let Some(value) = value {
            vars.push((name.to_string(), value.to_string()));
        }
    }
    err(RendezvousConfig::from_vars(|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }))
}

/// `Membership::join` on a fresh in-process store.
fn join(rank: usize, world_size: usize) -> String {
    err(Membership::join(
        "bad-inputs",
        rank,
        world_size,
        Arc::new(InProcessStore::new()),
        "in-process".to_string(),
        Duration::from_secs(1),
    ))
}

/// Every row. Keep rows of one area together: the Markdown follows this order.
fn rows() -> Vec<Row> {
    vec![
        // ----------------------------------------------------------------
        // nccl_tensor::checks: the shared building blocks.
        // ----------------------------------------------------------------
        Row {
            area: "checks",
            call: "checks::buffer",
            input: "buffer on device 1, communicator on device 0",
            expect: &["device 1", "device 0"],
            run: || err(checks::buffer("op", "x", &on_device_1(8), &info())),
        },
        Row {
            area: "checks",
            call: "checks::buffer",
            input: "transposed (strided) buffer",
            expect: &["not contiguous", "shape [2, 4], strides [1, 2]"],
            run: || err(checks::buffer("op", "x", &strided(), &info())),
        },
        Row {
            area: "checks",
            call: "checks::buffer",
            input: "bfloat16 with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(checks::buffer("op", "x", &buf(BF16, 8), &nccl(2, 9, 9))),
        },
        Row {
            area: "checks",
            call: "checks::same_dtype",
            input: "f32 input, f16 output",
            expect: &["output is half", "input is float"],
            run: || err(checks::same_dtype("op", &f32s(8), &buf(F16, 8))),
        },
        Row {
            area: "checks",
            call: "checks::length",
            input: "7 elements where 8 are needed",
            expect: &["has 7 elements", "expected 8"],
            run: || err(checks::length("op", "output", 8, 7, "a rule")),
        },
        Row {
            area: "checks",
            call: "checks::rank",
            input: "root 4 of world size 4",
            expect: &["root 4", "expected 0..4"],
            run: || err(checks::rank("op", "root", 4, &info())),
        },
        Row {
            area: "checks",
            call: "checks::peer",
            input: "peer -1",
            expect: &["dst -1", "expected 0..4"],
            run: || err(checks::peer("op", "dst", -1, &info())),
        },
        Row {
            area: "checks",
            call: "checks::peer",
            input: "peer = this rank, no group open",
            expect: &["peer 0 is this rank", "inside one nccl_core::Group"],
            run: || err(checks::peer("op", "dst", 0, &info())),
        },
        Row {
            area: "checks",
            call: "checks::reduction",
            input: "fp8 max on compute capability 8.0",
            expect: &["max on f8e4m3", "9.0 or newer, this one is 8.0"],
            run: || err(checks::reduction("op", MAX, E4M3, &ampere())),
        },
        Row {
            area: "checks",
            call: "checks::reduction",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || err(checks::reduction("op", AVG, E4M3, &info())),
        },
        Row {
            area: "checks",
            call: "checks::reduction",
            input: "avg with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(checks::reduction("op", AVG, F32, &nccl(2, 9, 9))),
        },
        // ----------------------------------------------------------------
        // nccl_tensor::checks: one function per operation.
        // ----------------------------------------------------------------
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "in-place tensor on device 1",
            expect: &["tensor is on device 1", "device 0"],
            run: || err(checks::all_reduce(&info(), None, &on_device_1(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "strided input",
            expect: &["input is not contiguous", "strides [1, 2]"],
            run: || err(checks::all_reduce(&info(), Some(&strided()), &f32s(8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "f16 input, f32 output",
            expect: &["output is float", "input is half"],
            run: || {
                err(checks::all_reduce(
                    &info(),
                    Some(&buf(F16, 8)),
                    &f32s(8),
                    SUM,
                ))
            },
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "8-element input, 6-element output",
            expect: &["output has 6 elements", "expected 8"],
            run: || err(checks::all_reduce(&info(), Some(&f32s(8)), &f32s(6), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || err(checks::all_reduce(&info(), None, &buf(E4M3, 8), AVG)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "fp8 sum on compute capability 8.0",
            expect: &["sum on f8e4m3", "this one is 8.0"],
            run: || err(checks::all_reduce(&ampere(), None, &buf(E4M3, 8), SUM)),
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "fp8 tensor with NCCL 2.23.4",
            expect: &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
            run: || {
                err(checks::all_reduce(
                    &nccl(2, 23, 4),
                    None,
                    &buf(E4M3, 8),
                    SUM,
                ))
            },
        },
        Row {
            area: "all_reduce",
            call: "checks::all_reduce",
            input: "avg with NCCL 2.9.9",
            expect: &["needs NCCL 2.10.0", "loaded libnccl is 2.9.9"],
            run: || err(checks::all_reduce(&nccl(2, 9, 9), None, &f32s(8), AVG)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "root 4 of world size 4",
            expect: &["root 4", "expected 0..4"],
            run: || err(checks::broadcast(&info(), None, &f32s(8), 4)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "root -1",
            expect: &["root -1", "expected 0..4"],
            run: || err(checks::broadcast(&info(), None, &f32s(8), -1)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "8-element input, 9-element output",
            expect: &["output has 9 elements", "expected 8"],
            run: || err(checks::broadcast(&info(), Some(&f32s(8)), &f32s(9), 0)),
        },
        Row {
            area: "broadcast",
            call: "checks::broadcast",
            input: "bf16 input, f32 output",
            expect: &["output is float", "input is bfloat16"],
            run: || err(checks::broadcast(&info(), Some(&buf(BF16, 8)), &f32s(8), 0)),
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "root 5 of world size 4",
            expect: &["root 5", "expected 0..4"],
            run: || err(checks::reduce(&info(), None, &f32s(8), SUM, 5)),
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "output on device 1",
            expect: &["output is on device 1", "device 0"],
            run: || {
                err(checks::reduce(
                    &info(),
                    Some(&f32s(8)),
                    &on_device_1(8),
                    SUM,
                    0,
                ))
            },
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "8-element input, 4-element output",
            expect: &["output has 4 elements", "expected 8"],
            run: || err(checks::reduce(&info(), Some(&f32s(8)), &f32s(4), SUM, 0)),
        },
        Row {
            area: "reduce",
            call: "checks::reduce",
            input: "fp8 max on compute capability 8.0",
            expect: &["max on f8e4m3", "this one is 8.0"],
            run: || err(checks::reduce(&ampere(), None, &buf(E4M3, 8), MAX, 0)),
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "2-element input, 7-element output (world 4)",
            expect: &["output has 7 elements", "expected 8"],
            run: || err(checks::all_gather_into_tensor(&info(), &f32s(2), &f32s(7))),
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "f32 input, f16 output",
            expect: &["output is half", "input is float"],
            run: || {
                err(checks::all_gather_into_tensor(
                    &info(),
                    &f32s(2),
                    &buf(F16, 8),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "input on device 1",
            expect: &["input is on device 1", "device 0"],
            run: || {
                err(checks::all_gather_into_tensor(
                    &info(),
                    &on_device_1(2),
                    &f32s(8),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_into_tensor",
            input: "fp8 with NCCL 2.23.4",
            expect: &["needs NCCL 2.24.0", "loaded libnccl is 2.23.4"],
            run: || {
                err(checks::all_gather_into_tensor(
                    &nccl(2, 23, 4),
                    &buf(E4M3, 2),
                    &buf(E4M3, 8),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "3 outputs for world size 4",
            expect: &["output list has 3 elements", "expected 4"],
            run: || {
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    [f32s(2); 3].into_iter(),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "one output of 3 elements, input of 2",
            expect: &["an output has 3 elements", "expected 2"],
            run: || {
                let outputs = [f32s(2), f32s(2), f32s(3), f32s(2)];
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    outputs.into_iter(),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "one f16 output, f32 input",
            expect: &["output is half", "input is float"],
            run: || {
                let outputs = [f32s(2), buf(F16, 2), f32s(2), f32s(2)];
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    outputs.into_iter(),
                ))
            },
        },
        Row {
            area: "all_gather",
            call: "checks::all_gather_list",
            input: "one output on device 1",
            expect: &["an output is on device 1", "device 0"],
            run: || {
                let outputs = [f32s(2), f32s(2), f32s(2), on_device_1(2)];
                err(checks::all_gather_list(
                    &info(),
                    &f32s(2),
                    outputs.into_iter(),
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "7-element input, 2-element output (world 4)",
            expect: &["input has 7 elements", "expected 8"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &f32s(7),
                    &f32s(2),
                    SUM,
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "f32 input, bf16 output",
            expect: &["output is bfloat16", "input is float"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &f32s(8),
                    &buf(BF16, 2),
                    SUM,
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "strided output",
            expect: &["output is not contiguous", "strides [1, 2]"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &f32s(32),
                    &strided(),
                    SUM,
                ))
            },
        },
        Row {
            area: "reduce_scatter",
            call: "checks::reduce_scatter_tensor",
            input: "fp8 avg",
            expect: &["avg on f8e4m3", "sum, prod, max and min work"],
            run: || {
                err(checks::reduce_scatter_tensor(
                    &info(),
                    &buf(E4M3, 8),
                    &buf(E4M3, 2),
                    AVG,
                ))
            },
        },
        Row {
            area: "all_to_all",
            call: "checks::all_to_all_single",
            input: "6 elements, world size 4",
            expect: &["input has 6 elements", "not a multiple of the world size 4"],
            run: || err(checks::all_to_all_single(&info(), &f32s(6), &f32s(6))),
        },
        Row {
            area: "all_to_all",
            call: "checks::all_to_all_single",
            input: "8-element input, 12-element output",
            expect: &["output has 12 elements", "expected 8"],
            run: || err(checks::all_to_all_single(&info(), &f32s(8), &f32s(12))),
        },
        Row {
            area: "all_to_all",
            call: "checks::all_to_all_single",
            input: "f16 input, f32 output",
            expect: &["output is float", "input is half"],
            run: || err(checks::all_to_all_single(&info(), &buf(F16, 8), &f32s(8))),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"send\", \"dst\")",
            input: "dst 4 of world size 4",
            expect: &["send: dst 4", "expected 0..4"],
            run: || err(checks::point_to_point("send", "dst", &info(), &f32s(8), 4)),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"send\", \"dst\")",
            input: "dst = this rank, no group open",
            expect: &["send: peer 0 is this rank", "inside one nccl_core::Group"],
            run: || err(checks::point_to_point("send", "dst", &info(), &f32s(8), 0)),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"send\", \"dst\")",
            input: "strided tensor",
            expect: &["send: tensor is not contiguous", "strides [1, 2]"],
            run: || {
                err(checks::point_to_point(
                    "send",
                    "dst",
                    &info(),
                    &strided(),
                    1,
                ))
            },
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"recv\", \"src\")",
            input: "src -1",
            expect: &["recv: src -1", "expected 0..4"],
            run: || err(checks::point_to_point("recv", "src", &info(), &f32s(8), -1)),
        },
        Row {
            area: "send/recv",
            call: "checks::point_to_point(\"recv\", \"src\")",
            input: "tensor on device 1",
            expect: &["recv: tensor is on device 1", "device 0"],
            run: || {
                err(checks::point_to_point(
                    "recv",
                    "src",
                    &info(),
                    &on_device_1(8),
                    1,
                ))
            },
        },
        // ----------------------------------------------------------------
        // nccl_core.
        // ----------------------------------------------------------------
        Row {
            area: "core",
            call: "Config::validate",
            input: "cga_cluster_size(9)",
            expect: &["cga_cluster_size", "expected 0 to 8", "got 9"],
            run: || err(Config::new().cga_cluster_size(9).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "cga_cluster_size(-1)",
            expect: &["cga_cluster_size", "expected 0 to 8", "got -1"],
            run: || err(Config::new().cga_cluster_size(-1).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "ctas(0, 4)",
            expect: &["min_ctas", "expected at least 1", "got 0"],
            run: || err(Config::new().ctas(0, 4).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "ctas(4, 2)",
            expect: &["max_ctas", "expected at least min_ctas", "got 2 < 4"],
            run: || err(Config::new().ctas(4, 2).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "timeout(0s)",
            expect: &["timeout", "expected a positive duration", "got 0s"],
            run: || err(Config::new().timeout(Duration::ZERO).validate()),
        },
        Row {
            area: "core",
            call: "Config::to_raw",
            input: "net_name with a NUL byte",
            expect: &[
                "net_name",
                "expected text without NUL bytes",
                "got \"ib\\0\"",
            ],
            run: || err(Config::new().net_name("ib\0").to_raw()),
        },
        Row {
            area: "core",
            call: "Config::to_raw",
            input: "comm_name with a NUL byte",
            expect: &[
                "comm_name",
                "expected text without NUL bytes",
                "got \"a\\0b\"",
            ],
            run: || err(Config::new().comm_name("a\0b").to_raw()),
        },
        Row {
            area: "core",
            call: "UniqueId::from_str",
            input: "10 hex digits",
            expect: &["expected 256 hex digits", "got 10 characters"],
            run: || err("0123456789".parse::<UniqueId>()),
        },
        Row {
            area: "core",
            call: "UniqueId::from_str",
            input: "256 characters, 'g' at position 3",
            expect: &["expected 256 hex digits", "got 'g' at position 3"],
            run: || err(format!("abcg{}", "0".repeat(252)).parse::<UniqueId>()),
        },
        Row {
            area: "core",
            call: "UniqueId::try_from_slice",
            input: "127 bytes",
            expect: &["expected 128 bytes", "got 127 bytes"],
            run: || err(UniqueId::try_from_slice(&[0; 127])),
        },
        Row {
            area: "core",
            call: "scalar_bytes",
            input: "NaN for float32",
            expect: &["expected a finite number for float", "got NaN"],
            run: || err(scalar_bytes(F32, f64::NAN)),
        },
        Row {
            area: "core",
            call: "scalar_bytes",
            input: "1.5 for int32",
            expect: &["expected an integer that fits i32 for int32", "got 1.5"],
            run: || err(scalar_bytes(DataType::Int32, 1.5)),
        },
        Row {
            area: "core",
            call: "scalar_bytes",
            input: "300 for uint8",
            expect: &["expected an integer that fits u8 for uint8", "got 300"],
            run: || err(scalar_bytes(DataType::Uint8, 300.0)),
        },
        Row {
            area: "core",
            call: "scalar_bytes",
            input: "1e40 for float32",
            expect: &[
                "expected a number within the type's range for float",
                "got 1",
            ],
            run: || err(scalar_bytes(F32, 1e40)),
        },
        Row {
            area: "core",
            call: "nccl_sys::load_first(&candidates(NCCL_LIBRARY))",
            input: "NCCL_LIBRARY=/nonexistent/libnccl.so.2",
            expect: &[MISSING_LIBRARY, "NCCL_LIBRARY", "libnccl.so.2"],
            run: || {
                let env = OsString::from(MISSING_LIBRARY);
                err(nccl_sys::load_first(&nccl_sys::candidates(Some(&env))))
            },
        },
        // ----------------------------------------------------------------
        // nccl_group: keys, membership, stores.
        // ----------------------------------------------------------------
        Row {
            area: "group",
            call: "DeviceList::new",
            input: "no devices",
            expect: &["device list", "expected 1 to 16 tensors", "got 0"],
            run: || err(DeviceList::new(std::iter::empty())),
        },
        Row {
            area: "group",
            call: "DeviceList::new",
            input: "17 devices",
            expect: &["device list", "expected 1 to 16 tensors", "got 17"],
            run: || err(DeviceList::new(0..17)),
        },
        Row {
            area: "group",
            call: "DeviceList::new",
            input: "devices [0, 1, 0]",
            expect: &[
                "expected one tensor per device",
                "got two tensors on device 0",
            ],
            run: || err(DeviceList::new([0, 1, 0].into_iter())),
        },
        Row {
            area: "group",
            call: "DeviceList::one",
            input: "ordinal 70000",
            expect: &["expected device ordinals up to 65535", "got 70000"],
            run: || err(DeviceList::one(70_000)),
        },
        Row {
            area: "group",
            call: "Membership::join",
            input: "rank 4 of world size 4",
            expect: &["invalid rank", "expected 0..4", "got 4"],
            run: || join(4, 4),
        },
        Row {
            area: "group",
            call: "Membership::join",
            input: "world size 0",
            expect: &["invalid rank", "expected 0..0", "got 0"],
            run: || join(0, 0),
        },
        Row {
            area: "group",
            call: "PrefixStore::new",
            input: "empty prefix",
            expect: &["store prefix", "expected a non-empty name without '/'"],
            run: || err(PrefixStore::new(InProcessStore::new(), "")),
        },
        Row {
            area: "group",
            call: "PrefixStore::new",
            input: "prefix \"a/b\"",
            expect: &[
                "store prefix \"a/b\"",
                "expected a non-empty name without '/'",
            ],
            run: || err(PrefixStore::new(InProcessStore::new(), "a/b")),
        },
        Row {
            area: "group",
            call: "RendezvousConfig::new",
            input: "world size 0",
            expect: &["world_size 0", "positive integer"],
            run: || {
                err(RendezvousConfig::new(
                    0,
                    0,
                    StoreSpec::File {
                        dir: "/tmp/store".into(),
                    },
                ))
            },
        },
        Row {
            area: "group",
            call: "RendezvousConfig::new",
            input: "rank 2 of world size 2",
            expect: &["rank 2", "below world_size 2"],
            run: || {
                err(RendezvousConfig::new(
                    2,
                    2,
                    StoreSpec::File {
                        dir: "/tmp/store".into(),
                    },
                ))
            },
        },
        // ----------------------------------------------------------------
        // Launch environment (RendezvousConfig::from_env reads these through
        // from_vars; the base is RANK=1 WORLD_SIZE=4 MASTER_ADDR=node0
        // MASTER_PORT=29500).
        // ----------------------------------------------------------------
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE unset (nor SLURM_NTASKS)",
            expect: &["WORLD_SIZE is not set", "number of processes"],
            run: || launch(&[("WORLD_SIZE", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=abc",
            expect: &["WORLD_SIZE=\"abc\"", "positive integer"],
            run: || launch(&[("WORLD_SIZE", Some("abc"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "WORLD_SIZE=0",
            expect: &["WORLD_SIZE=\"0\"", "positive integer"],
            run: || launch(&[("WORLD_SIZE", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_NTASKS=-2 (WORLD_SIZE unset)",
            expect: &["SLURM_NTASKS=\"-2\"", "positive integer"],
            run: || launch(&[("WORLD_SIZE", None), ("SLURM_NTASKS", Some("-2"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK unset (nor SLURM_PROCID)",
            expect: &["RANK is not set", "0 <= RANK < WORLD_SIZE"],
            run: || launch(&[("RANK", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK=-1",
            expect: &["RANK=\"-1\"", "non-negative integer"],
            run: || launch(&[("RANK", Some("-1"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "RANK=4 with WORLD_SIZE=4",
            expect: &["RANK=4", "below WORLD_SIZE=4"],
            run: || launch(&[("RANK", Some("4"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_PROCID=x (RANK unset)",
            expect: &["SLURM_PROCID=\"x\"", "non-negative integer"],
            run: || launch(&[("RANK", None), ("SLURM_PROCID", Some("x"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_RANK=one",
            expect: &["LOCAL_RANK=\"one\"", "non-negative integer"],
            run: || launch(&[("LOCAL_RANK", Some("one"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "LOCAL_RANK=4 with WORLD_SIZE=4",
            expect: &["LOCAL_RANK=4", "below WORLD_SIZE=4"],
            run: || launch(&[("LOCAL_RANK", Some("4"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "SLURM_LOCALID=9 (LOCAL_RANK unset)",
            expect: &["SLURM_LOCALID=9", "below WORLD_SIZE=4"],
            run: || launch(&[("SLURM_LOCALID", Some("9"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE=redis",
            expect: &["NCCL_RS_STORE=\"redis\"", "\"file:<directory>\""],
            run: || launch(&[("NCCL_RS_STORE", Some("redis"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE=file: (no directory)",
            expect: &["NCCL_RS_STORE=\"file:\"", "\"file:<directory>\""],
            run: || launch(&[("NCCL_RS_STORE", Some("file:"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_TIMEOUT_SECS=0",
            expect: &[
                "NCCL_RS_STORE_TIMEOUT_SECS=\"0\"",
                "positive whole number of seconds",
            ],
            run: || launch(&[("NCCL_RS_STORE_TIMEOUT_SECS", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_TIMEOUT_SECS=1.5",
            expect: &[
                "NCCL_RS_STORE_TIMEOUT_SECS=\"1.5\"",
                "positive whole number of seconds",
            ],
            run: || launch(&[("NCCL_RS_STORE_TIMEOUT_SECS", Some("1.5"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "NCCL_RS_STORE_SECRET= (empty)",
            expect: &["NCCL_RS_STORE_SECRET is set but empty", "non-empty secret"],
            run: || launch(&[("NCCL_RS_STORE_SECRET", Some(""))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_ADDR unset (TCP store)",
            expect: &["MASTER_ADDR is not set", "host name or IP address"],
            run: || launch(&[("MASTER_ADDR", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_ADDR=\"node 0\"",
            expect: &["MASTER_ADDR=\"node 0\"", "host name or IP address"],
            run: || launch(&[("MASTER_ADDR", Some("node 0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_ADDR=[] (empty brackets)",
            expect: &["MASTER_ADDR=\"[]\"", "host name or IP address"],
            run: || launch(&[("MASTER_ADDR", Some("[]"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_PORT unset (TCP store)",
            expect: &["MASTER_PORT is not set", "1-65535"],
            run: || launch(&[("MASTER_PORT", None)]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_PORT=0",
            expect: &["MASTER_PORT=\"0\"", "TCP port number (1-65535)"],
            run: || launch(&[("MASTER_PORT", Some("0"))]),
        },
        Row {
            area: "env",
            call: "RendezvousConfig::from_vars",
            input: "MASTER_PORT=70000",
            expect: &["MASTER_PORT=\"70000\"", "TCP port number (1-65535)"],
            run: || launch(&[("MASTER_PORT", Some("70000"))]),
        },
    ]
}

/// A table cell holding `text` as inline code, with `|` escaped and a
/// longer fence when the text itself holds backticks.
fn code_cell(text: &str) -> String {
    let text = text.replace('\n', " ").replace('|', "\\|");
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// A plain table cell, with `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The Markdown document for `rows` and their messages.
fn markdown(rows: &[Row], messages: &[String]) -> String {
    let mut areas: Vec<(&str, usize)> = Vec::new();
    for row in rows {
        match areas.last_mut() {
            Some((area, count)) if *area == row.area => *count += 1,
            _ => areas.push((row.area, 1)),
        }
    }
    let summary = areas
        .iter()
        .map(|(area, count)| format!("{area} {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = String::new();
    out.push_str("# Bad inputs and their errors\n\n");
    out.push_str(
        "Generated by `nccl-group/tests/bad_inputs.rs`; do not edit by hand. Regenerate with\n\
         `NCCL_UPDATE_BAD_INPUTS=1 cargo test -p nccl-group --test bad_inputs`.\n\n",
    );
    out.push_str(&format!(
        "Every row is one bad call, run on the CPU, and the exact message it returns; \
         the test checks that each message names what was expected and what was given.\n\
         {} rows: {summary}.\n\n",
        rows.len()
    ));
    out.push_str("| Area | Call | Bad input | Error |\n|---|---|---|---|\n");
    for (row, message) in rows.iter().zip(messages) {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            cell(row.area),
            row.call.replace('|', "\\|"),
            cell(row.input),
            code_cell(message)
        ));
    }
    out
}

#[test]
fn every_bad_input_gets_an_error_naming_expected_and_given() {
    let rows = rows();
    let mut failures = Vec::new();
    let mut messages = Vec::with_capacity(rows.len());
    for row in &rows {
        let message = (row.run)();
        if row.expect.len() < 2 {
            failures.push(format!(
                "{} / {} / {}: a row must expect at least two substrings (what was expected and what was given)",
                row.area, row.call, row.input
            ));
        }
        let missing: Vec<&str> = row
            .expect
            .iter()
            .copied()
            .filter(|want| !message.contains(want))
            .collect();
        if !missing.is_empty() {
            failures.push(format!(
                "{} / {} / {}:\n    message: {message}\n    missing: {missing:?}",
                row.area, row.call, row.input
            ));
        }
        messages.push(message);
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad-input rows are wrong:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DOC);
    let expected = markdown(&rows, &messages);
    if std::env::var_os(UPDATE_VAR).is_some_and(|v| v == "1") {
        std::fs::write(&path, &expected).unwrap_or_else(|e| panic!("writing {DOC}: {e}"));
        return;
    }
    if std::env::var_os(nccl_sys::NCCL_LIBRARY_ENV).is_some_and(|v| !v.is_empty()) {
        // The loader's message then names the real NCCL_LIBRARY value, so the
        // committed table (written without it) cannot match; rows are still
        // checked above.
        eprintln!("NCCL_LIBRARY is set: not comparing {DOC}");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{DOC} is out of date with the bad-input table (or missing); regenerate it with\n    \
         NCCL_UPDATE_BAD_INPUTS=1 cargo test -p nccl-group --test bad_inputs\nand commit the result. \
         First differing line: {:?}",
        committed
            .lines()
            .zip(expected.lines())
            .find(|(a, b)| a != b)
            .map_or_else(
                || format!(
                    "(line counts differ: {} vs {})",
                    committed.lines().count(),
                    expected.lines().count()
                ),
                |(a, b)| format!("committed {a:?}, expected {b:?}")
            )
    );
}
