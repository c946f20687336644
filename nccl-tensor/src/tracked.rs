//! [`TrackedSlice`]: a cudarc slice whose stream-tracking records are
//! deferred while it stays on one stream.
//!
//! cudarc orders the accesses to a `CudaSlice` across streams with two
//! events per slice: every access waits for the last write (a write also
//! for the last read) and records its own event. That costs three driver
//! calls per access of a buffer, several times an in-place collective's
//! whole host cost. Back-to-back accesses on one stream need none of it:
//! the stream orders them. A `TrackedSlice` waits the cudarc way when an
//! access comes from a new stream, then skips cudarc's records while the
//! accesses stay on that stream, and records them into cudarc's events
//! before anything else can look at them: before a shared borrow of the
//! slice (the deferred write), before an access from another stream, and
//! before an exclusive borrow, [`TrackedSlice::into_inner`] or drop (every
//! deferred access). So code that uses the slice through cudarc, on any
//! stream, sees the same ordering it would without the deferral.
//!
//! An access that needs none of those driver calls is *settled*
//! ([`TrackedSlice::is_settled_on`]): what a stream being captured in a
//! CUDA graph needs, since it cannot wait for events recorded outside the
//! capture. The slice may also view memory that NCCL allocated
//! (`ncclMemAlloc`, [`TrackedSlice::in_nccl_memory`]): cudarc then never
//! frees it; the drop waits for the device and frees it with `ncclMemFree`.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop, sys,
};
use nccl_core::NcclMemory;

use crate::error::Result;

/// How an operation uses a buffer: what [`TypedBuffer::is_settled_on`](crate::TypedBuffer::is_settled_on)
/// asks about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The operation only reads it (an input).
    Read,
    /// The operation writes it (an output, or a buffer used in place).
    Write,
}

/// The driver handle of the slice's cudarc write event (never null, so an
/// `Option` of it is one pointer wide).
#[derive(Clone, Copy, Debug)]
struct EventHandle(NonNull<sys::CUevent_st>);

// SAFETY: a CUDA event handle is an opaque driver handle; the driver API
// may be called with it from any thread.
unsafe impl Send for EventHandle {}
// SAFETY: as for `Send`: the handle is only passed to the driver.
unsafe impl Sync for EventHandle {}

/// Accesses whose cudarc records are deferred, all on one stream.
#[derive(Debug)]
struct Pending {
    stream: Arc<CudaStream>,
    /// A deferred access wrote: cudarc's write event is behind.
    wrote: bool,
    /// cudarc's read event may hold a read this stream has not waited
    /// for (a reader on another stream, or one through [`TrackedSlice::slice`],
    /// or the deferral began with a read, which waits for writes only): a
    /// writer on this stream must wait for it.
    foreign_read: bool,
}

/// What a read does, from the deferred state (pure, so it is unit-tested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadPlan {
    /// The stream already holds the deferred accesses: nothing to wait for.
    Direct,
    /// Nothing is deferred: wait the cudarc way, defer the read's record.
    WaitAndDefer,
    /// Another stream holds deferred accesses: record its write (if any)
    /// so this stream can wait for it, then read the cudarc way.
    PublishThenTracked,
}

/// `deferred`: `None` when nothing is deferred, else whether the deferred
/// accesses are on the reading stream.
fn plan_read(deferred: Option<bool>) -> ReadPlan {
    match deferred {
        None => ReadPlan::WaitAndDefer,
        Some(true) => ReadPlan::Direct,
        Some(false) => ReadPlan::PublishThenTracked,
    }
}

/// What a write does, from the deferred state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WritePlan {
    /// The stream holds the deferred accesses and nothing else read since.
    Direct,
    /// Wait the cudarc way (for foreign reads, or for the first access)
    /// and defer the write's record.
    WaitAndDefer,
    /// Record another stream's deferred accesses, then wait and defer.
    FlushThenWaitAndDefer,
}

/// `deferred`: `None` when nothing is deferred, else whether the deferred
/// accesses are on the writing stream and whether a foreign read happened
/// since; `knows_event`: whether cudarc's write event is known.
fn plan_write(deferred: Option<(bool, bool)>, knows_event: bool) -> WritePlan {
    match deferred {
        None => WritePlan::WaitAndDefer,
        Some((true, false)) if knows_event => WritePlan::Direct,
        Some((true, _)) => WritePlan::WaitAndDefer,
        Some((false, _)) => WritePlan::FlushThenWaitAndDefer,
    }
}

