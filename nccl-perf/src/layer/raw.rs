//! The raw layer: nccl-sys function pointers called directly, with the
//! communicator and stream handles taken once. This is the baseline the
//! other layers are compared against.
//!
//! On a nonblocking communicator, a call that NCCL answers with
//! `ncclInProgress` is followed by the least wait NCCL's contract allows
//! before the next call: `ncclCommGetAsyncError` polled back to back (no
//! sleep, no yield) until it no longer says in progress, so that what NCCL
//! itself costs there can be told from what a layer above adds.
//!
//! With [`RawLayer::with_fingerprint`] every operation is grouped with an
//! in-band fingerprint: a MAX all_reduce of two `u64`s `[h, !h]` from a
//! preallocated device buffer, in the same `ncclGroupStart`/`ncclGroupEnd`
//! (every rank's `h` agreed exactly when the result's second word is the
//! complement of its first). What that adds to each call, on the host and
//! on the GPU, is the cost of checking every collective inside NCCL.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, DataType, Op, ReduceOp};
use nccl_sys::{Functions, NcclLibrary, cudaStream_t, ncclComm_t, ncclResult_t};

use super::call::{AlongEach, launcher};
use super::{Binding, Call, Layer, LayerKind, Shift, place_within, shifted};
use crate::buffers::DeviceBuffers;
use crate::error::BenchError;

/// The words of a fingerprint: `h` and its complement.
const FINGERPRINT_WORDS: usize = 2;

/// Polls of `ncclCommGetAsyncError` between two looks at the clock in a
/// nonblocking wait: the deadline is checked, the clock read rarely.
const POLLS_PER_CLOCK_READ: u32 = 1024;

/// Issues calls through `nccl_sys::library()?.functions()`, bypassing
/// nccl-core's wrappers.
pub struct RawLayer<'a> {
    lib: &'static NcclLibrary,
    comm: ncclComm_t,
    /// The communicator's ranks, which bound calls are checked against.
    world: usize,
    /// Whether calls may answer `ncclInProgress`, to be waited out.
    blocking: bool,
    /// How long a nonblocking wait may take before the launch fails.
    wait_timeout: Duration,
    stream: cudaStream_t,
    /// The stream `stream` is the handle of, which gives the buffers'
    /// addresses.
    owner: &'a CudaStream,
    /// The fingerprint's buffers (`[h, !h]` sent, the MAX received), when
    /// every operation carries one.
    fingerprint: Option<DeviceBuffers>,
    _comm: PhantomData<&'a Communicator>,
}

impl<'a> RawLayer<'a> {
    /// The raw handles of `comm` and `stream`, which must outlive the layer.
    ///
    /// # Errors
    /// The communicator was aborted or finalized.
    pub fn new(comm: &'a Communicator, stream: &'a CudaStream) -> Result<Self, BenchError> {
        let lib = comm.library();
        Ok(Self {
            lib,
            comm: comm.as_raw()?,
            world: comm.world_size(),
            blocking: comm.is_blocking(),
            wait_timeout: comm.wait_timeout(),
            stream: stream.cu_stream() as cudaStream_t,
            owner: stream,
            fingerprint: None,
            _comm: PhantomData,
        })
    }

    /// The layer with every operation grouped with an in-band fingerprint
    /// (see the module docs), from buffers allocated and filled here on
    /// `stream`, the layer's stream.
    ///
    /// # Errors
    /// The allocation or the upload failed.
    pub fn with_fingerprint(mut self, stream: &Arc<CudaStream>) -> Result<Self, BenchError> {
        let mut buffers = DeviceBuffers::alloc(DataType::Uint64, FINGERPRINT_WORDS, stream)?;
        let h = 0u64;
        let words: Vec<u8> = [h, !h].iter().flat_map(|word| word.to_le_bytes()).collect();
        buffers.upload(&words, &[], 0, stream)?;
        stream
            .synchronize()
            .map_err(nccl_core::Error::cuda("uploading the fingerprint"))?;
        self.fingerprint = Some(buffers);
        Ok(self)
    }
}

/// `result` of `function` as nccl-core maps it: success, or in progress
/// on a nonblocking communicator, is `Ok` (`true` for in progress); any
/// other code is nccl-core's error for it, with NCCL's description and
/// last-error text.
#[inline(always)]
fn check(
    lib: &NcclLibrary,
    function: &'static str,
    result: ncclResult_t,
) -> Result<bool, BenchError> {
    nccl_core::check(lib, function, result)
        .map(|status| status == nccl_core::Status::InProgress)
        .map_err(BenchError::from)
}

