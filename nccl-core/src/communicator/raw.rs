//! Adopting a `ncclComm_t` made elsewhere ([`Communicator::from_raw`]) and
//! handing one back ([`Communicator::into_raw`]): who owns the handle, and
//! so who finalizes and destroys it, moves with the call.

use std::ffi::c_int;

use nccl_sys::{NcclLibrary, ncclComm_t, ncclResult_t};

use super::{Communicator, FINALIZED, LIVE, RELEASED, REVOKED, SUSPENDED};
use crate::config::Config;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::library::{check_accepted, library};
use crate::ranks::from_c;

/// Reads one `int` property of `raw` through `query`
/// (`ncclCommUserRank`, `ncclCommCount`, `ncclCommCuDevice`).
///
/// # Safety
/// `raw` must be a live communicator of `lib`.
pub(super) unsafe fn query(
    lib: &NcclLibrary,
    name: &'static str,
    query: unsafe extern "C" fn(ncclComm_t, *mut c_int) -> ncclResult_t,
    raw: ncclComm_t,
) -> Result<c_int> {
    let mut value: c_int = -1;
    // SAFETY: the caller vouches for `raw`; `value` is writable.
    let result = unsafe { query(raw, &mut value) };
    check_accepted(lib, name, result)?;
    Ok(value)
}

impl Communicator {
    /// Adopts a communicator that something else created, PyTorch for
    /// instance (`ProcessGroupNCCL` exposes its communicators' pointers):
    /// from here this `Communicator` owns `raw`, and its drop destroys it
    /// (after [`finalize`](Communicator::finalize)) or aborts it, as for one
    /// made here.
    ///
    /// [`into_raw`](Communicator::into_raw) hands it back.
    ///
    /// The rank, the world size and the device are read from NCCL
    /// (`ncclCommUserRank`, `ncclCommCount`, `ncclCommCuDevice`). `config`
    /// says how `raw` was created: whether it is blocking, and for a
    /// nonblocking one the timeout of this crate's waits on it; its other
    /// settings are not read. A nonblocking communicator is waited for
    /// until NCCL reports it ready, at most that timeout.
    ///
    /// # Safety
    /// The caller transfers the ownership of `raw` to the returned
    /// communicator:
    /// * `raw` is a live communicator (initialised, not finalized, destroyed
    ///   or aborted), created by the libnccl this process loaded
    ///   ([`library()`](crate::library); for PyTorch's communicators, point
    ///   `NCCL_LIBRARY` at PyTorch's own libnccl), with the blocking mode
    ///   `config` states;
    /// * nothing else uses, finalizes, destroys or aborts `raw` from now
    ///   on: the previous owner forgets it (with PyTorch, the process group
    ///   must not be used or destroyed while this communicator lives, or
    ///   it is handed back first);
    /// * no other `Communicator` owns it: calling `from_raw` twice on one
    ///   handle, or on [`as_raw`](Communicator::as_raw) of a living
    ///   communicator, makes two owners that both destroy it.
    ///
    /// Safe code cannot break the last rule:
    /// [`into_raw`](Communicator::into_raw) consumes its communicator and
    /// detaches its abort handles, so a handle passes from one owner to the
    /// next and is finalized and destroyed once.
    ///
    /// # Errors
    /// A null `raw`, an invalid `config`, no libnccl, NCCL's refusal of one
    /// of the queries, a device the CUDA driver refuses, or a timeout while
    /// a nonblocking communicator gets ready (it is then aborted).
    pub unsafe fn from_raw(raw: ncclComm_t, config: &Config) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::InvalidArgument {
                argument: "raw",
                expected: "a live ncclComm_t".to_string(),
                given: "a null pointer".to_string(),
            });
        }
        config.validate()?;
        let lib = library()?;
        let functions = lib.functions();
        // SAFETY: the caller vouches that `raw` is a live communicator of
        // `lib`; the three queries only read it.
        let (world_size, rank, ordinal) = unsafe {
            (
                query(lib, "ncclCommCount", functions.ncclCommCount()?, raw)?,
                query(lib, "ncclCommUserRank", functions.ncclCommUserRank()?, raw)?,
                query(lib, "ncclCommCuDevice", functions.ncclCommCuDevice()?, raw)?,
            )
        };
        let device = usize::try_from(ordinal)
            .map_err(|_| Error::InvalidArgument {
                argument: "raw",
                expected: "a communicator on a CUDA device (ncclCommCuDevice >= 0)".to_string(),
                given: format!("device {ordinal}"),
            })
            .and_then(Device::new);
        // Owned from here: an error below drops (and so aborts) it, as the
        // caller gave it up.
        let communicator = Self::wrap(
            raw,
            lib,
            device?,
            from_c("ncclCommUserRank", rank)?,
            from_c("ncclCommCount", world_size)?,
            config.is_blocking(),
            config.wait_timeout(),
        );
        crate::trace::event!(
            debug,
            rank,
            world_size,
            device = ordinal,
            blocking = config.is_blocking(),
            "adopted a communicator made elsewhere (from_raw)"
        );
        if !communicator.blocking {
            communicator.wait_ready("ncclCommGetAsyncError (from_raw)")?;
        }
        Ok(communicator)
    }

    /// Hands the `ncclComm_t` back, with its ownership: the communicator is
    /// consumed without being finalized, destroyed or aborted, and its
    /// [`AbortHandle`](crate::AbortHandle)s become no-ops (they can no
    /// longer reach the handle).
    ///
    /// The caller now finalizes and destroys it (`ncclCommFinalize` and
    /// `ncclCommDestroy`, or `ncclCommAbort`), or gives it to
    /// [`from_raw`](Communicator::from_raw) again. A finalized communicator is
    /// handed back too; the caller then only destroys it.
    ///
    /// # Errors
    /// [`Error::Aborted`] if it was aborted (by an abort handle, say): the
    /// handle is gone, and nothing is handed back. [`Error::Revoked`] or
    /// [`Error::Suspended`] for a communicator that only an abort may
    /// release: it is aborted, as a drop would.
    pub fn into_raw(self) -> Result<ncclComm_t> {
        if self.shared.claim_from(&[LIVE, FINALIZED], RELEASED) {
            crate::trace::event!(
                debug,
                rank = self.rank,
                world_size = self.world_size,
                "handed a communicator back (into_raw)"
            );
            Ok(self.shared.raw)
        } else {
            match self.shared.state.load(std::sync::atomic::Ordering::Acquire) {
                state @ (REVOKED | SUSPENDED) => Err(Self::unusable(state)),
                _ => Err(Error::Aborted),
            }
        }
    }
}
