//! The options of [`Config`](super::Config) for which NCCL defines named
//! values, as enums: each variant's C `int` is written once, in the
//! table below.

use std::ffi::c_int;

use nccl_sys::{
    NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_EFFICIENCY, NCCL_CTA_POLICY_ZERO, ncclHostCftMode_t,
    ncclNvlsHostMode_t,
};

/// Defines each option's enum (`#[non_exhaustive]`: NCCL adds values)
/// and its `raw`, the C `int` `ncclConfig_t` takes: `$Enum { $Variant =
/// $raw, ... }`.
macro_rules! named_values {
    ($(
        $(#[$doc:meta])*
        $name:ident {$(
            $(#[$variant_doc:meta])*
            $variant:ident = $raw:expr,
        )*}
    )*) => {$(
        $(#[$doc])*
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {$(
            $(#[$variant_doc])*
            $variant,
        )*}

        impl $name {
            /// The C `int` `ncclConfig_t` takes for this value.
            pub const fn raw(self) -> c_int {
                match self {$(
                    $name::$variant => $raw,
                )*}
            }
        }
    )*};
}

// The CTA policy flags are `#define`d as unsigned literals of 0 to 2 (and
// their union 3): each fits a C `int`.
named_values! {
    /// How many CTAs (thread blocks) NCCL spends on communication
    /// ([`Config::with_cta_policy`](super::Config::with_cta_policy),
    /// `CTAPolicy`, NCCL 2.27.3): the `NCCL_CTA_POLICY_*` flags.
    CtaPolicy {
        /// `NCCL_CTA_POLICY_DEFAULT`: NCCL adjusts resources for the best
        /// performance.
        Default = NCCL_CTA_POLICY_DEFAULT as c_int,
        /// `NCCL_CTA_POLICY_EFFICIENCY`: as few CTAs as give decent
        /// performance, leaving the GPU to overlapping compute.
        Efficiency = NCCL_CTA_POLICY_EFFICIENCY as c_int,
        /// `NCCL_CTA_POLICY_ZERO`: no CTA wherever NCCL can (copy engines,
        /// symmetric memory), even at some cost in performance.
        Zero = NCCL_CTA_POLICY_ZERO as c_int,
        /// `NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO`: no CTA
        /// where NCCL can, as few as possible elsewhere.
        EfficiencyAndZero = (NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO) as c_int,
    }

    /// How the communicator is used with CUDA graphs
    /// ([`Config::with_graph_usage_mode`](super::Config::with_graph_usage_mode),
    /// `graphUsageMode`, NCCL 2.29.2; `NCCL_GRAPH_MIXING_SUPPORT`
    /// overrides it at init).
    ///
    /// NCCL documents the values 0, 1 and 2.
    GraphUsageMode {
        /// 0: never captured in a CUDA graph.
        NoGraphs = 0,
        /// 1: captured into one graph.
        OneGraph = 1,
        /// 2: several graphs, or a mix of captured and uncaptured
        /// operations (NCCL's default).
        ///
        /// NCCL refuses it with `graph_stream_ordering` off.
        Mixed = 2,
    }

    /// Host-side Compute Fabric Transport queries
    /// ([`Config::with_host_cft_mode`](super::Config::with_host_cft_mode),
    /// `hostCftMode`, NCCL 2.31.2): `ncclHostCftMode_t`.
    HostCftMode {
        /// `ncclHostCftEnable`: the logical endpoints are created at the
        /// first window registration of a CFT-capable communicator.
        Enable = ncclHostCftMode_t::ncclHostCftEnable.0,
        /// `ncclHostCftDisable`: no host-side CFT.
        Disable = ncclHostCftMode_t::ncclHostCftDisable.0,
        /// `ncclHostCftFallback`: try to create the endpoints, and disable
        /// host-side CFT if that fails.
        Fallback = ncclHostCftMode_t::ncclHostCftFallback.0,
    }

    /// Which host-side NVLink SHARP components are disabled
    /// ([`Config::with_nvls_host_mode`](super::Config::with_nvls_host_mode),
    /// `nvlsHostMode`, NCCL 2.32.3): `ncclNvlsHostMode_t`.
    NvlsHostMode {
        /// `ncclNvlsHostModeEnable`: every component enabled.
        Enable = ncclNvlsHostMode_t::ncclNvlsHostModeEnable.0,
        /// `ncclNvlsHostModeDisableTransport`: the NVLS transport disabled.
        DisableTransport = ncclNvlsHostMode_t::ncclNvlsHostModeDisableTransport.0,
        /// `ncclNvlsHostModeDisableSymmetricMultimem`: the multimem of the
        /// symmetric kernels disabled.
        DisableSymmetricMultimem = ncclNvlsHostMode_t::ncclNvlsHostModeDisableSymmetricMultimem.0,
        /// Both of the above (the union of their bits).
        DisableTransportAndSymmetricMultimem =
            ncclNvlsHostMode_t::ncclNvlsHostModeDisableTransport.0
                | ncclNvlsHostMode_t::ncclNvlsHostModeDisableSymmetricMultimem.0,
        /// `ncclNvlsHostModeDisable`: every present and future component
        /// disabled.
        Disable = ncclNvlsHostMode_t::ncclNvlsHostModeDisable.0,
    }
}
