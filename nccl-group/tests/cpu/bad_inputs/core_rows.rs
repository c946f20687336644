//! The bad-input rows of nccl-core: `Config`, `UniqueId`, `scalar_bytes`
//! and the library loader.

use std::ffi::OsString;
use std::time::Duration;

use nccl_core::nccl_sys;
use nccl_core::{Config, DataType, UniqueId, scalar_bytes};

use super::{F32, Row, calls, err};

/// A library path that does not exist, as `NCCL_LIBRARY` might name it.
const MISSING_LIBRARY: &str = "/nonexistent/libnccl.so.2";

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    [
        // ----------------------------------------------------------------
        // nccl_core.
        // ----------------------------------------------------------------
        calls(
            "core",
            "Config::validate",
            &[
                (
                    "with_cga_cluster_size(9)",
                    &["cga_cluster_size", "expected 0 to 8", "got 9"],
                    || err(Config::new().with_cga_cluster_size(9).validate()),
                ),
                (
                    "with_cga_cluster_size(-1)",
                    &["cga_cluster_size", "expected 0 to 8", "got -1"],
                    || err(Config::new().with_cga_cluster_size(-1).validate()),
                ),
                (
                    "with_ctas(0, 4)",
                    &["min_ctas", "expected at least 1", "got 0"],
                    || err(Config::new().with_ctas(0, 4).validate()),
                ),
                (
                    "with_ctas(4, 2)",
                    &["max_ctas", "expected at least min_ctas", "got 2 < 4"],
                    || err(Config::new().with_ctas(4, 2).validate()),
                ),
                (
                    "with_timeout(0s)",
                    &["timeout", "expected a positive duration", "got 0s"],
                    || err(Config::new().with_timeout(Duration::ZERO).validate()),
                ),
                (
                    "with_rma_ctxs(-1)",
                    &["rma_ctxs", "expected at least 0", "got -1"],
                    || err(Config::new().with_rma_ctxs(-1).validate()),
                ),
            ],
        ),
        calls(
            "core",
            "Config::to_raw_for(2.28.3)",
            &[(
                "with_max_p2p_peers(2)",
                &[
                    "Config::with_max_p2p_peers (ncclConfig_t's maxP2pPeers)",
                    "needs NCCL 2.30.3",
                    "loaded libnccl is 2.28.3",
                ],
                || {
                    err(Config::new()
                        .with_max_p2p_peers(2)
                        .to_raw_for(nccl_core::Version::new(2, 28, 3)))
                },
            )],
        ),
        calls(
            "core",
            "Config::to_raw",
            &[
                (
                    "net_name with a NUL byte",
                    &[
                        "net_name",
                        "expected text without NUL bytes",
                        "got \"ib\\0\"",
                    ],
                    || err(Config::new().with_net_name("ib\0").to_raw()),
                ),
                (
                    "comm_name with a NUL byte",
                    &[
                        "comm_name",
                        "expected text without NUL bytes",
                        "got \"a\\0b\"",
                    ],
                    || err(Config::new().with_comm_name("a\0b").to_raw()),
                ),
            ],
        ),
        calls(
            "core",
            "UniqueId::from_str",
            &[
                (
                    "10 hex digits",
                    &["expected 256 hex digits", "got 10 characters"],
                    || err("0123456789".parse::<UniqueId>()),
                ),
                (
                    "256 characters, 'g' at position 3",
                    &["expected 256 hex digits", "got 'g' at position 3"],
                    || err(format!("abcg{}", "0".repeat(252)).parse::<UniqueId>()),
                ),
            ],
        ),
        calls(
            "core",
            "UniqueId::try_from_slice",
            &[(
                "127 bytes",
                &["expected 128 bytes", "got 127 bytes"],
                || err(UniqueId::try_from_slice(&[0; 127])),
            )],
        ),
        calls(
            "core",
            "scalar_bytes",
            &[
                (
                    "NaN for float32",
                    &["expected a finite number for float", "got NaN"],
                    || err(scalar_bytes(F32, f64::NAN)),
                ),
                (
                    "1.5 for int32",
                    &["expected an integer that fits i32 for int32", "got 1.5"],
                    || err(scalar_bytes(DataType::Int32, 1.5)),
                ),
                (
                    "300 for uint8",
                    &["expected an integer that fits u8 for uint8", "got 300"],
                    || err(scalar_bytes(DataType::Uint8, 300.0)),
                ),
                (
                    "1e40 for float32",
                    &[
                        "expected a number within the type's range for float",
                        "got 1",
                    ],
                    || err(scalar_bytes(F32, 1e40)),
                ),
            ],
        ),
        calls(
            "core",
            "nccl_sys::load_first(&candidates(NCCL_LIBRARY))",
            &[(
                "NCCL_LIBRARY=/nonexistent/libnccl.so.2",
                &[MISSING_LIBRARY, "NCCL_LIBRARY", "libnccl.so.2"],
                || {
                    let env = OsString::from(MISSING_LIBRARY);
                    err(nccl_sys::load_first(&nccl_sys::candidates(Some(&env))))
                },
            )],
        ),
    ]
    .concat()
}
