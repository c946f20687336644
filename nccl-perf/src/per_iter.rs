//! `-I 1`: nccl-tests 2.19's per-iteration timing. Each timed iteration
//! of a rank is bracketed by CUDA events on its stream
//! (`timing::IterEvents`); here every rank's times become a row's figures
//! as nccl-tests makes them (`BenchTime` in its `src/common.cu`,
//! `computeIterStats` in `src/util.cu`): per iteration the longest time
//! over a process's ranks (a process row), then the longest over the
//! process rows (`times_us`), and nccl-tests' statistics of those after the
//! first `-K` iterations. With `--batches K` the times are every batch's
//! iterations in the order they ran, and `-K` leaves out the first
//! iterations of each batch.

use serde::{Deserialize, Serialize};

/// nccl-tests' statistics of per-iteration times (`struct IterStats` and
/// the coefficient of variation `writePerIterReport` derives), in
/// microseconds, under nccl-tests' JSON names.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterStats {
    /// The shortest iteration.
    pub min_us: f64,
    /// The longest iteration.
    pub max_us: f64,
    /// The mean.
    pub avg_us: f64,
    /// The median: the `n / 2`-th of the sorted times.
    pub p50_us: f64,
    /// The 95th percentile, nearest rank.
    pub p95_us: f64,
    /// The 99th percentile, nearest rank (the maximum below 100 samples).
    pub p99_us: f64,
    /// The population standard deviation.
    pub stdev_us: f64,
    /// `stdev / avg` in percent; 0 when the mean is not positive.
    pub cv_pct: f64,
}

/// nccl-tests' `percentileIndex`, `min(n - 1, (n * p + 99) / 100 - 1)`:
/// the nearest-rank index of `percentile` among `n` (at least 1) sorted
/// samples.
fn percentile_index(n: usize, percentile: usize) -> usize {
    (n * percentile).div_ceil(100).saturating_sub(1).min(n - 1)
}

impl IterStats {
    /// The statistics of `times_us` as nccl-tests computes them; `None`
    /// without any time.
    pub fn of(times_us: &[f64]) -> Option<Self> {
        if times_us.is_empty() {
            return None;
        }
        let mut sorted = times_us.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let avg = sorted.iter().sum::<f64>() / n as f64;
        let variance = sorted
            .iter()
            .map(|time| (time - avg) * (time - avg))
            .sum::<f64>()
            / n as f64;
        let stdev = variance.sqrt();
        Some(Self {
            min_us: sorted[0],
            max_us: sorted[n - 1],
            avg_us: avg,
            p50_us: sorted[n / 2],
            p95_us: sorted[percentile_index(n, 95)],
            p99_us: sorted[percentile_index(n, 99)],
            stdev_us: stdev,
            cv_pct: if avg > 0.0 { stdev / avg * 100.0 } else { 0.0 },
        })
    }
}

/// One mode's per-iteration report: nccl-tests' `out_of_place_per_iter`
/// and `in_place_per_iter` objects, field for field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerIter {
    /// `-K`: the leading iterations (of each batch) left out of `stats`.
    pub skipped_iterations: u32,
    /// The statistics of `times_us` without the skipped iterations.
    #[serde(flatten)]
    pub stats: IterStats,
    /// Per iteration, the longest time over every rank, in the order run.
    pub times_us: Vec<f64>,
    /// With several processes: per process, per iteration, the longest
    /// time over its ranks (`times_us` is their maximum). Absent for one
    /// process, as in nccl-tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_process_max_times_us: Option<Vec<Vec<f64>>>,
}