impl Pending {
    fn on(&self, stream: &Arc<CudaStream>) -> bool {
        Arc::ptr_eq(&self.stream, stream)
    }
}

/// A cudarc `CudaSlice` whose stream-tracking records are deferred while
/// its accesses stay on one stream (see the module docs).
///
/// [`read`](Self::read) and [`write`](Self::write) hand out the device
/// address for work enqueued on a stream; [`slice`](Self::slice) hands out
/// the cudarc slice and [`slice_mut`](Self::slice_mut) a mutable view of
/// it (never `&mut CudaSlice`, through which the allocation could be
/// replaced under the address and events kept here), with every deferred
/// record made first. When cudarc is not tracking (one stream in
/// the context, tracking disabled, or a slice allocated without events)
/// nothing is deferred and nothing waits, as with cudarc itself.
#[derive(Debug)]
pub(crate) struct TrackedSlice<T> {
    /// Dropped by hand: freed by cudarc, or leaked to NCCL's free.
    slice: ManuallyDrop<CudaSlice<T>>,
    address: sys::CUdeviceptr,
    /// cudarc's write event of `slice`, learnt when wrapped; valid for as
    /// long as `slice` lives (cudarc never replaces a slice's events, and
    /// no `&mut` to the slice is handed out).
    ///
    /// `None`: cudarc made the slice without events (its tracking was off), and
    /// no access of it calls the driver.
    write_event: Option<EventHandle>,
    pending: Mutex<Option<Pending>>,
    /// The NCCL allocation `slice` views, freed (after the slice is
    /// leaked) when this drops; `None` for cudarc's own memory (boxed: the
    /// rare case stays one pointer wide).
    nccl_memory: Option<Box<NcclMemory>>,
}

fn tracking(stream: &CudaStream) -> bool {
    stream.context().is_managing_stream_synchronization()
}

/// The event a cudarc access will record when `record` drops, if any.
fn recorded_event(record: &SyncOnDrop<'_>) -> Option<EventHandle> {
    match record {
        SyncOnDrop::Record(Some((event, _))) => NonNull::new(event.cu_event()).map(EventHandle),
        _ => None,
    }
}

impl<T> TrackedSlice<T> {
    /// Wraps `slice`; nothing is deferred yet.
    pub(crate) fn new(mut slice: CudaSlice<T>) -> Self {
        // cudarc hands the address and the write event out only with an
        // access: one on the slice's own stream, whose record is not
        // needed (no work uses it).
        let stream = Arc::clone(slice.stream());
        let (address, record) = slice.device_ptr_mut(&stream);
        let write_event = recorded_event(&record);
        std::mem::forget(record);
        Self {
            slice: ManuallyDrop::new(slice),
            address,
            write_event,
            pending: Mutex::new(None),
            nccl_memory: None,
        }
    }

    /// A slice of `len` elements over `memory` (allocated by NCCL, of at
    /// least `len` elements of `T`), used on `stream`.
    ///
    /// # Errors
    /// `memory` is smaller than `len` elements, or on another device than
    /// `stream`'s.
    pub(crate) fn in_nccl_memory(
        memory: NcclMemory,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self> {
        let needed = len.saturating_mul(std::mem::size_of::<T>());
        let ordinal = stream.context().ordinal();
        if memory.bytes() < needed || memory.device().ordinal() != ordinal {
            return Err(nccl_core::Error::InvalidArgument {
                argument: "NCCL allocation",
                expected: format!("at least {needed} bytes on device {ordinal}"),
                given: format!(
                    "{} bytes on device {}",
                    memory.bytes(),
                    memory.device().ordinal()
                ),
            }
            .into());
        }
        // SAFETY: the address is NCCL's allocation of at least `len`
        // elements (checked above) on the stream's device; it outlives the
        // slice (kept in `nccl_memory`, dropped after the slice is leaked
        // in `drop`), and cudarc never frees it: the slice is only ever
        // leaked (`into_inner` refuses it).
        let slice = unsafe { stream.upgrade_device_ptr::<T>(memory.address() as u64, len) };
        let mut tracked = Self::new(slice);
        tracked.nccl_memory = Some(Box::new(memory));
        Ok(tracked)
    }

    /// The device address of the first element.
    pub(crate) fn address(&self) -> sys::CUdeviceptr {
        self.address
    }

    /// Whether the memory is NCCL's (`ncclMemAlloc`).
    pub(crate) fn is_nccl_memory(&self) -> bool {
        self.nccl_memory.is_some()
    }

    /// Whether an access from `stream` calls no driver function: cudarc is
    /// not tracking, or the deferred accesses are on `stream` and a write
    /// would find nothing to wait for.
    pub(crate) fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        if !tracking(stream) || self.write_event.is_none() {
            return true;
        }
        let pending = self.lock();
        match access {
            Access::Read => {
                plan_read(pending.as_ref().map(|deferred| deferred.on(stream))) == ReadPlan::Direct
            }
            Access::Write => {
                let deferred = pending
                    .as_ref()
                    .map(|deferred| (deferred.on(stream), deferred.foreign_read));
                plan_write(deferred, self.write_event.is_some()) == WritePlan::Direct
            }
        }
    }

