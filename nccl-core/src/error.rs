//! Errors and statuses of every call into NCCL and CUDA.

use std::fmt;
use std::time::Duration;

use nccl_sys::ncclResult_t;

/// A `ncclResult_t` as returned by the loaded library, which may be newer
/// than the header these bindings were generated from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResultCode(pub u32);

impl ResultCode {
    /// The C name of the code (`ncclInvalidArgument`), or `None` for a code
    /// this header does not know.
    pub fn name(self) -> Option<&'static str> {
        Some(match ncclResult_t(self.0) {
            ncclResult_t::ncclSuccess => "ncclSuccess",
            ncclResult_t::ncclUnhandledCudaError => "ncclUnhandledCudaError",
            ncclResult_t::ncclSystemError => "ncclSystemError",
            ncclResult_t::ncclInternalError => "ncclInternalError",
            ncclResult_t::ncclInvalidArgument => "ncclInvalidArgument",
            ncclResult_t::ncclInvalidUsage => "ncclInvalidUsage",
            ncclResult_t::ncclRemoteError => "ncclRemoteError",
            ncclResult_t::ncclInProgress => "ncclInProgress",
            ncclResult_t::ncclTimeout => "ncclTimeout",
            _ => return None,
        })
    }

    /// Whether the code is `ncclRemoteError`: a remote rank failed or went
    /// away ([`ErrorKind::PeerLost`]).
    pub fn is_remote_error(self) -> bool {
        ncclResult_t(self.0) == ncclResult_t::ncclRemoteError
    }

    /// What the code usually means and what to look at, for error messages.
    pub fn hint(self) -> &'static str {
        match ncclResult_t(self.0) {
            ncclResult_t::ncclSuccess => "no error",
            ncclResult_t::ncclInProgress => "a nonblocking operation is still in progress",
            ncclResult_t::ncclUnhandledCudaError => "a CUDA call inside NCCL failed",
            ncclResult_t::ncclSystemError => {
                "a system call failed (network, shared memory or files)"
            }
            ncclResult_t::ncclInternalError => "NCCL hit an internal error",
            ncclResult_t::ncclInvalidArgument => "an argument was rejected by NCCL",
            ncclResult_t::ncclInvalidUsage => "NCCL was called in a way it does not allow",
            ncclResult_t::ncclRemoteError => "a remote rank failed or went away",
            ncclResult_t::ncclTimeout => "a wait inside NCCL ran out of time (NCCL 2.30.3+)",
            _ => "a result code this binding does not know (newer libnccl?)",
        }
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "unknown NCCL result {}", self.0),
        }
    }
}

/// A call that NCCL accepted.
///
/// Nonblocking communicators may answer [`Status::InProgress`]: the operation
/// continues in the background and
/// [`Communicator::wait_ready`](crate::Communicator::wait_ready) or
/// [`Communicator::async_error`](crate::Communicator::async_error) tell when it
/// is done.
#[must_use = "an `InProgress` status means a nonblocking communicator is still working on the call: \
              wait for it (`Communicator::wait_ready`) before using its result or issuing the next call"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The call finished (for collectives: was enqueued on the stream).
    Success,
    /// A nonblocking communicator is still working on the call.
    InProgress,
}

