//! One row's figure from every rank's: the time as `-a` says (nccl-tests'
//! `average`: rank 0's, the mean, the minimum or the maximum over the
//! ranks) and the wrong elements summed.

use super::rank::Sample;

/// How a row's time comes from the ranks' times (`-a`, as nccl-tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Average {
    /// `-a 0`: rank 0's time.
    Rank0,
    /// `-a 1` (the default): the mean over the ranks.
    Mean,
    /// `-a 2`: the shortest.
    Min,
    /// `-a 3`: the longest.
    Max,
}

impl Average {
    /// The reduction of `-a value` (0 to 3; clap checks the range, and
    /// anything above 3 is taken as 3).
    pub const fn from_flag(value: u8) -> Self {
        match value {
            0 => Average::Rank0,
            1 => Average::Mean,
            2 => Average::Min,
            _ => Average::Max,
        }
    }

    /// `times` (in rank order, at least one) reduced; `None` when empty.
    pub fn of(self, times: &[f64]) -> Option<f64> {
        let first = *times.first()?;
        Some(match self {
            Average::Rank0 => first,
            Average::Mean => times.iter().sum::<f64>() / times.len() as f64,
            Average::Min => times.iter().copied().fold(first, f64::min),
            Average::Max => times.iter().copied().fold(first, f64::max),
        })
    }
}

/// Every rank's sample of one mode (in rank order) as one: the time
/// reduced by `average` (`None` unless every rank has one) and the wrong
/// elements summed (`None` unless every rank checked).
pub fn combine(samples: &[Sample], average: Average) -> Sample {
    let times: Option<Vec<f64>> = samples.iter().map(|sample| sample.time_us).collect();
    let wrong = samples
        .iter()
        .map(|sample| sample.wrong)
        .sum::<Option<u64>>();
    Sample {
        time_us: times.and_then(|times| average.of(&times)),
        wrong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time_us: Option<f64>, wrong: Option<u64>) -> Sample {
        Sample { time_us, wrong }
    }

    #[test]
    fn every_average_of_nccl_tests() {
        let times = [4.0, 1.0, 7.0, 2.0];
        let of = |flag| Average::from_flag(flag).of(&times);
        assert_eq!(
            (of(0), of(1), of(2), of(3)),
            (Some(4.0), Some(3.5), Some(1.0), Some(7.0))
        );
        assert_eq!(Average::Mean.of(&[]), None);
    }

    #[test]
    fn ranks_combine_into_one_row() {
        let samples = [sample(Some(1.0), Some(0)), sample(Some(3.0), Some(2))];
        assert_eq!(combine(&samples, Average::Mean), sample(Some(2.0), Some(2)));
        assert_eq!(
            combine(&samples, Average::Rank0),
            sample(Some(1.0), Some(2))
        );
        assert_eq!(combine(&samples, Average::Max), sample(Some(3.0), Some(2)));
        let missing = [sample(None, None), sample(None, None)];
        assert_eq!(combine(&missing, Average::Mean), sample(None, None));
        let alone = [sample(Some(1.0), None)];
        assert_eq!(combine(&alone, Average::Min), sample(Some(1.0), None));
        // One rank without a time leaves the mode without one.
        let partial = [sample(Some(1.0), Some(1)), sample(None, Some(1))];
        assert_eq!(combine(&partial, Average::Mean), sample(None, Some(2)));
    }
}
