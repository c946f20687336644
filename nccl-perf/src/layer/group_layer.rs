//! The group layer: nccl-group's `ProcessGroup`, through its public API
//! only (no `unsafe` here). Each rank thread of nccl-perf is one process of
//! the group, driving its rank's GPU, with a communicator of the group's
//! own (the runner creates it with a barrier before anything is timed).
//!
//! Every launch calls the operation and [`Work::wait`](nccl_group::Work::wait),
//! so the time includes what a user of the group pays per call: the event
//! that makes the group's NCCL stream wait for the rank's stream, the
//! communicator-cache lookup and lock, the collective (through
//! nccl-tensor's safe API), the end event, and the rank's stream waiting
//! for it (the CPU does not wait).
//!
//! Each launch issues the call's one operation ([`Call::ops`]) through
//! [`ProcessGroup::issue`]: in place on one tensor, out of place on an
//! `(output, input)` pair. sendrecv's two (a send to the next rank, a
//! receive from the previous) are one [`ProcessGroup::batch_isend_irecv`]
//! on the pair. The forms it lacks (every in-place form nccl-tensor's
//! safe API lacks, and sendrecv in place) print `N/A`; `layer::unsupported`
//! says why. The calls of one launch (nccl-tests' `-m`) are issued one
//! after another: a process group's operations do not join one NCCL group.
//!
//! The operations take owned tensors of exactly the call's element counts,
//! so binding allocates them on the rank's stream, one set per place of the
//! call's rotation (so that consecutive calls use different memory, as the
//! other layers' rotated buffers do), and copies the call's input region
//! at each place of the rank's buffers into them (device to device); each
//! launch moves the set of its place into the operation and takes it back
//! from `Work::wait`. Dropping the launcher copies the output tensor of the
//! first place back to the receive buffer there, so the runner's check
//! (which drops the launcher before reading the receive buffer, at the
//! first place) checks the group's result. Binding and dropping both
//! synchronise the stream: the runner times on the host, from the first
//! launch to a stream synchronisation, so a copy still queued then would be
//! timed.
//!
//! The layer keeps a dropped launcher's tensors until its next bind: with
//! `-G` the runner drops the launcher after capturing it and replays the
//! graph later, and the graph uses the tensors' memory (the other layers'
//! graphs use the rank's buffers, which outlive them anyway).

use std::any::Any;
use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaViewMut};
use nccl_core::Op;
use nccl_group::{OpBuffers, OpError, OpResult, Owned, P2POp, ProcessGroup, StreamMode};
use nccl_tensor::{Tensor, rules};

use super::{Binding, Call, Launch, Layer, LayerKind, Shift, unsupported};
use crate::buffers::{BenchElement, DeviceBuffers, Pair};
use crate::collective::{Collective, Mode};
use crate::error::BenchError;

/// Issues calls through nccl-group's `ProcessGroup` operations.
pub struct GroupLayer<'a> {
    group: &'a ProcessGroup,
    stream: &'a Arc<CudaStream>,
    /// The tensors of the last dropped launcher, freed by the next bind:
    /// a CUDA graph captured through that launcher still uses them.
    kept: Cell<Option<Box<dyn Any>>>,
}

#[cold]
fn internal(message: String) -> BenchError {
    BenchError::Usage(format!("internal error: the group layer {message}"))
}

/// A region of `len` elements from element `start` that a buffer of
/// `buffer_len` elements does not hold.
fn region_error(what: &str, start: usize, len: usize, buffer_len: usize) -> BenchError {
    internal(format!(
        "needs elements {start}..{} of the {what} buffer, but it holds {buffer_len}",
        start + len
    ))
}

/// A tensor of `len` zeroed elements on `stream`.
fn device_tensor<T: BenchElement>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<Tensor<T>, BenchError> {
    // An empty call still goes through the group (NCCL accepts count 0);
    // cudarc's `null` is its empty slice, with no zero-byte memset.
    let data = if len == 0 {
        stream.null()
    } else {
        stream.alloc_zeros(len)
    }
    .map_err(nccl_core::Error::cuda(
        "allocating a tensor of the group layer",
    ))?;
    Ok(Tensor::from_slice(data, &[len])?)
}