/// Declares an error-kind enum with every kind of nccl-core's
/// [`ErrorKind`], then the given ones, then `Other`: nccl-core's own, and
/// nccl-group's, which must have every kind of this one (so written once).
///
/// Exported (hidden) for nccl-group.
#[doc(hidden)]
#[macro_export]
macro_rules! __error_kinds {
    ($(#[$meta:meta])* pub enum $name:ident { $($extra:tt)* }) => {
        $(#[$meta])*
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            /// An argument the call cannot accept: a length, a shape, a data type
            /// that does not match, a value out of its range, a flag.
            InvalidArgument,
            /// A buffer or stream on another device than the communicator's.
            WrongDevice,
            /// A rank, root or peer outside `0..world_size`.
            RankOutOfRange,
            /// A feature, data type or reduction that the loaded NCCL or the GPU
            /// does not support; a newer libnccl or another GPU may have it.
            Unsupported,
            /// The loaded libnccl does not export a function the call needs (it is
            /// older than the function); the rest of the API still works.
            MissingFunction,
            /// This machine lacks what every call needs: the CUDA driver, a GPU,
            /// or a loadable NCCL library.
            Unavailable,
            /// NCCL returned an error code; `nccl_code()` says which.
            /// (`ncclRemoteError` is [`ErrorKind::PeerLost`] instead.)
            Nccl,
            /// A remote rank failed or went away: NCCL returned
            /// `ncclRemoteError` (a peer's process exited, or its connection
            /// broke); `nccl_code()` keeps the code.
            ///
            /// Create a new communicator without it (shrink, or meet again).
            PeerLost,
            /// A CUDA driver call failed.
            Cuda,
            /// A wait ran past its deadline: a NCCL call, a communicator's
            /// creation, an abort.
            Timeout,
            /// The communicator was aborted or revoked; create a new one (from a
            /// revoked one: shrink or split it).
            Aborted,
            /// The communicator was finalized or destroyed, or left suspended;
            /// create a new one.
            Closed,
            /// An operating-system request outside NCCL failed: starting a
            /// thread, writing a file.
            Io,
            $($extra)*
            /// Anything else; the message says what.
            Other,
        }
    };
}

__error_kinds! {
    /// What kind of failure an error is: `kind()` on nccl-core's [`Error`]
    /// and nccl-tensor's `Error` answers what the innermost error would.
    /// nccl-group's own `ErrorKind` has every kind of this one and adds the
    /// kinds only a process group and its store know (a failed group, a
    /// store, a launch setting).
    ///
    /// Match with a wildcard arm: kinds may be added.
    pub enum ErrorKind {}
}

/// Displays an error and every error of its `source()` chain, joined by
/// `": "`, on one line.
///
/// Each error's own `Display` describes only its own layer, so printing the
/// chain is how to show all of it.
#[derive(Clone, Copy, Debug)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// Every way a call of this crate can fail.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A NCCL function returned an error code.
    #[error(
        "{function} failed: {code}: {description} ({hint}){}",
        match last_error {
            Some(text) if !text.is_empty() => format!("; last NCCL error text (process-wide, may belong to another call): {text}"),
            _ => String::new(),
        }
    )]
    Nccl {
        /// The NCCL function that failed.
        function: &'static str,
        /// The code it returned.
        code: ResultCode,
        /// `ncclGetErrorString` for the code.
        description: String,
        /// What the code usually means.
        hint: &'static str,
        /// `ncclGetLastError` right after the call.
        ///
        /// NCCL keeps one buffer for the whole process, so another thread's
        /// failure can show here.
        last_error: Option<String>,
    },
    /// The NCCL library could not be loaded.
    #[error(transparent)]
    Library(#[from] nccl_sys::LoadError),
    /// The loaded libnccl lacks a function this call needs.
    #[error(transparent)]
    MissingFunction(#[from] nccl_sys::MissingSymbol),
    /// The loaded libnccl is too old for a feature.
    #[error(
        "{feature} needs NCCL {needed} or newer, but the loaded libnccl is {loaded}; load a newer libnccl (set NCCL_LIBRARY to its full path)"
    )]
    Unsupported {
        /// What was asked for.
        feature: String,
        /// The first release that has it.
        needed: nccl_sys::Version,
        /// The release that is loaded.
        loaded: nccl_sys::Version,
    },
    /// No CUDA driver library (`libcuda.so.1`) could be loaded.
    #[error(
        "no CUDA driver found: libcuda.so.1 could not be loaded; this machine needs an NVIDIA GPU with its driver installed (is the driver's library folder on the loader path?)"
    )]
    NoCudaDriver,
    /// A CUDA driver call failed.
    ///
    /// The driver's error is the `source()`, not part of this message
    /// ([`ErrorChain`] prints both).
    #[error("CUDA error during {during}")]
    Cuda {
        /// What was being done.
        during: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// A rank or peer outside `0..world_size`.
    #[error("{what} {given} is out of range: expected 0..{world_size}")]
    RankOutOfRange {
        /// Which argument ("rank", "root", "peer").
        what: &'static str,
        /// The value given.
        given: usize,
        /// The communicator's world size.
        world_size: usize,
    },
    /// A stream (or buffer) on another device than the communicator's.
    #[error("{what} is on device {given}, but the communicator is on device {expected}")]
    WrongDevice {
        /// Which argument ("stream").
        what: &'static str,
        /// The communicator's device.
        expected: usize,
        /// The device of the argument.
        given: usize,
    },
    /// An argument that is not valid for NCCL.
    #[error("invalid {argument}: expected {expected}, got {given}")]
    InvalidArgument {
        /// Which argument.
        argument: &'static str,
        /// What is accepted.
        expected: String,
        /// What was given.
        given: String,
    },
    /// The communicator was aborted (here or through an [`AbortHandle`](crate::AbortHandle)).
    #[error("the communicator was aborted; create a new one")]
    Aborted,
    /// The communicator was finalized; only dropping it remains.
    #[error("the communicator was finalized; create a new one")]
    Finalized,
    /// The communicator was revoked (`ncclCommRevoke`): it issues no more
    /// operations; shrink or split it, or drop it (which aborts it).
    #[error(
        "the communicator was revoked; shrink or split it into a new one, or drop it (revoked communicators are released by abort)"
    )]
    Revoked,
    /// The communicator is suspended (`ncclCommSuspend`): by
    /// [`Communicator::suspend_in_place`](crate::Communicator::suspend_in_place),
    /// or its [`Suspended`](crate::Suspended) guard was dropped without a
    /// successful [`resume`](crate::Suspended::resume), or a suspend failed
    /// part way.
    ///
    /// [`Communicator::resume_in_place`](crate::Communicator::resume_in_place)
    /// on every rank resumes it (collective); dropping it aborts it.
    #[error(
        "the communicator is suspended (not resumed, or its suspend or resume failed); resume it on every rank \
         (Communicator::resume_in_place) or create a new one"
    )]
    Suspended,
    /// A wait ran past its deadline.
    #[error(
        "{operation} did not complete within {waited:?}; the communicator was aborted (are all ranks running and reachable?)"
    )]
    Timeout {
        /// What was waited for.
        operation: &'static str,
        /// How long it waited.
        waited: Duration,
    },
}

