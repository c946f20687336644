//! The `ncclConfig_t` a [`Config`] becomes, and which NCCL release knows
//! each of its options.
//!
//! How a library reads the struct (`parseCommConfig` in NCCL's
//! `src/init.cc`, the same logic from 2.14.3 to 2.30.7): it copies
//! `min(config->size, sizeof(its own ncclConfig_t))` bytes over its own
//! `NCCL_CONFIG_INITIALIZER`, refuses a wrong `magic`, and resets to its
//! default every field that a release newer than `config->version`
//! introduced. It never refuses a `size` or `version` newer than its own.
//! So the struct of the pinned header (`version` = its
//! `NCCL_VERSION_CODE`) suits every release:
//! * an older library reads the fields it knows, at the same offsets (the
//!   struct only ever grows at its end), and ignores the rest without a
//!   word: hence [`Config::check_release`], which refuses an option the
//!   loaded release does not know instead of letting it be dropped.
//!   Lowering `version` to the loaded release would change nothing: that
//!   library resets only fields it knows, and knows none newer than itself;
//! * a newer library reads our `size` bytes and resets the fields after
//!   the pinned release to its defaults, as `version` says they are not
//!   there.

use std::ffi::CString;

use nccl_sys::{NCCL_API_MAGIC, NCCL_VERSION_CODE, PINNED_HEADER_VERSION, Version, ncclConfig_t};

use super::{Config, CtaPolicy, GraphUsageMode, HostCftMode, NvlsHostMode};
use crate::error::{Error, Result};

/// `NCCL_CONFIG_UNDEF_INT`: leave the attribute to NCCL's default.
const UNDEF_INT: i32 = i32::MIN;

/// One option as set: its builder method, its `ncclConfig_t` field, and the
/// first release whose `ncclConfig_t` has that field (the first
/// `vX.Y.Z-1` tag of NVIDIA/nccl whose `nccl.h.in` declares it; 2.31.2 and
/// 2.32.3 from the `nvidia-nccl-cu13` wheels' headers; 2.29.2, the first
/// 2.29 release, from 2.30.7's `parseCommConfig`, which resets
/// `graphUsageMode` and `numRmaCtx` for a struct older than 2.29.0).
struct KnownOption {
    set: bool,
    method: &'static str,
    field: &'static str,
    since: Version,
}

const fn option(
    set: bool,
    method: &'static str,
    field: &'static str,
    since: Version,
) -> KnownOption {
    KnownOption {
        set,
        method,
        field,
        since,
    }
}

