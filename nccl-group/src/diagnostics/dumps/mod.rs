//! Flight-recorder dumps on disk: one folder per incident, shared by the
//! ranks, written so that nothing is ever overwritten and a reader can
//! tell a complete dump from one being written.
//!
//! An incident is a failure of the group (or its abort), or a dump asked
//! for ([`ProcessGroup::dump_flight_recorder`](crate::Diagnostics::dump_flight_recorder),
//! or the file trigger [`REQUEST_FILE`]). Each rank writes its dump of an
//! incident into the folder `<dump dir>/<group>-g<generation>-<label>/`
//! ([`incident_name`]; `label` is [`FAILURE_LABEL`] for a failure):
//!
//! ```text
//! trainer-g0-failure/
//!     rank3.json            this crate's JSON (FlightDump)
//!     nccl_trace_rank_3     PyTorch's pickle, for torchfrtrace (feature `torch-dumps`)
//!     rank3.done            written last: rank 3's dump is complete
//! ```
//!
//! Every rank of one incident uses the same folder, so the folder is what
//! PyTorch's analyzer and [`crate::analysis`] read. Each file is written
//! under a temporary name in the dump folder and then linked into the
//! incident's folder under its final name, which never replaces a file:
//! a rank that finds its own `rank<r>.json` already there (the same label
//! used twice, or an earlier job with the same group name) takes the next
//! folder, `<name>.1`, `<name>.2`, ... The marker `rank<r>.done` is
//! created last and lists the files of the dump: a script waits for it.

#[cfg(feature = "torch-dumps")]
#[cfg_attr(docsrs, doc(cfg(feature = "torch-dumps")))]
pub mod torch;

#[cfg(feature = "cuda")]
pub(crate) mod request;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::diagnostics::recorder::records::FlightDump;

/// The environment variable that sets the default [`GroupOptions::dump_dir`](crate::GroupOptions::dump_dir).
pub const DUMP_DIR_VARIABLE: &str = "NCCL_GROUP_DUMP_DIR";

/// The label of the incident a failure (or an abort) of the group writes.
pub const FAILURE_LABEL: &str = "failure";

/// The file that asks every group whose dump folder holds it for a dump:
/// each change of it (written, rewritten, touched) is one request, served
/// within a second by every such group of every process.
///
/// Its first line is the incident's label (empty: `request`); a file already
/// there when a group is created is not a request.
pub const REQUEST_FILE: &str = "dump-request";

/// The name prefix of PyTorch's dump files (`TORCH_FR_DUMP_TEMP_FILE`'s
/// default file name, `nccl_trace_rank_`): rank `r`'s file is the prefix
/// followed by `r`, as torchfrtrace's `--prefix` expects.
pub const TORCH_FILE_PREFIX: &str = "nccl_trace_rank_";

/// How many folders one incident name may take (`<name>`, `<name>.1`, ...)
/// before a dump gives up.
const MAX_FOLDERS: usize = 1000;

/// Why a dump was not written.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The group has no dump folder.
    #[error(
        "the group has no folder for flight-recorder dumps: GroupOptions::dump_dir is None \
         (set it, or {DUMP_DIR_VARIABLE} before the group is created)"
    )]
    NoFolder,
    /// Creating, writing or linking a file failed.
    #[error("could not write the flight-recorder dump {}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Every folder this incident may take already holds this rank's dump.
    #[error(
        "{} and its {MAX_FOLDERS} numbered successors all hold a dump of rank {rank} already: \
         clear out the dump folder or use another label",
        folder.display()
    )]
    FoldersTaken {
        /// The incident's first folder.
        folder: PathBuf,
        /// The rank.
        rank: usize,
    },
    /// The dump could not be encoded in PyTorch's format.
    #[error("encoding the flight-recorder dump in PyTorch's pickle format: {0}")]
    Torch(String),
}

/// The files one rank wrote for one incident.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DumpFiles {
    /// The incident's folder.
    pub folder: PathBuf,
    /// The dump as this crate's JSON (`rank<r>.json`).
    pub json: PathBuf,
    /// The dump in PyTorch's format (`nccl_trace_rank_<r>`); `None`
    /// without the `torch-dumps` feature.
    pub torch: Option<PathBuf>,
    /// The completion marker (`rank<r>.done`), written last.
    pub done: PathBuf,
}

