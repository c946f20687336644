//! Reading flight-recorder dumps back, for those without Python: which
//! collectives every rank issued alike, the first one where they did not
//! ([`first_divergence`]), and which ranks left no dump. What PyTorch's
//! `torchfrtrace` prints for its own dumps; the `nccl-frtrace` binary
//! prints it for a folder of this crate's ([`analyze_tree`]).
//!
//! The comparison works on [`Issued`] collectives, which come from this
//! crate's JSON (a [`FlightDump`] read back) or straight from the recorder
//! ([`Issued::from_record`]), so a check inside a running job can use it
//! on records exchanged between the ranks.

mod divergence;
mod folder;

use std::borrow::Cow;
use std::fmt;

#[cfg(feature = "cuda")]
use nccl_core::DataType;
use serde::{Deserialize, Serialize};

use crate::diagnostics::recorder::records::{FlightDump, OpRecord};

pub use divergence::{Comparison, Deviation, Divergence, compare, first_divergence};
pub use folder::{FolderAnalysis, Report, Unreadable, analyze, analyze_tree};

/// What one rank issued as one collective: everything that must agree
/// across the ranks.
///
/// Its JSON is that of [`OpRecord`]'s fields of the same names (the root is the
/// record's `peer`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issued {
    /// The collective's number among the group's collectives.
    pub collective_seq: u64,
    /// The operation (`all_reduce`, ...).
    pub op: Cow<'static, str>,
    /// The element type, as nccl-tests names it (`float`); `None` for
    /// operations without one (barrier, custom operations).
    pub dtype: Option<Cow<'static, str>>,
    /// Elements of the (first) input on each device.
    pub count: usize,
    /// The root of broadcast, reduce, gather and scatter.
    #[serde(rename = "peer")]
    pub root: Option<usize>,
    /// The reduction, as nccl-tests names it (`sum`).
    #[serde(default)]
    pub reduction: Option<Cow<'static, str>>,
}

impl Issued {
    /// The collective `record` is (`None` for a point-to-point operation).
    pub fn from_record(record: &OpRecord) -> Option<Self> {
        Some(Self {
            collective_seq: record.collective_seq?,
            op: record.op.clone(),
            dtype: record.dtype.clone(),
            count: record.count,
            root: record.peer,
            reduction: record.reduction.clone(),
        })
    }

    /// Collective `collective_seq` as the flight recorder describes an
    /// operation: its name, element type, input elements, root and
    /// reduction.
    #[cfg(feature = "cuda")]
    pub(crate) fn described(
        collective_seq: u64,
        op: &'static str,
        dtype: Option<DataType>,
        count: usize,
        root: Option<usize>,
        reduction: Option<&'static str>,
    ) -> Self {
        Self {
            collective_seq,
            op: Cow::Borrowed(op),
            dtype: dtype.map(|dtype| Cow::Borrowed(dtype.short_name())),
            count,
            root,
            reduction: reduction.map(Cow::Borrowed),
        }
    }

    /// What differs between this and `other` (`operation`, `data type`,
    /// `element count`, `root`, `reduction`); empty when every rank may
    /// issue both as one collective.
    ///
    /// Element counts are compared for the operations whose every rank passes
    /// as many elements: not for `all_to_all` (the list form takes any
    /// lengths), `all_to_all_single_split` and `scatter` (only the root's input
    /// is read), nor for custom operations.
    pub fn differences(&self, other: &Issued) -> Vec<&'static str> {
        if self.op != other.op {
            return vec!["operation"];
        }
        let counts_agree = matches!(
            &*self.op,
            "all_reduce" | "broadcast" | "reduce" | "all_gather" | "reduce_scatter" | "gather"
        );
        [
            (self.dtype != other.dtype, "data type"),
            (counts_agree && self.count != other.count, "element count"),
            (self.root != other.root, "root"),
            (self.reduction != other.reduction, "reduction"),
        ]
        .into_iter()
        .filter_map(|(differs, what)| differs.then_some(what))
        .collect()
    }
}

/// `all_reduce(float x 1024, sum)`, `broadcast(float x 16, root 0)`,
/// `barrier`.
impl fmt::Display for Issued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match &self.dtype {
            Some(dtype) => parts.push(format!("{dtype} x {}", self.count)),
            None if self.count > 0 => parts.push(format!("{} elements", self.count)),
            None => {}
        }
        parts.extend(self.reduction.as_ref().map(ToString::to_string));
        parts.extend(self.root.map(|root| format!("root {root}")));
        match parts.is_empty() {
            true => write!(f, "{}", self.op),
            false => write!(f, "{}({})", self.op, parts.join(", ")),
        }
    }
}

impl FlightDump {
    /// The collectives of the dump, oldest first.
    pub fn collectives(&self) -> Vec<Issued> {
        self.ops.iter().filter_map(Issued::from_record).collect()
    }
}

/// Ranks as `rank 3`, `ranks 0-2` or `ranks 0-2, 5`.
pub(crate) struct Ranks<'a>(pub(crate) &'a [usize]);

impl fmt::Display for Ranks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ranks = self.0.to_vec();
        ranks.sort_unstable();
        ranks.dedup();
        f.write_str(if ranks.len() == 1 { "rank " } else { "ranks " })?;
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for rank in ranks {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == rank => *last = rank,
                _ => runs.push((rank, rank)),
            }
        }
        let runs: Vec<String> = runs
            .iter()
            .map(|&(first, last)| match first == last {
                true => first.to_string(),
                false => format!("{first}-{last}"),
            })
            .collect();
        f.write_str(&runs.join(", "))
    }
}

#[cfg(test)]
mod tests;
