//! A builder over `ncclConfig_t`, with owned strings.

use std::ffi::CString;
use std::time::Duration;

use nccl_sys::{NCCL_VERSION_CODE, ncclConfig_t};

use crate::error::{Error, Result};

/// `NCCL_CONFIG_UNDEF_INT`: leave the attribute to NCCL's default.
const UNDEF_INT: i32 = i32::MIN;
/// `NCCL_CONFIG_INITIALIZER`'s magic.
const CONFIG_MAGIC: u32 = 0xcafe_beef;
/// How long a nonblocking init, split or finalize may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Communicator options (`ncclConfig_t`). Unset options keep NCCL's default,
/// which also honours the matching `NCCL_*` environment variables.
///
/// ```
/// # use nccl_core::Config;
/// let config = Config::new()
///     .blocking(false)
///     .ctas(4, 16)
///     .comm_name("trainer.dp");
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
    comm_name: Option<String>,
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
            comm_name: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Blocking (the default) or nonblocking communicator. A nonblocking
    /// communicator's init, split and finalize return at once; this crate
    /// then polls `ncclCommGetAsyncError` until done or [`Config::timeout`].
    pub fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = Some(blocking);
        self
    }

    /// CGA cluster size (0 to 8; 0 disables clusters).
    pub fn cga_cluster_size(mut self, size: i32) -> Self {
        self.cga_cluster_size = Some(size);
        self
    }

    /// The fewest and most CTAs (thread blocks) NCCL may use per collective.
    pub fn ctas(mut self, min: i32, max: i32) -> Self {
        self.min_ctas = Some(min);
        self.max_ctas = Some(max);
        self
    }

    /// The network module to use ("IB", "Socket", ...).
    pub fn net_name(mut self, name: impl Into<String>) -> Self {
        self.net_name = Some(name.into());
        self
    }

    /// Whether communicators split from this one share its resources.
    pub fn split_share(mut self, share: bool) -> Self {
        self.split_share = Some(share);
        self
    }

    /// A name that shows in NCCL's logs and profilers.
    pub fn comm_name(mut self, name: impl Into<String>) -> Self {
        self.comm_name = Some(name.into());
        self
    }

    /// How long a nonblocking init, split or finalize may take before the
    /// communicator is aborted and [`Error::Timeout`] returned.
    pub fn timeout(mut self, timeout: Duration) -> Self {
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

    /// The timeout for nonblocking waits.
    pub fn wait_timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks every option against what NCCL accepts.
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
        if self.timeout.is_zero() {
            return invalid("timeout", "a positive duration", "0s".to_string());
        }
        Ok(())
    }

    /// Builds the C struct (validating first). The strings it points to live in the returned
    /// [`RawConfig`], which must outlive the NCCL call.
    ///
    /// # Errors
    /// As [`Config::validate`], and a name that contains a NUL byte.
    pub fn to_raw(&self) -> Result<RawConfig> {
        self.validate()?;
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
        let raw = ncclConfig_t {
            size: std::mem::size_of::<ncclConfig_t>(),
            magic: CONFIG_MAGIC,
            version: NCCL_VERSION_CODE,
            blocking: flag(self.blocking),
            cgaClusterSize: int(self.cga_cluster_size),
            minCTAs: int(self.min_ctas),
            maxCTAs: int(self.max_ctas),
            netName: net_name.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            splitShare: flag(self.split_share),
            trafficClass: UNDEF_INT,
            commName: comm_name.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            collnetEnable: UNDEF_INT,
            CTAPolicy: UNDEF_INT,
            shrinkShare: UNDEF_INT,
            nvlsCTAs: UNDEF_INT,
            nChannelsPerNetPeer: UNDEF_INT,
            nvlinkCentricSched: UNDEF_INT,
        };
        Ok(RawConfig {
            raw,
            _net_name: net_name,
            _comm_name: comm_name,
        })
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
