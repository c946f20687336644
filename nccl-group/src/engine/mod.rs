//! The group and its issue path: [`ProcessGroup`](crate::ProcessGroup)
//! and its state, the operation tables and batches, the buffers an
//! operation owns or borrows, [`Work`](crate::Work), capture into CUDA
//! graphs and their replays, registration, the communicator cache,
//! suspending it, and how the group fails, raises the alarm and dumps its
//! records.

pub(crate) mod alarm;
pub(crate) mod batch;
pub(crate) mod buffers;
pub(crate) mod builder;
pub(crate) mod cache;
pub(crate) mod capture;
pub(crate) mod captures;
pub(crate) mod checking;
pub(crate) mod comms;
pub(crate) mod dumping;
pub(crate) mod factory;
pub(crate) mod failing;
pub(crate) mod generation;
pub(crate) mod graph;
pub(crate) mod group;
pub(crate) mod handoff;
pub(crate) mod issue;
pub(crate) mod key;
pub(crate) mod liveness;
pub(crate) mod local_comms;
pub(crate) mod member;
pub(crate) mod memory;
pub(crate) mod membership;
pub(crate) mod multi;
pub(crate) mod ops;
pub(crate) mod ownership;
pub(crate) mod pool;
pub(crate) mod presence;
pub(crate) mod ras_beside;
pub(crate) mod recent;
pub(crate) mod register;
pub(crate) mod release;
pub(crate) mod shared_end;
pub(crate) mod suspending;
pub(crate) mod suspension;
pub(crate) mod tracked;
#[cfg(feature = "async")]
pub(crate) mod waker;
pub(crate) mod work;
pub(crate) mod work_buffers;
#[cfg(feature = "async")]
pub(crate) mod work_future;
