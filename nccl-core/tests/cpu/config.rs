//! CPU tests of the `Config` builder and the `ncclConfig_t` it fills in.
//! No NCCL and no GPU needed.

use std::ffi::{CStr, c_char};
use std::fmt::Debug;
use std::time::Duration;

use nccl_test_support::assert_invalid;

use nccl_core::nccl_sys::{NCCL_API_MAGIC, NCCL_VERSION_CODE, ncclConfig_t};
use nccl_core::{Config, CtaPolicy, DEFAULT_TIMEOUT, GraphUsageMode, HostCftMode, NvlsHostMode};

/// `NCCL_CONFIG_UNDEF_INT`.
const UNDEF: i32 = i32::MIN;

/// Reads a string the raw config points to; `None` for NULL.
fn c_text(pointer: *const c_char) -> Option<String> {
    if pointer.is_null() {
        return None;
    }
    // SAFETY: every non-null pointer passed here comes from a `RawConfig`
    // that is still alive in the caller, which owns the NUL-terminated
    // `CString` it points to.
    let text = unsafe { CStr::from_ptr(pointer) };
    Some(text.to_str().expect("config strings are UTF-8").to_string())
}

/// Asserts both `validate` and `to_raw` reject `config` the same way.
fn assert_rejected(config: &Config, argument: &str, expected: &str, given: &str) {
    assert_invalid(config.validate().unwrap_err(), argument, expected, given);
    assert_invalid(config.to_raw().unwrap_err(), argument, expected, given);
}

#[test]
fn defaults() {
    let config = Config::new();
    assert!(config.is_blocking());
    assert_eq!(config.blocking_option(), None);
    assert_eq!(config.wait_timeout(), DEFAULT_TIMEOUT);
    assert_eq!(DEFAULT_TIMEOUT, Duration::from_secs(600));
    assert_eq!(Config::default(), config);
    assert!(config.validate().is_ok());
}

#[test]
fn builder_getters() {
    let config = Config::new()
        .with_blocking(false)
        .with_timeout(Duration::from_millis(250));
    assert!(!config.is_blocking());
    assert_eq!(config.blocking_option(), Some(false));
    assert_eq!(config.wait_timeout(), Duration::from_millis(250));
    let config = Config::new().with_blocking(true);
    assert!(config.is_blocking());
    assert_eq!(config.blocking_option(), Some(true));
    assert_ne!(config, Config::new());
}

#[test]
fn default_raw_config_leaves_everything_to_nccl() {
    let raw_config = Config::new().to_raw().unwrap();
    let raw = raw_config.as_raw();
    assert_eq!(raw.size, std::mem::size_of::<ncclConfig_t>());
    assert_eq!(raw.magic, 0xcafe_beef);
    assert_eq!(raw.magic, NCCL_API_MAGIC);
    assert_eq!(raw.version, NCCL_VERSION_CODE);
    // Each field with its name, written once.
    macro_rules! named {
        ($($field:ident),*) => {
            [$((stringify!($field), raw.$field)),*]
        };
    }
    for (field, value) in named![
        blocking,
        cgaClusterSize,
        minCTAs,
        maxCTAs,
        splitShare,
        trafficClass,
        collnetEnable,
        CTAPolicy,
        shrinkShare,
        nvlsCTAs,
        nChannelsPerNetPeer,
        nvlinkCentricSched,
        graphUsageMode,
        numRmaCtx,
        maxP2pPeers,
        graphStreamOrdering,
        launchOrderImplicit,
        numRmaSig,
        rmaEagerInit,
        hostCftMode,
        nvlsHostMode
    ] {
        assert_eq!(value, UNDEF, "{field}");
    }
    assert!(raw.netName.is_null());
    assert!(raw.commName.is_null());
}

#[test]
fn raw_config_carries_every_option() {
    let config = Config::new()
        .with_blocking(false)
        .with_cga_cluster_size(4)
        .with_ctas(2, 32)
        .with_net_name("Socket")
        .with_split_share(true)
        .with_comm_name("trainer.dp");
    let raw_config = config.to_raw().unwrap();
    let raw = raw_config.as_raw();
    assert_eq!(raw.size, std::mem::size_of::<ncclConfig_t>());
    assert_eq!(raw.magic, 0xcafe_beef);
    assert_eq!(raw.version, NCCL_VERSION_CODE);
    assert_eq!(raw.blocking, 0);
    assert_eq!(raw.cgaClusterSize, 4);
    assert_eq!(raw.minCTAs, 2);
    assert_eq!(raw.maxCTAs, 32);
    assert_eq!(raw.splitShare, 1);
    assert_eq!(c_text(raw.netName).as_deref(), Some("Socket"));
    assert_eq!(c_text(raw.commName).as_deref(), Some("trainer.dp"));
    // Options not set stay undefined.
    assert_eq!(raw.trafficClass, UNDEF);
    assert_eq!(raw.collnetEnable, UNDEF);
    assert_eq!(raw.CTAPolicy, UNDEF);
    assert_eq!(raw.shrinkShare, UNDEF);
    assert_eq!(raw.nvlsCTAs, UNDEF);
    assert_eq!(raw.nChannelsPerNetPeer, UNDEF);
    assert_eq!(raw.nvlinkCentricSched, UNDEF);
    assert_eq!(raw.nvlsHostMode, UNDEF);
}

