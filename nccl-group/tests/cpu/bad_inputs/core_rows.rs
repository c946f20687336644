//! The bad-input rows of nccl-core: `Config`, `UniqueId`, `scalar_bytes`
//! and the library loader.

use std::ffi::OsString;
use std::time::Duration;

use nccl_core::nccl_sys;
use nccl_core::{Config, DataType, UniqueId, scalar_bytes};

use super::{F32, Row, err};

/// A library path that does not exist, as `NCCL_LIBRARY` might name it.
const MISSING_LIBRARY: &str = "/nonexistent/libnccl.so.2";

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    vec![
        // ----------------------------------------------------------------
        // nccl_core.
        // ----------------------------------------------------------------
        Row {
            area: "core",
            call: "Config::validate",
            input: "with_cga_cluster_size(9)",
            expect: &["cga_cluster_size", "expected 0 to 8", "got 9"],
            run: || err(Config::new().with_cga_cluster_size(9).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "with_cga_cluster_size(-1)",
            expect: &["cga_cluster_size", "expected 0 to 8", "got -1"],
            run: || err(Config::new().with_cga_cluster_size(-1).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "with_ctas(0, 4)",
            expect: &["min_ctas", "expected at least 1", "got 0"],
            run: || err(Config::new().with_ctas(0, 4).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "with_ctas(4, 2)",
            expect: &["max_ctas", "expected at least min_ctas", "got 2 < 4"],
            run: || err(Config::new().with_ctas(4, 2).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "with_timeout(0s)",
            expect: &["timeout", "expected a positive duration", "got 0s"],
            run: || err(Config::new().with_timeout(Duration::ZERO).validate()),
        },
        Row {
            area: "core",
            call: "Config::validate",
            input: "with_rma_ctxs(-1)",
            expect: &["rma_ctxs", "expected at least 0", "got -1"],
            run: || err(Config::new().with_rma_ctxs(-1).validate()),
        },
        Row {
            area: "core",
            call: "Config::to_raw_for(2.28.3)",
            input: "with_max_p2p_peers(2)",
            expect: &[
                "Config::with_max_p2p_peers (ncclConfig_t's maxP2pPeers)",
                "needs NCCL 2.30.3",
                "loaded libnccl is 2.28.3",
            ],
            run: || {
                err(Config::new()
                    .with_max_p2p_peers(2)
                    .to_raw_for(nccl_core::Version::new(2, 28, 3)))
            },
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
            run: || err(Config::new().with_net_name("ib\0").to_raw()),
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
            run: || err(Config::new().with_comm_name("a\0b").to_raw()),
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
    ]
}
