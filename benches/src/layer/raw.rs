//! The raw layer: nccl-sys function pointers called directly, with the
//! communicator and stream handles taken once. This is the baseline the
//! other layers are compared against.

use std::ffi::CStr;
use std::marker::PhantomData;

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, ResultCode};
use nccl_sys::{NcclLibrary, cudaStream_t, ncclComm_t, ncclResult_t};

use super::{Call, Launch, Layer, LayerKind, has_native_all_to_all};
use crate::buffers::DeviceBuffers;
use crate::collective::Collective;
use crate::error::BenchError;

/// Issues calls through `nccl_sys::library()?.functions()`, bypassing
/// nccl-core's wrappers.
pub struct RawLayer<'a> {
    lib: &'static NcclLibrary,
    comm: ncclComm_t,
    stream: cudaStream_t,
    native_all_to_all: bool,
    _borrows: PhantomData<(&'a Communicator, &'a CudaStream)>,
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
            stream: stream.cu_stream() as cudaStream_t,
            native_all_to_all: has_native_all_to_all(lib),
            _borrows: PhantomData,
        })
    }
}

/// Maps a raw result to `Ok` (success, or in progress on a nonblocking
/// communicator) or nccl-core's error for it.
#[inline(always)]
fn check(
    lib: &'static NcclLibrary,
    function: &'static str,
    result: ncclResult_t,
) -> Result<(), BenchError> {
    if result == ncclResult_t::ncclSuccess || result == ncclResult_t::ncclInProgress {
        Ok(())
    } else {
        Err(error(lib, function, result))
    }
}

#[cold]
#[inline(never)]
fn error(lib: &'static NcclLibrary, function: &'static str, result: ncclResult_t) -> BenchError {
    let text = |pointer: *const std::ffi::c_char| {
        if pointer.is_null() {
            return None;
        }
        // SAFETY: not NULL (checked above); NCCL returns NUL-terminated
        // strings that stay valid until the next NCCL call on this thread,
        // and this one is copied at once.
        let text = unsafe { CStr::from_ptr(pointer) };
        Some(text.to_string_lossy().into_owned())
    };
    let description = lib.functions().ncclGetErrorString().ok().and_then(|get| {
        // SAFETY: ncclGetErrorString accepts any code and returns a static string.
        text(unsafe { get(result) })
    });
    let last_error = lib.functions().ncclGetLastError().ok().and_then(|get| {
        // SAFETY: ncclGetLastError accepts NULL and returns a process-wide buffer.
        text(unsafe { get(std::ptr::null_mut()) })
    });
    nccl_core::Error::from_code(function, ResultCode(result.0), description, last_error).into()
}

impl Layer for RawLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Raw
    }

    unsafe fn bind<'s>(
        &'s self,
        call: &Call,
        _buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError> {
        let (lib, comm, stream) = (self.lib, self.comm, self.stream);
        let functions = lib.functions();
        let (send, recv, count) = (call.send_ptr(), call.recv_ptr(), call.count);
        let (dtype, op, root) = (call.dtype.to_raw(), call.op.to_raw(), call.root);
        Ok(match call.collective {
            Collective::AllReduce => {
                let f = functions.ncclAllReduce()?;
                Box::new(move || {
                    // SAFETY: `bind`'s contract covers the buffers; `comm` and
                    // `stream` are live for the layer's lifetime.
                    check(lib, "ncclAllReduce", unsafe {
                        f(send, recv, count, dtype, op, comm, stream)
                    })
                })
            }
            Collective::Broadcast => {
                let f = functions.ncclBroadcast()?;
                Box::new(move || {
                    // SAFETY: as for all_reduce.
                    check(lib, "ncclBroadcast", unsafe {
                        f(send, recv, count, dtype, root, comm, stream)
                    })
                })
            }
            Collective::Reduce => {
                let f = functions.ncclReduce()?;
                Box::new(move || {
                    // SAFETY: as for all_reduce.
                    check(lib, "ncclReduce", unsafe {
                        f(send, recv, count, dtype, op, root, comm, stream)
                    })
                })
            }
            Collective::AllGather => {
                let f = functions.ncclAllGather()?;
                Box::new(move || {
                    // SAFETY: as for all_reduce.
                    check(lib, "ncclAllGather", unsafe {
                        f(send, recv, count, dtype, comm, stream)
                    })
                })
            }
            Collective::ReduceScatter => {
                let f = functions.ncclReduceScatter()?;
                Box::new(move || {
                    // SAFETY: as for all_reduce.
                    check(lib, "ncclReduceScatter", unsafe {
                        f(send, recv, count, dtype, op, comm, stream)
                    })
                })
            }
            Collective::AllToAll if self.native_all_to_all => {
                let f = functions.ncclAlltoAll()?;
                Box::new(move || {
                    // SAFETY: as for all_reduce. In-place (send == recv, as
                    // nccl-tests runs it) stays within the buffer; its result
                    // is unspecified and not checked.
                    check(lib, "ncclAlltoAll", unsafe {
                        f(send, recv, count, dtype, comm, stream)
                    })
                })
            }
            Collective::AllToAll => {
                let (start, end) = (functions.ncclGroupStart()?, functions.ncclGroupEnd()?);
                let (send_fn, recv_fn) = (functions.ncclSend()?, functions.ncclRecv()?);
                let (world, block) = (call.world, call.block_bytes() as usize);
                Box::new(move || {
                    // SAFETY: as for all_reduce; block `peer` of each buffer
                    // lies within the `world * count` elements of the call.
                    unsafe {
                        check(lib, "ncclGroupStart", start())?;
                        let mut result = Ok(());
                        for peer in 0..world {
                            let offset = peer as usize * block;
                            result = result
                                .and(check(
                                    lib,
                                    "ncclSend",
                                    send_fn(
                                        send.wrapping_byte_add(offset),
                                        count,
                                        dtype,
                                        peer,
                                        comm,
                                        stream,
                                    ),
                                ))
                                .and(check(
                                    lib,
                                    "ncclRecv",
                                    recv_fn(
                                        recv.wrapping_byte_add(offset),
                                        count,
                                        dtype,
                                        peer,
                                        comm,
                                        stream,
                                    ),
                                ));
                        }
                        let ended = check(lib, "ncclGroupEnd", end());
                        result.and(ended)
                    }
                })
            }
            Collective::SendRecv => {
                let (start, end) = (functions.ncclGroupStart()?, functions.ncclGroupEnd()?);
                let (send_fn, recv_fn) = (functions.ncclSend()?, functions.ncclRecv()?);
                let (next, previous) = call.ring_peers();
                Box::new(move || {
                    // SAFETY: as for all_reduce; the send and the receive are
                    // issued in one group, so a rank may be its own peer.
                    unsafe {
                        check(lib, "ncclGroupStart", start())?;
                        let sent = check(
                            lib,
                            "ncclSend",
                            send_fn(send, count, dtype, next, comm, stream),
                        );
                        let received = check(
                            lib,
                            "ncclRecv",
                            recv_fn(recv, count, dtype, previous, comm, stream),
                        );
                        let ended = check(lib, "ncclGroupEnd", end());
                        sent.and(received).and(ended)
                    }
                })
            }
        })
    }
}