impl Error {
    /// The error for `function` returning `code`, with the library's
    /// description and last-error text when a library is at hand.
    #[cold]
    pub fn from_code(
        function: &'static str,
        code: ResultCode,
        description: Option<String>,
        last_error: Option<String>,
    ) -> Self {
        Error::Nccl {
            function,
            code,
            description: description.unwrap_or_else(|| "no description".to_string()),
            hint: code.hint(),
            last_error,
        }
    }

    /// What kind of failure this is, for callers that branch on it:
    ///
    /// | Variant | Kind |
    /// |---|---|
    /// | `Nccl` with `ncclRemoteError` | [`ErrorKind::PeerLost`] |
    /// | `Nccl`, any other code | [`ErrorKind::Nccl`] ([`Error::nccl_code`] says which code) |
    /// | `Library`, `NoCudaDriver` | [`ErrorKind::Unavailable`] |
    /// | `MissingFunction` | [`ErrorKind::MissingFunction`] |
    /// | `Unsupported` | [`ErrorKind::Unsupported`] |
    /// | `Cuda` | [`ErrorKind::Cuda`] |
    /// | `RankOutOfRange` | [`ErrorKind::RankOutOfRange`] |
    /// | `WrongDevice` | [`ErrorKind::WrongDevice`] |
    /// | `InvalidArgument` | [`ErrorKind::InvalidArgument`] |
    /// | `Aborted`, `Revoked` | [`ErrorKind::Aborted`] |
    /// | `Finalized`, `Suspended` | [`ErrorKind::Closed`] |
    /// | `Timeout` | [`ErrorKind::Timeout`] |
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Nccl { code, .. } if code.is_remote_error() => ErrorKind::PeerLost,
            Error::Nccl { .. } => ErrorKind::Nccl,
            Error::Library(_) | Error::NoCudaDriver => ErrorKind::Unavailable,
            Error::MissingFunction(_) => ErrorKind::MissingFunction,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Cuda { .. } => ErrorKind::Cuda,
            Error::RankOutOfRange { .. } => ErrorKind::RankOutOfRange,
            Error::WrongDevice { .. } => ErrorKind::WrongDevice,
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::Aborted | Error::Revoked => ErrorKind::Aborted,
            Error::Finalized | Error::Suspended => ErrorKind::Closed,
            Error::Timeout { .. } => ErrorKind::Timeout,
        }
    }

    /// The NCCL result code behind this error: a NCCL call's, or the one
    /// `ncclGetVersion` failed with while the library was loaded
    /// ([`LoadError::VersionQuery`](nccl_sys::LoadError::VersionQuery)).
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            Error::Nccl { code, .. } => Some(*code),
            Error::Library(nccl_sys::LoadError::VersionQuery { code, .. }) => {
                u32::try_from(*code).ok().map(ResultCode)
            }
            _ => None,
        }
    }

    /// True when a wait ran past its deadline ([`ErrorKind::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        self.kind() == ErrorKind::Timeout
    }

    /// The error of a failed CUDA driver call made during `during`, as a
    /// function for `map_err`: `stream.synchronize().map_err(Error::cuda("a
    /// copy"))?`. nccl-tensor, nccl-group and the benches use this one
    /// variant (through their `From<nccl_core::Error>`) rather than a
    /// `Cuda` of their own.
    pub fn cuda(during: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        move |source| Error::Cuda { during, source }
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
