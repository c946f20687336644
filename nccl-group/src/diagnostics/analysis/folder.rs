//! A folder of dumps read back: the dumps by group and generation, the
//! files that could not be read, the ranks without a dump, and how their
//! collectives compare.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Comparison, Issued, Ranks, compare};
use crate::diagnostics::recorder::records::{FlightDump, OpState};

/// A file of the folder that is not a readable dump (truncated, say).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    /// The file.
    pub path: PathBuf,
    /// The rank its name gives (`rank3.json`), if it does.
    pub rank: Option<usize>,
    /// What is wrong with it.
    pub error: String,
}

/// The dumps of one group instance (one name and generation) in a folder.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The group's name.
    pub group: String,
    /// Its generation.
    pub generation: u64,
    /// Its number of ranks (the largest any dump gives).
    pub world_size: usize,
    /// The dumps, by rank.
    pub dumps: BTreeMap<usize, FlightDump>,
    /// The ranks with no readable dump.
    pub missing: Vec<usize>,
    /// How the dumps' collectives compare.
    pub comparison: Comparison,
}

impl Report {
    /// Whether every rank left a dump and all agree.
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty() && self.comparison.divergence.is_none()
    }
}

/// Every dump of one folder, read back (in JSON, as `nccl-frtrace --json`
/// prints it: these fields, the dumps whole).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct FolderAnalysis {
    /// The folder.
    pub folder: PathBuf,
    /// One report per group instance with dumps in it.
    pub reports: Vec<Report>,
    /// The `.json` files that are not readable dumps.
    pub unreadable: Vec<Unreadable>,
}

impl FolderAnalysis {
    /// Whether every file was read, every rank left a dump and all agree.
    pub fn is_clean(&self) -> bool {
        self.unreadable.is_empty() && self.reports.iter().all(Report::is_clean)
    }
}

/// The `.json` files directly in `folder`, in name order.
fn json_files(folder: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "json") && path.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// The rank a dump's file name gives: `rank3.json`, or the older
/// `<group>-g<generation>-rank3-pid<pid>.json`.
fn rank_of(path: &Path) -> Option<usize> {
    let stem = path.file_stem()?.to_str()?;
    let after = &stem[stem.rfind("rank")? + "rank".len()..];
    after.split('-').next()?.parse().ok()
}

/// Reads every `.json` file directly in `folder` as a dump (this crate's
/// JSON, [`FlightDump`](crate::FlightDump)), and compares the ranks of each
/// group instance ([`compare`]).
///
/// # Errors
/// The folder cannot be listed. A file that cannot be read or parsed is
/// not an error: it is listed in [`FolderAnalysis::unreadable`].
pub fn analyze(folder: &Path) -> std::io::Result<FolderAnalysis> {
    let mut unreadable = Vec::new();
    let mut instances: BTreeMap<(String, u64), BTreeMap<usize, FlightDump>> = BTreeMap::new();
    for path in json_files(folder)? {
        let parsed = std::fs::read_to_string(&path)
            .map_err(|error| error.to_string())
            .and_then(|text| FlightDump::from_json(&text).map_err(|error| error.to_string()));
        match parsed {
            Ok(dump) => {
                let key = (dump.group.clone(), dump.generation);
                instances.entry(key).or_default().insert(dump.rank, dump);
            }
            Err(error) => unreadable.push(Unreadable {
                rank: rank_of(&path),
                path,
                error,
            }),
        }
    }
    let reports = instances
        .into_iter()
        .map(|((group, generation), dumps)| {
            let world_size = dumps.values().map(|d| d.world_size).max().unwrap_or(0);
            let missing = (0..world_size)
                .filter(|rank| !dumps.contains_key(rank))
                .collect();
            let collectives = dumps
                .iter()
                .map(|(&rank, dump)| (rank, dump.collectives()))
                .collect();
            Report {
                group,
                generation,
                world_size,
                comparison: compare(&collectives),
                dumps,
                missing,
            }
        })
        .collect();
    Ok(FolderAnalysis {
        folder: folder.to_path_buf(),
        reports,
        unreadable,
    })
}

