//! How a run measures and reports, beyond what it runs: nccl-tests'
//! rotation, aggregation (`-m`), blocking (`-z`), checks (`-c`), CPU time
//! (`-C`), timestamps (`-S`), the NULL stream (`-y`), the timeout (`-T`),
//! misalignment (`-u`), JSON file (`-J`), per-iteration timing (`-I`,
//! `-K`) and memory report (`-M`), read from the flags once
//! ([`crate::cli::Args::method`]), plus the one-line notes on the flags
//! that cannot apply here; and how a row's time comes from the ranks'
//! (`-a`, [`Average`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::buffers::Memory;

/// How sizes grow from one row to the next (`-f`, or `-i` with `-f 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Multiplied by this factor.
    Factor(u64),
    /// This many bytes more.
    Bytes(u64),
}

impl Step {
    /// The step of `-f factor -i bytes`, as nccl-tests picks it.
    pub const fn new(factor: u64, bytes: u64) -> Self {
        if factor > 1 {
            Step::Factor(factor)
        } else {
            Step::Bytes(bytes)
        }
    }
}

impl fmt::Display for Step {
    /// As nccl-tests prints it: `2(factor)`, `1048576(bytes)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Factor(factor) => write!(f, "{factor}(factor)"),
            Step::Bytes(bytes) => write!(f, "{bytes}(bytes)"),
        }
    }
}

/// nccl-tests' `-z`: whether and where the timed loop waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Blocking {
    /// `-z 0`: calls back to back, one wait at the end.
    #[default]
    None,
    /// `-z 1`: wait and meet the other ranks after each call (each group
    /// of `-m` calls); the time includes the meeting.
    WaitAndBarrier,
    /// `-z 2`: wait after each call (each group of `-m` calls).
    Wait,
    /// `-z 3`: wait and meet the other ranks after each iteration; the
    /// time excludes the meetings.
    WaitAndBarrierUntimed,
}

impl Blocking {
    /// The mode of `-z value` (0 to 3).
    pub const fn from_flag(value: u8) -> Option<Self> {
        match value {
            0 => Some(Blocking::None),
            1 => Some(Blocking::WaitAndBarrier),
            2 => Some(Blocking::Wait),
            3 => Some(Blocking::WaitAndBarrierUntimed),
            _ => None,
        }
    }

    /// Whether the loop waits for the GPU after each iteration.
    pub const fn waits(self) -> bool {
        !matches!(self, Blocking::None)
    }

    /// Whether the ranks meet after each iteration.
    pub const fn meets(self) -> bool {
        matches!(
            self,
            Blocking::WaitAndBarrier | Blocking::WaitAndBarrierUntimed
        )
    }

    /// The line nccl-tests prints for this mode, if any.
    pub const fn header_line(self) -> Option<&'static str> {
        match self {
            Blocking::None => None,
            Blocking::WaitAndBarrier => {
                Some("# Blocking Enabled: wait and barrier after each inner iteration (-m) ")
            }
            Blocking::Wait => {
                Some("# Blocking Enabled: wait after each inner iteration (-m), no barrier ")
            }
            Blocking::WaitAndBarrierUntimed => Some(
                "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ",
            ),
        }
    }
}

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

