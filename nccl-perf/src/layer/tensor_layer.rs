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
//! Each launch plans and enqueues the call's operations ([`Call::ops`])
//! through [`Communicator::plan`] at each place it is given: in place on
//! one part of the receive buffer, out of place from a part of the send
//! buffer into one of the receive buffer, the parts sized by the
//! operation's rules ([`Call::lengths`]) and made at the place's
//! offset ([`Tensor::part`]: a range check, nothing allocated). A send
//! reads the input part and a receive writes the output part (in place,
//! both use the one part).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Group, Op};
use nccl_tensor::{Communicator, Pair, ReadOnly, Single, Tensor, TensorPart, TensorPartMut};

use super::{Binding, Call, Launch, Layer, LayerKind, Shift, unsupported};
use crate::buffers::{BenchElement, DeviceBuffers};
use crate::collective::{Collective, Mode};
use crate::error::BenchError;

/// Issues calls through `nccl_tensor::Communicator`'s safe operations.
pub struct TensorLayer<'a> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
}

/// The part `start..start + len` of `buffer`, read by the operation.
#[inline]
fn input<T: BenchElement>(
    buffer: &Tensor<T>,
    start: usize,
    len: usize,
) -> Result<TensorPart<'_, T>, BenchError> {
    buffer
        .part(start..start + len)
        .map_err(|_| too_small(start + len, buffer.len()))
}

/// The part `start..start + len` of `buffer`, written by the operation.
#[inline]
fn output<T: BenchElement>(
    buffer: &mut Tensor<T>,
    start: usize,
    len: usize,
) -> Result<TensorPartMut<'_, T>, BenchError> {
    let available = buffer.len();
    buffer
        .part_mut(start..start + len)
        .map_err(|_| too_small(start + len, available))
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

    /// Whether the safe API has `collective` in `mode` (see `layer::unsupported`).
    pub fn has(collective: Collective, mode: Mode) -> bool {
        unsupported(LayerKind::Tensor, collective, mode).is_none()
    }

    /// Binds `call` on typed buffers, its pointers `offsets` (send,
    /// receive) elements into them: each launch makes the parts of the
    /// elements each of the call's operations uses at each place it is
    /// given, and plans and enqueues the operations on them (in one NCCL
    /// group when there are several operations or places).
    ///
    /// # Errors
    /// A call the safe API cannot express ([`TensorLayer::has`]), or
    /// buffers too small for it at the last place of its rotation.
    pub fn bind_typed<'s, T: BenchElement>(
        &'s self,
        call: &Call,
        (send_offset, recv_offset): (usize, usize),
        send: &'s mut Tensor<T>,
        recv: &'s mut Tensor<T>,
    ) -> Result<Launch<'s>, BenchError> {
        if let Some(why) = unsupported(LayerKind::Tensor, call.collective, call.mode) {
            return Err(BenchError::Usage(format!(
                "the tensor layer has no {} {}: {why}",
                call.mode.key(),
                call.collective
            )));
        }
        let (comm, stream) = (self.comm, self.stream);
        let ops = call.ops();
        let (input_len, output_len) = call.lengths();
        let send: &'s Tensor<T> = send;
        let last = call.rotation.last();
        // The farthest parts fit, so no launch fails on a range.
        match call.mode {
            Mode::OutOfPlace => {
                input(send, send_offset + last, input_len)?;
                output(recv, recv_offset + last, output_len)?;
            }
            Mode::InPlace => {
                output(recv, recv_offset + last, output_len)?;
            }
        }
        let (mode, grouped) = (call.mode, ops.len() > 1);
        Ok(Box::new(move |shifts: &[Shift]| {
            let group = (grouped || shifts.len() > 1)
                .then(Group::start)
                .transpose()?;
            for shift in shifts {
                let mut parts = match mode {
                    Mode::OutOfPlace => Parts::Two(
                        input(send, send_offset + shift.elems, input_len)?,
                        output(recv, recv_offset + shift.elems, output_len)?,
                    ),
                    Mode::InPlace => {
                        Parts::One(output(recv, recv_offset + shift.elems, output_len)?)
                    }
                };
                for &op in &ops {
                    let planned = match (&mut parts, op) {
                        (Parts::Two(input, _), Op::Send { .. }) => {
                            comm.plan(op, ReadOnly(&*input), stream)?.enqueue()
                        }
                        (Parts::Two(_, output), Op::Recv { .. }) => {
                            comm.plan(op, Single(&mut *output), stream)?.enqueue()
                        }
                        (Parts::Two(input, output), _) => {
                            let pair = Pair {
                                input: &*input,
                                output: &mut *output,
                            };
                            comm.plan(op, pair, stream)?.enqueue()
                        }
                        (Parts::One(buffer), _) => {
                            comm.plan(op, Single(&mut *buffer), stream)?.enqueue()
                        }
                    };
                    let _ = planned?;
                }
            }
            if let Some(group) = group {
                let _ = group.end()?;
            }
            Ok(())
        }))
    }
}

/// The parts of the rank's buffers a bound call uses.
enum Parts<'s, T: BenchElement> {
    /// In place: one part of the receive buffer.
    One(TensorPartMut<'s, T>),
    /// Out of place: the input part of the send buffer, the output part of
    /// the receive buffer.
    Two(TensorPart<'s, T>, TensorPartMut<'s, T>),
}

impl Layer for TensorLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Tensor
    }

    /// Binds through [`TensorLayer::bind_typed`] on the typed buffers;
    /// `call`'s addresses only give its offsets in them, and the parts
    /// made there are range-checked.
    fn bind<'s>(&'s self, call: &Call, buffers: &'s mut DeviceBuffers) -> Binding<'s> {
        let offsets = call.offsets(buffers.addresses(self.stream))?;
        crate::with_pair!(buffers.typed_mut(), pair => {
            self.bind_typed(call, offsets, &mut pair.send, &mut pair.recv)
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
