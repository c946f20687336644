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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nccl_core::UniqueId;
use nccl_group::{GroupOptions, InProcessStore, ProcessGroup, RendezvousConfig, Store};

use crate::error::BenchError;

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
    /// The first part of this module's store keys (the program's name).
    program: &'static str,
    store: Arc<dyn Store>,
    /// Where the store is, for error messages.
    address: String,
    /// Barriers passed so far: the n-th barrier of every rank meets under
    /// the same key.
    barriers: AtomicU64,
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
        let world = if let Some(config) = RendezvousConfig::from_env_if_launched()? {
            let address = config.store.to_string();
            Self {
                rank: config.rank,
                size: config.world_size,
                local_rank: config.local_rank,
                launched: true,
                ..Self::alone(program, Arc::from(config.connect()?), address)
            }
        } else {
            Self::alone(
                program,
                Arc::new(InProcessStore::new()),
                "in-process".into(),
            )
        };
        Ok(Self {
            simulated_hosts,
            ..world
        })
    }

    /// Rank 0 of a world of 1 over `store` (at `address`): the whole world
    /// without a launch, and all but a launched rank's place in one.
    fn alone(program: &'static str, store: Arc<dyn Store>, address: String) -> Self {
        Self {
            rank: 0,
            size: 1,
            launched: false,
            local_rank: 0,
            simulated_hosts: false,
            timeout: store.default_timeout(),
            program,
            store,
            address,
            barriers: AtomicU64::new(0),
        }
    }

    /// Process `rank` of `size` over `store` (at `address`), as a launch
    /// of processes simulated by threads has it.
    #[cfg(test)]
    pub(crate) fn in_store(rank: usize, size: usize, store: Arc<dyn Store>, address: &str) -> Self {
        Self {
            rank,
            size,
            launched: true,
            ..Self::alone("test", store, address.to_string())
        }
    }

    /// The store key of `what`, scoped by the program's name.
    pub(crate) fn key(&self, what: &str) -> String {
        format!("{}/{what}", self.program)
    }

    /// The store the ranks share.
    pub(crate) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// The NCCL unique id called `name`: rank 0 creates it and publishes
    /// it, the other ranks wait for it. Every rank asks for each name once.
    ///
    /// # Errors
    /// NCCL cannot create an id, or the store fails or times out.
    pub fn unique_id(&self, name: &str) -> Result<UniqueId, BenchError> {
        let key = self.key(&format!("unique-id/{name}"));
        if self.rank == 0 {
            let id = UniqueId::new()?;
            self.store.set(&key, id.as_bytes())?;
            Ok(id)
        } else {
            Ok(UniqueId::try_from_slice(
                &self.store.get(&key, self.timeout)?,
            )?)
        }
    }

    /// Returns once every rank has called it as often as this one.
    ///
    /// # Errors
    /// The store fails, or a rank does not come within the timeout.
    pub fn barrier(&self) -> Result<(), BenchError> {
        let count = self.barriers.fetch_add(1, Ordering::Relaxed);
        let key = self.key(&format!("barrier/{count}"));
        let open = format!("{key}/open");
        if self.store.add(&key, 1)? == self.size as i64 {
            self.store.set(&open, b"")?;
        }
        Ok(self.store.wait(&[open.as_str()], self.timeout)?)
    }

    /// Every rank's `values` under `name`, in rank order, on every rank.
    ///
    /// # Errors
    /// The store fails or times out, or a rank gave another number of
    /// values than this one (the ranks were started with other flags).
    pub fn all_gather(&self, name: &str, values: &[f64]) -> Result<Vec<Vec<f64>>, BenchError> {
        let key = |rank: usize| self.key(&format!("{name}/{rank}"));
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.store.set(&key(self.rank), &bytes)?;
        (0..self.size)
            .map(|rank| {
                let bytes = self.store.get(&key(rank), self.timeout)?;
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
    /// As [`ProcessGroup::new`].
    pub fn group(&self, name: &str, options: GroupOptions) -> Result<ProcessGroup, BenchError> {
        self.group_member(name, self.rank, self.size, options)
    }

    /// Joins the process group `name` as its member `rank` of `size` over
    /// the world's store, for a process that holds several members (one
    /// per GPU it drives); otherwise as [`World::group`].
    ///
    /// # Errors
    /// As [`ProcessGroup::new`].
    pub fn group_member(
        &self,
        name: &str,
        rank: usize,
        size: usize,
        options: GroupOptions,
    ) -> Result<ProcessGroup, BenchError> {
        Ok(ProcessGroup::new(
            name,
            rank,
            size,
            Arc::clone(&self.store),
            self.address.clone(),
            options.with_timeout(self.timeout),
        )?)
    }

    /// Leaves the launch. Rank 0 hosts the TCP store, so it waits until
    /// every other rank has said it is done with the store; the others
    /// say so and return at once.
    ///
    /// # Errors
    /// The store fails, or a rank does not finish within the timeout.
    pub fn finish(self) -> Result<(), BenchError> {
        let key = |rank: usize| self.key(&format!("done/{rank}"));
        if self.rank != 0 {
            return Ok(self.store.set(&key(self.rank), b"")?);
        }
        let keys: Vec<String> = (1..self.size).map(key).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        Ok(self.store.wait(&keys, self.timeout)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Process `rank` of `size` over `store` (its waits end at the store's timeout).
    fn rank_of(rank: usize, size: usize, store: &Arc<dyn Store>) -> World {
        World::in_store(rank, size, Arc::clone(store), "in-process")
    }

    #[test]
    fn ranks_share_barriers_and_values() {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::with_timeout(Duration::from_secs(5)));
        let gathered: Vec<Vec<Vec<f64>>> = std::thread::scope(|scope| {
            let ranks: Vec<_> = (0..3)
                .map(|rank| {
                    let world = rank_of(rank, 3, &store);
                    scope.spawn(move || {
                        world.barrier().unwrap();
                        world.barrier().unwrap();
                        let all = world.all_gather("v", &[rank as f64, -0.5]).unwrap();
                        world.finish().unwrap();
                        all
                    })
                })
                .collect();
            ranks.into_iter().map(|rank| rank.join().unwrap()).collect()
        });
        for all in gathered {
            assert_eq!(all, vec![vec![0.0, -0.5], vec![1.0, -0.5], vec![2.0, -0.5]]);
        }
    }

    #[test]
    fn a_rank_started_with_other_flags_is_named() {
        let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
        store.set("test/v/0", &[0; 4]).unwrap();
        let message = rank_of(1, 2, &store)
            .all_gather("v", &[1.0])
            .unwrap_err()
            .to_string();
        assert!(message.starts_with("rank 0 gave 4 bytes"), "{message}");
        assert!(message.contains("same flags"), "{message}");
    }
}