    /// The number of elements.
    pub(crate) fn len(&self) -> usize {
        self.slice.len()
    }

    /// The context (device) the memory belongs to.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        self.slice.context()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Pending>> {
        // The state is consistent between statements, so a panic
        // elsewhere while it was held leaves nothing half-done.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f` with the device address, valid for reads by work that `f`
    /// enqueues on `stream`: `stream` first waits for the last write made
    /// on another stream.
    pub(crate) fn read<R>(
        &self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(sys::CUdeviceptr) -> R,
    ) -> R {
        if !tracking(stream) {
            return f(self.address);
        }
        let mut pending = self.lock();
        match plan_read(pending.as_ref().map(|deferred| deferred.on(stream))) {
            ReadPlan::Direct => {
                drop(pending);
                f(self.address)
            }
            ReadPlan::WaitAndDefer => {
                let (address, record) = self.slice.device_ptr(stream);
                if recorded_event(&record).is_some() {
                    // The record is made later, by a flush.
                    std::mem::forget(record);
                    *pending = Some(Pending {
                        stream: Arc::clone(stream),
                        wrote: false,
                        // A read waits for writes only.
                        foreign_read: true,
                    });
                }
                drop(pending);
                f(address)
            }
            ReadPlan::PublishThenTracked => {
                if let Some(deferred) = pending.as_mut() {
                    self.publish_write(deferred);
                    deferred.foreign_read = true;
                }
                drop(pending);
                // Waits for the write just published; records the read
                // into cudarc's read event once `f` has enqueued.
                let (address, _record) = self.slice.device_ptr(stream);
                f(address)
            }
        }
    }

    /// Calls `f` with the device address, valid for reads and writes by
    /// work that `f` enqueues on `stream`: `stream` first waits for every
    /// earlier access made on another stream.
    pub(crate) fn write<R>(
        &mut self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(sys::CUdeviceptr) -> R,
    ) -> R {
        if !tracking(stream) {
            return f(self.address);
        }
        let Self {
            slice,
            address,
            write_event,
            pending,
            ..
        } = self;
        let pending = pending.get_mut().unwrap_or_else(PoisonError::into_inner);
        let deferred = pending
            .as_ref()
            .map(|deferred| (deferred.on(stream), deferred.foreign_read));
        match plan_write(deferred, write_event.is_some()) {
            WritePlan::Direct => {
                if let Some(deferred) = pending.as_mut() {
                    deferred.wrote = true;
                }
                return f(*address);
            }
            WritePlan::FlushThenWaitAndDefer => {
                if let Some(previous) = pending.take() {
                    drop(slice.device_ptr_mut(&previous.stream));
                }
            }
            WritePlan::WaitAndDefer => {}
        }
        let (address, record) = slice.device_ptr_mut(stream);
        match recorded_event(&record) {
            Some(event) => {
                std::mem::forget(record);
                *write_event = Some(event);
                *pending = Some(Pending {
                    stream: Arc::clone(stream),
                    wrote: true,
                    foreign_read: false,
                });
                f(address)
            }
            None => {
                *pending = None;
                let result = f(address);
                drop(record);
                result
            }
        }
    }