/// Per iteration, the largest value over `rows` (as long as the shortest).
fn max_over(rows: &[&[f64]]) -> Vec<f64> {
    let len = rows.iter().map(|row| row.len()).min().unwrap_or(0);
    (0..len)
        .map(|index| {
            rows.iter()
                .map(|row| row[index])
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect()
}

impl PerIter {
    /// The report of every rank's per-iteration times (in rank order,
    /// `ranks_per_process` consecutive ranks per process), each the
    /// iterations of its batches of `iters`, leaving the first `skip` of
    /// each batch out of the statistics. `None` when a rank has no times
    /// or every iteration is skipped.
    pub fn of_ranks(
        ranks: &[Option<&[f64]>],
        ranks_per_process: usize,
        iters: usize,
        skip: u32,
    ) -> Option<Self> {
        let ranks: Vec<&[f64]> = ranks.iter().copied().collect::<Option<_>>()?;
        let processes: Vec<Vec<f64>> = ranks
            .chunks(ranks_per_process.max(1))
            .map(max_over)
            .collect();
        let rows: Vec<&[f64]> = processes.iter().map(Vec::as_slice).collect();
        let times_us = max_over(&rows);
        let kept: Vec<f64> = times_us
            .chunks(iters.max(1))
            .flat_map(|batch| batch.iter().skip(skip as usize).copied())
            .collect();
        Some(Self {
            skipped_iterations: skip,
            stats: IterStats::of(&kept)?,
            times_us,
            per_process_max_times_us: (processes.len() > 1).then_some(processes),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// nccl-tests' names of a one-process per-iteration report's fields, in
    /// its order.
    pub(crate) const PER_ITER_KEYS: [&str; 10] = [
        "skipped_iterations",
        "min_us",
        "max_us",
        "avg_us",
        "p50_us",
        "p95_us",
        "p99_us",
        "stdev_us",
        "cv_pct",
        "times_us",
    ];

    #[test]
    fn statistics_as_nccl_tests_computes_them() {
        assert_eq!(IterStats::of(&[]), None);
        let one = IterStats::of(&[4.0]).unwrap();
        assert_eq!(
            (one.min_us, one.max_us, one.p50_us, one.p99_us, one.stdev_us),
            (4.0, 4.0, 4.0, 4.0, 0.0)
        );
        // 1..=10 shuffled: nearest-rank p95 and p99 are the 10th value,
        // the median the 6th (index n / 2), the stdev the population's.
        let stats = IterStats::of(&[7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0]).unwrap();
        assert_eq!((stats.min_us, stats.max_us), (1.0, 10.0));
        assert_eq!((stats.avg_us, stats.p50_us), (5.5, 6.0));
        assert_eq!((stats.p95_us, stats.p99_us), (10.0, 10.0));
        assert!((stats.stdev_us - 8.25f64.sqrt()).abs() < 1e-12);
        assert!((stats.cv_pct - 8.25f64.sqrt() / 5.5 * 100.0).abs() < 1e-12);
        // 200 samples 1..=200: p95 is the 190th, p99 the 198th.
        let many: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        let stats = IterStats::of(&many).unwrap();
        assert_eq!(
            (stats.p50_us, stats.p95_us, stats.p99_us),
            (101.0, 190.0, 198.0)
        );
        assert_eq!(percentile_index(1, 99), 0);
        assert_eq!(percentile_index(100, 99), 98);
        assert_eq!(percentile_index(101, 99), 99);
        // A zero mean has no coefficient of variation.
        assert_eq!(IterStats::of(&[0.0, 0.0]).unwrap().cv_pct, 0.0);
    }

    #[test]
    fn ranks_reduce_to_process_rows_then_to_times() {
        // Two processes of two ranks, three iterations.
        let ranks: [&[f64]; 4] = [
            &[1.0, 5.0, 2.0],
            &[2.0, 1.0, 2.0],
            &[3.0, 1.0, 1.0],
            &[1.0, 1.0, 9.0],
        ];
        let given: Vec<Option<&[f64]>> = ranks.iter().copied().map(Some).collect();
        let report = PerIter::of_ranks(&given, 2, 3, 1).unwrap();
        assert_eq!(report.times_us, [3.0, 5.0, 9.0]);
        assert_eq!(
            report.per_process_max_times_us,
            Some(vec![vec![2.0, 5.0, 2.0], vec![3.0, 1.0, 9.0]])
        );
        assert_eq!(report.skipped_iterations, 1);
        // The first iteration is left out of the statistics.
        assert_eq!((report.stats.min_us, report.stats.max_us), (5.0, 9.0));
        // One process: no process rows.
        let alone = PerIter::of_ranks(&given, 4, 3, 0).unwrap();
        assert_eq!(alone.times_us, [3.0, 5.0, 9.0]);
        assert_eq!(alone.per_process_max_times_us, None);
        assert_eq!(alone.stats.min_us, 3.0);
        // Two batches of two: -K skips the first of each.
        let batches = PerIter::of_ranks(&[Some(&[8.0, 1.0, 7.0, 3.0][..])], 1, 2, 1).unwrap();
        assert_eq!(batches.times_us, [8.0, 1.0, 7.0, 3.0]);
        assert_eq!((batches.stats.min_us, batches.stats.max_us), (1.0, 3.0));
        // A rank without times, or nothing left after the skip: no report.
        assert_eq!(PerIter::of_ranks(&[Some(&[1.0][..]), None], 1, 1, 0), None);
        assert_eq!(PerIter::of_ranks(&[Some(&[1.0][..])], 1, 1, 1), None);
    }

    #[test]
    fn the_json_form_has_nccl_tests_names() {
        let report = PerIter::of_ranks(&[Some(&[2.0, 4.0][..])], 1, 2, 0).unwrap();
        let value = serde_json::to_value(&report).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for key in PER_ITER_KEYS {
            assert!(keys.contains(&key), "{key} in {keys:?}");
        }
        assert!(value.get("per_process_max_times_us").is_none());
        let cv = value["cv_pct"].as_f64().unwrap();
        assert!((cv - 100.0 / 3.0).abs() < 1e-12, "{cv}");
        let back: PerIter = serde_json::from_value(value).unwrap();
        assert_eq!(back, report);
    }
}