#[test]
fn raw_config_carries_every_newer_option() {
    let config = Config::new()
        .with_traffic_class(3)
        .with_collnet(true)
        .with_cta_policy(CtaPolicy::Zero)
        .with_shrink_share(false)
        .with_nvls_ctas(16)
        .with_channels_per_net_peer(4)
        .with_nvlink_centric_sched(true)
        .with_max_p2p_peers(8)
        .with_graph_stream_ordering(false)
        .with_launch_order_implicit(true)
        .with_nvls_host_mode(NvlsHostMode::Disable);
    let raw_config = config.to_raw().unwrap();
    let raw = raw_config.as_raw();
    assert_eq!(raw.trafficClass, 3);
    assert_eq!(raw.collnetEnable, 1);
    assert_eq!(raw.CTAPolicy, 2);
    assert_eq!(raw.shrinkShare, 0);
    assert_eq!(raw.nvlsCTAs, 16);
    assert_eq!(raw.nChannelsPerNetPeer, 4);
    assert_eq!(raw.nvlinkCentricSched, 1);
    assert_eq!(raw.maxP2pPeers, 8);
    assert_eq!(raw.graphStreamOrdering, 0);
    assert_eq!(raw.launchOrderImplicit, 1);
    assert_eq!(raw.nvlsHostMode, i32::MAX);
    // What no builder method sets stays NCCL's.
    for value in [
        raw.blocking,
        raw.graphUsageMode,
        raw.numRmaCtx,
        raw.numRmaSig,
        raw.rmaEagerInit,
        raw.hostCftMode,
    ] {
        assert_eq!(value, UNDEF);
    }
}

#[test]
fn flags_map_to_zero_and_one() {
    // (blocking, split_share) and the raw values each must become.
    for (blocking, split_share, raw) in [(true, false, (1, 0)), (false, true, (0, 1))] {
        let raw_config = Config::new()
            .with_blocking(blocking)
            .with_split_share(split_share)
            .to_raw()
            .unwrap();
        assert_eq!(
            (raw_config.as_raw().blocking, raw_config.as_raw().splitShare),
            raw,
            "blocking {blocking}, split_share {split_share}"
        );
    }
}

#[test]
fn names_survive_the_config_being_dropped_and_moved() {
    let raw_config = {
        let config = Config::new()
            .with_net_name(String::from("IB"))
            .with_comm_name("pp.stage.3");
        config.to_raw().unwrap()
    };
    // Moving the RawConfig must not invalidate the pointers it holds.
    let moved = Box::new(raw_config);
    assert_eq!(c_text(moved.as_raw().netName).as_deref(), Some("IB"));
    assert_eq!(
        c_text(moved.as_raw().commName).as_deref(),
        Some("pp.stage.3")
    );
}

#[test]
fn non_ascii_and_empty_names() {
    let raw_config = Config::new()
        .with_net_name("")
        .with_comm_name("rang-é-ü")
        .to_raw()
        .unwrap();
    let raw = raw_config.as_raw();
    assert!(!raw.netName.is_null());
    assert_eq!(c_text(raw.netName).as_deref(), Some(""));
    assert_eq!(c_text(raw.commName).as_deref(), Some("rang-é-ü"));
}

#[test]
fn as_mut_ptr_points_at_the_same_struct() {
    let mut raw_config = Config::new().with_ctas(1, 1).to_raw().unwrap();
    let shared: *const ncclConfig_t = raw_config.as_raw();
    assert_eq!(raw_config.as_mut_ptr().cast_const(), shared);
}

#[test]
fn edge_values_are_accepted() {
    for size in [0, 8] {
        let raw_config = Config::new().with_cga_cluster_size(size).to_raw().unwrap();
        assert_eq!(raw_config.as_raw().cgaClusterSize, size);
    }
    let raw_config = Config::new().with_ctas(1, 1).to_raw().unwrap();
    assert_eq!(
        (raw_config.as_raw().minCTAs, raw_config.as_raw().maxCTAs),
        (1, 1)
    );
    assert!(
        Config::new()
            .with_timeout(Duration::from_nanos(1))
            .validate()
            .is_ok()
    );
}

#[test]
fn cga_cluster_size_out_of_range_is_rejected() {
    assert_rejected(
        &Config::new().with_cga_cluster_size(9),
        "cga_cluster_size",
        "0 to 8",
        "9",
    );
    assert_rejected(
        &Config::new().with_cga_cluster_size(-1),
        "cga_cluster_size",
        "0 to 8",
        "-1",
    );
}

#[test]
fn min_ctas_below_one_is_rejected() {
    assert_rejected(
        &Config::new().with_ctas(0, 4),
        "min_ctas",
        "at least 1",
        "0",
    );
    assert_rejected(
        &Config::new().with_ctas(-3, 4),
        "min_ctas",
        "at least 1",
        "-3",
    );
}