/// Waits out a call that answered `ncclInProgress`: polls
/// `ncclCommGetAsyncError` back to back until it says something else,
/// at most `timeout`.
///
/// # Errors
/// The communicator's asynchronous error, or [`BenchError::Usage`] past
/// `timeout` (a rank that stopped calling).
fn wait_out(
    lib: &NcclLibrary,
    functions: &Functions,
    comm: ncclComm_t,
    timeout: Duration,
) -> Result<(), BenchError> {
    let get = functions.ncclCommGetAsyncError()?;
    let started = Instant::now();
    let mut polls = 0u32;
    loop {
        let mut state = ncclResult_t::ncclSuccess;
        // SAFETY: `comm` is live for the layer's lifetime and `state` is
        // writable.
        check(lib, "ncclCommGetAsyncError", unsafe {
            get(comm, &mut state)
        })?;
        if !check(lib, "ncclCommGetAsyncError (asynchronous error)", state)? {
            return Ok(());
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(POLLS_PER_CLOCK_READ) && started.elapsed() > timeout {
            return Err(BenchError::Usage(format!(
                "a nonblocking call was still in progress after {timeout:?}: expected every rank to make the \
                 same calls"
            )));
        }
    }
}

impl Layer for RawLayer<'_> {
    fn kind(&self) -> LayerKind {
        if self.fingerprint.is_some() {
            LayerKind::RawFingerprint
        } else {
            LayerKind::Raw
        }
    }

    fn bind<'s>(&'s self, call: &Call, buffers: &'s mut DeviceBuffers) -> Binding<'s> {
        let last = call.check_within(
            buffers.addresses(self.owner),
            (buffers.dtype(), buffers.len()),
            self.world,
        )?;
        let (lib, comm, stream) = (self.lib, self.comm, self.stream);
        let (blocking, timeout) = (self.blocking, self.wait_timeout);
        let functions = *lib.functions();
        let elem = call.dtype.size_bytes();
        // A function the loaded libnccl lacks fails the first launch (the
        // runner's warm-up), naming it.
        let calls = call.core_calls(lib);
        let (start, end) = (functions.ncclGroupStart()?, functions.ncclGroupEnd()?);
        let fingerprint = self.fingerprint.as_ref().map(|fingerprint| {
            let (send, recv) = fingerprint.addresses(self.owner);
            nccl_core::Call {
                op: Op::AllReduce(ReduceOp::Max.into()),
                send: send as usize as *const std::ffi::c_void,
                recv: recv as usize as *mut std::ffi::c_void,
                count: FINGERPRINT_WORDS,
                dtype: DataType::Uint64,
            }
        });
        // What NCCL answered `function` with, waited out when in progress.
        let settle = move |function: &'static str, result: ncclResult_t| {
            if check(lib, function, result)? && !blocking {
                wait_out(lib, &functions, comm, timeout)?;
            }
            Ok(())
        };
        let issue = move |part: nccl_core::Call<'static>, shift: &Shift| {
            let part = shifted(part, place_within(shift, last)? * elem);
            // SAFETY: `check_within` found the call within `buffers` (which
            // the launcher borrows) at every place up to `last`, for the
            // elements the call reads and writes on the communicator's
            // ranks, and `place_within` keeps this one there; `comm` and
            // `stream` are live for the layer's lifetime.
            // In-place all_to_all (send == recv, as nccl-tests runs it)
            // stays within the buffer; its result is unspecified and not
            // checked. A part of a grouped call (a block of all_to_all,
            // one half of sendrecv) lies within the call's buffers, and a
            // send to this rank is paired with its receive in the group.
            let result = unsafe { part.issue_raw(&functions, comm, stream) }?;
            settle(part.op.function(), result)
        };
        let along = fingerprint.map(|fingerprint| -> AlongEach<'s> {
            Box::new(move || {
                // SAFETY: the fingerprint's two buffers of two u64 each
                // belong to the layer, which the launcher borrows; `comm`
                // and `stream` are live for the layer's lifetime.
                let result = unsafe { fingerprint.issue_raw(&functions, comm, stream) }?;
                settle(fingerprint.op.function(), result)
            })
        });
        let grouped = move |issue_all: &mut dyn FnMut() -> Result<(), BenchError>| {
            // SAFETY: ncclGroupStart takes no arguments.
            settle("ncclGroupStart", unsafe { start() })?;
            let issued = issue_all();
            // SAFETY: ncclGroupEnd takes no arguments.
            let ended = settle("ncclGroupEnd", unsafe { end() });
            issued.and(ended)
        };
        Ok(launcher(calls, issue, along, grouped))
    }
}
