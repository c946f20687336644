//! Every option of nccl-core's `Config`, with its `ncclConfig_t` field and
//! the release that introduced it: for the CPU tests of the release checks
//! and the GPU tests that create a communicator with each option.

use nccl_core::{Config, Version};

/// Every option: a config with only it set, its builder method, its
/// `ncclConfig_t` field, and the first release whose `ncclConfig_t` has
/// the field (the first NVIDIA/nccl tag whose `nccl.h.in` declares it;
/// 2.31.2 and 2.32.3 from the wheels' headers).
pub fn every_option() -> Vec<(Config, &'static str, &'static str, Version)> {
    let v = Version::new;
    vec![
        (
            Config::new().blocking(false),
            "blocking",
            "blocking",
            v(2, 14, 3),
        ),
        (
            Config::new().cga_cluster_size(2),
            "cga_cluster_size",
            "cgaClusterSize",
            v(2, 17, 1),
        ),
        (
            Config::new().ctas(1, 2),
            "ctas",
            "minCTAs and maxCTAs",
            v(2, 17, 1),
        ),
        (
            Config::new().net_name("IB"),
            "net_name",
            "netName",
            v(2, 17, 1),
        ),
        (
            Config::new().split_share(true),
            "split_share",
            "splitShare",
            v(2, 18, 1),
        ),
        (
            Config::new().traffic_class(1),
            "traffic_class",
            "trafficClass",
            v(2, 26, 2),
        ),
        (
            Config::new().comm_name("dp"),
            "comm_name",
            "commName",
            v(2, 27, 3),
        ),
        (
            Config::new().collnet(true),
            "collnet",
            "collnetEnable",
            v(2, 27, 3),
        ),
        (
            Config::new().cta_policy(1),
            "cta_policy",
            "CTAPolicy",
            v(2, 27, 3),
        ),
        (
            Config::new().shrink_share(true),
            "shrink_share",
            "shrinkShare",
            v(2, 27, 3),
        ),
        (
            Config::new().nvls_ctas(4),
            "nvls_ctas",
            "nvlsCTAs",
            v(2, 27, 3),
        ),
        (
            Config::new().channels_per_net_peer(2),
            "channels_per_net_peer",
            "nChannelsPerNetPeer",
            v(2, 28, 3),
        ),
        (
            Config::new().nvlink_centric_sched(true),
            "nvlink_centric_sched",
            "nvlinkCentricSched",
            v(2, 28, 3),
        ),
        (
            Config::new().graph_usage_mode(1),
            "graph_usage_mode",
            "graphUsageMode",
            v(2, 29, 2),
        ),
        (
            Config::new().rma_ctxs(0),
            "rma_ctxs",
            "numRmaCtx",
            v(2, 29, 2),
        ),
        (
            Config::new().max_p2p_peers(4),
            "max_p2p_peers",
            "maxP2pPeers",
            v(2, 30, 3),
        ),
        (
            Config::new().graph_stream_ordering(true),
            "graph_stream_ordering",
            "graphStreamOrdering",
            v(2, 30, 7),
        ),
        (
            Config::new().launch_order_implicit(true),
            "launch_order_implicit",
            "launchOrderImplicit",
            v(2, 31, 2),
        ),
        (
            Config::new().rma_signals(1),
            "rma_signals",
            "numRmaSig",
            v(2, 31, 2),
        ),
        (
            Config::new().rma_eager_init(1),
            "rma_eager_init",
            "rmaEagerInit",
            v(2, 31, 2),
        ),
        (
            Config::new().host_cft_mode(0),
            "host_cft_mode",
            "hostCftMode",
            v(2, 31, 2),
        ),
        (
            Config::new().nvls_host_mode(1),
            "nvls_host_mode",
            "nvlsHostMode",
            v(2, 32, 3),
        ),
    ]
}
