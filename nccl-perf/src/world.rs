//! The ranks of one launch, for the binaries that run as every rank of a
//! job (`nccl-launch -n N PROGRAM`, or torchrun): where this process
//! stands, the store its ranks meet at, and the meetings they need besides
//! NCCL's own (unique ids, barriers, values gathered from every rank).
//!
//! When a launcher's variables are in the environment (torchrun's, srun's,
//! mpirun's or mpiexec's: [`RendezvousConfig::from_env_if_launched`]) the
//! launch is read from them: rank 0 hosts the TCP store
//! on `MASTER_PORT` and every rank connects to it once. That one connection
//! serves this module's keys and every process group made with
//! [`World::group`] or [`World::group_member`]: a second
//! `ProcessGroup::from_env` would make rank 0 bind `MASTER_PORT` again,
//! which is taken. Without those variables the process is the whole world:
//! rank 0 of 1, over an in-process store.

use std::sync::Arc;
use std::time::Duration;

use nccl_core::UniqueId;
use nccl_group::store::meet::Meeting;
use nccl_group::{
    GroupOptions, InProcessStore, PrefixStore, ProcessGroup, RendezvousConfig, Store, StoreError,
};

use crate::error::BenchError;

/// The meeting of a launch's processes, scoped by the program's name.
pub(crate) type LaunchMeeting = Meeting<PrefixStore<Arc<dyn Store>>>;

/// Who a meeting waits for, as messages name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Who {
    /// An NCCL rank (one GPU).
    Rank,
    /// A process of the launch.
    Process,
}

impl Who {
    /// `rank 3`, `ranks 1, 3`, `process 2`, `processes 1, 2`.
    pub(crate) fn name(self, numbers: &[usize]) -> String {
        let noun = match (self, numbers.len()) {
            (Who::Rank, 1) => "rank",
            (Who::Rank, _) => "ranks",
            (Who::Process, 1) => "process",
            (Who::Process, _) => "processes",
        };
        let list: Vec<String> = numbers.iter().map(ToString::to_string).collect();
        format!("{noun} {}", list.join(", "))
    }
}

/// `error`, from the meeting called `what` of `who`s, in
/// `BenchError`'s terms: the ranks or processes that did not come
/// ([`BenchError::Absent`]), else as [`published`] has it.
pub(crate) fn met(error: impl Into<BenchError>, what: &str, who: Who) -> BenchError {
    match error.into() {
        BenchError::Store(StoreError::Absent {
            missing, waited, ..
        }) => BenchError::Absent {
            missing: who.name(&missing),
            what: what.to_string(),
            waited,
        },
        other => published(other),
    }
}

/// `error` in `BenchError`'s terms: the failure a process published is
/// [`BenchError::Peer`], with its exit status (1 for a code that is no
/// exit status); any other error stays as it is.
pub(crate) fn published(error: impl Into<BenchError>) -> BenchError {
    match error.into() {
        BenchError::Store(StoreError::PeerFailed {
            rank,
            message,
            code,
        }) => BenchError::Peer {
            origin: Who::Process.name(&[rank]),
            message,
            status: u8::try_from(code).unwrap_or(1),
        },
        other => other,
    }
}

/// This process's place in its launch, and the store its ranks share.
pub struct World {
    /// This process's rank.
    pub rank: usize,
    /// The number of ranks.
    pub size: usize,
    /// Whether a launcher started this process (false: the whole world
    /// alone, over an in-process store).
    pub launched: bool,
    /// This rank's GPU on its host (`LOCAL_RANK`; 0 on every simulated host).
    pub local_rank: usize,
    /// Whether nccl-launch runs the ranks as simulated hosts on one GPU
    /// (`NCCL_LAUNCH_SIMULATED_HOSTS=1`), where only host-side figures
    /// mean anything.
    pub simulated_hosts: bool,
    /// How long a meeting (and a group's communicator creation) waits for
    /// the other ranks: the store's timeout.
    pub timeout: Duration,
    /// The program's name, which scopes the meeting's keys.
    program: &'static str,
    store: Arc<dyn Store>,
    /// Where the store is, for error messages.
    address: String,
    meeting: LaunchMeeting,
}

impl World {
    /// The launch this process belongs to, read from the environment (see
    /// the module docs); `program` scopes the store keys of this module.
    ///
    /// # Errors
    /// [`BenchError::Store`] for a malformed launch variable (named in the
    /// message) or a store that cannot be hosted or reached.
    pub fn from_env(program: &'static str) -> Result<Self, BenchError> {
        let simulated_hosts =
            std::env::var_os(nccl_launch::SIMULATED_HOSTS_VAR).is_some_and(|value| value == "1");
        let world = match RendezvousConfig::from_env_if_launched()? {
            Some(config) => Self {
                local_rank: config.local_rank,
                launched: true,
                ..Self::meet(
                    program,
                    (config.rank, config.world_size),
                    Arc::from(config.connect()?),
                    config.store.to_string(),
                )?
            },
            None => Self::meet(
                program,
                (0, 1),
                Arc::new(InProcessStore::new()),
                "in-process".into(),
            )?,
        };
        Ok(Self {
            simulated_hosts,
            ..world
        })
    }

