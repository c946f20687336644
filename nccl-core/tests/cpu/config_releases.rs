//! CPU tests of which NCCL release knows each `Config` option, and of the
//! `ncclConfig_t` layout an older library reads. No NCCL and no GPU needed.

use std::mem::offset_of;

use nccl_core::nccl_sys::{NCCL_VERSION_CODE, PINNED_HEADER_VERSION, ncclConfig_t};
use nccl_core::{
    Config, CtaPolicy, Error, ErrorKind, GraphUsageMode, HostCftMode, NvlsHostMode, Version,
};
use nccl_test_support::config::every_option;

/// The release just before `release`.
fn just_before(release: Version) -> Version {
    match release.patch {
        0 => Version::new(release.major, release.minor - 1, 99),
        patch => Version::new(release.major, release.minor, patch - 1),
    }
}

fn assert_unsupported(error: Error, method: &str, field: &str, needed: Version, loaded: Version) {
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    let message = error.to_string();
    assert_eq!(
        message,
        format!(
            "Config::{method} (ncclConfig_t's {field}) needs NCCL {needed} or newer, but the \
             loaded libnccl is {loaded}; load a newer libnccl (set NCCL_LIBRARY to its full path)"
        )
    );
    match error {
        Error::Unsupported {
            needed: n,
            loaded: l,
            ..
        } => assert_eq!((n, l), (needed, loaded)),
        other => panic!("expected Error::Unsupported, got {other:?}"),
    }
}

#[test]
fn every_option_needs_the_release_that_introduced_its_field() {
    for (config, method, field, release) in every_option() {
        assert!(
            config.check_release(release).is_ok(),
            "{method} on {release}"
        );
        assert!(config.to_raw_for(release).is_ok(), "{method} on {release}");
        let older = just_before(release);
        assert_unsupported(
            config.check_release(older).unwrap_err(),
            method,
            field,
            release,
            older,
        );
        assert_unsupported(
            config.to_raw_for(older).unwrap_err(),
            method,
            field,
            release,
            older,
        );
    }
}

#[test]
fn the_pinned_header_knows_every_option() {
    let all = every_option();
    assert!(
        all.iter()
            .all(|(_, _, _, release)| *release <= PINNED_HEADER_VERSION)
    );
    let everything = Config::new()
        .with_blocking(true)
        .with_cga_cluster_size(1)
        .with_ctas(1, 2)
        .with_net_name("Socket")
        .with_split_share(false)
        .with_traffic_class(0)
        .with_comm_name("all")
        .with_collnet(false)
        .with_cta_policy(CtaPolicy::Default)
        .with_shrink_share(false)
        .with_nvls_ctas(1)
        .with_channels_per_net_peer(1)
        .with_nvlink_centric_sched(false)
        .with_graph_usage_mode(GraphUsageMode::Mixed)
        .with_rma_ctxs(1)
        .with_max_p2p_peers(1)
        .with_graph_stream_ordering(false)
        .with_launch_order_implicit(false)
        .with_rma_signals(1)
        .with_rma_eager_init(false)
        .with_host_cft_mode(HostCftMode::Disable)
        .with_nvls_host_mode(NvlsHostMode::Enable);
    assert!(everything.check_release(PINNED_HEADER_VERSION).is_ok());
    let raw_config = everything.to_raw().unwrap();
    let raw = raw_config.as_raw();
    assert_eq!(
        (
            raw.graphUsageMode,
            raw.numRmaCtx,
            raw.numRmaSig,
            raw.rmaEagerInit,
            raw.hostCftMode
        ),
        (2, 1, 1, 0, 2)
    );
    // An option left unset stays NCCL_CONFIG_UNDEF_INT.
    let unset = Config::new().to_raw().unwrap();
    assert_eq!(unset.as_raw().graphUsageMode, i32::MIN);
    assert_eq!(unset.as_raw().hostCftMode, i32::MIN);
    // The newest option decides.
    assert_unsupported(
        everything
            .check_release(Version::new(2, 31, 2))
            .unwrap_err(),
        "with_nvls_host_mode",
        "nvlsHostMode",
        Version::new(2, 32, 3),
        Version::new(2, 31, 2),
    );
}

