//! Finding, opening and describing the NCCL shared library at run time.

use std::ffi::{OsString, c_int};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Functions, introduced_in, ncclResult_t};

/// The environment variable that names the NCCL library to load (a full path).
pub const NCCL_LIBRARY_ENV: &str = "NCCL_LIBRARY";

/// The names tried, in order, when [`NCCL_LIBRARY_ENV`] is not set.
pub const DEFAULT_LIBRARY_NAMES: &[&str] = &["libnccl.so.2", "libnccl.so"];

/// A NCCL release, as reported by `ncclGetVersion`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major release number.
    pub major: u32,
    /// Minor release number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl Version {
    /// Decodes `ncclGetVersion`'s integer (`NCCL_VERSION(X,Y,Z)`), which
    /// changed layout after 2.8: `X*1000+Y*100+Z` up to 2.8, then
    /// `X*10000+Y*100+Z`.
    pub fn from_code(code: i32) -> Self {
        let code = code.max(0) as u32;
        if code >= 10_000 {
            Self::new(code / 10_000, (code % 10_000) / 100, code % 100)
        } else {
            Self::new(code / 1000, (code % 1000) / 100, code % 100)
        }
    }

    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Whether this release is `major.minor` or newer (any patch).
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A function the loaded libnccl does not export.
///
/// Only calls of that function fail; the rest of the API keeps working.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{function} is not exported by the loaded libnccl {loaded}{}",
    match introduced_in { Some(v) => format!(": it was introduced in NCCL {v}; load a newer libnccl (set NCCL_LIBRARY to its full path)"), None => String::new() }
)]
pub struct MissingSymbol {
    /// The C name of the function.
    pub function: &'static str,
    /// The NCCL release that introduced it, where known.
    pub introduced_in: Option<Version>,
    /// The version of the library that was loaded.
    pub loaded: Version,
}

impl MissingSymbol {
    pub(crate) fn new(function: &'static str, loaded: Version) -> Self {
        Self {
            function,
            introduced_in: introduced_in(function),
            loaded,
        }
    }
}

/// One attempt to open a candidate library, kept for the error message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The name or path handed to the dynamic loader.
    pub candidate: String,
    /// What the dynamic loader said.
    pub error: String,
}

/// Why no usable NCCL library could be loaded.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// None of the candidates could be opened.
    #[error(
        "could not load the NCCL library: {}; {}",
        attempts.iter().map(|a| format!("{} ({})", a.candidate, a.error)).collect::<Vec<_>>().join(", "),
        match nccl_library_env {
            Some(path) => format!("NCCL_LIBRARY is set to {path:?}: point it at an existing libnccl.so.2"),
            None => "install NCCL or set NCCL_LIBRARY to the full path of libnccl.so.2".to_string(),
        }
    )]
    NotFound {
        /// Every candidate that was tried, with the loader's message.
        attempts: Vec<Attempt>,
        /// The value of `NCCL_LIBRARY` at the time, if it was set.
        nccl_library_env: Option<String>,
    },
    /// The library opened but is not NCCL (it has no `ncclGetVersion`).
    #[error(
        "{path} was loaded but is not a NCCL library (it exports no ncclGetVersion); point NCCL_LIBRARY at libnccl.so.2"
    )]
    NotNccl {
        /// The library that was opened.
        path: String,
    },
    /// `ncclGetVersion` returned an error code.
    #[error("ncclGetVersion in {path} failed with NCCL result code {code}")]
    VersionQuery {
        /// The library that was opened.
        path: String,
        /// The raw `ncclResult_t`.
        code: i32,
    },
}

/// An opened libnccl: where it came from, its version and its entry points.
///
/// A library is never unloaded: NCCL starts threads that outlive any call,
/// so unloading it is not safe. Every instance is therefore `'static`.
pub struct NcclLibrary {
    path: String,
    version: Version,
    functions: Functions,
}

