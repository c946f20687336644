//! The core layer: nccl-core's `unsafe` collectives on `Communicator`,
//! which check the communicator, stream, type and ranks on every call.

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, Group, Status};

use super::{Call, Launch, Layer, LayerKind, has_native_all_to_all};
use crate::buffers::DeviceBuffers;
use crate::collective::Collective;
use crate::error::BenchError;

/// A call NCCL accepted (enqueued, or in progress on a nonblocking
/// communicator) is `Ok`.
#[inline(always)]
fn accepted(result: nccl_core::Result<Status>) -> Result<(), BenchError> {
    match result {
        Ok(_) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Issues calls through nccl-core's `Communicator` methods and `Group`.
pub struct CoreLayer<'a> {
    comm: &'a Communicator,
    stream: &'a CudaStream,
    native_all_to_all: bool,
}

impl<'a> CoreLayer<'a> {
    /// The layer over this rank's communicator and stream.
    pub fn new(comm: &'a Communicator, stream: &'a CudaStream) -> Self {
        Self {
            comm,
            stream,
            native_all_to_all: has_native_all_to_all(comm.library()),
        }
    }
}

impl Layer for CoreLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Core
    }

    unsafe fn bind<'s>(
        &'s self,
        call: &Call,
        _buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError> {
        let (comm, stream) = (self.comm, self.stream);
        let (send, recv, count) = (call.send_ptr(), call.recv_ptr(), call.count);
        let (dtype, op, root) = (call.dtype, call.op, call.root);
        Ok(match call.collective {
            Collective::AllReduce => Box::new(move || {
                // SAFETY: `bind`'s contract covers the buffers, for `count`
                // elements on the communicator's device.
                accepted(unsafe { comm.all_reduce(send, recv, count, dtype, op, stream) })
            }),
            Collective::Broadcast => Box::new(move || {
                // SAFETY: as for all_reduce.
                accepted(unsafe { comm.broadcast(send, recv, count, dtype, root, stream) })
            }),
            Collective::Reduce => Box::new(move || {
                // SAFETY: as for all_reduce.
                accepted(unsafe { comm.reduce(send, recv, count, dtype, op, root, stream) })
            }),
            Collective::AllGather => Box::new(move || {
                // SAFETY: as for all_reduce; `recv` holds `world * count` elements.
                accepted(unsafe { comm.all_gather(send, recv, count, dtype, stream) })
            }),
            Collective::ReduceScatter => Box::new(move || {
                // SAFETY: as for all_reduce; `send` holds `world * count` elements.
                accepted(unsafe { comm.reduce_scatter(send, recv, count, dtype, op, stream) })
            }),
            Collective::AllToAll if self.native_all_to_all => Box::new(move || {
                // SAFETY: as for all_reduce; both buffers hold `world * count`
                // elements. In-place (send == recv, as nccl-tests runs it)
                // reads and writes only within that one buffer; its result is
                // unspecified and not checked.
                accepted(unsafe { comm.all_to_all(send, recv, count, dtype, stream) })
            }),
            Collective::AllToAll => {
                let (world, block) = (call.world, call.block_bytes() as usize);
                Box::new(move || {
                    let group = Group::start()?;
                    for peer in 0..world {
                        let offset = peer as usize * block;
                        // SAFETY: as for all_reduce; block `peer` of each
                        // buffer lies within its `world * count` elements, and
                        // the self-send is paired with its receive in the group.
                        unsafe {
                            accepted(comm.send(
                                send.wrapping_byte_add(offset),
                                count,
                                dtype,
                                peer,
                                stream,
                            ))?;
                            accepted(comm.recv(
                                recv.wrapping_byte_add(offset),
                                count,
                                dtype,
                                peer,
                                stream,
                            ))?;
                        }
                    }
                    accepted(group.end())
                })
            }
            Collective::SendRecv => {
                let (next, previous) = call.ring_peers();
                Box::new(move || {
                    let group = Group::start()?;
                    // SAFETY: as for all_reduce; the send and the receive are
                    // issued in one group, so a rank may be its own peer.
                    unsafe {
                        accepted(comm.send(send, count, dtype, next, stream))?;
                        accepted(comm.recv(recv, count, dtype, previous, stream))?;
                    }
                    accepted(group.end())
                })
            }
        })
    }
}