/// [`analyze`] of `folder` if it holds `.json` files, else of each of its
/// subfolders that does (a dump folder of several incidents), in name
/// order.
///
/// # Errors
/// A folder that cannot be listed.
pub fn analyze_tree(folder: &Path) -> std::io::Result<Vec<FolderAnalysis>> {
    if !json_files(folder)?.is_empty() {
        return Ok(vec![analyze(folder)?]);
    }
    let mut subfolders: Vec<PathBuf> = std::fs::read_dir(folder)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    subfolders.sort();
    let mut analyses = Vec::new();
    for subfolder in subfolders {
        if !json_files(&subfolder)?.is_empty() {
            analyses.push(analyze(&subfolder)?);
        }
    }
    Ok(analyses)
}

/// The collectives of `dump` as `#first-#last`.
fn collective_range(dump: &FlightDump) -> String {
    let seqs: Vec<u64> = dump.ops.iter().filter_map(|op| op.collective_seq).collect();
    match (seqs.first(), seqs.last()) {
        (Some(first), Some(last)) => format!("collectives #{first}-#{last}"),
        _ => "no collective".to_string(),
    }
}

/// The GPU times of `dump`'s timed operations
/// ([`OpRecord::gpu_duration`](crate::OpRecord::gpu_duration)): how many,
/// their sum and the longest, or `None` when none was timed.
fn gpu_times(dump: &FlightDump) -> Option<String> {
    let timed: Vec<_> = dump
        .ops
        .iter()
        .filter_map(|op| Some((op, op.gpu_duration?)))
        .collect();
    let (longest, time) = timed.iter().max_by_key(|(_, time)| *time)?;
    let total: std::time::Duration = timed.iter().map(|(_, time)| *time).sum();
    let number = longest.collective_seq.map_or_else(
        || format!("operation #{}", longest.seq),
        |n| format!("#{n}"),
    );
    Some(format!(
        "{} timed operations, {:.3} ms on the GPU in all, the longest {} {number} ({:.3} ms)",
        timed.len(),
        total.as_secs_f64() * 1e3,
        longest.op,
        time.as_secs_f64() * 1e3,
    ))
}

fn seq(n: Option<u64>) -> String {
    n.map_or_else(|| "none".to_string(), |n| format!("#{n}"))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranks: Vec<usize> = self.dumps.keys().copied().collect();
        writeln!(
            f,
            "group {:?}, generation {}: dumps of {} of {}",
            self.group,
            self.generation,
            Ranks(&ranks),
            self.world_size
        )?;
        for (rank, dump) in &self.dumps {
            let reason = dump.reason.lines().next().unwrap_or_default();
            writeln!(
                f,
                "  rank {rank}: last enqueued {}, last completed {}; {} of {} operations kept \
                 ({}); dumped: {reason}",
                seq(dump.last_enqueued),
                seq(dump.last_completed),
                dump.ops.len(),
                dump.total_recorded,
                collective_range(dump),
            )?;
            if let Some(times) = gpu_times(dump) {
                writeln!(f, "    GPU time: {times}")?;
            }
            if let Some(op) = dump.ops.iter().find(|op| op.state != OpState::Completed) {
                let what = Issued::from_record(op)
                    .map_or_else(|| op.op.to_string(), |issued| issued.to_string());
                let number = op
                    .collective_seq
                    .map_or_else(|| format!("operation #{}", op.seq), |n| format!("#{n}"));
                writeln!(
                    f,
                    "    oldest not completed: {what} {number} ({})",
                    op.state
                )?;
            }
        }
        if !self.missing.is_empty() {
            writeln!(f, "  missing: no readable dump of {}", Ranks(&self.missing))?;
        }
        match &self.comparison.matched {
            Some((first, last)) => writeln!(
                f,
                "  matched: collectives #{first}-#{last} ({} collectives) alike on {}",
                last - first + 1,
                Ranks(&ranks)
            )?,
            None => writeln!(f, "  matched: no collective that every dump holds alike")?,
        }
        match &self.comparison.divergence {
            Some(divergence) => writeln!(f, "  first mismatch: {divergence}"),
            None => writeln!(f, "  no mismatch among {}", Ranks(&ranks)),
        }
    }
}

impl fmt::Display for FolderAnalysis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:", self.folder.display())?;
        for file in &self.unreadable {
            let rank = file
                .rank
                .map_or_else(String::new, |rank| format!(" (rank {rank})"));
            writeln!(
                f,
                "  unreadable{rank}: {}: {}",
                file.path.display(),
                file.error
            )?;
        }
        if self.reports.is_empty() {
            writeln!(f, "  no readable dump")?;
        }
        for report in &self.reports {
            write!(f, "{report}")?;
        }
        Ok(())
    }
}
