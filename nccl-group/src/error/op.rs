//! An operation's refusal with the buffers it was given ([`OpError`]).

use std::fmt;

use nccl_core::ResultCode;

use super::{ErrorKind, GroupError};

/// An operation on owned buffers that failed before its work was
/// enqueued, with the buffers it was given, so the caller keeps them
/// (borrowed memory's refusal is a plain [`GroupError`]: the caller still
/// owns it).
///
/// Transparent: its message and `source()` are its error's, and so are its
/// `kind()`, `nccl_code()` and `is_timeout()`.
///
/// `?` converts it (boxed, as [`OpResult`](crate::OpResult) has it, or
/// not) into its [`GroupError`], dropping the buffers: NCCL never saw
/// them, and their memory is freed as any dropped tensor's. To keep them,
/// match the `Err` instead: `Err(refused) => (refused.error, refused.buffers)`.
pub struct OpError<B> {
    /// What went wrong.
    pub error: GroupError,
    /// The buffers passed to the operation, untouched by NCCL.
    pub buffers: B,
}

impl<B> OpError<B> {
    /// [`GroupError::kind`] of the error.
    pub fn kind(&self) -> ErrorKind {
        self.error.kind()
    }

    /// [`GroupError::nccl_code`] of the error.
    pub fn nccl_code(&self) -> Option<ResultCode> {
        self.error.nccl_code()
    }

    /// [`GroupError::is_timeout`] of the error.
    pub fn is_timeout(&self) -> bool {
        self.error.is_timeout()
    }
}

impl<B> fmt::Display for OpError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

/// The error's `Debug` (the message first), without the buffers.
impl<B> fmt::Debug for OpError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}, refused with its buffers", self.error)
    }
}

impl<B> std::error::Error for OpError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<B> From<OpError<B>> for GroupError {
    /// The error; the buffers are dropped.
    fn from(refused: OpError<B>) -> Self {
        refused.error
    }
}

impl<B> From<Box<OpError<B>>> for GroupError {
    /// The error of an [`OpResult`](crate::OpResult)'s refusal, so that
    /// `group.all_reduce(...)?` works in a function returning
    /// [`GroupError`]; the buffers are dropped.
    fn from(refused: Box<OpError<B>>) -> Self {
        refused.error
    }
}