/// The tensors a bound call moves through the group: its output is what
/// goes back to the receive buffer. Owned (`'static`), so the layer can
/// keep them after the launcher is gone.
trait Operands<T: BenchElement>: OpBuffers<Ownership = Owned> + Sized + 'static {
    /// The operands of a call whose input is `input` and whose output has
    /// `output_len` elements (made on `stream`).
    fn new(
        input: Tensor<T>,
        output_len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BenchError>;
    /// The tensor the result lands in.
    fn output(&self) -> &Tensor<T>;
}

/// An in-place operation's one tensor.
impl<T: BenchElement> Operands<T> for Tensor<T> {
    fn new(
        input: Tensor<T>,
        _output_len: usize,
        _stream: &Arc<CudaStream>,
    ) -> Result<Self, BenchError> {
        Ok(input)
    }

    fn output(&self) -> &Tensor<T> {
        self
    }
}

/// A launch's error, with the tensors when they survived it (boxed:
/// failures are rare).
type Failed<B> = Box<(BenchError, Option<B>)>;

/// An out-of-place operation's `(output, input)`, as the group takes them.
type OutputInput<T> = (Tensor<T>, Tensor<T>);

impl<T: BenchElement> Operands<T> for OutputInput<T> {
    fn new(
        input: Tensor<T>,
        output_len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BenchError> {
        Ok((device_tensor(stream, output_len)?, input))
    }

    fn output(&self) -> &Tensor<T> {
        &self.0
    }
}

/// A bound call: its tensors between launches, one set per place of its
/// rotation, and the receive-buffer region the first place's output is
/// copied back to when the launcher is dropped.
struct Bound<'s, T: BenchElement, B: Operands<T>> {
    /// Indexed by the place's slot; an entry is `None` only after a failed
    /// `Work::wait`, which releases its tensors.
    ring: Vec<Option<B>>,
    results: CudaViewMut<'s, T>,
    stream: &'s Arc<CudaStream>,
    /// Where the tensors go when the launcher is dropped ([`GroupLayer::kept`]).
    kept: &'s Cell<Option<Box<dyn Any>>>,
}

impl<'s, T: BenchElement, B: Operands<T>> Bound<'s, T, B> {
    /// `ring` (the operands of each place, the first's output of the
    /// length of `results`) bound to the result region `results`, once the
    /// copies into them are done.
    fn new(
        ring: Vec<Option<B>>,
        results: CudaViewMut<'s, T>,
        layer: &'s GroupLayer<'_>,
    ) -> Result<Self, BenchError> {
        let stream = layer.stream;
        let produced = ring
            .first()
            .and_then(Option::as_ref)
            .map(|b| b.output().len());
        if produced != Some(results.len()) {
            return Err(internal(format!(
                "made output tensors of {produced:?} elements for a result region of {}",
                results.len()
            )));
        }
        stream.synchronize().map_err(nccl_core::Error::cuda(
            "synchronizing after filling the group layer's tensors",
        ))?;
        Ok(Self {
            ring,
            results,
            stream,
            kept: &layer.kept,
        })
    }

    /// Runs `op` on the tensors of each place in `shifts` in turn and waits
    /// for its work on the stream (not on the CPU), keeping the tensors for
    /// the next launch.
    #[inline]
    fn launch(
        &mut self,
        shifts: &[Shift],
        op: impl Fn(B) -> OpResult<B>,
    ) -> Result<(), BenchError> {
        self.launch_with(shifts, |operands| match op(operands) {
            Ok(work) => work.wait().map_err(|error| Box::new((error.into(), None))),
            Err(failed) => {
                let OpError { error, buffers } = *failed;
                Err(Box::new((error.into(), Some(buffers))))
            }
        })
    }

    /// Runs `op` on the tensors of each place in `shifts` in turn; `op`
    /// hands them back, or its error with the tensors when they survived
    /// it.
    #[inline]
    fn launch_with(
        &mut self,
        shifts: &[Shift],
        op: impl Fn(B) -> Result<B, Failed<B>>,
    ) -> Result<(), BenchError> {
        let slots = self.ring.len().max(1);
        for shift in shifts {
            let entry = &mut self.ring[shift.slot % slots];
            let operands = entry.take().ok_or_else(|| {
                internal(
                    "has no tensors left: an earlier Work::wait failed and released them".into(),
                )
            })?;
            match op(operands) {
                Ok(operands) => *entry = Some(operands),
                Err(failed) => {
                    let (error, operands) = *failed;
                    *entry = operands;
                    return Err(error);
                }
            }
        }
        Ok(())
    }
}

