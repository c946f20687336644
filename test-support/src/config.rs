//! Every option of nccl-core's `Config`, with its `ncclConfig_t` field and
//! the release that introduced it: for the CPU tests of the release checks
//! and the GPU tests that create a communicator with each option.

use nccl_core::{Config, CtaPolicy, GraphUsageMode, HostCftMode, NvlsHostMode, Version};

/// Every option: a config with only it set, its builder method, its
/// `ncclConfig_t` field, and the first release whose `ncclConfig_t` has
/// the field (the first NVIDIA/nccl tag whose `nccl.h.in` declares it;
/// 2.31.2 and 2.32.3 from the wheels' headers).
pub fn every_option() -> Vec<(Config, &'static str, &'static str, Version)> {
    let v = Version::new;
    vec![
        (
            Config::new().with_blocking(false),
            "with_blocking",
            "blocking",
            v(2, 14, 3),
        ),
        (
            Config::new().with_cga_cluster_size(2),
            "with_cga_cluster_size",
            "cgaClusterSize",
            v(2, 17, 1),
        ),
        (
            Config::new().with_ctas(1, 2),
            "with_ctas",
            "minCTAs and maxCTAs",
            v(2, 17, 1),
        ),
        (
            Config::new().with_net_name("IB"),
            "with_net_name",
            "netName",
            v(2, 17, 1),
        ),
        (
            Config::new().with_split_share(true),
            "with_split_share",
            "splitShare",
            v(2, 18, 1),
        ),
        (
            Config::new().with_traffic_class(1),
            "with_traffic_class",
            "trafficClass",
            v(2, 26, 2),
        ),
        (
            Config::new().with_comm_name("dp"),
            "with_comm_name",
            "commName",
            v(2, 27, 3),
        ),
        (
            Config::new().with_collnet(true),
            "with_collnet",
            "collnetEnable",
            v(2, 27, 3),
        ),
        (
            Config::new().with_cta_policy(CtaPolicy::Efficiency),
            "with_cta_policy",
            "CTAPolicy",
            v(2, 27, 3),
        ),
        (
            Config::new().with_shrink_share(true),
            "with_shrink_share",
            "shrinkShare",
            v(2, 27, 3),
        ),
        (
            Config::new().with_nvls_ctas(4),
            "with_nvls_ctas",
            "nvlsCTAs",
            v(2, 27, 3),
        ),
        (
            Config::new().with_channels_per_net_peer(2),
            "with_channels_per_net_peer",
            "nChannelsPerNetPeer",
            v(2, 28, 3),
        ),
        (
            Config::new().with_nvlink_centric_sched(true),
            "with_nvlink_centric_sched",
            "nvlinkCentricSched",
            v(2, 28, 3),
        ),
        (
            Config::new().with_graph_usage_mode(GraphUsageMode::OneGraph),
            "with_graph_usage_mode",
            "graphUsageMode",
            v(2, 29, 2),
        ),
        (
            Config::new().with_rma_ctxs(0),
            "with_rma_ctxs",
            "numRmaCtx",
            v(2, 29, 2),
        ),
        (
            Config::new().with_max_p2p_peers(4),
            "with_max_p2p_peers",
            "maxP2pPeers",
            v(2, 30, 3),
        ),
        (
            Config::new().with_graph_stream_ordering(true),
            "with_graph_stream_ordering",
            "graphStreamOrdering",
            v(2, 30, 7),
        ),
        (
            Config::new().with_launch_order_implicit(true),
            "with_launch_order_implicit",
            "launchOrderImplicit",
            v(2, 31, 2),
        ),
        (
            Config::new().with_rma_signals(1),
            "with_rma_signals",
            "numRmaSig",
            v(2, 31, 2),
        ),
        (
            Config::new().with_rma_eager_init(true),
            "with_rma_eager_init",
            "rmaEagerInit",
            v(2, 31, 2),
        ),
        (
            Config::new().with_host_cft_mode(HostCftMode::Disable),
            "with_host_cft_mode",
            "hostCftMode",
            v(2, 31, 2),
        ),
        (
            Config::new().with_nvls_host_mode(NvlsHostMode::DisableTransport),
            "with_nvls_host_mode",
            "nvlsHostMode",
            v(2, 32, 3),
        ),
    ]
}