/// How a run measures and reports (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Method {
    /// How sizes grow (`-f`, `-i`), as the output describes the sweep.
    pub step: Step,
    /// Whether each iteration moves to the next offset of the buffers, as
    /// nccl-tests does (`--no-rotate` turns it off).
    pub rotate: bool,
    /// Bytes each send and receive buffer holds (`-e`, as nccl-tests
    /// allocates them), before the misalignment.
    pub capacity_bytes: u64,
    /// Elements the buffers are misaligned by (`-u`).
    pub unalign: usize,
    /// Calls per timed iteration, issued in one NCCL group (`-m`).
    pub agg_iters: u32,
    /// Where the timed loop waits (`-z`).
    pub blocking: Blocking,
    /// How many times each size and mode is checked (`-c`; 0: never).
    pub checks: u32,
    /// Report the time the host spent issuing the calls instead of the
    /// time until they completed (`-C 1`).
    pub cpu_time: bool,
    /// End each row with the time it was printed (`-S 1`).
    pub timestamps: bool,
    /// Issue on the NULL stream instead of a created one (`-y 1`).
    pub stream_null: bool,
    /// Who allocates the send and receive buffers (`--alloc`; NCCL with
    /// `-R 1`); the group layers' own tensors are cudarc's either way.
    pub memory: Memory,
    /// Register the send and receive buffers (NCCL's memory) with the
    /// rank's communicator (`-R 1`), as nccl-tests does; the group
    /// layers' own tensors are not registered.
    pub register: bool,
    /// Give up on any wait for the GPU after this long (`-T`; `None`: never).
    pub timeout: Option<Duration>,
    /// Where nccl-tests' JSON document goes (`-J`); `None` without `-J` or
    /// when its name does not end in `.json` (nccl-tests writes nothing then).
    pub output_file: Option<PathBuf>,
    /// `-I 1`: each timed iteration is timed with CUDA events, and this
    /// many leading iterations (`-K`) are left out of the statistics;
    /// `None` without `-I 1` (and with `-G`, which turns it off).
    pub per_iter: Option<u32>,
    /// Report the GPU memory used (`-M 1`).
    pub memory_report: bool,
    /// One line per flag that is accepted but cannot apply as it does in
    /// nccl-tests, each starting with `# note:`.
    pub notes: Vec<String>,
}

impl Default for Method {
    /// nccl-tests' defaults, with rotation, for buffers of 128 MiB.
    fn default() -> Self {
        Self {
            step: Step::Factor(2),
            rotate: true,
            capacity_bytes: 128 << 20,
            unalign: 0,
            agg_iters: 1,
            blocking: Blocking::None,
            checks: 1,
            cpu_time: false,
            timestamps: false,
            stream_null: false,
            memory: Memory::Cudarc,
            register: false,
            timeout: None,
            output_file: None,
            per_iter: None,
            memory_report: false,
            notes: Vec::new(),
        }
    }
}

impl Method {
    /// Whether results are checked at all.
    pub const fn checks_results(&self) -> bool {
        self.checks > 0
    }

    /// Elements of `elem_size` bytes each buffer holds for the rotation
    /// (at least `largest`, the largest call's extent), before `-u`.
    pub fn capacity_elems(&self, elem_size: usize, largest: usize) -> usize {
        let capacity =
            usize::try_from(self.capacity_bytes / elem_size.max(1) as u64).unwrap_or(usize::MAX);
        if self.rotate {
            capacity.max(largest)
        } else {
            largest
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_modes() {
        let modes: Vec<Blocking> = (0..4).filter_map(Blocking::from_flag).collect();
        assert_eq!(
            modes,
            vec![
                Blocking::None,
                Blocking::WaitAndBarrier,
                Blocking::Wait,
                Blocking::WaitAndBarrierUntimed
            ]
        );
        assert_eq!(Blocking::from_flag(4), None);
        assert_eq!(
            modes
                .iter()
                .map(|m| (m.waits(), m.meets()))
                .collect::<Vec<_>>(),
            vec![(false, false), (true, true), (true, false), (true, true)]
        );
        assert!(Blocking::None.header_line().is_none());
        for mode in &modes[1..] {
            assert!(
                mode.header_line()
                    .is_some_and(|line| line.starts_with("# Blocking Enabled: "))
            );
        }
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
    fn steps_as_nccl_tests_prints_them() {
        assert_eq!(Step::new(4, 1 << 20).to_string(), "4(factor)");
        assert_eq!(Step::new(1, 1 << 20).to_string(), "1048576(bytes)");
        assert_eq!(Step::new(0, 64), Step::Bytes(64));
    }

    #[test]
    fn capacity_follows_the_largest_size() {
        let method = Method {
            capacity_bytes: 1 << 30,
            ..Method::default()
        };
        assert_eq!(method.capacity_elems(4, 1000), 1 << 28);
        assert_eq!(method.capacity_elems(4, 1 << 29), 1 << 29);
        let fixed = Method {
            rotate: false,
            ..method
        };
        assert_eq!(fixed.capacity_elems(4, 1000), 1000);
        assert!(Method::default().checks_results());
    }
}