impl fmt::Debug for NcclLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclLibrary")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl NcclLibrary {
    /// Opens the library at `path` (a full path or a name for the dynamic
    /// loader) and resolves every function on its own.
    ///
    /// Each call opens the library again and leaks one small table; use
    /// [`library()`] for the process-wide instance.
    ///
    /// # Errors
    /// [`LoadError::NotFound`] if the loader cannot open it,
    /// [`LoadError::NotNccl`] if it has no `ncclGetVersion`.
    pub fn open(path: impl AsRef<Path>) -> Result<&'static Self, LoadError> {
        let path = path.as_ref();
        // SAFETY: opening a shared library runs its initialisers; libnccl's
        // are safe to run at any time and in any thread.
        let library =
            unsafe { libloading::Library::new(path) }.map_err(|error| LoadError::NotFound {
                attempts: vec![Attempt {
                    candidate: path.display().to_string(),
                    error: error.to_string(),
                }],
                nccl_library_env: std::env::var(NCCL_LIBRARY_ENV).ok(),
            })?;
        Self::from_library(library, path.display().to_string())
    }

    fn from_library(
        library: libloading::Library,
        path: String,
    ) -> Result<&'static Self, LoadError> {
        // SAFETY: `ncclGetVersion` has had this signature in every release.
        let get_version = unsafe {
            library.get::<unsafe extern "C" fn(*mut c_int) -> ncclResult_t>(b"ncclGetVersion\0")
        }
        .map_err(|_| LoadError::NotNccl { path: path.clone() })?;
        let mut code: c_int = 0;
        // SAFETY: `code` is a valid, writable int for the call's duration.
        let result = unsafe { get_version(&mut code) };
        if result != ncclResult_t::ncclSuccess {
            return Err(LoadError::VersionQuery {
                path,
                code: result.0 as i32,
            });
        }
        let version = Version::from_code(code);
        // SAFETY: the library exports ncclGetVersion, so it is libnccl, whose
        // symbols match the pinned header's signatures for every function it
        // exports; it is leaked below, so it is never unloaded.
        let functions = unsafe { Functions::resolve(&library, version) };
        std::mem::forget(library);
        Ok(Box::leak(Box::new(Self {
            path,
            version,
            functions,
        })))
    }

    /// Where the library was loaded from (as handed to the loader).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The version `ncclGetVersion` reported.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The entry points; each accessor fails on its own if its symbol is missing.
    pub fn functions(&self) -> &Functions {
        &self.functions
    }
}

/// The candidates to try, in order: `NCCL_LIBRARY` alone when it is set
/// (so a wrong override is an error rather than a silent fallback to another
/// library), otherwise [`DEFAULT_LIBRARY_NAMES`].
pub fn candidates(nccl_library_env: Option<&OsString>) -> Vec<PathBuf> {
    match nccl_library_env {
        Some(path) if !path.is_empty() => vec![PathBuf::from(path)],
        _ => DEFAULT_LIBRARY_NAMES.iter().map(PathBuf::from).collect(),
    }
}

/// Loads the candidates of [`candidates`] in order and keeps the first that
/// opens.
pub fn load_first(candidates: &[PathBuf]) -> Result<&'static NcclLibrary, LoadError> {
    let mut attempts = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        // SAFETY: as in `NcclLibrary::open`.
        let error = match unsafe { libloading::Library::new(candidate) } {
            Ok(library) => {
                match NcclLibrary::from_library(library, candidate.display().to_string()) {
                    Ok(nccl) => return Ok(nccl),
                    // A library that opens but is not a working NCCL: try the next.
                    Err(error) => error.to_string(),
                }
            }
            Err(error) => error.to_string(),
        };
        attempts.push(Attempt {
            candidate: candidate.display().to_string(),
            error,
        });
    }
    Err(LoadError::NotFound {
        attempts,
        nccl_library_env: std::env::var(NCCL_LIBRARY_ENV)
            .ok()
            .filter(|value| !value.is_empty()),
    })
}

/// The process-wide NCCL library, loaded on first use from `NCCL_LIBRARY`
/// or the default names. Later calls return the same table (or the same
/// error) at the cost of one atomic load.
pub fn library() -> Result<&'static NcclLibrary, LoadError> {
    static LIBRARY: OnceLock<Result<&'static NcclLibrary, LoadError>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| load_first(&candidates(std::env::var_os(NCCL_LIBRARY_ENV).as_ref())))
        .clone()
}