    /// Records a deferred write into cudarc's write event, so readers on
    /// other streams wait for it.
    ///
    /// The deferred stream stays: reads on it may be in flight on other
    /// threads.
    fn publish_write(&self, deferred: &mut Pending) {
        if !deferred.wrote {
            return;
        }
        if let Some(EventHandle(event)) = self.write_event {
            let context = deferred.stream.context();
            // As cudarc's own record: a stream of another context, or a
            // context that cannot be bound, is an error and records nothing.
            let same_context = **context == **self.slice.context();
            let recorded = if same_context {
                context.bind_to_thread()
            } else {
                Err(cudarc::driver::DriverError(
                    sys::cudaError_enum::CUDA_ERROR_INVALID_CONTEXT,
                ))
            };
            let recorded = recorded.and_then(|()| {
                // SAFETY: `event` is cudarc's write event of `self.slice`,
                // alive as long as `self` and never replaced (see
                // `write_event`); the stream belongs to the event's context
                // (checked above), which is now current.
                unsafe {
                    cudarc::driver::result::event::record(
                        event.as_ptr(),
                        deferred.stream.cu_stream(),
                    )
                }
            });
            context.record_err(recorded);
        }
        deferred.wrote = false;
    }

    /// Records every deferred access into cudarc's events and ends the
    /// deferral.
    fn flush(&mut self) {
        let pending = self
            .pending
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(previous) = pending.take() {
            // The write event, recorded after waiting for the read event,
            // orders everything deferred and every foreign read before the
            // next writer; readers wait for it too.
            drop(self.slice.device_ptr_mut(&previous.stream));
        }
    }

    /// The cudarc slice, for use on any stream: a deferred write is
    /// recorded first, so cudarc's accesses wait for it.
    /// The stream the slice was allocated on (cudarc frees it there),
    /// recording nothing.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.slice.stream()
    }

    pub(crate) fn slice(&self) -> &CudaSlice<T> {
        let mut pending = self.lock();
        if let Some(deferred) = pending.as_mut() {
            self.publish_write(deferred);
            // cudarc may now read it on any stream, into the read event.
            deferred.foreign_read = true;
        }
        &self.slice
    }

    /// A mutable cudarc view of the whole slice: every deferred access is
    /// recorded first.
    pub(crate) fn slice_mut(&mut self) -> CudaViewMut<'_, T> {
        self.flush();
        self.slice.as_view_mut()
    }

    /// A mutable cudarc view of `range`, as [`slice_mut`](Self::slice_mut);
    /// `None` for a range past the end.
    pub(crate) fn range_mut(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Option<CudaViewMut<'_, T>> {
        self.flush();
        self.slice.try_slice_mut(range)
    }

    /// The cudarc slice, with every deferred access recorded; `Err(self)`
    /// for NCCL's memory, which cudarc must not free.
    pub(crate) fn into_inner(mut self) -> std::result::Result<CudaSlice<T>, Self> {
        if self.is_nccl_memory() {
            return Err(self);
        }
        self.flush();
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the slice is
        // moved out exactly once; the other fields own nothing after the
        // flush (an empty state, a plain handle and no NCCL memory).
        Ok(unsafe { ManuallyDrop::take(&mut this.slice) })
    }
}

impl<T> Drop for TrackedSlice<T> {
    fn drop(&mut self) {
        // cudarc frees the memory after its events: they must cover the
        // deferred accesses.
        self.flush();
        // SAFETY: the slice is taken once, here, and never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        if self.nccl_memory.is_some() {
            // The stream waits for every tracked access; `nccl_memory`,
            // dropped after this, waits for the device and frees it.
            let _ = slice.leak();
        } else {
            drop(slice);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wait_once_per_stream() {
        assert_eq!(plan_read(None), ReadPlan::WaitAndDefer);
        assert_eq!(plan_read(Some(true)), ReadPlan::Direct);
        assert_eq!(plan_read(Some(false)), ReadPlan::PublishThenTracked);
    }

    #[test]
    fn writes_skip_waits_only_on_a_clean_deferral_of_their_stream() {
        assert_eq!(plan_write(None, false), WritePlan::WaitAndDefer);
        assert_eq!(plan_write(None, true), WritePlan::WaitAndDefer);
        assert_eq!(plan_write(Some((true, false)), true), WritePlan::Direct);
        // A reader on another stream recorded the read event since.
        assert_eq!(
            plan_write(Some((true, true)), true),
            WritePlan::WaitAndDefer
        );
        // Deferred by reads only: the write event is not known yet.
        assert_eq!(
            plan_write(Some((true, false)), false),
            WritePlan::WaitAndDefer
        );
        for foreign_read in [false, true] {
            for knows_event in [false, true] {
                assert_eq!(
                    plan_write(Some((false, foreign_read)), knows_event),
                    WritePlan::FlushThenWaitAndDefer
                );
            }
        }
    }
}
