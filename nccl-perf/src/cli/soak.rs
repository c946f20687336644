//! `--stall RANK:MS`: which rank of a `--soak` is slow, and by how much
//! (the run itself: `soak`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `--stall`: rank `rank` sleeps `ms` milliseconds before each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Which rank (of the launch) is slow.
    pub rank: usize,
    /// How long it sleeps before each step, in milliseconds (not 0).
    pub ms: u64,
}

impl Stall {
    /// The sleep before each of the slow rank's steps.
    pub fn duration(self) -> Duration {
        Duration::from_millis(self.ms)
    }
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.rank, self.ms)
    }
}

impl FromStr for Stall {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = |why: &str| {
            format!(
                "expected RANK:MS, a rank and a stall above 0 ms (e.g. 3:2000); got {text:?}{why}"
            )
        };
        let (rank, ms) = text.split_once(':').ok_or_else(|| refuse(""))?;
        let rank = rank
            .parse::<usize>()
            .map_err(|_| refuse(&format!(" (RANK {rank:?} is not a whole number)")))?;
        let ms = match ms.parse::<u64>() {
            Ok(0) => return Err(refuse(" (a stall of 0 ms is no stall)")),
            Ok(ms) => ms,
            Err(_) => return Err(refuse(&format!(" (MS {ms:?} is not a whole number)"))),
        };
        Ok(Self { rank, ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_parses_with_its_rank_and_milliseconds_and_prints_back() {
        let stall: Stall = "3:2000".parse().expect("parses");
        assert_eq!(stall, Stall { rank: 3, ms: 2000 });
        assert_eq!(stall.duration(), Duration::from_secs(2));
        assert_eq!(stall.to_string(), "3:2000");
    }

    #[test]
    fn a_malformed_stall_names_the_form_and_what_was_wrong() {
        for (text, why) in [
            ("3", "got \"3\""),
            ("x:2000", "RANK \"x\" is not a whole number"),
            ("3:-5", "MS \"-5\" is not a whole number"),
            ("3:0", "a stall of 0 ms is no stall"),
        ] {
            let error = text.parse::<Stall>().expect_err(text);
            assert!(error.starts_with("expected RANK:MS"), "{error}");
            assert!(error.contains(why), "{text}: {error}");
        }
    }
}
