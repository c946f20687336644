//! `ncclGroupStart` / `ncclGroupEnd` as an RAII guard.

use std::cell::Cell;
use std::marker::PhantomData;

use crate::error::{Result, Status};
use crate::library::{check, check_accepted, library};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// How many [`Group`]s are open on this thread.
pub fn group_depth() -> u32 {
    DEPTH.with(Cell::get)
}

/// An open NCCL group: calls issued while it lives are fused and launched
/// when it ends.
///
/// Groups nest. NCCL tracks groups per thread, so a `Group` cannot be sent to
/// another thread.
///
/// ```no_run
/// # fn main() -> nccl_core::Result<()> {
/// let group = nccl_core::Group::start()?;
/// // ... issue sends and receives ...
/// group.end()?; // errors surface here
/// # Ok(()) }
/// ```
///
/// Dropping an open group ends it and ignores the result; call
/// [`Group::end`] to see errors.
#[must_use = "a group ends when dropped; call end() to see its errors"]
pub struct Group {
    open: bool,
    _not_send: PhantomData<*const ()>,
}

impl Group {
    /// `ncclGroupStart`.
    ///
    /// # Errors
    /// The library could not be loaded, or NCCL refused.
    pub fn start() -> Result<Self> {
        let lib = library()?;
        let start = lib.functions().ncclGroupStart()?;
        // SAFETY: ncclGroupStart takes no arguments and only updates
        // thread-local state.
        check_accepted(lib, "ncclGroupStart", unsafe { start() })?;
        DEPTH.with(|depth| depth.set(depth.get() + 1));
        Ok(Self {
            open: true,
            _not_send: PhantomData,
        })
    }

    /// `ncclGroupEnd`: launches what the group collected.
    ///
    /// # Errors
    /// Any error of the fused calls (an invalid argument, a peer failure).
    pub fn end(mut self) -> Result<Status> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Status> {
        self.open = false;
        DEPTH.with(|depth| depth.set(depth.get().saturating_sub(1)));
        let lib = library()?;
        let end = lib.functions().ncclGroupEnd()?;
        // SAFETY: matched with the ncclGroupStart of `Group::start` on this
        // thread (`Group` is !Send).
        check(lib, "ncclGroupEnd", unsafe { end() })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.open {
            // Drop cannot report errors; `end()` exists for that.
            let _ = self.finish();
        }
    }
}