#[test]
fn max_ctas_below_min_ctas_is_rejected() {
    assert_rejected(
        &Config::new().with_ctas(8, 4),
        "max_ctas",
        "at least min_ctas",
        "4 < 8",
    );
}

#[test]
fn zero_timeout_is_rejected() {
    assert_rejected(
        &Config::new().with_timeout(Duration::ZERO),
        "timeout",
        "a positive duration",
        "0s",
    );
}

#[test]
fn nul_inside_a_name_is_rejected_by_to_raw() {
    let config = Config::new().with_net_name("IB\0x");
    assert!(
        config.validate().is_ok(),
        "validate does not build C strings"
    );
    assert_invalid(
        config.to_raw().unwrap_err(),
        "net_name",
        "text without NUL bytes",
        "\"IB\\0x\"",
    );
    let config = Config::new().with_comm_name("a\0");
    assert_invalid(
        config.to_raw().unwrap_err(),
        "comm_name",
        "text without NUL bytes",
        "\"a\\0\"",
    );
}

#[test]
fn newer_options_out_of_range_are_rejected() {
    let cases = [
        (
            Config::new().with_traffic_class(-1),
            "traffic_class",
            "at least 0",
            "-1",
        ),
        (
            Config::new().with_nvls_ctas(0),
            "nvls_ctas",
            "at least 1",
            "0",
        ),
        (
            Config::new().with_channels_per_net_peer(0),
            "channels_per_net_peer",
            "at least 1",
            "0",
        ),
        (
            Config::new().with_max_p2p_peers(-2),
            "max_p2p_peers",
            "at least 1",
            "-2",
        ),
        (
            Config::new().with_rma_ctxs(-1),
            "rma_ctxs",
            "at least 0",
            "-1",
        ),
    ];
    for (config, argument, expected, given) in cases {
        assert_rejected(&config, argument, expected, given);
    }
    assert!(
        Config::new()
            .with_traffic_class(0)
            .with_cta_policy(CtaPolicy::EfficiencyAndZero)
            .validate()
            .is_ok()
    );
}

/// Asserts that each `(value, raw)` row, set on a new config with `set`,
/// becomes `raw` in the `ncclConfig_t` field that `field` reads.
#[track_caller]
fn assert_raw_values<V: Copy + Debug, R: PartialEq + Debug>(
    rows: &[(V, R)],
    set: fn(Config, V) -> Config,
    field: fn(&ncclConfig_t) -> R,
) {
    for (value, raw) in rows {
        let config = set(Config::new(), *value);
        assert_eq!(&field(config.to_raw().unwrap().as_raw()), raw, "{value:?}");
    }
}

#[test]
fn named_values_become_the_ints_nccl_defines() {
    use nccl_core::nccl_sys::{ncclHostCftMode_t as Cft, ncclNvlsHostMode_t as Nvls};
    let cta = [
        (CtaPolicy::Default, 0),
        (CtaPolicy::Efficiency, 1),
        (CtaPolicy::Zero, 2),
        (CtaPolicy::EfficiencyAndZero, 3),
    ];
    for (policy, raw) in cta {
        assert_eq!(policy.raw(), raw, "{policy:?}");
    }
    assert_raw_values(&cta, Config::with_cta_policy, |raw| raw.CTAPolicy);
    assert_raw_values(
        &[
            (GraphUsageMode::NoGraphs, 0),
            (GraphUsageMode::OneGraph, 1),
            (GraphUsageMode::Mixed, 2),
        ],
        Config::with_graph_usage_mode,
        |raw| raw.graphUsageMode,
    );
    assert_raw_values(
        &[
            (HostCftMode::Enable, Cft::ncclHostCftEnable.0),
            (HostCftMode::Disable, Cft::ncclHostCftDisable.0),
            (HostCftMode::Fallback, Cft::ncclHostCftFallback.0),
        ],
        Config::with_host_cft_mode,
        |raw| raw.hostCftMode,
    );
    assert_raw_values(
        &[
            (NvlsHostMode::Enable, 0),
            (NvlsHostMode::DisableTransport, 1),
            (NvlsHostMode::DisableSymmetricMultimem, 2),
            (NvlsHostMode::DisableTransportAndSymmetricMultimem, 3),
            (NvlsHostMode::Disable, Nvls::ncclNvlsHostModeDisable.0),
        ],
        Config::with_nvls_host_mode,
        |raw| raw.nvlsHostMode,
    );
    assert_raw_values(
        &[(false, 0), (true, 1)],
        Config::with_rma_eager_init,
        |raw| raw.rmaEagerInit,
    );
}

#[test]
fn the_first_invalid_option_is_reported() {
    let config = Config::new()
        .with_cga_cluster_size(9)
        .with_ctas(0, 4)
        .with_timeout(Duration::ZERO);
    assert_rejected(&config, "cga_cluster_size", "0 to 8", "9");
}
