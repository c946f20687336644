//! The main thread's side of a run: it gathers every rank's measurements
//! into table rows, in plan order, and writes them with the comment lines
//! around them as they complete.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use indicatif::ProgressBar;
use nccl_core::AbortHandle;
use nccl_group::ProcessGroup;

use super::barrier::RankBarrier;
use super::plan::Plan;
use super::rank::{Message, RowKey, Sample};
use crate::collective::{Collective, Mode};
use crate::env::Environment;
use crate::error::BenchError;
use crate::report::{
    DeviceInfo, Machine, Measurement, Ratio, Reporter, Row, average_busbw, collective_header,
    compare_footer, table_footer,
};
use crate::selection::RowSpec;
use crate::sizes::bandwidths;

/// What a finished run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Wrong elements over every row, mode, layer and rank.
    pub wrong: u64,
    /// Every row of every layer, in the order they were reported.
    pub rows: Vec<Row>,
}

/// Gathers the rank threads' messages: their measurements into rows, and
/// what it takes to stop them all should one fail.
pub struct Gatherer {
    receiver: Receiver<Message>,
    pending: HashMap<RowKey, Vec<Sample>>,
    aborts: Vec<AbortHandle>,
    groups: Vec<ProcessGroup>,
    world: usize,
    barrier: Arc<RankBarrier>,
    progress: ProgressBar,
}

/// The rank-averaged time (`None` unless every rank has one) and summed
/// wrong count of one mode.
fn combine(samples: &[Sample]) -> Sample {
    let times: Option<Vec<f64>> = samples.iter().map(|sample| sample.time_us).collect();
    let time_us = times
        .filter(|times| !times.is_empty())
        .map(|times| times.iter().sum::<f64>() / times.len() as f64);
    let wrong = samples
        .iter()
        .map(|sample| sample.wrong)
        .sum::<Option<u64>>();
    Sample { time_us, wrong }
}

fn io_error(source: std::io::Error) -> BenchError {
    BenchError::Io {
        what: "the output".to_string(),
        source,
    }
}

impl Gatherer {
    /// A gatherer of the messages of `world` rank threads, which meet at
    /// `barrier`; `progress` counts the rows.
    pub fn new(
        receiver: Receiver<Message>,
        world: usize,
        barrier: Arc<RankBarrier>,
        progress: ProgressBar,
    ) -> Self {
        Self {
            receiver,
            pending: HashMap::new(),
            aborts: Vec::new(),
            groups: Vec::new(),
            world,
            barrier,
            progress,
        }
    }

    /// Receives one message; a failure or a vanished rank is an error.
    fn receive(&mut self) -> Result<Option<(usize, DeviceInfo)>, BenchError> {
        match self.receiver.recv() {
            Ok(Message::Ready {
                rank,
                device,
                abort,
                groups,
            }) => {
                self.aborts.push(abort);
                self.groups.extend(groups);
                Ok(Some((rank, device)))
            }
            Ok(Message::Measured { key, sample }) => {
                self.pending.entry(key).or_default().push(sample);
                Ok(None)
            }
            Ok(Message::Finished) => Ok(None),
            Ok(Message::Failed { rank, error }) => Err(BenchError::Rank {
                rank,
                source: Box::new(error),
            }),
            Err(_) => Err(BenchError::Lost),
        }
    }

    /// The rank-averaged time and summed wrong count of `key`.
    fn gather(&mut self, key: RowKey) -> Result<Sample, BenchError> {
        loop {
            if self
                .pending
                .get(&key)
                .is_some_and(|samples| samples.len() >= self.world)
            {
                let samples = self.pending.remove(&key).unwrap_or_default();
                return Ok(combine(&samples));
            }
            self.receive()?;
        }
    }

    /// Breaks the barrier and aborts every rank's communicator and process
    /// groups, so that no rank stays blocked.
    pub fn stop_everyone(&self) {
        self.barrier.break_all();
        for abort in &self.aborts {
            let _ = abort.abort();
        }
        for group in &self.groups {
            // The process exits next, so an abort that stalls changes nothing.
            let _ = group.abort();
        }
    }

