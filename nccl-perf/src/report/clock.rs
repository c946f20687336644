//! Wall-clock timestamps as nccl-tests prints them (`%Y-%m-%d %H:%M:%S`),
//! in UTC: the standard library has no time zones, and nothing here may
//! call the C library's `localtime`.

use std::time::{SystemTime, UNIX_EPOCH};

/// `time` as `YYYY-MM-DD HH:MM:SS` in UTC (the epoch for a time before it).
pub fn utc_timestamp(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Now, as [`utc_timestamp`] writes it.
pub fn utc_now() -> String {
    utc_timestamp(SystemTime::now())
}

/// The proleptic Gregorian (year, month, day) of `days` days after
/// 1970-01-01 (the days-to-civil algorithm: 400-year eras of 146097 days,
/// years starting on March 1st so that the leap day ends them).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(seconds: u64) -> String {
        utc_timestamp(UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[test]
    fn known_instants() {
        assert_eq!(at(0), "1970-01-01 00:00:00");
        assert_eq!(at(86_399), "1970-01-01 23:59:59");
        assert_eq!(at(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(at(951_868_800), "2000-03-01 00:00:00");
        assert_eq!(at(1_709_210_096), "2024-02-29 12:34:56");
        assert_eq!(at(1_798_761_599), "2026-12-31 23:59:59");
        assert_eq!(at(4_107_542_400), "2100-03-01 00:00:00");
        assert_eq!(
            utc_timestamp(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01 00:00:00"
        );
        assert_eq!(utc_now().len(), "YYYY-MM-DD HH:MM:SS".len());
    }
}
