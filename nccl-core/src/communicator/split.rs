//! Splitting a communicator (`ncclCommSplit`): by color and key, for the
//! same ranks, or for a list of ranks.

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Instant;

use nccl_sys::{NCCL_SPLIT_NOCOLOR, ncclComm, ncclComm_t, ncclConfig_t, ncclResult_t};

use super::Communicator;
use crate::config::{Config, RawConfig};
use crate::error::{Error, Result};
use crate::library::{check_accepted, require_version};
use crate::ranks::{from_c, to_c};

impl Communicator {
    /// Splits off a communicator of the same ranks (color 0, key = rank),
    /// like torch's `split_group` with one list of every rank.
    ///
    /// Collective: every rank calls it. `config` of `None` inherits this
    /// communicator's options.
    ///
    /// # Errors
    /// As [`Communicator::split`].
    pub fn split_all(&self, config: Option<&Config>) -> Result<Self> {
        self.split(Some(0), self.rank, config)?
            .ok_or_else(|| Error::InvalidArgument {
                argument: "split",
                expected: "a communicator for every rank".to_string(),
                given: "none for this rank".to_string(),
            })
    }

    /// Splits off a communicator of `ranks` only, like torch's
    /// `new_group`.
    ///
    /// Collective: every rank of this communicator calls it. A rank in `ranks`
    /// gets `Some`, with its new rank being its position in `ranks`; others get
    /// `None`. An empty `ranks` means "this rank is not in the new
    /// communicator, and does not know who is" (`NCCL_SPLIT_NOCOLOR`).
    ///
    /// Checks: every rank in `0..world_size`, no rank twice.
    ///
    /// # Errors
    /// Bad ranks, or as [`Communicator::split`].
    pub fn split_from(&self, ranks: &[usize], config: Option<&Config>) -> Result<Option<Self>> {
        self.check_distinct_ranks(ranks, "ranks", "rank in split_from")?;
        match ranks.iter().position(|&rank| rank == self.rank) {
            Some(position) => self.split(Some(0), position, config),
            None => self.split(None, 0, config),
        }
    }

    /// `ncclCommSplit` (NCCL 2.18+): ranks that pass the same `color` form
    /// a new communicator, ordered by `key` (ties by their rank here);
    /// `color` of `None` (`NCCL_SPLIT_NOCOLOR`) joins none and returns
    /// `None`.
    ///
    /// Collective: every rank calls it.
    ///
    /// # Errors
    /// A negative color, a key above `i32::MAX`, an invalid config, an old
    /// libnccl, NCCL's failure, or a nonblocking split past its timeout.
    pub fn split(
        &self,
        color: Option<i32>,
        key: usize,
        config: Option<&Config>,
    ) -> Result<Option<Self>> {
        if let Some(color) = color
            && color < 0
        {
            return Err(Error::InvalidArgument {
                argument: "color",
                expected: "a non-negative color, or None for NCCL_SPLIT_NOCOLOR".to_string(),
                given: color.to_string(),
            });
        }
        let c_key = to_c("key", key)?;
        let lib = self.shared.lib;
        require_version(lib, 2, 18, || "ncclCommSplit".to_string())?;
        let split = lib.functions().ncclCommSplit()?;
        let mut raw_config = self.raw_config(config)?;
        let config_ptr = config_ptr(&mut raw_config);
        let parent = self.raw_for_management()?;
        self.device.bind_to_thread()?;
        let child = AtomicPtr::<ncclComm>::new(std::ptr::null_mut());
        // SAFETY: `parent` is live; `child.as_ptr()` is a writable
        // `ncclComm_t` (an `AtomicPtr` has the layout of the pointer) that
        // outlives the call and the job NCCL may leave writing it, which
        // `adopt_child` waits for; `config_ptr` is null or points into
        // `raw_config`, which outlives the call.
        let result = unsafe {
            split(
                parent,
                color.unwrap_or(NCCL_SPLIT_NOCOLOR),
                c_key,
                child.as_ptr(),
                config_ptr,
            )
        };
        check_accepted(lib, "ncclCommSplit", result)?;
        crate::trace::event!(debug, parent_rank = self.rank, color = ?color, key, "ncclCommSplit issued");
        self.adopt_child(&child, color.is_some(), config, "ncclCommSplit")
    }

