//! Ranks, world sizes and counts between this crate's `usize` and NCCL's
//! C `int`. The public API takes and returns `usize`, as the layers above
//! do; the conversion happens here, at the FFI edge, and nowhere else.

use std::ffi::c_int;

use nccl_sys::ncclResult_t;

use crate::error::{Error, Result, ResultCode};

/// `value` (the argument `argument`) as the C `int` NCCL takes.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `argument`, for a value above
/// `i32::MAX`.
pub(crate) fn to_c(argument: &'static str, value: usize) -> Result<c_int> {
    c_int::try_from(value).map_err(|_| Error::InvalidArgument {
        argument,
        expected: format!("at most {} (NCCL takes a C int)", c_int::MAX),
        given: value.to_string(),
    })
}

/// A rank or count that `function` reported, as a `usize`.
///
/// # Errors
/// [`Error::Nccl`] with `ncclInternalError` for a negative value, which
/// NCCL never reports for a live communicator.
pub(crate) fn from_c(function: &'static str, value: c_int) -> Result<usize> {
    usize::try_from(value).map_err(|_| {
        Error::from_code(
            function,
            ResultCode(ncclResult_t::ncclInternalError.0),
            Some(format!("reported {value}, expected 0 or more")),
            None,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn values_up_to_i32_max_pass_unchanged() {
        assert_eq!(to_c("root", 3).unwrap(), 3);
        let largest = usize::try_from(c_int::MAX).unwrap();
        assert_eq!(to_c("dst", largest).unwrap(), c_int::MAX);
        assert_eq!(from_c("ncclCommCount", 8).unwrap(), 8);
    }

    #[test]
    fn a_value_past_i32_max_is_refused_naming_the_argument_and_the_value() {
        let error = to_c("src", 1 << 31).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            error.to_string(),
            "invalid src: expected at most 2147483647 (NCCL takes a C int), got 2147483648"
        );
        assert_eq!(
            to_c("key", usize::MAX).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn a_negative_value_from_nccl_is_an_internal_error() {
        let error = from_c("ncclCommUserRank", -1).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Nccl);
        assert!(error.to_string().contains("ncclCommUserRank"), "{error}");
        assert!(error.to_string().contains("reported -1"), "{error}");
    }
}
