//! The tensor layer: nccl-tensor's safe `Communicator` on parts of typed
//! `Tensor<T>`s ([`Tensor::part`]), through its public API only (no
//! `unsafe` here).
//!
//! Every launch calls the safe operation, so the time includes everything a
//! user of nccl-tensor pays per call: building the buffer descriptions,
//! every argument check, the tensors' stream tracking (cudarc's event wait
//! and record, deferred while a tensor stays on one stream) and nccl-core
//! below.
//!
//! The operations, per collective (out-of-place / in-place):
//!
//! | collective | out-of-place | in-place |
//! |---|---|---|
//! | all_reduce | `all_reduce_into(&in, &mut out)` | `all_reduce(&mut buf)` |
//! | broadcast | `broadcast_into(&in, &mut out)` | `broadcast(&mut buf)` |
//! | reduce | `reduce_into(&in, &mut out)` | `reduce(&mut buf)` |
//! | all_gather | `all_gather_into_tensor(&mut out, &in)` | N/A |
//! | reduce_scatter | `reduce_scatter_tensor(&mut out, &in)` | N/A |
//! | all_to_all | `all_to_all_single(&mut out, &in)` | N/A |
//! | sendrecv | `send(&in)` + `recv(&mut out)` in a `Group` | `send(&buf)` + `recv(&mut buf)` in a `Group` |
//!
//! The safe API has no in-place all_gather, reduce_scatter or all_to_all:
//! nccl-tests' in-place forms pass an input that lies inside the output,
//! which the borrow checker (and the cell check) refuses by design.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Group, Status};
use nccl_tensor::{Communicator, Tensor, TensorPart, TensorPartMut};

use super::{Call, Launch, Layer, LayerKind};
use crate::buffers::{BenchElement, DeviceBuffers};
use crate::collective::{Collective, Mode};
use crate::error::BenchError;

/// Issues calls through `nccl_tensor::Communicator`'s safe operations.
pub struct TensorLayer<'a> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
}

/// A call the communicator accepted is `Ok`.
#[inline(always)]
fn accepted(result: nccl_tensor::Result<Status>) -> Result<(), BenchError> {
    match result {
        Ok(_) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

fn input<T: BenchElement>(buffer: &Tensor<T>, len: usize) -> Result<TensorPart<'_, T>, BenchError> {
    buffer
        .part(0..len)
        .map_err(|_| too_small(len, buffer.len()))
}

fn output<T: BenchElement>(
    buffer: &mut Tensor<T>,
    len: usize,
) -> Result<TensorPartMut<'_, T>, BenchError> {
    let available = buffer.len();
    buffer
        .part_mut(0..len)
        .map_err(|_| too_small(len, available))
}

#[cold]
fn too_small(needed: usize, len: usize) -> BenchError {
    BenchError::Usage(format!(
        "internal error: the tensor layer needs {needed} elements but the buffer holds {len}"
    ))
}

impl<'a> TensorLayer<'a> {
    /// The layer over this rank's communicator and stream.
    pub fn new(comm: &'a Communicator, stream: &'a Arc<CudaStream>) -> Self {
        Self { comm, stream }
    }

    /// Whether the safe API has `collective` in `mode` (see the module docs).
    pub const fn has(collective: Collective, mode: Mode) -> bool {
        !matches!(
            (collective, mode),
            (
                Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll,
                Mode::InPlace
            )
        )
    }

