//! nccl-rendezvous' CPU tests that need no process of their own, one
//! module per concern. The tests that start copies of this crate's test
//! binaries (`multiprocess`, `netns_hosts`, `store_abuse`,
//! `store_descriptors`, `store_file_crash`, `launch_env_torchrun`) are
//! binaries of their own.

mod c10d_store;
mod launch_env;
mod launch_env_namespace;
mod store_cas_counter;
mod store_conformance;
mod store_security;
