//! Async completion: [`Work`] is [`IntoFuture`], its future woken by the
//! process's waker thread ([`waker`](crate::engine::waker)) once the
//! operation ended or its group failed. Runtime-agnostic: any executor
//! that polls futures drives it.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::engine::tracked::Tracked;
use crate::engine::waker::{Settle, wakers};
use crate::engine::work::Work;
use crate::engine::work_buffers::WorkBuffers;
use crate::error::{GroupError, Result};
use crate::health::watchdog::{Completion, Progress};

impl Settle for Tracked {
    fn is_settled(&self) -> bool {
        self.failed().is_some() || self.poll_closing() != Progress::Running
    }
}

/// The future of a [`Work`]: ready with what [`Work::wait`] returns once
/// the operation is complete on the GPU and its communicators' errors
/// were checked, as [`Work::synchronize`] checks them.
///
/// The CPU does not block: the process's one waker thread polls the
/// operation's end and wakes the task. Dropping the future drops the
/// work (its buffers are released after the operation, as on drop).
#[must_use = "a future does nothing unless awaited"]
pub struct WorkFuture<B: WorkBuffers> {
    work: Option<Work<B>>,
    /// The registration with the waker thread, once one was made.
    registration: Option<u64>,
}

// Nothing in the future is pinned structurally: it moves its `Work` out.
impl<B: WorkBuffers> Unpin for WorkFuture<B> {}

impl<B: WorkBuffers> std::fmt::Debug for WorkFuture<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkFuture")
            .field("work", &self.work)
            .field("registered", &self.registration.is_some())
            .finish()
    }
}

impl<B: WorkBuffers> IntoFuture for Work<B> {
    type Output = Result<B>;
    type IntoFuture = WorkFuture<B>;

    /// Awaiting a work: the operation's buffers once it completed on the
    /// GPU and no communicator of the group reported an error, the CPU
    /// free meanwhile (see [`WorkFuture`]).
    fn into_future(self) -> WorkFuture<B> {
        WorkFuture {
            work: Some(self),
            registration: None,
        }
    }
}

impl<B: WorkBuffers> Future for WorkFuture<B> {
    type Output = Result<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<B>> {
        let this = self.get_mut();
        let Some(work) = &this.work else {
            return Poll::Ready(Err(GroupError::InvalidArgument {
                argument: "future",
                expected: "a work future not yet complete".to_string(),
                given: "one polled again after it returned its result".to_string(),
            }));
        };
        let pending = work.tracked().filter(|op| !op.is_settled()).cloned();
        let Some(op) = pending else {
            if let Some(id) = this.registration.take() {
                wakers().unregister(id);
            }
            let Some(work) = this.work.take() else {
                return Poll::Pending;
            };
            return Poll::Ready(finish(work));
        };
        let wakers = wakers();
        let id = *this.registration.get_or_insert_with(|| wakers.next_id());
        if let Err(error) = wakers.register(id, op as Arc<dyn Settle>, cx.waker()) {
            this.registration = None;
            return Poll::Ready(Err(GroupError::WakerStart { source: error }));
        }
        Poll::Pending
    }
}

/// The result of a settled work: [`Work::synchronize`]'s checks, then
/// [`Work::wait`].
fn finish<B: WorkBuffers>(work: Work<B>) -> Result<B> {
    work.synchronize(Duration::ZERO)?;
    work.wait()
}

impl<B: WorkBuffers> Drop for WorkFuture<B> {
    fn drop(&mut self) {
        if let Some(id) = self.registration {
            wakers().unregister(id);
        }
    }
}
