//! The clock of the group's records and watches: nanoseconds since one
//! instant of the process, so that an operation's enqueue time is
//! converted from an [`Instant`] once and read by the flight recorder and
//! the enqueue watch alike.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The instant every time counts from, and the same moment in
/// microseconds since the Unix epoch: fixed at the first use.
fn origin() -> &'static (Instant, u64) {
    static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
    ORIGIN.get_or_init(|| {
        let unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64);
        (Instant::now(), unix_us)
    })
}

/// Fixes the epoch, if nothing did yet: before anything is timed, so that no
/// time is clamped to it.
pub(crate) fn fix() {
    let _ = origin();
}

/// Nanoseconds from the epoch to `at` (0 before it).
pub(crate) fn nanos(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(origin().0).as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds from the epoch to now.
pub(crate) fn now() -> u64 {
    nanos(Instant::now())
}

/// The instant `nanos` nanoseconds after the epoch.
pub(crate) fn instant(nanos: u64) -> Instant {
    origin().0 + Duration::from_nanos(nanos)
}

/// The epoch in microseconds since the Unix epoch.
pub(crate) fn epoch_unix_us() -> u64 {
    origin().1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_converted_to_nanoseconds_and_back_is_the_same_instant() {
        let before = now();
        let at = Instant::now() + Duration::from_millis(3);
        let back = instant(nanos(at));
        assert!(back.max(at) - back.min(at) < Duration::from_micros(1));
        assert!(nanos(at) > before);
        assert!(epoch_unix_us() > 0);
    }
}