    /// Writes the whole output of `plan` on `env` to `reporter` as the
    /// ranks measure it: the preamble, then per collective its header, its
    /// rows and its footer.
    ///
    /// # Errors
    /// A failing or vanished rank, or output that cannot be written.
    pub fn report<W: Write>(
        &mut self,
        plan: &Plan,
        env: &Environment,
        reporter: &mut Reporter<W>,
    ) -> Result<Summary, BenchError> {
        let mut devices: Vec<Option<DeviceInfo>> = vec![None; self.world];
        while devices.iter().any(Option::is_none) {
            if let Some((rank, device)) = self.receive()? {
                devices[rank] = Some(device);
            }
        }
        let machine = Machine::new(env, devices.into_iter().flatten().collect());
        reporter.begin(plan, &machine).map_err(io_error)?;
        let mut summary = Summary::default();
        for (index, &collective) in plan.collectives.iter().enumerate() {
            reporter
                .lines(collective_header(collective, plan, &machine))
                .map_err(io_error)?;
            self.collective_table(plan, index, collective, reporter, &mut summary)?;
        }
        reporter.line("#").map_err(io_error)?;
        reporter.finish().map_err(io_error)?;
        Ok(summary)
    }

    /// The rows and footer of `collective`, the `index`-th of the plan,
    /// added to `summary` too.
    fn collective_table<W: Write>(
        &mut self,
        plan: &Plan,
        index: usize,
        collective: Collective,
        reporter: &mut Reporter<W>,
        summary: &mut Summary,
    ) -> Result<(), BenchError> {
        let specs = plan.rows(collective);
        let mut table_rows = Vec::with_capacity(specs.len());
        let mut baseline_rows = Vec::new();
        let mut wrong_total = 0;
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
                let out_of_place =
                    self.measurement(plan, collective, spec, key(Mode::OutOfPlace))?;
                let in_place = self.measurement(plan, collective, spec, key(Mode::InPlace))?;
                wrong_total += [out_of_place, in_place]
                    .iter()
                    .flatten()
                    .filter_map(|m| m.wrong)
                    .sum::<u64>();
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
                    ratio: None,
                    graph: plan.graph,
                });
            }
            let mut shown = rows.pop().ok_or(BenchError::Lost)?;
            if let Some(baseline) = rows.pop() {
                shown.ratio = Some(Ratio::between(&baseline, &shown));
                reporter.json_row(&baseline).map_err(io_error)?;
                summary.rows.push(baseline.clone());
                baseline_rows.push(baseline);
            }
            reporter.row(&shown).map_err(io_error)?;
            self.progress.inc(1);
            self.progress
                .set_message(format!("{} {} B", collective.name(), shown.size));
            summary.rows.push(shown.clone());
            table_rows.push(shown);
        }
        reporter
            .lines(table_footer(wrong_total, average_busbw(&table_rows)))
            .map_err(io_error)?;
        if let Some((a, b)) = plan.compare() {
            reporter
                .lines(compare_footer(a, b, &baseline_rows, &table_rows))
                .map_err(io_error)?;
        }
        summary.wrong += wrong_total;
        Ok(())
    }

    /// Every rank's measurement of `key`, of `collective`'s row `spec`,
    /// with its bandwidths; `None` where the layer cannot issue that mode.
    fn measurement(
        &mut self,
        plan: &Plan,
        collective: Collective,
        spec: &RowSpec,
        key: RowKey,
    ) -> Result<Option<Measurement>, BenchError> {
        let Sample { time_us, wrong } = self.gather(key)?;
        Ok(time_us.map(|time_us| {
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
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_combine_into_one_time() {
        let sample = |time_us, wrong| Sample { time_us, wrong };
        assert_eq!(
            combine(&[sample(Some(1.0), Some(0)), sample(Some(3.0), Some(2))]),
            sample(Some(2.0), Some(2))
        );
        assert_eq!(
            combine(&[sample(None, None), sample(None, None)]),
            sample(None, None)
        );
        assert_eq!(combine(&[sample(Some(1.0), None)]), sample(Some(1.0), None));
        // One rank without a time leaves the mode without one.
        assert_eq!(
            combine(&[sample(Some(1.0), Some(1)), sample(None, Some(1))]),
            sample(None, Some(2))
        );
    }
}
