//! Admitting new ranks into a live communicator (NCCL 2.29.2):
//! `ncclCommGetUniqueId` for the id, `ncclCommGrow` on the existing ranks
//! and on the new ones.

use nccl_sys::{ncclComm_t, ncclUniqueId};

use super::Communicator;
use super::revoke::no_communicator;
use crate::capabilities::{Capabilities, Capability};
use crate::config::Config;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::library::{check_accepted, library, require_version};
use crate::ranks::to_c;
use crate::unique_id::UniqueId;

impl Communicator {
    /// `ncclCommGetUniqueId` (NCCL 2.29.2): the id of the next
    /// [`grow`](Communicator::grow) of this communicator.
    ///
    /// One existing rank, the grow's root, calls it and hands the id to the new
    /// ranks (through a store, say); NCCL itself hands it to the existing ranks
    /// that need it.
    ///
    /// NCCL's rules: a new id cannot be made while the previous one is
    /// unused, each id serves one grow, and the next id waits until that
    /// grow has completed.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming 2.29.2 on an older libnccl; a
    /// communicator that is not live; NCCL's failure.
    pub fn grow_unique_id(&self) -> Result<UniqueId> {
        let lib = self.shared.lib;
        Capabilities::of(lib).require(Capability::Grow)?;
        let get = lib.functions().ncclCommGetUniqueId()?;
        let raw = self.raw_for_management()?;
        let mut id = ncclUniqueId {
            internal: [0; UniqueId::BYTES],
        };
        // SAFETY: `raw` is live (or revoked, which NCCL allows) and `id` is
        // a writable ncclUniqueId for the call.
        let result = unsafe { get(raw, &mut id) };
        check_accepted(lib, "ncclCommGetUniqueId", result)?;
        Ok(UniqueId::from_raw(id))
    }

    /// `ncclCommGrow` (NCCL 2.29.2) on an existing rank: a new communicator
    /// of `new_world_size` ranks, this rank keeping its rank, the new ranks
    /// joining through [`Communicator::join_grow`].
    ///
    /// Collective over every existing rank and every new one. The grow's root
    /// passes the id of its [`grow_unique_id`](Communicator::grow_unique_id);
    /// the other existing ranks pass `None`. `config` of `None` inherits this
    /// communicator's options. This communicator stays as it was, this rank's
    /// to drop.
    ///
    /// Checks: `new_world_size` above the current world size and at most
    /// `i32::MAX`.
    ///
    /// # Errors
    /// A bad size; [`Error::Unsupported`] naming 2.29.2 on an older
    /// libnccl; an invalid config, or one the library is too old for;
    /// NCCL's failure, or a timeout of a nonblocking grow.
    pub fn grow(
        &self,
        new_world_size: usize,
        unique_id: Option<&UniqueId>,
        config: Option<&Config>,
    ) -> Result<Self> {
        if new_world_size <= self.world_size {
            return Err(Error::InvalidArgument {
                argument: "new_world_size",
                expected: format!("more than the current {} ranks", self.world_size),
                given: new_world_size.to_string(),
            });
        }
        let c_new_world_size = to_c("new_world_size", new_world_size)?;
        if let Some(config) = config {
            config.validate()?;
        }
        let lib = self.shared.lib;
        Capabilities::of(lib).require(Capability::Grow)?;
        let grow = lib.functions().ncclCommGrow()?;
        let mut raw_config = self.raw_config(config)?;
        let config_ptr = super::split::config_ptr(&mut raw_config);
        let id = unique_id.map(|id| id.to_raw());
        let parent = self.raw_for_management()?;
        self.device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `parent` is live (or revoked, which NCCL allows); `id` is
        // null or a ncclUniqueId NCCL only reads; rank -1 is what existing
        // ranks pass; `raw` is writable; `config_ptr` is null or points into
        // `raw_config`; all outlive the call.
        let result = unsafe {
            grow(
                parent,
                c_new_world_size,
                id.as_ref().map_or(std::ptr::null(), |id| id as *const _),
                -1,
                &mut raw,
                config_ptr,
            )
        };
        let issued = check_accepted(lib, "ncclCommGrow", result);
        crate::trace::event!(
            debug,
            rank = self.rank,
            new_world_size,
            "ncclCommGrow issued"
        );
        // Unlike split and shrink, NCCL writes the new handle before
        // returning and runs the grow as the new communicator's job, not
        // the parent's: the new one is waited for, the parent is not.
        if raw.is_null() {
            return Err(issued
                .err()
                .unwrap_or_else(|| no_communicator("ncclCommGrow")));
        }
        let blocking = config
            .and_then(Config::blocking_option)
            .unwrap_or(self.blocking);
        let timeout = config.map_or(self.timeout, Config::wait_timeout);
        // Owned from here: an error below drops (and so aborts) it.
        let grown = Self::wrap(
            raw,
            lib,
            self.device.clone(),
            self.rank,
            new_world_size,
            blocking,
            timeout,
        );
        issued?;
        grown.finish_child("ncclCommGrow")
    }

    /// `ncclCommGrow` (NCCL 2.29.2) on a new rank: joins the grow of a
    /// communicator whose existing ranks call [`Communicator::grow`], as
    /// `rank` of `new_world_size` on `device`, with the root's
    /// [`grow_unique_id`](Communicator::grow_unique_id).
    ///
    /// A nonblocking `config` is waited for until ready, at most
    /// [`Config::with_timeout`].
    ///
    /// Checks: `rank` in `0..new_world_size`, `new_world_size` at most
    /// `i32::MAX`.
    ///
    /// # Errors
    /// A bad rank; no libnccl, or [`Error::Unsupported`] naming 2.29.2 on
    /// an older one; an invalid config, or one the library is too old for;
    /// NCCL's failure, or a timeout.
    pub fn join_grow(
        device: Device,
        new_world_size: usize,
        unique_id: &UniqueId,
        rank: usize,
        config: &Config,
    ) -> Result<Self> {
        if rank >= new_world_size {
            return Err(Error::RankOutOfRange {
                what: "rank",
                given: rank,
                world_size: new_world_size,
            });
        }
        let c_new_world_size = to_c("new_world_size", new_world_size)?;
        let c_rank = to_c("rank", rank)?;
        config.validate()?;
        let lib = library()?;
        require_version(lib, 2, 14, || "a communicator config".to_string())?;
        Capabilities::of(lib).require(Capability::Grow)?;
        let grow = lib.functions().ncclCommGrow()?;
        let mut raw_config = config.to_raw_for(lib.version())?;
        let id = unique_id.to_raw();
        device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: a null parent is how new ranks call it; `id` is read only;
        // `raw` is writable; `raw_config` outlives the call; the device's
        // context is current on this thread, as NCCL requires.
        let result = unsafe {
            grow(
                std::ptr::null_mut(),
                c_new_world_size,
                &id,
                c_rank,
                &mut raw,
                raw_config.as_mut_ptr(),
            )
        };
        let issued = check_accepted(lib, "ncclCommGrow", result);
        if raw.is_null() {
            return Err(issued
                .err()
                .unwrap_or_else(|| no_communicator("ncclCommGrow")));
        }
        // Owned from here: an error below drops (and so aborts) it.
        let joined = Self::wrap(
            raw,
            lib,
            device,
            rank,
            new_world_size,
            config.is_blocking(),
            config.wait_timeout(),
        );
        issued?;
        joined.finish_child("ncclCommGrow")
    }
}
