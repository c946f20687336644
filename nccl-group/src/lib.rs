//! nccl-group: the multi-device cached process group.
//!
//! This crate is the application-facing layer over `nccl-core` and
//! `nccl-tensor`. Its first part is the **rendezvous layer** ([`store`]): the
//! key-value stores through which the ranks of a job meet (rank 0 publishes
//! the NCCL unique id, the others read it; counters and barriers), and the
//! launch configuration read from the environment as torchrun and Slurm set
//! it.
//!
//! ```no_run
//! use nccl_group::{RendezvousConfig, Store};
//!
//! let config = RendezvousConfig::from_env()?; // RANK, WORLD_SIZE, MASTER_ADDR, ...
//! let store = config.connect()?; // rank 0 hosts the TCP server
//! if config.rank == 0 {
//!     store.set("uid", b"...")?;
//! }
//! let uid = store.get_default("uid")?;
//! # let _ = uid;
//! # Ok::<(), nccl_group::StoreError>(())
//! ```
//!
//! Every blocking call takes a timeout and every failure is a
//! [`StoreError`] that names what was expected, what was seen and what to
//! do; nothing here panics or hangs.
#![forbid(unsafe_code)]

pub mod store;

pub use store::{
    FileStore, InProcessStore, PrefixStore, RendezvousConfig, Store, StoreError, StoreSpec,
    TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions,
};