impl Config {
    /// Every option with whether it is set.
    fn options(&self) -> [KnownOption; 22] {
        let v = Version::new;
        [
            option(
                self.blocking.is_some(),
                "with_blocking",
                "blocking",
                v(2, 14, 3),
            ),
            option(
                self.cga_cluster_size.is_some(),
                "with_cga_cluster_size",
                "cgaClusterSize",
                v(2, 17, 1),
            ),
            option(
                self.min_ctas.is_some() || self.max_ctas.is_some(),
                "with_ctas",
                "minCTAs and maxCTAs",
                v(2, 17, 1),
            ),
            option(
                self.net_name.is_some(),
                "with_net_name",
                "netName",
                v(2, 17, 1),
            ),
            option(
                self.split_share.is_some(),
                "with_split_share",
                "splitShare",
                v(2, 18, 1),
            ),
            option(
                self.traffic_class.is_some(),
                "with_traffic_class",
                "trafficClass",
                v(2, 26, 2),
            ),
            option(
                self.comm_name.is_some(),
                "with_comm_name",
                "commName",
                v(2, 27, 3),
            ),
            option(
                self.collnet.is_some(),
                "with_collnet",
                "collnetEnable",
                v(2, 27, 3),
            ),
            option(
                self.cta_policy.is_some(),
                "with_cta_policy",
                "CTAPolicy",
                v(2, 27, 3),
            ),
            option(
                self.shrink_share.is_some(),
                "with_shrink_share",
                "shrinkShare",
                v(2, 27, 3),
            ),
            option(
                self.nvls_ctas.is_some(),
                "with_nvls_ctas",
                "nvlsCTAs",
                v(2, 27, 3),
            ),
            option(
                self.channels_per_net_peer.is_some(),
                "with_channels_per_net_peer",
                "nChannelsPerNetPeer",
                v(2, 28, 3),
            ),
            option(
                self.nvlink_centric_sched.is_some(),
                "with_nvlink_centric_sched",
                "nvlinkCentricSched",
                v(2, 28, 3),
            ),
            option(
                self.graph_usage_mode.is_some(),
                "with_graph_usage_mode",
                "graphUsageMode",
                v(2, 29, 2),
            ),
            option(
                self.rma_ctxs.is_some(),
                "with_rma_ctxs",
                "numRmaCtx",
                v(2, 29, 2),
            ),
            option(
                self.max_p2p_peers.is_some(),
                "with_max_p2p_peers",
                "maxP2pPeers",
                v(2, 30, 3),
            ),
            option(
                self.graph_stream_ordering.is_some(),
                "with_graph_stream_ordering",
                "graphStreamOrdering",
                v(2, 30, 7),
            ),
            option(
                self.launch_order_implicit.is_some(),
                "with_launch_order_implicit",
                "launchOrderImplicit",
                v(2, 31, 2),
            ),
            option(
                self.rma_signals.is_some(),
                "with_rma_signals",
                "numRmaSig",
                v(2, 31, 2),
            ),
            option(
                self.rma_eager_init.is_some(),
                "with_rma_eager_init",
                "rmaEagerInit",
                v(2, 31, 2),
            ),
            option(
                self.host_cft_mode.is_some(),
                "with_host_cft_mode",
                "hostCftMode",
                v(2, 31, 2),
            ),
            option(
                self.nvls_host_mode.is_some(),
                "with_nvls_host_mode",
                "nvlsHostMode",
                v(2, 32, 3),
            ),
        ]
    }

    /// Checks that the NCCL release `loaded` knows every option that is set:
    /// a library ignores the `ncclConfig_t` fields newer than itself.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the first option `loaded` does not
    /// know, its `ncclConfig_t` field and the release that introduced it.
    pub fn check_release(&self, loaded: Version) -> Result<()> {
        match self
            .options()
            .into_iter()
            .find(|option| option.set && option.since > loaded)
        {
            Some(option) => Err(Error::Unsupported {
                feature: format!(
                    "Config::{} (ncclConfig_t's {})",
                    option.method, option.field
                ),
                needed: option.since,
                loaded,
            }),
            None => Ok(()),
        }
    }