    /// Binds `call` on typed buffers: views of the elements the call uses
    /// are made here, once; each launch calls the safe operation on them.
    ///
    /// # Errors
    /// A call the safe API cannot express ([`TensorLayer::has`]), or
    /// buffers too small for it.
    pub fn bind_typed<'s, T: BenchElement>(
        &'s self,
        call: &Call,
        send: &'s mut Tensor<T>,
        recv: &'s mut Tensor<T>,
    ) -> Result<Launch<'s>, BenchError> {
        let (comm, stream) = (self.comm, self.stream);
        let (count, op, root) = (call.count, call.op, call.root);
        let whole = count * call.world.max(1) as usize;
        let send: &'s Tensor<T> = send;
        Ok(match (call.collective, call.mode) {
            (Collective::AllReduce, Mode::OutOfPlace) => {
                let (input, mut output) = (input(send, count)?, output(recv, count)?);
                Box::new(move || accepted(comm.all_reduce_into(&input, &mut output, op, stream)))
            }
            (Collective::AllReduce, Mode::InPlace) => {
                let mut buffer = output(recv, count)?;
                Box::new(move || accepted(comm.all_reduce(&mut buffer, op, stream)))
            }
            (Collective::Broadcast, Mode::OutOfPlace) => {
                let (input, mut output) = (input(send, count)?, output(recv, count)?);
                Box::new(move || accepted(comm.broadcast_into(&input, &mut output, root, stream)))
            }
            (Collective::Broadcast, Mode::InPlace) => {
                let mut buffer = output(recv, count)?;
                Box::new(move || accepted(comm.broadcast(&mut buffer, root, stream)))
            }
            (Collective::Reduce, Mode::OutOfPlace) => {
                let (input, mut output) = (input(send, count)?, output(recv, count)?);
                Box::new(move || accepted(comm.reduce_into(&input, &mut output, op, root, stream)))
            }
            (Collective::Reduce, Mode::InPlace) => {
                let mut buffer = output(recv, count)?;
                Box::new(move || accepted(comm.reduce(&mut buffer, op, root, stream)))
            }
            (Collective::AllGather, Mode::OutOfPlace) => {
                let (input, mut output) = (input(send, count)?, output(recv, whole)?);
                Box::new(move || accepted(comm.all_gather_into_tensor(&mut output, &input, stream)))
            }
            (Collective::ReduceScatter, Mode::OutOfPlace) => {
                let (input, mut output) = (input(send, whole)?, output(recv, count)?);
                Box::new(move || {
                    accepted(comm.reduce_scatter_tensor(&mut output, &input, op, stream))
                })
            }
            (Collective::AllToAll, Mode::OutOfPlace) => {
                let (input, mut output) = (input(send, whole)?, output(recv, whole)?);
                Box::new(move || accepted(comm.all_to_all_single(&mut output, &input, stream)))
            }
            (Collective::SendRecv, Mode::OutOfPlace) => {
                let (next, previous) = call.ring_peers();
                let (input, mut output) = (input(send, count)?, output(recv, count)?);
                Box::new(move || {
                    let group = Group::start()?;
                    accepted(comm.send(&input, next, stream))?;
                    accepted(comm.recv(&mut output, previous, stream))?;
                    let _ = group.end()?;
                    Ok(())
                })
            }
            (Collective::SendRecv, Mode::InPlace) => {
                let (next, previous) = call.ring_peers();
                let mut buffer = output(recv, count)?;
                Box::new(move || {
                    let group = Group::start()?;
                    accepted(comm.send(&buffer, next, stream))?;
                    accepted(comm.recv(&mut buffer, previous, stream))?;
                    let _ = group.end()?;
                    Ok(())
                })
            }
            (
                collective @ (Collective::AllGather
                | Collective::ReduceScatter
                | Collective::AllToAll),
                Mode::InPlace,
            ) => {
                return Err(BenchError::Usage(format!(
                    "the tensor layer has no in-place {collective}: its safe API refuses an input inside the output"
                )));
            }
        })
    }
}

impl Layer for TensorLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Tensor
    }

    fn supports(&self, collective: Collective, mode: Mode) -> bool {
        Self::has(collective, mode)
    }

    /// Binds through [`TensorLayer::bind_typed`] on the typed buffers;
    /// `call`'s addresses are not used (nothing here needs the caller's
    /// promise, which only the raw and core layers rely on).
    unsafe fn bind<'s>(
        &'s self,
        call: &Call,
        buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError> {
        crate::with_pair!(buffers.typed_mut(), pair => {
            self.bind_typed(call, &mut pair.send, &mut pair.recv)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_forms_of_the_safe_api() {
        for collective in Collective::ALL {
            assert!(TensorLayer::has(collective, Mode::OutOfPlace));
        }
        for collective in [
            Collective::AllReduce,
            Collective::Broadcast,
            Collective::Reduce,
            Collective::SendRecv,
        ] {
            assert!(TensorLayer::has(collective, Mode::InPlace), "{collective}");
        }
        for collective in [
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllToAll,
        ] {
            assert!(!TensorLayer::has(collective, Mode::InPlace), "{collective}");
        }
    }
}
