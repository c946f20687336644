//! What the loaded libnccl can do of NCCL's newer communicator management:
//! revoke, shrink, grow, suspend and resume, memory statistics.

use std::fmt;

use nccl_sys::{NcclLibrary, Version};

use crate::error::{Error, Result};

/// A communicator feature that only newer NCCL releases have.
///
/// A library has it when it exports every function of the feature
/// ([`Capability::functions`]) *and* reports a version at least
/// [`Capability::introduced_in`]: the version is what says the functions
/// behave as NVIDIA's release notes describe, for libraries that export a
/// symbol before (or without) those semantics, such as another vendor's
/// NCCL-compatible library, and for [`Capability::GroupedSuspendResume`],
/// whose functions exist from 2.29.7 but only act inside a group from
/// 2.30.3.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Capability {
    /// `ncclCommRevoke` (NCCL 2.28.7): stop a communicator's in-flight
    /// work without freeing it, so that it can be shrunk or split.
    Revoke,
    /// `ncclCommShrink` (NCCL 2.27.3): a communicator of the ranks left
    /// after excluding some, without their participation.
    Shrink,
    /// `ncclCommGetUniqueId` and `ncclCommGrow` (NCCL 2.29.2): admit new
    /// ranks into a live communicator.
    Grow,
    /// `ncclCommSuspend` and `ncclCommResume` (NCCL 2.29.7): release a
    /// communicator's dynamic GPU memory and get it back.
    SuspendResume,
    /// Suspend and resume inside a `ncclGroupStart`/`ncclGroupEnd`, for
    /// one process that drives several ranks of a communicator (NCCL
    /// 2.30.3: "dynamic memory offload with group support"; in 2.29.7 each
    /// call completes on its own, so suspending one local rank after the
    /// other waits forever at NCCL's barrier).
    GroupedSuspendResume,
    /// `ncclCommMemStats` (NCCL 2.29.7): how much GPU memory a
    /// communicator holds, and whether it is suspended.
    MemStats,
}

impl Capability {
    /// Every capability, in the order above.
    pub const ALL: [Capability; 6] = [
        Capability::Revoke,
        Capability::Shrink,
        Capability::Grow,
        Capability::SuspendResume,
        Capability::GroupedSuspendResume,
        Capability::MemStats,
    ];

    /// A short name: "revoke", "shrink", "grow", "suspend/resume",
    /// "grouped suspend/resume", "memory statistics".
    pub fn name(self) -> &'static str {
        match self {
            Capability::Revoke => "revoke",
            Capability::Shrink => "shrink",
            Capability::Grow => "grow",
            Capability::SuspendResume => "suspend/resume",
            Capability::GroupedSuspendResume => "grouped suspend/resume",
            Capability::MemStats => "memory statistics",
        }
    }

    /// The NCCL functions the capability calls.
    pub fn functions(self) -> &'static [&'static str] {
        match self {
            Capability::Revoke => &["ncclCommRevoke"],
            Capability::Shrink => &["ncclCommShrink"],
            Capability::Grow => &["ncclCommGetUniqueId", "ncclCommGrow"],
            Capability::SuspendResume | Capability::GroupedSuspendResume => {
                &["ncclCommSuspend", "ncclCommResume"]
            }
            Capability::MemStats => &["ncclCommMemStats"],
        }
    }

    /// The first NCCL release with the capability (checked against the
    /// `vX.Y.Z-1` tags of NVIDIA/nccl and their release notes).
    pub fn introduced_in(self) -> Version {
        match self {
            Capability::Revoke => Version::new(2, 28, 7),
            Capability::Shrink => Version::new(2, 27, 3),
            Capability::Grow => Version::new(2, 29, 2),
            Capability::SuspendResume | Capability::MemStats => Version::new(2, 29, 7),
            Capability::GroupedSuspendResume => Version::new(2, 30, 3),
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which [`Capability`]s a libnccl has: [`Capabilities::of`] a library,
/// [`Capabilities::loaded`] for the process-wide one, or
/// [`Communicator::capabilities`](crate::Communicator::capabilities).
///
/// ```no_run
/// use nccl_core::{Capabilities, Capability};
/// let capabilities = Capabilities::loaded()?;
/// if capabilities.has(Capability::Revoke) {
///     // revoke, then shrink
/// } else {
///     // abort, then make a new communicator
/// }
/// println!("{capabilities}"); // NCCL 2.28.3: revoke no (2.28.7), shrink yes, ...
/// # Ok::<(), nccl_core::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Capabilities {
    lib: &'static NcclLibrary,
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        map.entry(&"version", &self.version());
        for capability in Capability::ALL {
            map.entry(&capability.name(), &self.has(capability));
        }
        map.finish()
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NCCL {}:", self.version())?;
        for (index, capability) in Capability::ALL.into_iter().enumerate() {
            let separator = if index == 0 { " " } else { ", " };
            let answer = if self.has(capability) {
                "yes".to_string()
            } else {
                format!("no ({})", capability.introduced_in())
            };
            write!(f, "{separator}{capability} {answer}")?;
        }
        Ok(())
    }
}

impl Capabilities {
    /// The capabilities of `lib`.
    pub fn of(lib: &'static NcclLibrary) -> Self {
        Self { lib }
    }

    /// The capabilities of the process-wide libnccl ([`crate::library`]).
    ///
    /// # Errors
    /// [`Error::Library`] if no libnccl loads.
    pub fn loaded() -> Result<Self> {
        Ok(Self::of(crate::library::library()?))
    }

    /// The version of the library asked.
    pub fn version(&self) -> Version {
        self.lib.version()
    }

    /// Whether the library has `capability`: a version at least its
    /// release, and every one of its functions.
    pub fn has(&self, capability: Capability) -> bool {
        self.require(capability).is_ok()
    }

    /// `Ok` when the library has `capability`, else why not.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the capability, the release that
    /// introduced it and the loaded one, when the library is older;
    /// [`Error::MissingFunction`] naming the function and its release when
    /// the library is new enough but lacks one of its functions.
    pub fn require(&self, capability: Capability) -> Result<()> {
        let loaded = self.version();
        let needed = capability.introduced_in();
        if loaded < needed {
            return Err(Error::Unsupported {
                feature: format!("{capability} ({})", capability.functions().join(", ")),
                needed,
                loaded,
            });
        }
        match capability
            .functions()
            .iter()
            .find_map(|name| self.lib.functions().missing(name))
        {
            Some(missing) => Err(Error::MissingFunction(missing)),
            None => Ok(()),
        }
    }
}