impl<T: BenchElement, B: Operands<T>> Drop for Bound<'_, T, B> {
    /// Copies the first place's output back to the receive buffer, hands
    /// the tensors to the layer to keep, then synchronises so that the copy
    /// does not land in a timed batch. A failure cannot be returned from
    /// here: an asynchronous one is sticky and the runner's next
    /// synchronisation reports it; a copy refused outright leaves the
    /// receive buffer as it was, which the check then counts as wrong
    /// elements.
    fn drop(&mut self) {
        let ring = std::mem::take(&mut self.ring);
        // `new` checked that the lengths match, as the copy requires.
        if let Some(Some(first)) = ring.first()
            && !self.results.is_empty()
        {
            let _ = self
                .stream
                .memcpy_dtod(first.output().as_slice(), &mut self.results);
        }
        self.kept.set(Some(Box::new(ring)));
        let _ = self.stream.synchronize();
    }
}

impl<'a> GroupLayer<'a> {
    /// The layer over this rank's process group and stream.
    pub fn new(group: &'a ProcessGroup, stream: &'a Arc<CudaStream>) -> Self {
        Self {
            group,
            stream,
            kept: Cell::new(None),
        }
    }

    /// Why the group has no `collective` in `mode` (`layer::unsupported`);
    /// `None` when it has.
    pub fn missing(collective: Collective, mode: Mode) -> Option<&'static str> {
        unsupported(LayerKind::Group, collective, mode)
    }

    /// Whether the group has `collective` in `mode`.
    pub fn has(collective: Collective, mode: Mode) -> bool {
        Self::missing(collective, mode).is_none()
    }

    /// The operands of each place of `call`'s rotation, the input filled
    /// from the call's input region there (the send buffer out of place,
    /// the receive buffer in place), and the receive-buffer region of the
    /// first place, where its output goes back. `offsets` are the call's
    /// (send, receive) element offsets in the buffers.
    fn stage<'s, T: BenchElement, B: Operands<T>>(
        &'s self,
        call: &Call,
        op: &Op<'_>,
        (send_offset, recv_offset): (usize, usize),
        pair: &'s mut Pair<T>,
    ) -> Result<Bound<'s, T, B>, BenchError> {
        // No graph of the last launcher is replayed after this bind; its
        // tensors are freed on the stream, before the synchronisation that
        // ends the bind.
        drop(self.kept.take());
        let (input_len, output_len) = rules(op).sizes.lengths(call.count, call.world);
        let (source, source_name) = match call.mode {
            Mode::OutOfPlace => (pair.send.as_slice(), "send"),
            Mode::InPlace => (pair.recv.as_slice(), "receive"),
        };
        let rotation = call.rotation;
        let mut ring = Vec::with_capacity(rotation.slots());
        for slot in 0..rotation.slots() {
            let start = send_offset + rotation.shift(slot).elems;
            let region = source
                .try_slice(start..start + input_len)
                .ok_or_else(|| region_error(source_name, start, input_len, source.len()))?;
            let mut input = device_tensor(self.stream, input_len)?;
            if input_len > 0 {
                self.stream
                    .memcpy_dtod(&region, &mut input.as_slice_mut())
                    .map_err(nccl_core::Error::cuda(
                        "copying the call's input into the group layer's tensor",
                    ))?;
            }
            ring.push(Some(B::new(input, output_len, self.stream)?));
        }
        let available = pair.recv.len();
        let start = recv_offset + rotation.shift(0).elems;
        let results = pair
            .recv
            .view_mut(start..start + output_len)
            .map_err(|_| region_error("receive", start, output_len, available))?;
        Bound::new(ring, results, self)
    }

    /// Binds `call` on typed buffers, its pointers `offsets` (send,
    /// receive) elements into them: the tensors of every place of its
    /// rotation are made and filled here, once; each launch calls the
    /// group's operation on those of its places and waits on the stream.
    /// The last launcher's tensors, kept by the layer, are freed here, so a
    /// CUDA graph captured through that launcher must not be replayed after
    /// this call.
    ///
    /// # Errors
    /// A call the group cannot express ([`GroupLayer::missing`]), buffers
    /// too small for it, or a CUDA failure making the tensors.
    pub fn bind_typed<'s, T: BenchElement>(
        &'s self,
        call: &Call,
        offsets: (usize, usize),
        pair: &'s mut Pair<T>,
    ) -> Result<Launch<'s>, BenchError> {
        let (group, stream) = (self.group, self.stream);
        let ops = call.ops();
        let op = match (
            unsupported(self.kind(), call.collective, call.mode),
            ops.as_slice(),
        ) {
            (None, &[op]) => op,
            (None, &[send @ Op::Send { peer: next }, Op::Recv { peer: previous }]) => {
                let mut bound: Bound<'s, T, OutputInput<T>> =
                    self.stage(call, &send, offsets, pair)?;
                return Ok(Box::new(move |shifts: &[Shift]| {
                    bound.launch_with(shifts, |pair| {
                        sendrecv(group, pair, (next, previous), stream)
                    })
                }));
            }
            (why, _) => {
                let why = why.unwrap_or("it issues one operation per call");
                return Err(BenchError::Usage(format!(
                    "the group layer has no {} {}: {why}",
                    call.mode.key(),
                    call.collective
                )));
            }
        };
        Ok(match call.mode {
            Mode::InPlace => {
                let mut bound: Bound<'s, T, Tensor<T>> = self.stage(call, &op, offsets, pair)?;
                Box::new(move |shifts: &[Shift]| {
                    bound.launch(shifts, |tensor| group.issue(op, tensor, stream))
                })
            }
            Mode::OutOfPlace => {
                let mut bound: Bound<'s, T, OutputInput<T>> =
                    self.stage(call, &op, offsets, pair)?;
                Box::new(move |shifts: &[Shift]| {
                    bound.launch(shifts, |pair| group.issue(op, pair, stream))
                })
            }
        })
    }
}

