//! Creating communicators: by rank (`ncclCommInitRank`), with a config,
//! for several local ranks in one group, and for all local GPUs
//! (`ncclCommInitAll`), with the argument checks they share.

use std::ffi::c_int;

use nccl_sys::{ncclComm_t, ncclResult_t};

use super::Communicator;
use super::wait::wait_all_ready;
use crate::config::Config;
use crate::device::Device;
use crate::error::{Error, Result, ResultCode};
use crate::group::Group;
use crate::library::{check, check_accepted, library, require_version};
use crate::ranks::to_c;
use crate::unique_id::UniqueId;

/// At least one device, none twice (NCCL allows one rank per GPU).
fn check_distinct(devices: &[Device]) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::InvalidArgument {
            argument: "devices",
            expected: "at least one device".to_string(),
            given: "an empty list".to_string(),
        });
    }
    let ordinal = |i: usize| devices[i].ordinal();
    match (0..devices.len()).find(|&i| (0..i).any(|j| ordinal(j) == ordinal(i))) {
        Some(duplicate) => Err(Error::InvalidArgument {
            argument: "devices",
            expected: "distinct devices (NCCL allows one rank per GPU)".to_string(),
            given: format!("device {} twice", ordinal(duplicate)),
        }),
        None => Ok(()),
    }
}

/// `world_size >= 1` and `rank` in `0..world_size`, as the C `int`s
/// NCCL takes: `(world_size, rank)`.
fn check_world(world_size: usize, rank: usize) -> Result<(c_int, c_int)> {
    if world_size < 1 {
        return Err(Error::InvalidArgument {
            argument: "world_size",
            expected: "at least 1".to_string(),
            given: world_size.to_string(),
        });
    }
    let c_world_size = to_c("world_size", world_size)?;
    if rank >= world_size {
        return Err(Error::RankOutOfRange {
            what: "rank",
            given: rank,
            world_size,
        });
    }
    Ok((c_world_size, to_c("rank", rank)?))
}

impl Communicator {
    /// Creates this rank's communicator (`ncclCommInitRank`).
    ///
    /// Every rank calls it, each in its own thread or process, with the same
    /// `unique_id` and `world_size`; it returns when all have joined.
    ///
    /// Checks: `world_size >= 1` and `rank` in `0..world_size`.
    ///
    /// # Errors
    /// Bad arguments, no CUDA driver or NCCL library, or NCCL's failure.
    pub fn new(
        device: Device,
        world_size: usize,
        unique_id: UniqueId,
        rank: usize,
    ) -> Result<Self> {
        let (c_world_size, c_rank) = check_world(world_size, rank)?;
        crate::trace::enter_span!(
            debug,
            "ncclCommInitRank",
            rank,
            world_size,
            device = device.ordinal()
        );
        let lib = library()?;
        let init = lib.functions().ncclCommInitRank()?;
        device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `raw` is writable; the id is passed by value; the device's
        // context is current on this thread, as NCCL requires.
        let result = unsafe { init(&mut raw, c_world_size, unique_id.to_raw(), c_rank) };
        check_accepted(lib, "ncclCommInitRank", result)?;
        crate::trace::event!(debug, "communicator created");
        Ok(Self::wrap(
            raw,
            lib,
            device,
            rank,
            world_size,
            true,
            Config::new().wait_timeout(),
        ))
    }

    /// Like [`Communicator::new`] with options (`ncclCommInitRankConfig`,
    /// NCCL 2.14+).
    ///
    /// A nonblocking config returns once NCCL reports the communicator ready,
    /// polling until [`Config::with_timeout`]; past it the communicator is
    /// aborted and [`Error::Timeout`] returned.
    ///
    /// # Errors
    /// As [`Communicator::new`], plus an invalid config or a timeout.
    pub fn with_config(
        device: Device,
        world_size: usize,
        unique_id: UniqueId,
        rank: usize,
        config: &Config,
    ) -> Result<Self> {
        let communicator = Self::start_init(device, world_size, unique_id, rank, config)?;
        communicator.wait_ready("ncclCommInitRankConfig")?;
        Ok(communicator)
    }

    /// `ncclCommInitRankConfig` without waiting for a nonblocking init
    /// to finish (inside a group it only finishes at the group's end).
    fn start_init(
        device: Device,
        world_size: usize,
        unique_id: UniqueId,
        rank: usize,
        config: &Config,
    ) -> Result<Self> {
        let (c_world_size, c_rank) = check_world(world_size, rank)?;
        crate::trace::enter_span!(
            debug,
            "ncclCommInitRankConfig",
            rank,
            world_size,
            device = device.ordinal(),
            blocking = config.is_blocking()
        );
        config.validate()?;
        let lib = library()?;
        require_version(lib, 2, 14, || "a communicator config".to_string())?;
        let mut raw_config = config.to_raw_for(lib.version())?;
        let init = lib.functions().ncclCommInitRankConfig()?;
        device.bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: as in `new`; `raw_config` outlives the call.
        let result = unsafe {
            init(
                &mut raw,
                c_world_size,
                unique_id.to_raw(),
                c_rank,
                raw_config.as_mut_ptr(),
            )
        };
        let created = check(lib, "ncclCommInitRankConfig", result);
        if raw.is_null() {
            return Err(created.err().unwrap_or_else(|| {
                Error::from_code(
                    "ncclCommInitRankConfig",
                    ResultCode(ncclResult_t::ncclInternalError.0),
                    Some("returned no communicator".to_string()),
                    None,
                )
            }));
        }
        // From here `communicator` owns the handle: an error below drops
        // (and so aborts) it.
        let communicator = Self::wrap(
            raw,
            lib,
            device,
            rank,
            world_size,
            config.is_blocking(),
            config.wait_timeout(),
        );
        created.map(|_| ())?;
        crate::trace::event!(debug, "communicator init issued");
        Ok(communicator)
    }

