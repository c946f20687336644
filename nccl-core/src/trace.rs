//! The crate's tracing, behind its `tracing` feature. Call sites use these
//! macros, never `tracing` itself: with the feature on they are `tracing`'s
//! (the target is the calling module's path), with it off they expand to
//! nothing, so their arguments are not even evaluated and the cost is zero.
//!
//! * `event!(level, fields..., "message")`: an event at `trace`, `debug`,
//!   `info`, `warn` or `error`, in `tracing`'s field syntax.
//! * `enter_span!(level, "name", fields...);`: a span entered until the
//!   end of the enclosing block (nothing with the feature off).

// Exported (hidden) so that nccl-group, which depends on this crate, calls
// the same macros. The `cfg`s sit inside the expansions, so they are
// evaluated in the calling crate: its own `tracing` feature and dependency
// decide, not this crate's.

#[doc(hidden)]
#[macro_export]
macro_rules! __trace_event {
    ($level:ident, $($field:tt)+) => {{
        #[cfg(feature = "tracing")]
        ::tracing::$level!($($field)+);
    }};
}

// A statement, not a value: the guard is a `let` of the expansion (hygienic,
// so unnamed at the call site) that lives to the end of the enclosing block,
// and with the feature off there is no statement at all.
#[doc(hidden)]
#[macro_export]
macro_rules! __trace_enter_span {
    (trace, $($field:tt)+) => { $crate::__trace_enter_span!(@entered trace_span, $($field)+) };
    (debug, $($field:tt)+) => { $crate::__trace_enter_span!(@entered debug_span, $($field)+) };
    (info, $($field:tt)+) => { $crate::__trace_enter_span!(@entered info_span, $($field)+) };
    (@entered $span:ident, $($field:tt)+) => {
        #[cfg(feature = "tracing")]
        let _entered = ::tracing::$span!($($field)+).entered();
    };
}

pub(crate) use {__trace_enter_span as enter_span, __trace_event as event};

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::{enter_span, event};

    #[test]
    fn without_a_subscriber_or_the_feature_no_argument_is_evaluated() {
        let evaluated = Cell::new(false);
        event!(
            info,
            value = evaluated.replace(true),
            "an event nobody listens to"
        );
        enter_span!(
            debug,
            "a span nobody listens to",
            value = evaluated.replace(true)
        );
        assert!(!evaluated.get());
    }
}
