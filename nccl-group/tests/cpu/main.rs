//! nccl-group's CPU tests, one module per concern: the communicator cache and
//! its rendezvous, keys, error kinds, settings that must never panic, the
//! bad-input table (`bad_inputs`, which writes docs/bad-inputs.md), the
//! flight recorder's dumps and their analysis, the client of NCCL's RAS,
//! the types of operations on borrowed cudarc memory (`borrowed`), sub-groups
//! of groups without communicators (`subgroups`), the builder's refusals
//! (`builder`), the rules of a suspended group (`suspend`), the elastic
//! trainer's commit vote, pending joins and store (`elastic`), an untold
//! heal after a process exits over a TCP store (`presence`).

mod analysis;
mod bad_inputs;
mod borrowed;
mod builder;
mod cache;
mod cache_rendezvous;
mod dumps;
mod elastic;
mod error_kinds;
mod keys;
mod once_map;
mod presence;
mod ras;
mod settings_never_panic;
mod store_keys;
mod subgroups;
mod suspend;