    /// Checks that `ranks` (the argument `argument`) are distinct ranks of
    /// this communicator, each `what` in an error.
    pub(super) fn check_distinct_ranks(
        &self,
        ranks: &[usize],
        argument: &'static str,
        what: &'static str,
    ) -> Result<()> {
        for (index, &rank) in ranks.iter().enumerate() {
            if rank >= self.world_size {
                return Err(Error::RankOutOfRange {
                    what,
                    given: rank,
                    world_size: self.world_size,
                });
            }
            if ranks[..index].contains(&rank) {
                return Err(Error::InvalidArgument {
                    argument,
                    expected: "distinct ranks".to_string(),
                    given: format!("rank {rank} twice"),
                });
            }
        }
        Ok(())
    }

    /// `config` as the loaded library's `ncclConfig_t` (checked against
    /// its release), or `None` for NCCL's defaults: what split, shrink and
    /// grow pass to NCCL, through [`config_ptr`].
    pub(super) fn raw_config(&self, config: Option<&Config>) -> Result<Option<RawConfig>> {
        config
            .map(|config| config.to_raw_for(self.shared.lib.version()))
            .transpose()
    }

    /// Takes the communicator `child` that `operation` (split or shrink)
    /// on this parent writes: waits for a nonblocking parent or child
    /// before reading it (NCCL runs it as the parent's job and writes it
    /// when done), then owns it, waits until it is ready and reads its
    /// rank and size.
    ///
    /// When this rank `expects` one, also waits (bounded by the timeout) for
    /// the pointer itself: a revoked nonblocking parent reports ready before
    /// its job has written it (seen on NCCL 2.28.9 and 2.30.7). `None` when
    /// NCCL made no communicator for this rank.
    pub(super) fn adopt_child(
        &self,
        child: &AtomicPtr<ncclComm>,
        expects: bool,
        config: Option<&Config>,
        operation: &'static str,
    ) -> Result<Option<Self>> {
        let blocking = config
            .and_then(Config::blocking_option)
            .unwrap_or(self.blocking);
        let waits = !self.blocking || !blocking;
        if waits {
            self.wait_ready(operation)?;
        }
        let mut raw: ncclComm_t = child.load(Ordering::Acquire);
        let started = Instant::now();
        while raw.is_null() && expects && waits {
            if started.elapsed() >= self.timeout {
                return Err(Error::Timeout {
                    operation,
                    waited: started.elapsed(),
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
            raw = child.load(Ordering::Acquire);
        }
        if raw.is_null() {
            return Ok(None);
        }
        let timeout = config.map_or(self.timeout, Config::wait_timeout);
        let child = Self::wrap(
            raw,
            self.shared.lib,
            self.device.clone(),
            0,
            1,
            blocking,
            timeout,
        );
        child.finish_child(operation).map(Some)
    }

    /// Waits until a new communicator made by `operation` is ready and
    /// reads its rank and size (owned already: an error aborts it).
    pub(super) fn finish_child(mut self, operation: &'static str) -> Result<Self> {
        if !self.blocking {
            self.wait_ready(operation)?;
        }
        self.rank = self.query("ncclCommUserRank", |f| f.ncclCommUserRank())?;
        self.world_size = self.query("ncclCommCount", |f| f.ncclCommCount())?;
        Ok(self)
    }

    /// Reads one rank or count through `ncclCommUserRank`-like calls.
    fn query(
        &self,
        name: &'static str,
        function: impl FnOnce(
            &nccl_sys::Functions,
        ) -> std::result::Result<
            unsafe extern "C" fn(ncclComm_t, *mut c_int) -> ncclResult_t,
            nccl_sys::MissingSymbol,
        >,
    ) -> Result<usize> {
        let raw = self.raw_for_call()?;
        let get = function(self.shared.lib.functions())?;
        // SAFETY: `raw` is live, a communicator of this library.
        let value = unsafe { super::raw::query(self.shared.lib, name, get, raw) }?;
        from_c(name, value)
    }
}

/// The pointer NCCL takes for `raw` ([`Communicator::raw_config`]): null
/// for NCCL's defaults.
pub(super) fn config_ptr(raw: &mut Option<RawConfig>) -> *mut ncclConfig_t {
    raw.as_mut()
        .map_or(std::ptr::null_mut(), RawConfig::as_mut_ptr)
}
