//! One row's figure from every rank's: the time as `-a` says
//! ([`Average`]) and the wrong elements summed.

use super::protocol::Sample;
use crate::method::Average;

/// Every rank's sample of one mode (in rank order) as one: the time
/// reduced by `average` (`None` unless every rank has one) and the wrong
/// elements summed (`None` unless every rank checked); the per-iteration
/// times are `PerIter::of_ranks`'s to combine, and left out here.
pub fn combine(samples: &[Sample], average: Average) -> Sample {
    let times: Option<Vec<f64>> = samples.iter().map(|sample| sample.time_us).collect();
    let wrong = samples
        .iter()
        .map(|sample| sample.wrong)
        .sum::<Option<u64>>();
    Sample {
        time_us: times.and_then(|times| average.of(&times)),
        wrong,
        iter_us: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time_us: Option<f64>, wrong: Option<u64>) -> Sample {
        Sample {
            time_us,
            wrong,
            iter_us: None,
        }
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