#[test]
fn the_first_option_an_old_release_lacks_is_named() {
    let config = Config::new()
        .with_comm_name("dp")
        .with_max_p2p_peers(2)
        .with_nvls_host_mode(NvlsHostMode::Enable);
    let old = Version::new(2, 26, 6);
    assert_unsupported(
        config.check_release(old).unwrap_err(),
        "with_comm_name",
        "commName",
        Version::new(2, 27, 3),
        old,
    );
}

#[test]
fn a_config_with_only_old_options_suits_every_release_since_them() {
    let config = Config::new()
        .with_blocking(false)
        .with_ctas(2, 8)
        .with_net_name("IB");
    for release in [
        Version::new(2, 19, 3),
        Version::new(2, 28, 3),
        Version::new(2, 32, 3),
        Version::new(3, 0, 0),
    ] {
        let raw_config = config.to_raw_for(release).unwrap();
        let raw = raw_config.as_raw();
        assert_eq!((raw.blocking, raw.minCTAs, raw.maxCTAs), (0, 2, 8));
        // The struct and version of the pinned header, whatever the
        // release: NCCL reads `min(size, its own size)` bytes and ignores a
        // newer version (see nccl-core/src/config/raw.rs).
        assert_eq!(raw.size, std::mem::size_of::<ncclConfig_t>());
        assert_eq!(raw.version, NCCL_VERSION_CODE);
    }
    let empty = Config::new();
    assert!(empty.check_release(Version::new(2, 14, 3)).is_ok());
}

#[test]
fn validation_comes_before_the_release_check() {
    let config = Config::new()
        .with_cga_cluster_size(9)
        .with_nvls_host_mode(NvlsHostMode::Enable);
    let error = config.to_raw_for(Version::new(2, 28, 3)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
}

/// The fields of `ncclConfig_t` as each release lays them out: the struct
/// only grows at its end, so an older library that copies its own
/// `sizeof(ncclConfig_t)` bytes of ours finds each of its fields where it
/// expects it. The offsets are those of bindgen's layout tests for 2.28.3
/// (80 bytes), 2.30.7 (96), 2.31.2 (112) and 2.32.3 (120).
#[test]
fn the_struct_keeps_every_older_release_s_layout() {
    let fields = [
        (offset_of!(ncclConfig_t, size), 0),
        (offset_of!(ncclConfig_t, magic), 8),
        (offset_of!(ncclConfig_t, version), 12),
        (offset_of!(ncclConfig_t, blocking), 16),
        (offset_of!(ncclConfig_t, cgaClusterSize), 20),
        (offset_of!(ncclConfig_t, minCTAs), 24),
        (offset_of!(ncclConfig_t, maxCTAs), 28),
        (offset_of!(ncclConfig_t, netName), 32),
        (offset_of!(ncclConfig_t, splitShare), 40),
        (offset_of!(ncclConfig_t, trafficClass), 44),
        (offset_of!(ncclConfig_t, commName), 48),
        (offset_of!(ncclConfig_t, collnetEnable), 56),
        (offset_of!(ncclConfig_t, CTAPolicy), 60),
        (offset_of!(ncclConfig_t, shrinkShare), 64),
        (offset_of!(ncclConfig_t, nvlsCTAs), 68),
        (offset_of!(ncclConfig_t, nChannelsPerNetPeer), 72),
        (offset_of!(ncclConfig_t, nvlinkCentricSched), 76),
        // 2.28.3 ends here (80 bytes).
        (offset_of!(ncclConfig_t, graphUsageMode), 80),
        (offset_of!(ncclConfig_t, numRmaCtx), 84),
        (offset_of!(ncclConfig_t, maxP2pPeers), 88),
        (offset_of!(ncclConfig_t, graphStreamOrdering), 92),
        // 2.30.7 ends here (96 bytes).
        (offset_of!(ncclConfig_t, launchOrderImplicit), 96),
        (offset_of!(ncclConfig_t, numRmaSig), 100),
        (offset_of!(ncclConfig_t, rmaEagerInit), 104),
        (offset_of!(ncclConfig_t, hostCftMode), 108),
        // 2.31.2 ends here (112 bytes).
        (offset_of!(ncclConfig_t, nvlsHostMode), 112),
    ];
    for (index, (offset, expected)) in fields.into_iter().enumerate() {
        assert_eq!(offset, expected, "field {index}");
    }
    assert_eq!(std::mem::size_of::<ncclConfig_t>(), 120);
}
