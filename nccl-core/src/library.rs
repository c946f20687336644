//! The FFI-facing glue between the loaded libnccl and this crate's
//! [`Result`]: turning result codes into [`Status`] or [`Error`].

use std::ffi::CStr;

use nccl_sys::{NcclLibrary, Version, ncclResult_t};

use crate::error::{Error, Result, ResultCode, Status};

/// The process-wide libnccl (see [`nccl_sys::library`]).
///
/// # Errors
/// [`Error::Library`] naming the candidates tried and `NCCL_LIBRARY`.
pub fn library() -> Result<&'static NcclLibrary> {
    Ok(nccl_sys::library()?)
}

/// The version of the loaded libnccl.
///
/// # Errors
/// As [`library`].
pub fn version() -> Result<Version> {
    Ok(library()?.version())
}

/// Fails with [`Error::Unsupported`] unless the loaded library is at least
/// `major.minor`.
pub(crate) fn require_version(
    lib: &NcclLibrary,
    major: u32,
    minor: u32,
    feature: impl FnOnce() -> String,
) -> Result<()> {
    if lib.version().at_least(major, minor) {
        Ok(())
    } else {
        Err(Error::Unsupported {
            feature: feature(),
            needed: Version::new(major, minor, 0),
            loaded: lib.version(),
        })
    }
}

/// Maps the result of `function` to a [`Status`] or an [`Error`] carrying
/// NCCL's description and last-error text.
///
/// Public for callers that call `nccl-sys` directly (for instance on
/// [`Communicator::as_raw`](crate::Communicator::as_raw)).
///
/// # Errors
/// [`Error::Nccl`] for every code but success and in-progress.
#[inline]
pub fn check(lib: &NcclLibrary, function: &'static str, result: ncclResult_t) -> Result<Status> {
    match result {
        ncclResult_t::ncclSuccess => Ok(Status::Success),
        ncclResult_t::ncclInProgress => Ok(Status::InProgress),
        code => Err(error_for(lib, function, code)),
    }
}

/// [`check`] for calls whose `InProgress` the caller handles itself (it
/// waits for nonblocking communicators, or the call cannot be in progress).
#[inline]
pub(crate) fn check_accepted(
    lib: &NcclLibrary,
    function: &'static str,
    result: ncclResult_t,
) -> Result<()> {
    check(lib, function, result).map(|_| ())
}

#[cold]
#[inline(never)]
fn error_for(lib: &NcclLibrary, function: &'static str, code: ncclResult_t) -> Error {
    let description = lib.functions().ncclGetErrorString().ok().and_then(|get| {
        // SAFETY: ncclGetErrorString accepts any code and returns a static
        // NUL-terminated string (or NULL, checked by `c_text`).
        c_text(unsafe { get(code) })
    });
    let last_error = lib.functions().ncclGetLastError().ok().and_then(|get| {
        // SAFETY: ncclGetLastError ignores its argument (NULL is documented
        // as fine) and returns a NUL-terminated process-wide buffer.
        c_text(unsafe { get(std::ptr::null_mut()) })
    });
    Error::from_code(function, ResultCode(code.0), description, last_error)
}

/// Copies a C string NCCL returned, or `None` for NULL.
fn c_text(pointer: *const std::ffi::c_char) -> Option<String> {
    if pointer.is_null() {
        return None;
    }
    // SAFETY: NCCL returns NUL-terminated strings that stay valid at least
    // until the next NCCL call in this thread; we copy right away.
    Some(
        unsafe { CStr::from_ptr(pointer) }
            .to_string_lossy()
            .into_owned(),
    )
}
