//! A builder over `ncclConfig_t`, with owned strings. Which NCCL release
//! knows each option, and the C struct itself, are in `config/raw.rs`.

use std::time::Duration;

use crate::error::{Error, Result};

pub use modes::{CtaPolicy, GraphUsageMode, HostCftMode, NvlsHostMode};
pub use raw::RawConfig;

mod modes;
mod raw;

/// How long a nonblocking init, split or finalize may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Communicator options (`ncclConfig_t`).
///
/// Unset options keep NCCL's default, which also honours the matching `NCCL_*`
/// environment variables.
///
/// `ncclConfig_t` grew over NCCL's releases, and a library ignores the
/// fields after the ones its own release knows. So every option names the
/// release that introduced it, and an option set for an older library is
/// an [`Error::Unsupported`] naming the option and that release, never an
/// option silently dropped: [`Config::check_release`] checks, and the
/// communicator constructors check against the loaded library.
///
/// Every setter is `with_*`; options for which NCCL defines named values
/// take enums ([`CtaPolicy`], [`GraphUsageMode`], [`HostCftMode`],
/// [`NvlsHostMode`]), the others their count, size or flag.
///
/// ```
/// # use nccl_core::{Config, CtaPolicy};
/// let config = Config::new()
///     .with_blocking(false)
///     .with_ctas(4, 16)
///     .with_cta_policy(CtaPolicy::Efficiency)
///     .with_comm_name("trainer.dp");
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    blocking: Option<bool>,
    cga_cluster_size: Option<i32>,
    min_ctas: Option<i32>,
    max_ctas: Option<i32>,
    net_name: Option<String>,
    split_share: Option<bool>,
    traffic_class: Option<i32>,
    comm_name: Option<String>,
    collnet: Option<bool>,
    cta_policy: Option<CtaPolicy>,
    shrink_share: Option<bool>,
    nvls_ctas: Option<i32>,
    channels_per_net_peer: Option<i32>,
    nvlink_centric_sched: Option<bool>,
    graph_usage_mode: Option<GraphUsageMode>,
    rma_ctxs: Option<i32>,
    max_p2p_peers: Option<i32>,
    graph_stream_ordering: Option<bool>,
    launch_order_implicit: Option<bool>,
    rma_signals: Option<i32>,
    rma_eager_init: Option<bool>,
    host_cft_mode: Option<HostCftMode>,
    nvls_host_mode: Option<NvlsHostMode>,
    timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// Every option at NCCL's default; [`DEFAULT_TIMEOUT`] for nonblocking waits.
    pub const fn new() -> Self {
        Self {
            blocking: None,
            cga_cluster_size: None,
            min_ctas: None,
            max_ctas: None,
            net_name: None,
            split_share: None,
            traffic_class: None,
            comm_name: None,
            collnet: None,
            cta_policy: None,
            shrink_share: None,
            nvls_ctas: None,
            channels_per_net_peer: None,
            nvlink_centric_sched: None,
            graph_usage_mode: None,
            rma_ctxs: None,
            max_p2p_peers: None,
            graph_stream_ordering: None,
            launch_order_implicit: None,
            rma_signals: None,
            rma_eager_init: None,
            host_cft_mode: None,
            nvls_host_mode: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Blocking (the default) or nonblocking communicator (`blocking`,
    /// NCCL 2.14.3).
    ///
    /// A nonblocking communicator's init, split and finalize return at once;
    /// this crate then polls `ncclCommGetAsyncError` until done or
    /// [`Config::wait_timeout`].
    pub fn with_blocking(mut self, blocking: bool) -> Self {
        self.blocking = Some(blocking);
        self
    }

    /// CGA cluster size, 0 to 8; 0 disables clusters (`cgaClusterSize`,
    /// NCCL 2.17.1).
    pub fn with_cga_cluster_size(mut self, size: i32) -> Self {
        self.cga_cluster_size = Some(size);
        self
    }

    /// The fewest and most CTAs (thread blocks) NCCL may use per collective
    /// (`minCTAs`, `maxCTAs`, NCCL 2.17.1).
    pub fn with_ctas(mut self, min: i32, max: i32) -> Self {
        self.min_ctas = Some(min);
        self.max_ctas = Some(max);
        self
    }

    /// The network module to use: "IB", "Socket", ... (`netName`, NCCL 2.17.1).
    pub fn with_net_name(mut self, name: impl Into<String>) -> Self {
        self.net_name = Some(name.into());
        self
    }

    /// Whether communicators split from this one share its resources
    /// (`splitShare`, NCCL 2.18.1).
    pub fn with_split_share(mut self, share: bool) -> Self {
        self.split_share = Some(share);
        self
    }

    /// The network traffic class, 0 or more, for quality of service
    /// (`trafficClass`, NCCL 2.26.2).
    pub fn with_traffic_class(mut self, class: i32) -> Self {
        self.traffic_class = Some(class);
        self
    }

    /// A name that shows in NCCL's logs and profilers (`commName`,
    /// NCCL 2.27.3).
    pub fn with_comm_name(mut self, name: impl Into<String>) -> Self {
        self.comm_name = Some(name.into());
        self
    }

    /// Whether CollNet (in-network reductions) may be used
    /// (`collnetEnable`, NCCL 2.27.3).
    pub fn with_collnet(mut self, enable: bool) -> Self {
        self.collnet = Some(enable);
        self
    }

    /// The CTA policy (`CTAPolicy`, NCCL 2.27.3).
    pub fn with_cta_policy(mut self, policy: CtaPolicy) -> Self {
        self.cta_policy = Some(policy);
        self
    }

    /// Whether communicators shrunk from this one share its resources
    /// (`shrinkShare`, NCCL 2.27.3).
    pub fn with_shrink_share(mut self, share: bool) -> Self {
        self.shrink_share = Some(share);
        self
    }

    /// The most CTAs NVLink SHARP may use, at least 1 (`nvlsCTAs`,
    /// NCCL 2.27.3).
    pub fn with_nvls_ctas(mut self, ctas: i32) -> Self {
        self.nvls_ctas = Some(ctas);
        self
    }

    /// Channels per network peer, at least 1 (`nChannelsPerNetPeer`,
    /// NCCL 2.28.3).
    pub fn with_channels_per_net_peer(mut self, channels: i32) -> Self {
        self.channels_per_net_peer = Some(channels);
        self
    }

    /// Whether NCCL schedules around NVLink first (`nvlinkCentricSched`,
    /// NCCL 2.28.3).
    pub fn with_nvlink_centric_sched(mut self, enable: bool) -> Self {
        self.nvlink_centric_sched = Some(enable);
        self
    }

    /// How the communicator is used with CUDA graphs (`graphUsageMode`,
    /// NCCL 2.29.2).
    ///
    /// `NCCL_GRAPH_MIXING_SUPPORT` overrides it at init.
    pub fn with_graph_usage_mode(mut self, mode: GraphUsageMode) -> Self {
        self.graph_usage_mode = Some(mode);
        self
    }

    /// How many RMA contexts the communicator creates, 0 or more; 0
    /// disables RMA for it (`numRmaCtx`, NCCL 2.29.2; what `NCCL_NUM_RMA_CTX`
    /// sets, which overrides it at init).
    pub fn with_rma_ctxs(mut self, contexts: i32) -> Self {
        self.rma_ctxs = Some(contexts);
        self
    }

    /// The most peers a rank keeps point-to-point connections to, at least
    /// 1 (`maxP2pPeers`, NCCL 2.30.3).
    pub fn with_max_p2p_peers(mut self, peers: i32) -> Self {
        self.max_p2p_peers = Some(peers);
        self
    }

    /// Whether operations captured in a CUDA graph keep the stream order
    /// of their capture (`graphStreamOrdering`, NCCL 2.30.7).
    pub fn with_graph_stream_ordering(mut self, enable: bool) -> Self {
        self.graph_stream_ordering = Some(enable);
        self
    }

    /// Whether kernels of different communicators are ordered implicitly by
    /// their launch order (`launchOrderImplicit`, NCCL 2.31.2; what
    /// `NCCL_LAUNCH_ORDER_IMPLICIT` sets for the whole process).
    pub fn with_launch_order_implicit(mut self, enable: bool) -> Self {
        self.launch_order_implicit = Some(enable);
        self
    }

    /// The number of RMA signals (`numRmaSig`, NCCL 2.31.2).
    ///
    /// Passed to NCCL as given: NCCL's headers document no range, and NCCL
    /// checks it at init.
    pub fn with_rma_signals(mut self, signals: i32) -> Self {
        self.rma_signals = Some(signals);
        self
    }

    /// Whether the one-sided RMA signals are set up when the communicator
    /// is created (`true`) or at its first window registration (`false`,
    /// NCCL's default) (`rmaEagerInit`, NCCL 2.31.2; what
    /// `NCCL_RMA_EAGER_INIT` sets, which overrides it).
    ///
    /// Signalling without a registered window needs `true`.
    pub fn with_rma_eager_init(mut self, eager: bool) -> Self {
        self.rma_eager_init = Some(eager);
        self
    }

    /// Host-side Compute Fabric Transport queries (`hostCftMode`,
    /// NCCL 2.31.2).
    pub fn with_host_cft_mode(mut self, mode: HostCftMode) -> Self {
        self.host_cft_mode = Some(mode);
        self
    }

    /// Which host-side NVLink SHARP components are disabled
    /// (`nvlsHostMode`, NCCL 2.32.3).
    pub fn with_nvls_host_mode(mut self, mode: NvlsHostMode) -> Self {
        self.nvls_host_mode = Some(mode);
        self
    }

    /// How long a nonblocking init, split or finalize may take before the
    /// communicator is aborted and [`Error::Timeout`] returned.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether the communicator will be blocking (NCCL's default is blocking).
    pub fn is_blocking(&self) -> bool {
        self.blocking.unwrap_or(true)
    }

    /// The blocking option as set (`None`: left to NCCL or the parent).
    pub fn blocking_option(&self) -> Option<bool> {
        self.blocking
    }

    /// The `split_share` option as set (`None`: left to NCCL, which reads
    /// `NCCL_COMM_SPLIT_SHARE_RESOURCES` and otherwise does not share).
    pub fn split_share_option(&self) -> Option<bool> {
        self.split_share
    }

    /// The timeout for nonblocking waits.
    pub fn wait_timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks every option against what NCCL accepts.
    ///
    /// Which release knows each option is [`Config::check_release`]'s part.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option, what it accepts and
    /// what it was given.
    pub fn validate(&self) -> Result<()> {
        let invalid = |argument, expected: &str, given: String| {
            Err(Error::InvalidArgument {
                argument,
                expected: expected.to_string(),
                given,
            })
        };
        if let Some(size) = self.cga_cluster_size
            && !(0..=8).contains(&size)
        {
            return invalid("cga_cluster_size", "0 to 8", size.to_string());
        }
        if let Some(min) = self.min_ctas
            && min < 1
        {
            return invalid("min_ctas", "at least 1", min.to_string());
        }
        if let (Some(min), Some(max)) = (self.min_ctas, self.max_ctas)
            && max < min
        {
            return invalid("max_ctas", "at least min_ctas", format!("{max} < {min}"));
        }
        let at_least = |argument, least: i32, value: Option<i32>| match value {
            Some(value) if value < least => {
                invalid(argument, &format!("at least {least}"), value.to_string())
            }
            _ => Ok(()),
        };
        at_least("traffic_class", 0, self.traffic_class)?;
        at_least("nvls_ctas", 1, self.nvls_ctas)?;
        at_least("channels_per_net_peer", 1, self.channels_per_net_peer)?;
        at_least("max_p2p_peers", 1, self.max_p2p_peers)?;
        at_least("rma_ctxs", 0, self.rma_ctxs)?;
        if self.timeout.is_zero() {
            return invalid("timeout", "a positive duration", "0s".to_string());
        }
        Ok(())
    }
}
