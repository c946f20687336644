//! The crate's tracing, behind its `tracing` feature: nccl-core's macros
//! (see its `trace` module), whose `cfg`s are evaluated here, in this
//! crate, against this crate's own `tracing` feature.

pub(crate) use nccl_core::{__trace_enter_span as enter_span, __trace_event as event};