    /// Creates the communicators of several consecutive ranks of one
    /// communicator that this process drives, one per device
    /// (`ncclCommInitRankConfig` for each, inside one NCCL group, so no
    /// device waits for the others): `devices[i]` becomes rank
    /// `first_rank + i` of `world_size`.
    ///
    /// Every process of the communicator calls this (or
    /// [`Communicator::with_config`]) with the same `unique_id`. A nonblocking
    /// `config` bounds the whole creation by [`Config::with_timeout`]: past it
    /// every communicator is aborted and [`Error::Timeout`] returned, so a rank
    /// that never joins cannot hang the caller.
    ///
    /// Checks: at least one device, no device twice, and the ranks
    /// `first_rank .. first_rank + devices.len()` inside `0..world_size`.
    ///
    /// # Errors
    /// Bad arguments, an invalid config, a timeout, or NCCL's failure.
    pub fn init_local_ranks(
        devices: &[Device],
        world_size: usize,
        unique_id: UniqueId,
        first_rank: usize,
        config: &Config,
    ) -> Result<Vec<Self>> {
        check_distinct(devices)?;
        let last_rank = first_rank.saturating_add(devices.len() - 1);
        check_world(world_size, first_rank)?;
        check_world(world_size, last_rank)?;
        if let [device] = devices {
            return Ok(vec![Self::with_config(
                device.clone(),
                world_size,
                unique_id,
                first_rank,
                config,
            )?]);
        }
        let group = Group::start()?;
        // Every init is tried and the group ended before any communicator
        // is dropped: dropping one aborts it, which must not happen while
        // the group that holds its init is still open.
        let started: Vec<Result<Self>> = devices
            .iter()
            .zip(first_rank..)
            .map(|(device, rank)| {
                Self::start_init(device.clone(), world_size, unique_id, rank, config)
            })
            .collect();
        let ended = group.end();
        let communicators = started.into_iter().collect::<Result<Vec<_>>>()?;
        let _ = ended?;
        wait_all_ready(&communicators, "ncclCommInitRankConfig")?;
        Ok(communicators)
    }

    /// Creates one communicator per device for a single process that drives
    /// several GPUs (`ncclCommInitAll`); rank `i` is on `devices[i]`.
    ///
    /// Checks: at least one device, no device twice.
    ///
    /// # Errors
    /// Bad arguments, or NCCL's failure.
    pub fn init_all(devices: &[Device]) -> Result<Vec<Self>> {
        check_distinct(devices)?;
        let ordinals = devices
            .iter()
            .map(|device| to_c("devices", device.ordinal()))
            .collect::<Result<Vec<c_int>>>()?;
        crate::trace::enter_span!(debug, "ncclCommInitAll", devices = ?ordinals);
        let lib = library()?;
        let init_all = lib.functions().ncclCommInitAll()?;
        devices[0].bind_to_thread()?;
        let world_size = devices.len();
        let c_world_size = to_c("devices", world_size)?;
        let mut raws: Vec<ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raws` has room for `world_size` handles and `ordinals`
        // lists `world_size` distinct devices.
        let result = unsafe { init_all(raws.as_mut_ptr(), c_world_size, ordinals.as_ptr()) };
        check_accepted(lib, "ncclCommInitAll", result)?;
        Ok(raws
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (raw, device))| {
                Self::wrap(
                    raw,
                    lib,
                    device.clone(),
                    rank,
                    world_size,
                    true,
                    Config::new().wait_timeout(),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::check_world;
    use crate::error::Error;

    #[test]
    fn a_world_size_past_i32_is_refused_naming_it() {
        match check_world(1 << 31, 0) {
            Err(Error::InvalidArgument {
                argument, given, ..
            }) => assert_eq!((argument, given.as_str()), ("world_size", "2147483648")),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn ranks_in_the_world_become_c_ints() {
        assert_eq!(check_world(4, 3).unwrap(), (4, 3));
        let largest = usize::try_from(i32::MAX).unwrap();
        assert_eq!(
            check_world(largest, largest - 1).unwrap(),
            (i32::MAX, i32::MAX - 1)
        );
        assert!(matches!(
            check_world(4, 4),
            Err(Error::RankOutOfRange {
                what: "rank",
                given: 4,
                world_size: 4
            })
        ));
        assert!(matches!(
            check_world(0, 0),
            Err(Error::InvalidArgument {
                argument: "world_size",
                ..
            })
        ));
    }
}
