//! Process 0's output: every rank's samples combined into table rows, in
//! plan order, written with the comment lines around them as they
//! complete.

use std::io::Write;

use indicatif::ProgressBar;

use super::plan::Plan;
use super::protocol::{RowKey, Sample};
use super::reduce::combine;
use crate::collective::{Collective, Mode};
use crate::error::BenchError;
use crate::memory::MemoryUsage;
use crate::per_iter::PerIter;
use crate::report::{
    Machine, Measurement, Ratio, Reporter, Row, collective_footer, collective_header,
    wrong_elements,
};
use crate::selection::RowSpec;
use crate::sizes::bandwidths;

/// What a finished run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Wrong elements over every row, mode, layer and rank.
    pub wrong: u64,
    /// Every row of every layer, in the order they were reported (process
    /// 0's; empty elsewhere).
    pub rows: Vec<Row>,
}

fn io_error(source: std::io::Error) -> BenchError {
    BenchError::Io {
        what: "the output".to_string(),
        source,
    }
}

/// The end of the output after the tables: with `-M 1` the memory report
/// of every rank's `memory`, then the last comment line, and `-J`'s
/// document closed.
///
/// # Errors
/// Output that cannot be written.
pub fn finish<W: Write>(
    reporter: &mut Reporter<W>,
    memory: Option<&[MemoryUsage]>,
) -> Result<(), BenchError> {
    if let Some(memory) = memory {
        reporter
            .line(&MemoryUsage::max(memory).line())
            .map_err(io_error)?;
    }
    reporter.line("#").map_err(io_error)?;
    reporter.finish().map_err(io_error)
}

/// Writes the tables of `plan` on `machine` to `reporter`, one row after
/// another as `samples` gives every rank's samples of each key (in rank
/// order); `progress` counts the rows.
pub struct Tables<'a, W: Write, F> {
    /// What runs.
    pub plan: &'a Plan,
    /// Where the lines go.
    pub reporter: &'a mut Reporter<W>,
    /// Counts the rows.
    pub progress: &'a ProgressBar,
    /// Every rank's samples of a key, in rank order.
    pub samples: F,
}

impl<W, F> Tables<'_, W, F>
where
    W: Write,
    F: FnMut(RowKey) -> Result<Vec<Sample>, BenchError>,
{
    /// The output on `machine` up to [`finish`]: the preamble, then per
    /// collective its header, its rows and its footer.
    ///
    /// # Errors
    /// A failing or absent rank, or output that cannot be written.
    pub fn write(mut self, machine: &Machine) -> Result<Summary, BenchError> {
        let plan = self.plan;
        self.reporter.begin(plan, machine).map_err(io_error)?;
        let mut summary = Summary::default();
        for (index, &collective) in plan.collectives.iter().enumerate() {
            self.reporter
                .lines(collective_header(collective, plan, machine))
                .map_err(io_error)?;
            self.collective_table(index, collective, &mut summary)?;
        }
        Ok(summary)
    }

    /// The rows and footer of `collective`, the `index`-th of the plan,
    /// added to `summary` too.
    fn collective_table(
        &mut self,
        index: usize,
        collective: Collective,
        summary: &mut Summary,
    ) -> Result<(), BenchError> {
        let plan = self.plan;
        let specs = plan.rows(collective);
        let mut table_rows = Vec::with_capacity(specs.len());
        let mut baseline_rows = Vec::new();
        for (row_index, spec) in specs.iter().enumerate() {
            let counts = &spec.counts;
            let mut rows = Vec::with_capacity(plan.layers.len());
            for (slot, layer) in plan.layers.iter().enumerate() {
                let key = |mode| RowKey {
                    collective: index,
                    row: row_index,
                    mode,
                    layer: slot,
                };
                let (out_of_place, out_of_place_per_iter) =
                    self.measurement(collective, spec, key(Mode::OutOfPlace))?;
                let (in_place, in_place_per_iter) =
                    self.measurement(collective, spec, key(Mode::InPlace))?;
                rows.push(Row {
                    collective: collective.name(),
                    layer: layer.name(),
                    world_size: plan.world,
                    size: counts.printed_bytes(spec.dtype.size_bytes()),
                    count: counts.param,
                    dtype: spec.dtype.short_name(),
                    redop: collective.redop_column(spec.op),
                    root: collective.root_column(spec.root),
                    out_of_place,
                    in_place,
                    out_of_place_per_iter,
                    in_place_per_iter,
                    cpu_time: plan.method.cpu_time,
                    ratio: None,
                    graph: plan.graph,
                });
            }
            let mut shown = rows.pop().ok_or(BenchError::Lost)?;
            if let Some(baseline) = rows.pop() {
                shown.ratio = Some(Ratio::between(&baseline, &shown));
                self.reporter.json_row(&baseline).map_err(io_error)?;
                summary.rows.push(baseline.clone());
                baseline_rows.push(baseline);
            }
            self.reporter.row(&shown).map_err(io_error)?;
            self.progress.inc(1);
            self.progress
                .set_message(format!("{} {} B", collective.name(), shown.size));
            summary.rows.push(shown.clone());
            table_rows.push(shown);
        }
        let baseline = plan.compare().map(|_| baseline_rows.as_slice());
        self.reporter
            .lines(collective_footer(&table_rows, baseline))
            .map_err(io_error)?;
        summary.wrong += wrong_elements(&table_rows) + wrong_elements(&baseline_rows);
        Ok(())
    }

    /// Every rank's measurement of `key`, of `collective`'s row `spec`,
    /// with its bandwidths (`None` where the layer cannot issue that mode),
    /// and with `-I 1` its per-iteration report.
    fn measurement(
        &mut self,
        collective: Collective,
        spec: &RowSpec,
        key: RowKey,
    ) -> Result<(Option<Measurement>, Option<PerIter>), BenchError> {
        let plan = self.plan;
        let samples = (self.samples)(key)?;
        let Sample { time_us, wrong, .. } = combine(&samples, plan.average);
        let per_iter = plan.method.per_iter.and_then(|skip| {
            let ranks: Vec<Option<&[f64]>> = samples
                .iter()
                .map(|sample| sample.iter_us.as_deref())
                .collect();
            PerIter::of_ranks(&ranks, plan.ranks_per_process(), plan.iters as usize, skip)
        });
        let measurement = time_us.map(|time_us| {
            let bandwidth = bandwidths(
                collective,
                &spec.counts,
                spec.dtype.size_bytes(),
                plan.world,
                time_us,
            );
            Measurement {
                time_us,
                algbw: bandwidth.algbw,
                busbw: bandwidth.busbw,
                wrong,
            }
        });
        Ok((measurement, per_iter))
    }
}