    /// The C struct for the loaded NCCL release `loaded` (validating, and
    /// checking [`Config::check_release`], first).
    ///
    /// The strings it points to live in the returned [`RawConfig`], which must
    /// outlive the NCCL call.
    ///
    /// # Errors
    /// As [`Config::validate`] and [`Config::check_release`], and a name
    /// that contains a NUL byte.
    pub fn to_raw_for(&self, loaded: Version) -> Result<RawConfig> {
        self.validate()?;
        self.check_release(loaded)?;
        let c_string = |argument, text: &Option<String>| {
            text.as_deref()
                .map(|t| {
                    CString::new(t).map_err(|_| Error::InvalidArgument {
                        argument,
                        expected: "text without NUL bytes".to_string(),
                        given: format!("{t:?}"),
                    })
                })
                .transpose()
        };
        let net_name = c_string("net_name", &self.net_name)?;
        let comm_name = c_string("comm_name", &self.comm_name)?;
        let int = |value: Option<i32>| value.unwrap_or(UNDEF_INT);
        let flag = |value: Option<bool>| value.map(i32::from).unwrap_or(UNDEF_INT);
        let mut raw = initializer();
        raw.blocking = flag(self.blocking);
        raw.cgaClusterSize = int(self.cga_cluster_size);
        raw.minCTAs = int(self.min_ctas);
        raw.maxCTAs = int(self.max_ctas);
        raw.netName = net_name.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        raw.splitShare = flag(self.split_share);
        raw.trafficClass = int(self.traffic_class);
        raw.commName = comm_name.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        raw.collnetEnable = flag(self.collnet);
        raw.CTAPolicy = self.cta_policy.map_or(UNDEF_INT, CtaPolicy::raw);
        raw.shrinkShare = flag(self.shrink_share);
        raw.nvlsCTAs = int(self.nvls_ctas);
        raw.nChannelsPerNetPeer = int(self.channels_per_net_peer);
        raw.nvlinkCentricSched = flag(self.nvlink_centric_sched);
        raw.graphUsageMode = self.graph_usage_mode.map_or(UNDEF_INT, GraphUsageMode::raw);
        raw.numRmaCtx = int(self.rma_ctxs);
        raw.maxP2pPeers = int(self.max_p2p_peers);
        raw.graphStreamOrdering = flag(self.graph_stream_ordering);
        raw.launchOrderImplicit = flag(self.launch_order_implicit);
        raw.numRmaSig = int(self.rma_signals);
        raw.rmaEagerInit = flag(self.rma_eager_init);
        raw.hostCftMode = self.host_cft_mode.map_or(UNDEF_INT, HostCftMode::raw);
        raw.nvlsHostMode = self.nvls_host_mode.map_or(UNDEF_INT, NvlsHostMode::raw);
        Ok(RawConfig {
            raw,
            _net_name: net_name,
            _comm_name: comm_name,
        })
    }

    /// [`Config::to_raw_for`] the pinned header's release
    /// ([`PINNED_HEADER_VERSION`]), which knows every option.
    ///
    /// For a struct handed to a loaded library, use
    /// `to_raw_for(library.version())`: an older library ignores the options it
    /// does not know.
    ///
    /// # Errors
    /// As [`Config::validate`], and a name that contains a NUL byte.
    pub fn to_raw(&self) -> Result<RawConfig> {
        self.to_raw_for(PINNED_HEADER_VERSION)
    }
}

/// `NCCL_CONFIG_INITIALIZER` of the pinned header: every field listed, so
/// that a header with a new field does not compile until it is added here.
fn initializer() -> ncclConfig_t {
    ncclConfig_t {
        size: std::mem::size_of::<ncclConfig_t>(),
        magic: NCCL_API_MAGIC,
        version: NCCL_VERSION_CODE,
        blocking: UNDEF_INT,
        cgaClusterSize: UNDEF_INT,
        minCTAs: UNDEF_INT,
        maxCTAs: UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: UNDEF_INT,
        trafficClass: UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: UNDEF_INT,
        CTAPolicy: UNDEF_INT,
        shrinkShare: UNDEF_INT,
        nvlsCTAs: UNDEF_INT,
        nChannelsPerNetPeer: UNDEF_INT,
        nvlinkCentricSched: UNDEF_INT,
        graphUsageMode: UNDEF_INT,
        numRmaCtx: UNDEF_INT,
        maxP2pPeers: UNDEF_INT,
        graphStreamOrdering: UNDEF_INT,
        launchOrderImplicit: UNDEF_INT,
        numRmaSig: UNDEF_INT,
        rmaEagerInit: UNDEF_INT,
        hostCftMode: UNDEF_INT,
        nvlsHostMode: UNDEF_INT,
    }
}

/// A filled-in `ncclConfig_t` and the strings it points to.
#[derive(Debug)]
pub struct RawConfig {
    raw: ncclConfig_t,
    _net_name: Option<CString>,
    _comm_name: Option<CString>,
}

impl RawConfig {
    /// The C struct (valid while `self` lives).
    pub fn as_raw(&self) -> &ncclConfig_t {
        &self.raw
    }

    /// A pointer for NCCL calls that take `ncclConfig_t*` (NCCL only reads it).
    pub fn as_mut_ptr(&mut self) -> *mut ncclConfig_t {
        &mut self.raw
    }
}