/// `name` with anything but ASCII letters, digits, `-` and `_` replaced by
/// `_`, and cut to `max` characters, so that it cannot point elsewhere.
fn safe(name: &str, max: usize) -> String {
    name.chars()
        .take(max)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The folder name of an incident: `trainer-g0-failure`, the group's name
/// and the label made safe (see the module's documentation).
///
/// An empty label is `request`.
pub fn incident_name(group: &str, generation: u64, label: &str) -> String {
    let label = match safe(label.trim(), 64) {
        empty if empty.is_empty() => "request".to_string(),
        label => label,
    };
    format!("{}-g{generation}-{label}", safe(group, 96))
}

/// Writes `dump` as the dump of rank `dump.rank` for the incident `label`
/// under `dir` (created if need be), and returns its files once the
/// completion marker is written.
///
/// Never replaces a file (see the module's documentation).
///
/// # Errors
/// A file that could not be written or linked, every folder of the
/// incident taken, or (with `torch-dumps`) an encoding failure.
pub fn write_incident(dir: &Path, label: &str, dump: &FlightDump) -> Result<DumpFiles, DumpError> {
    let name = incident_name(&dump.group, dump.generation, label);
    let rank = dump.rank;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DumpError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let pid = std::process::id();
    let json_temp = Temp::write(
        dir.join(format!(".{name}-rank{rank}-{pid}.json.tmp")),
        dump.to_json().as_bytes(),
    )?;
    #[cfg(feature = "torch-dumps")]
    let torch_temp = Some(Temp::write(
        dir.join(format!(".{name}-rank{rank}-{pid}.torch.tmp")),
        &torch::encode(dump)?,
    )?);
    #[cfg(not(feature = "torch-dumps"))]
    let torch_temp: Option<Temp> = None;

    let json_name = format!("rank{rank}.json");
    let folder = (0..=MAX_FOLDERS)
        .map(|n| match n {
            0 => dir.join(&name),
            n => dir.join(format!("{name}.{n}")),
        })
        .find_map(|folder| {
            let placed = std::fs::create_dir_all(&folder)
                .and_then(|()| json_temp.place(&folder.join(&json_name)));
            match placed {
                Ok(()) => Some(Ok(folder)),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => None,
                Err(source) => Some(Err(DumpError::Io {
                    path: folder,
                    source,
                })),
            }
        })
        .unwrap_or_else(|| {
            Err(DumpError::FoldersTaken {
                folder: dir.join(&name),
                rank,
            })
        })?;
    let json = folder.join(json_name);
    let torch = match torch_temp {
        Some(temp) => {
            let path = folder.join(format!("{TORCH_FILE_PREFIX}{rank}"));
            temp.place(&path).map_err(io(&path))?;
            Some(path)
        }
        None => None,
    };
    let done = folder.join(format!("rank{rank}.done"));
    let listing: String = std::iter::once(&json)
        .chain(&torch)
        .filter_map(|path| Some(format!("{}\n", path.file_name()?.to_str()?)))
        .collect();
    std::fs::File::create_new(&done)
        .and_then(|mut file| file.write_all(listing.as_bytes()))
        .map_err(io(&done))?;
    Ok(DumpFiles {
        folder,
        json,
        torch,
        done,
    })
}

/// A file written under a temporary name, removed if it is never placed.
struct Temp(PathBuf);

impl Temp {
    fn write(path: PathBuf, bytes: &[u8]) -> Result<Self, DumpError> {
        match std::fs::write(&path, bytes) {
            Ok(()) => Ok(Self(path)),
            Err(source) => {
                let _ = std::fs::remove_file(&path);
                Err(DumpError::Io { path, source })
            }
        }
    }

    /// Gives the file the name `target`, unless a file has it already
    /// (`AlreadyExists`): a hard link, which never replaces a file, or a
    /// rename where the file system has no hard links.
    fn place(&self, target: &Path) -> std::io::Result<()> {
        match std::fs::hard_link(&self.0, target) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Err(error),
            Err(_) if target.symlink_metadata().is_ok() => {
                Err(std::io::ErrorKind::AlreadyExists.into())
            }
            Err(_) => std::fs::rename(&self.0, target),
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests;
