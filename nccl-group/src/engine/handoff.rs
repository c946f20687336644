//! The stream handoff of an operation: the NCCL stream waits for the
//! caller's, a start event is recorded before a timed operation and an
//! end event after every operation, and buffers of an operation left in
//! flight are released only after its stream.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream};
use nccl_tensor::checks;

use crate::engine::member::Member;
use crate::engine::pool::DevicePool;
use crate::engine::tracked::{End, Ends};
use crate::engine::work_buffers::WorkBuffers;
use crate::error::Result;

/// Makes every stream that may free `buffers` wait for what `stream` has
/// queued so far, and `caller` too when the buffers borrow its memory,
/// which it may use again once they are handed back (best effort: if CUDA
/// cannot even record an event, the stream is broken and nothing queued
/// after it runs either).
pub(crate) fn order_after_stream<B: WorkBuffers>(
    buffers: &B,
    stream: &CudaStream,
    caller: Option<&CudaStream>,
) {
    if let Ok(event) = stream.context().new_event(None)
        && event.record(stream).is_ok()
    {
        let _ = buffers.order_after(&event);
        if let Some(caller) = caller {
            let _ = caller.wait(&event);
        }
    }
}

/// The caller's stream must be on the buffers' device (nccl-tensor's
/// check and error: the stream is used for the event handoff before the
/// operation is planned). Inlined: its `Ok` is not returned through memory.
#[inline]
pub(crate) fn check_stream(op: &'static str, caller: &CudaStream, device: usize) -> Result<()> {
    Ok(checks::stream(op, caller.context().ordinal(), device)?)
}

/// The NCCL stream waits for what the caller's stream has queued so far.
pub(crate) fn sync_start(member: &Member, caller: &CudaStream) -> Result<()> {
    let start = member.pool.event()?;
    let synced = start
        .record(caller)
        .and_then(|()| member.stream.wait(&start))
        .map_err(nccl_core::Error::cuda(
            "making the NCCL stream wait for the caller's stream",
        ));
    // The wait has captured the event; it can be recorded again.
    member.pool.give_back(start);
    Ok(synced?)
}

/// With GPU timing, records a timed event on `stream`, the stream the
/// operation is about to be enqueued on: its start, for
/// [`end_event`]; `None` without.
pub(crate) fn start_event(
    timed: bool,
    member: &Member,
    stream: &CudaStream,
) -> Result<Option<CudaEvent>> {
    if !timed {
        return Ok(None);
    }
    let start = member.pool.timed_event()?;
    match start.record(stream) {
        Ok(()) => Ok(Some(start)),
        Err(error) => {
            member.pool.give_back_timed(start);
            Err(nccl_core::Error::cuda("recording the start event")(error).into())
        }
    }
}

/// The end of an operation on one device just enqueued on `stream`: the
/// end it shares with the operations beside it when it runs untimed on the
/// caller's stream, a stream of its own (not the legacy default stream,
/// which synchronizes with every other), and `buffers` are freed there (a
/// `Work` dropped unwaited then needs no end; see `engine::shared_end`);
/// else an event of its own ([`end_event`]).
pub(crate) fn op_end(
    member: &Member,
    stream: &Arc<CudaStream>,
    caller: &Arc<CudaStream>,
    start: Option<CudaEvent>,
    buffers: &impl WorkBuffers,
) -> Result<Ends> {
    if start.is_none()
        && Arc::ptr_eq(stream, caller)
        && !stream.cu_stream().is_null()
        && buffers.frees_on(stream)
    {
        let end = member.open_end.end_for(&member.pool, stream)?;
        return Ok(Ends::Shared(end));
    }
    end_event(member, stream, caller, start).map(Ends::One)
}

/// Records the end of the operation on `stream`, the stream it ran on;
/// the caller's stream waits for it in [`Work::wait`](crate::Work::wait) unless it is that
/// stream.
///
/// An operation timed from `start` ([`start_event`]) ends with a timed
/// event, whose time from the start is its GPU time.
pub(crate) fn end_event(
    member: &Member,
    stream: &Arc<CudaStream>,
    caller: &Arc<CudaStream>,
    start: Option<CudaEvent>,
) -> Result<End> {
    end_event_in(&member.pool, stream, caller, start)
}

/// [`end_event`] with an event of `pool`.
pub(crate) fn end_event_in(
    pool: &Arc<DevicePool>,
    stream: &Arc<CudaStream>,
    caller: &Arc<CudaStream>,
    start: Option<CudaEvent>,
) -> Result<End> {
    let timed = start.is_some();
    let recorded = if timed { pool.timed_event() } else { pool.event() }.and_then(|event| {
        match event.record(stream) {
            Ok(()) => Ok(event),
            Err(error) => {
                if timed {
                    pool.give_back_timed(event);
                } else {
                    pool.give_back(event);
                }
                Err(nccl_core::Error::cuda("recording the end event")(error).into())
            }
        }
    });
    match recorded {
        Ok(event) => Ok(End {
            pool: Arc::clone(pool),
            event,
            start,
            stream: Arc::clone(stream),
            caller: (!Arc::ptr_eq(stream, caller)).then(|| Arc::clone(caller)),
        }),
        Err(error) => {
            if let Some(start) = start {
                pool.give_back_timed(start);
            }
            Err(error)
        }
    }
}