#[cfg(test)]
mod tests {
    use nccl_sys::Version;

    use super::*;
    use crate::report::DeviceInfo;
    use crate::runner::plan_of;

    /// The output of `flags` at world size 4 where rank r measured
    /// `r + 1` µs and found `wrong[r]` wrong elements in every mode.
    fn tables(flags: &[&str], wrong: [u64; 4]) -> (String, Summary) {
        let plan = plan_of(flags, 4);
        let devices = (0..4)
            .map(|rank| DeviceInfo {
                rank,
                ordinal: 0,
                name: "GPU".to_string(),
                pci: "0000:00:00".to_string(),
                host: format!("host{rank}"),
                pid: 100 + rank as u32,
            })
            .collect();
        let machine = Machine {
            nccl_version: Version::new(2, 28, 3),
            nccl_path: "libnccl.so.2".to_string(),
            native_all_to_all: true,
            devices,
        };
        let mut out = Vec::new();
        let mut reporter = Reporter::new(&mut out, None);
        let summary = Tables {
            plan: &plan,
            reporter: &mut reporter,
            progress: &ProgressBar::hidden(),
            samples: |_| {
                Ok((0..4)
                    .map(|rank| Sample {
                        time_us: Some(rank as f64 + 1.0),
                        wrong: Some(wrong[rank]),
                        iter_us: Some(vec![rank as f64 + 1.0; 20]),
                    })
                    .collect())
            },
        }
        .write(&machine)
        .unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    #[test]
    fn rows_follow_average_and_sum_the_wrong_elements() {
        let flags = ["--layer", "raw", "-b", "1K", "-e", "2K", "all_reduce"];
        let (text, summary) = tables(&flags, [0, 1, 0, 2]);
        // Two sizes, two modes, 3 wrong elements each.
        assert_eq!(summary.wrong, 12);
        assert_eq!(summary.rows.len(), 2);
        let time = |summary: &Summary| summary.rows[0].out_of_place.unwrap().time_us;
        assert_eq!(time(&summary), 2.5);
        assert_eq!(summary.rows[0].world_size, 4);
        assert!(
            text.contains("#  Rank  3 Group  0 Pid    103 on      host3 device  0"),
            "{text}"
        );
        // Without -I, no per-iteration report; with it, the slowest rank's
        // times, in the table and the rows.
        assert_eq!(summary.rows[0].out_of_place_per_iter, None);
        let (text, per_iter) = tables(&[&flags[..], &["-I", "1", "-K", "2"]].concat(), [0; 4]);
        let report = per_iter.rows[1].in_place_per_iter.clone().unwrap();
        assert_eq!(report.times_us, [4.0; 20]);
        assert_eq!((report.skipped_iterations, report.stats.p99_us), (2, 4.0));
        assert!(
            text.contains("  i_min    i_max    i_p99    i_cv%"),
            "{text}"
        );
        for (flag, expected) in [("0", 1.0), ("1", 2.5), ("2", 1.0), ("3", 4.0)] {
            let (_, summary) = tables(&[&flags[..], &["-a", flag]].concat(), [0; 4]);
            assert_eq!(time(&summary), expected, "-a {flag}");
            assert_eq!(summary.wrong, 0);
        }
    }

    #[test]
    fn the_memory_report_ends_the_output_before_the_last_line() {
        let usage = |init| MemoryUsage {
            init,
            buffers: 1 << 20,
            collective: 0,
        };
        let mut out = Vec::new();
        let mut reporter = Reporter::new(&mut out, None);
        finish(&mut reporter, Some(&[usage(3 << 20), usage(5 << 20)])).unwrap();
        finish(&mut Reporter::new(Vec::new(), None), None).unwrap();
        drop(reporter);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# GPU memory usage     : Initialization 5.00 MB | User-Allocated 1.00 MB | Collective 0.00 B | Total  6.00 MB\n#\n"
        );
    }
}