/// sendrecv on `(output, input)`: `input` to the `next` rank and `output`
/// from the `previous`, as one batch, waited for on `stream`.
fn sendrecv<T: BenchElement>(
    group: &ProcessGroup,
    (output, input): OutputInput<T>,
    (next, previous): (usize, usize),
    stream: &Arc<CudaStream>,
) -> Result<OutputInput<T>, Failed<OutputInput<T>>> {
    // The batch hands its tensors back in the order of its operations.
    let unbatch = |tensors: Vec<Tensor<T>>| {
        let mut tensors = tensors.into_iter();
        Some((tensors.next()?, tensors.next()?)).map(|(input, output)| (output, input))
    };
    let ops = vec![P2POp::send(input, next), P2POp::recv(output, previous)];
    match group.batch_isend_irecv(ops, stream) {
        Ok(work) => match work.wait() {
            Ok(tensors) => unbatch(tensors).ok_or_else(|| {
                Box::new((
                    internal("got fewer tensors back from batch_isend_irecv than it gave".into()),
                    None,
                ))
            }),
            Err(error) => Err(Box::new((error.into(), None))),
        },
        Err(failed) => {
            let OpError { error, buffers } = *failed;
            Err(Box::new((error.into(), unbatch(buffers))))
        }
    }
}

impl Layer for GroupLayer<'_> {
    fn kind(&self) -> LayerKind {
        match self.group.stream_mode() {
            StreamMode::Caller => LayerKind::GroupCaller,
            _ => LayerKind::Group,
        }
    }

    /// Binds through [`GroupLayer::bind_typed`]; `call`'s addresses only
    /// locate the regions to copy from and to, through the typed buffers,
    /// range-checked.
    fn bind<'s>(&'s self, call: &Call, buffers: &'s mut DeviceBuffers) -> Binding<'s> {
        let offsets = call.offsets(buffers.addresses(self.stream))?;
        crate::with_pair!(buffers.typed_mut(), pair => self.bind_typed(call, offsets, pair))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::TensorLayer;

    #[test]
    fn the_group_has_every_form_of_the_safe_api_but_sendrecv_in_place() {
        for collective in Collective::ALL {
            for mode in Mode::BOTH {
                let in_place_sendrecv = collective == Collective::SendRecv && mode == Mode::InPlace;
                let expected = !in_place_sendrecv && TensorLayer::has(collective, mode);
                assert_eq!(
                    GroupLayer::has(collective, mode),
                    expected,
                    "{collective} {mode:?}"
                );
                let why = GroupLayer::missing(collective, mode);
                assert_eq!(why.is_none(), expected);
                assert!(why.is_none_or(|why| !why.is_empty()));
            }
        }
        assert!(GroupLayer::has(Collective::AllReduce, Mode::OutOfPlace));
        assert!(!GroupLayer::has(Collective::AllGather, Mode::InPlace));
        assert!(GroupLayer::has(Collective::SendRecv, Mode::OutOfPlace));
    }
}
