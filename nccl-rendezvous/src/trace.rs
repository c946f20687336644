//! The crate's tracing, behind its `tracing` feature. Call sites use these
//! macros, never `tracing` itself: with the feature on they are `tracing`'s
//! (the target is the calling module's path), with it off they expand to
//! nothing, so their arguments are not even evaluated and the cost is zero.
//!
//! * `event!(level, fields..., "message")`: an event at `trace`, `debug`,
//!   `info`, `warn` or `error`, in `tracing`'s field syntax.

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

pub(crate) use event;