    /// Rank `rank` of `size` (`place`) over `store` (at `address`); not
    /// launched, on GPU 0.
    fn meet(
        program: &'static str,
        (rank, size): (usize, usize),
        store: Arc<dyn Store>,
        address: String,
    ) -> Result<Self, BenchError> {
        let timeout = store.default_timeout();
        Ok(Self {
            rank,
            size,
            launched: false,
            local_rank: 0,
            simulated_hosts: false,
            timeout,
            program,
            meeting: Self::meeting_at(program, (rank, size), &store, timeout)?,
            store,
            address,
        })
    }

    /// The meeting of `program`'s processes over `store`, as process
    /// `rank` of `size`, its waits bounded by `timeout`.
    fn meeting_at(
        program: &str,
        (rank, size): (usize, usize),
        store: &Arc<dyn Store>,
        timeout: Duration,
    ) -> Result<LaunchMeeting, BenchError> {
        Ok(Meeting::new(Arc::clone(store), rank, size)?
            .scoped(program)?
            .with_timeout(timeout))
    }

    /// Process `rank` of `size` over `store` (at `address`), as a launch
    /// of processes simulated by threads has it.
    #[cfg(test)]
    pub(crate) fn in_store(rank: usize, size: usize, store: Arc<dyn Store>, address: &str) -> Self {
        Self {
            launched: true,
            ..Self::meet("test", (rank, size), store, address.to_string()).unwrap()
        }
    }

    /// Where the launch's processes meet (this process as its rank).
    pub(crate) fn meeting(&self) -> &LaunchMeeting {
        &self.meeting
    }

    /// The NCCL unique id called `name`: rank 0 creates it and publishes
    /// it, the other ranks wait for it. Every rank asks for each name once.
    ///
    /// # Errors
    /// NCCL cannot create an id, rank 0 did not publish it in time, or
    /// the store fails.
    pub fn unique_id(&self, name: &str) -> Result<UniqueId, BenchError> {
        let bytes = self
            .meeting
            .share_from(0, &format!("unique-id/{name}"), || {
                Ok::<_, BenchError>(UniqueId::new()?.as_bytes().to_vec())
            })
            .map_err(|error| met(error, &format!("the sharing of {name:?}"), Who::Rank))?;
        Ok(UniqueId::try_from_slice(&bytes)?)
    }

    /// Returns once every rank has called it as often as this one.
    ///
    /// # Errors
    /// A rank does not come within the timeout, or the store fails.
    pub fn barrier(&self) -> Result<(), BenchError> {
        self.meeting
            .barrier(self.program)
            .map_err(|error| met(error, "a barrier", Who::Rank))
    }

