//! Every option of nccl-core's `Config`, with its `ncclConfig_t` field and
//! the release that introduced it: for the CPU tests of the release checks
//! and the GPU tests that create a communicator with each option.

use nccl_core::{Config, CtaPolicy, GraphUsageMode, HostCftMode, NvlsHostMode, Version};

/// The rows of [`every_option`], one a line: `setter(arguments) => field,
/// release`, so that the builder method's name is written once.
macro_rules! option_rows {
    ($($setter:ident($($argument:expr),*) => $field:literal, $since:expr;)*) => {
        vec![$((Config::new().$setter($($argument),*), stringify!($setter), $field, $since)),*]
    };
}

/// Every option: a config with only it set, its builder method, its
/// `ncclConfig_t` field, and the first release whose `ncclConfig_t` has
/// the field (the first NVIDIA/nccl tag whose `nccl.h.in` declares it;
/// 2.31.2 and 2.32.3 from the wheels' headers).
pub fn every_option() -> Vec<(Config, &'static str, &'static str, Version)> {
    let v = Version::new;
    option_rows! {
        with_blocking(false) => "blocking", v(2, 14, 3);
        with_cga_cluster_size(2) => "cgaClusterSize", v(2, 17, 1);
        with_ctas(1, 2) => "minCTAs and maxCTAs", v(2, 17, 1);
        with_net_name("IB") => "netName", v(2, 17, 1);
        with_split_share(true) => "splitShare", v(2, 18, 1);
        with_traffic_class(1) => "trafficClass", v(2, 26, 2);
        with_comm_name("dp") => "commName", v(2, 27, 3);
        with_collnet(true) => "collnetEnable", v(2, 27, 3);
        with_cta_policy(CtaPolicy::Efficiency) => "CTAPolicy", v(2, 27, 3);
        with_shrink_share(true) => "shrinkShare", v(2, 27, 3);
        with_nvls_ctas(4) => "nvlsCTAs", v(2, 27, 3);
        with_channels_per_net_peer(2) => "nChannelsPerNetPeer", v(2, 28, 3);
        with_nvlink_centric_sched(true) => "nvlinkCentricSched", v(2, 28, 3);
        with_graph_usage_mode(GraphUsageMode::OneGraph) => "graphUsageMode", v(2, 29, 2);
        with_rma_ctxs(0) => "numRmaCtx", v(2, 29, 2);
        with_max_p2p_peers(4) => "maxP2pPeers", v(2, 30, 3);
        with_graph_stream_ordering(true) => "graphStreamOrdering", v(2, 30, 7);
        with_launch_order_implicit(true) => "launchOrderImplicit", v(2, 31, 2);
        with_rma_signals(1) => "numRmaSig", v(2, 31, 2);
        with_rma_eager_init(true) => "rmaEagerInit", v(2, 31, 2);
        with_host_cft_mode(HostCftMode::Disable) => "hostCftMode", v(2, 31, 2);
        with_nvls_host_mode(NvlsHostMode::DisableTransport) => "nvlsHostMode", v(2, 32, 3);
    }
}
