//! The crate's tracing, behind its `tracing` feature. Call sites use these
//! macros, never `tracing` itself: with the feature on they are `tracing`'s
//! (the target is the calling module's path), with it off they expand to
//! nothing, so their arguments are not even evaluated and the cost is zero.
//!
//! * `event!(level, fields..., "message")`: an event at `trace`, `debug`,
//!   `info`, `warn` or `error`, in `tracing`'s field syntax.
//! * `enter_span!(level, "name", fields...)`: a span entered until the
//!   returned guard drops (`()` with the feature off).

#[cfg(feature = "tracing")]
macro_rules! event {
    ($level:ident, $($field:tt)+) => {
        ::tracing::$level!($($field)+)
    };
}

#[cfg(not(feature = "tracing"))]
macro_rules! event {
    ($($field:tt)*) => {};
}

#[cfg(feature = "tracing")]
macro_rules! enter_span {
    (trace, $($field:tt)+) => { ::tracing::trace_span!($($field)+).entered() };
    (debug, $($field:tt)+) => { ::tracing::debug_span!($($field)+).entered() };
    (info, $($field:tt)+) => { ::tracing::info_span!($($field)+).entered() };
}

#[cfg(not(feature = "tracing"))]
macro_rules! enter_span {
    ($($field:tt)*) => {
        ()
    };
}

pub(crate) use {enter_span, event};