    /// Every rank's `values` under `name`, in rank order, on every rank.
    ///
    /// # Errors
    /// A rank does not share them in time, the store fails, or a rank gave
    /// another number of values than this one (the ranks were started
    /// with other flags).
    pub fn all_gather(&self, name: &str, values: &[f64]) -> Result<Vec<Vec<f64>>, BenchError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let gathered = self
            .meeting
            .all_gather(name, &bytes)
            .map_err(|error| met(error, &format!("the exchange of {name:?}"), Who::Rank))?;
        (0..).zip(gathered)
            .map(|(rank, bytes)| {
                if bytes.len() != 8 * values.len() {
                    return Err(BenchError::Usage(format!(
                        "rank {rank} gave {} bytes under {name:?}, rank {} expected {} ({} values): \
                         start every rank with the same flags",
                        bytes.len(),
                        self.rank,
                        8 * values.len(),
                        values.len()
                    )));
                }
                Ok(bytes
                    .chunks_exact(8)
                    .map(|chunk| {
                        let mut value = [0; 8];
                        value.copy_from_slice(chunk);
                        f64::from_le_bytes(value)
                    })
                    .collect())
            })
            .collect()
    }

    /// Joins the process group `name` of every rank over the world's store,
    /// with `options` and the world's timeout for communicator creation.
    ///
    /// # Errors
    /// As [`GroupBuilder::build`](nccl_group::GroupBuilder::build).
    pub fn group(&self, name: &str, options: GroupOptions) -> Result<ProcessGroup, BenchError> {
        self.group_member(name, self.rank, self.size, options)
    }

    /// Joins the process group `name` as its member `rank` of `size` over
    /// the world's store, for a process that holds several members (one
    /// per GPU it drives); otherwise as [`World::group`].
    ///
    /// # Errors
    /// As [`GroupBuilder::build`](nccl_group::GroupBuilder::build).
    pub fn group_member(
        &self,
        name: &str,
        rank: usize,
        size: usize,
        options: GroupOptions,
    ) -> Result<ProcessGroup, BenchError> {
        Ok(ProcessGroup::builder(name)
            .rank(rank)
            .world_size(size)
            .store(Arc::clone(&self.store))
            .store_address(self.address.clone())
            .options(options.with_timeout(self.timeout))
            .build()?)
    }

    /// Waits, at most the world's timeout, for a grow of the process group
    /// `name` (made over the world's store) to take this process in, on
    /// its GPU, with `options` and the world's timeout for the grow's own
    /// waits.
    ///
    /// # Errors
    /// As [`GroupBuilder::join_grown`](nccl_group::GroupBuilder::join_grown).
    pub fn join_grown(
        &self,
        name: &str,
        options: GroupOptions,
    ) -> Result<ProcessGroup, BenchError> {
        Ok(ProcessGroup::builder(name)
            .store(Arc::clone(&self.store))
            .store_address(self.address.clone())
            .local_rank(self.local_rank)
            .options(options.with_timeout(self.timeout))
            .join_grown(self.timeout)?)
    }

    /// Leaves the launch. Rank 0 hosts the TCP store, so it waits until
    /// every other rank has said it is done with the store; the others
    /// say so and return at once.
    ///
    /// # Errors
    /// A rank does not finish within the timeout, a rank failed, or the
    /// store fails.
    pub fn finish(self) -> Result<(), BenchError> {
        self.leave_within(self.timeout)
    }

    /// [`World::finish`], with rank 0 waiting at most `timeout` (shorter
    /// after a failure: the others may be stuck).
    pub(crate) fn leave_within(&self, timeout: Duration) -> Result<(), BenchError> {
        Self::meeting_at(self.program, (self.rank, self.size), &self.store, timeout)?
            .leave(0)
            .map_err(|error| met(error, "the end of the run", Who::Process))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::assert_timeout_starting;
    use crate::threads::on_threads;

    /// Process `rank` of `size` over `store` (its waits end at the store's timeout).
    fn rank_of(rank: usize, size: usize, store: &Arc<dyn Store>) -> World {
        World::in_store(rank, size, Arc::clone(store), "in-process")
    }

    #[test]
    fn ranks_share_barriers_and_values() {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(Duration::from_secs(5)));
        let gathered = on_threads(3, |rank| {
            let world = rank_of(rank, 3, &store);
            world.barrier().unwrap();
            world.barrier().unwrap();
            let all = world.all_gather("v", &[rank as f64, -0.5]).unwrap();
            world.finish().unwrap();
            all
        });
        for all in gathered {
            assert_eq!(all, vec![vec![0.0, -0.5], vec![1.0, -0.5], vec![2.0, -0.5]]);
        }
    }

    #[test]
    fn a_rank_started_with_other_flags_is_named() {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(Duration::from_secs(5)));
        let values = [vec![0.0, 0.5], vec![1.0]];
        let messages = on_threads(2, |rank| {
            let world = rank_of(rank, 2, &store);
            world
                .all_gather("v", &values[rank])
                .unwrap_err()
                .to_string()
        });
        assert!(
            messages[0].starts_with("rank 1 gave 8 bytes"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].starts_with("rank 0 gave 16 bytes"),
            "{}",
            messages[1]
        );
        assert!(messages[1].contains("same flags"), "{}", messages[1]);
    }

    #[test]
    fn a_missing_rank_and_a_failed_process_in_the_benches_terms() {
        let store: Arc<dyn Store> =
            Arc::new(InProcessStore::with_timeout(Duration::from_millis(50)));
        let error = rank_of(0, 3, &store).barrier().unwrap_err();
        assert_timeout_starting(&error, "ranks 1, 2 did not reach a barrier within");
        let failing = rank_of(2, 3, &store);
        failing.meeting().fail("no GPU", 2).unwrap();
        let error = rank_of(1, 3, &store).barrier().unwrap_err();
        assert_eq!(error.to_string(), "process 2 failed: no GPU");
        assert_eq!(error.exit_code(), 2);
        let odd = published(StoreError::PeerFailed {
            rank: 0,
            message: "killed".into(),
            code: -9,
        });
        assert_eq!(odd.exit_code(), 1, "a status that is no exit status");
    }

    #[test]
    fn names_of_who_is_missing() {
        assert_eq!(Who::Rank.name(&[3]), "rank 3");
        assert_eq!(Who::Rank.name(&[1, 3]), "ranks 1, 3");
        assert_eq!(Who::Process.name(&[2]), "process 2");
        assert_eq!(Who::Process.name(&[0, 2]), "processes 0, 2");
    }
}
