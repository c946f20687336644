//! The layers a benchmark can issue its calls through, one implementation
//! each: [`RawLayer`] (nccl-sys function pointers), [`CoreLayer`]
//! (nccl-core's `unsafe` collectives), [`TensorLayer`] (nccl-tensor's
//! safe, typed `Communicator`) and [`GroupLayer`] (nccl-group's
//! `ProcessGroup`, one process per rank thread). Another layer is a
//! [`LayerKind`] variant, a type implementing [`Layer`] and a line in
//! [`new_layer`].
//!
//! A layer *binds* one call (collective, mode, buffers, count, type) before
//! the timed loop into a [`Launch`]: the timed loop then only calls the
//! launcher with the places ([`Shift`]s, nccl-tests' rotation, computed
//! before the loop) of one iteration's calls, so it measures the collective
//! calls and nothing else. A launcher borrows the rank's [`DeviceBuffers`]
//! for as long as it lives (the tensor layer makes typed views of them at
//! each call's place; the group layer copies its tensors, one set per
//! place, from them when bound and back when dropped), so the runner binds
//! again after touching the buffers itself; binding is never timed.
//!
//! Binding is safe: every layer checks that the call lies within the
//! buffers it is bound on at every place of its rotation (the raw and core
//! layers, which hand NCCL bare addresses, with [`Call::check_within`] when
//! bound and one comparison per place launched), so the nccl-perf runner,
//! the criterion benches and `world-cost` bind through [`Layer::bind`]
//! alike, with no promise of their own.

mod core_layer;
mod group_layer;
mod raw;
mod tensor_layer;

use std::ffi::c_void;
use std::sync::Arc;

use clap::ValueEnum;
use cudarc::driver::CudaStream;
use nccl_core::{DataType, Op, ReduceOp};
use nccl_group::{ProcessGroup, StreamMode};

pub use core_layer::CoreLayer;
pub use group_layer::GroupLayer;
pub use raw::RawLayer;
pub use tensor_layer::TensorLayer;

use crate::buffers::DeviceBuffers;
use crate::collective::{Collective, Mode};
use crate::error::BenchError;
pub use crate::rotation::{Rotation, Shift};
use crate::sizes::OpCounts;

/// Which layer issues the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum LayerKind {
    /// The function pointers of `nccl_sys::library()?.functions()`, called directly.
    Raw,
    /// nccl-core's `Communicator` methods (argument checks, then the same pointers).
    Core,
    /// nccl-tensor's safe `Communicator` on typed `CudaSlice<T>` views
    /// (full argument checks and cudarc's stream tracking on every call).
    Tensor,
    /// nccl-group's `ProcessGroup` (one member per rank thread, over the
    /// run's store): an operation + `Work::wait` per call, on tensors
    /// of its own; whole-tensor forms only (in-place all_reduce, broadcast,
    /// reduce; out-of-place all_gather, reduce_scatter, all_to_all, and
    /// sendrecv as one `batch_isend_irecv`).
    Group,
    /// The group layer with `StreamMode::Caller`: operations on the
    /// caller's stream, no event handoff.
    GroupCaller,
}

impl LayerKind {
    /// The name on the command line and in the output.
    pub const fn name(self) -> &'static str {
        match self {
            LayerKind::Raw => "raw",
            LayerKind::Core => "core",
            LayerKind::Tensor => "tensor",
            LayerKind::Group => "group",
            LayerKind::GroupCaller => "group-caller",
        }
    }

    /// The group's stream mode, for the two group layers.
    pub const fn stream_mode(self) -> Option<StreamMode> {
        match self {
            LayerKind::Group => Some(StreamMode::Separate),
            LayerKind::GroupCaller => Some(StreamMode::Caller),
            LayerKind::Raw | LayerKind::Core | LayerKind::Tensor => None,
        }
    }
}

/// One bound operation: each call enqueues it once per place given (in
/// one NCCL group when there are several: nccl-tests' `-m`), each time
/// with both buffers moved by the place's offset, on the rank's stream.
pub type Launch<'a> = Box<dyn FnMut(&[Shift]) -> Result<(), BenchError> + 'a>;

/// One call at the start of the buffers: the places of a launch without
/// rotation.
pub const AT_START: &[Shift] = &[Shift { slot: 0, elems: 0 }];

/// The arguments of one collective call on one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// The collective.
    pub collective: Collective,
    /// Out-of-place or in-place.
    pub mode: Mode,
    /// Device address of the data to send.
    pub send: u64,
    /// Device address of the data to receive.
    pub recv: u64,
    /// The NCCL count (per rank for all_gather and reduce_scatter, per peer for all_to_all).
    pub count: usize,
    /// The element type.
    pub dtype: DataType,
    /// The reduction.
    pub op: ReduceOp,
    /// The root of broadcast and reduce.
    pub root: i32,
    /// This rank.
    pub rank: i32,
    /// The number of ranks.
    pub world: i32,
    /// The places the call's launches rotate through (every [`Shift`] a
    /// launch gets is one of them); the buffers hold the call at each.
    pub rotation: Rotation,
}

impl Call {
    /// The call of `collective` in `mode` on buffers starting at
    /// `send_base` and `recv_base`, laid out as nccl-tests does: in-place,
    /// both pointers point into the receive buffer, at this rank's offsets.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        collective: Collective,
        mode: Mode,
        counts: &OpCounts,
        send_base: u64,
        recv_base: u64,
        dtype: DataType,
        op: ReduceOp,
        root: i32,
        rank: usize,
        world: usize,
    ) -> Self {
        let elem = dtype.size_bytes() as u64;
        let (send_offset, recv_offset) = counts.pointer_offsets(mode, rank);
        let send_start = if mode == Mode::InPlace {
            recv_base
        } else {
            send_base
        };
        Self {
            collective,
            mode,
            send: send_start + send_offset as u64 * elem,
            recv: recv_base + recv_offset as u64 * elem,
            count: counts.param,
            dtype,
            op,
            root,
            rank: rank as i32,
            world: world as i32,
            rotation: Rotation::fixed(0),
        }
    }

    /// The call rotating through `rotation`'s places.
    pub fn rotated(self, rotation: Rotation) -> Self {
        Self { rotation, ..self }
    }

    /// The element offsets of the send and receive pointers from the starts
    /// of the buffers they point into (in place, both into the receive
    /// buffer), whose device addresses are `bases` (send, receive).
    ///
    /// # Errors
    /// A pointer below its buffer or between two elements (a call not
    /// made by [`Call::new`] over these buffers).
    pub fn offsets(
        &self,
        (send_base, recv_base): (u64, u64),
    ) -> Result<(usize, usize), BenchError> {
        let elem = self.dtype.size_bytes();
        let send_base = if self.mode == Mode::InPlace {
            recv_base
        } else {
            send_base
        };
        let offset = |what: &str, address: u64, base: u64| {
            element_offset(address, base, elem).ok_or_else(|| {
                BenchError::Usage(format!(
                    "internal error: the {what} address {address:#x} is not an element of the buffer at {base:#x} \
                     ({elem}-byte elements)"
                ))
            })
        };
        Ok((
            offset("send", self.send, send_base)?,
            offset("receive", self.recv, recv_base)?,
        ))
    }

    /// The send pointer.
    pub fn send_ptr(&self) -> *const c_void {
        self.send as usize as *const c_void
    }

    /// The receive pointer.
    pub fn recv_ptr(&self) -> *mut c_void {
        self.recv as usize as *mut c_void
    }

    /// sendrecv's peers: the rank this one sends to and the one it receives from.
    pub fn ring_peers(&self) -> (i32, i32) {
        let world = self.world.max(1);
        ((self.rank + 1) % world, (self.rank - 1 + world) % world)
    }

    /// Bytes between consecutive per-peer blocks of all_to_all.
    pub fn block_bytes(&self) -> u64 {
        (self.count * self.dtype.size_bytes()) as u64
    }

    /// The elements the call reads from its send pointer and writes from
    /// its receive pointer, by nccl-tensor's rules for its first operation
    /// (every operation of one call moves the same count).
    pub fn lengths(&self) -> (usize, usize) {
        let sizes = self
            .ops()
            .first()
            .map_or(nccl_tensor::Sizes::SAME, |op| nccl_tensor::rules(op).sizes);
        sizes.lengths(self.count, usize::try_from(self.world).unwrap_or(1))
    }

    /// Checks that the call lies within a rank's two buffers (at `bases`,
    /// their send and receive addresses, of `len` elements of `dtype` each)
    /// at every place of its rotation, on a communicator of `world` ranks:
    /// its element type is theirs, its world size the communicator's, both
    /// pointers are elements of their buffers, and the elements it reads
    /// and writes from each ([`Call::lengths`]) end inside them at the
    /// rotation's last place. The raw and core layers hand NCCL bare
    /// addresses; this is what makes those addresses safe to hand. Returns
    /// that last place's offset.
    ///
    /// # Errors
    /// [`BenchError::Usage`] naming the mismatch.
    pub fn check_within(
        &self,
        bases: (u64, u64),
        (dtype, len): (DataType, usize),
        world: i32,
    ) -> Result<usize, BenchError> {
        let refuse = |what: String| Err(BenchError::Usage(format!("internal error: {what}")));
        if self.dtype != dtype {
            return refuse(format!("a call of {} on buffers of {dtype}", self.dtype));
        }
        if self.world != world {
            return refuse(format!(
                "a call for {} ranks on a communicator of {world}",
                self.world
            ));
        }
        let (send, recv) = self.offsets(bases)?;
        let (input, output) = self.lengths();
        let last = self.rotation.last();
        for (what, offset, needed) in [("send", send, input), ("receive", recv, output)] {
            let end = offset
                .checked_add(last)
                .and_then(|start| start.checked_add(needed));
            if end.is_none_or(|end| end > len) {
                return refuse(format!(
                    "the {what} side of the {} call needs {needed} elements from element {offset} + {last} \
                     (its rotation's last place), but the buffer holds {len}",
                    self.collective
                ));
            }
        }
        Ok(last)
    }
}

/// `shift`'s offset in elements, when it is no farther than `last`, the
/// last place of the call a launcher was bound for (checked once per
/// place by the launchers that hand NCCL bare addresses).
///
/// # Errors
/// [`BenchError::Usage`] for a place past `last`.
#[inline(always)]
pub fn place_within(shift: &Shift, last: usize) -> Result<usize, BenchError> {
    if shift.elems <= last {
        Ok(shift.elems)
    } else {
        Err(past_the_last_place(shift, last))
    }
}

#[cold]
#[inline(never)]
fn past_the_last_place(shift: &Shift, last: usize) -> BenchError {
    BenchError::Usage(format!(
        "internal error: a launch at element {} of buffers bound for places up to element {last}",
        shift.elems
    ))
}

/// The element index of device address `address` in a buffer of
/// `elem`-byte elements starting at `base`; `None` for an address below the
/// buffer or between two elements.
pub fn element_offset(address: u64, base: u64, elem: usize) -> Option<usize> {
    let bytes = usize::try_from(address.checked_sub(base)?).ok()?;
    let elem = elem.max(1);
    (bytes % elem == 0).then_some(bytes / elem)
}

impl Call {
    /// The operations the call issues ([`Collective::ops`]).
    pub fn ops(&self) -> Vec<Op<'static>> {
        self.collective.ops(self.op, self.root, self.ring_peers())
    }

    /// [`Call::ops`] as nccl-core calls on this call's buffers. An
    /// operation whose function `library` lacks (all_to_all, gather and
    /// scatter before NCCL 2.28) is a send and a receive per peer, block by
    /// block, as nccl-tests issues it (nccl-core's
    /// [`nccl_core::Call::point_to_point_parts`]).
    pub fn core_calls(&self, library: &nccl_sys::NcclLibrary) -> Vec<nccl_core::Call<'static>> {
        let mut calls = Vec::new();
        for op in self.ops() {
            let call = nccl_core::Call {
                op,
                send: self.send_ptr(),
                recv: self.recv_ptr(),
                count: self.count,
                dtype: self.dtype,
            };
            match call.point_to_point_parts(self.rank, self.world) {
                Some(parts) if !library.functions().has(op.function()) => calls.extend(parts),
                _ => calls.push(call),
            }
        }
        calls
    }
}

/// `call` with both pointers moved `bytes` further (a null pointer, which
/// its operation does not use, stays null).
#[inline]
pub fn shifted(call: nccl_core::Call<'static>, bytes: usize) -> nccl_core::Call<'static> {
    let send = if call.send.is_null() {
        call.send
    } else {
        call.send.wrapping_byte_add(bytes)
    };
    let recv = if call.recv.is_null() {
        call.recv
    } else {
        call.recv.wrapping_byte_add(bytes)
    };
    nccl_core::Call { send, recv, ..call }
}

/// Why `layer` has no `collective` in `mode`; `None` when it has. The one
/// place the layers' `N/A` rows are explained:
/// * nccl-tensor's safe API (the tensor and group layers) takes an
///   operation whose output is larger or smaller than its input
///   (all_gather, reduce_scatter, all_to_all: [`nccl_tensor::Layouts::OutOfPlace`])
///   as two buffers, so nccl-tests' in-place layout, the input inside the
///   output, cannot be expressed: the borrow checker and the cell check
///   refuse it by design;
/// * the group's sendrecv is one `batch_isend_irecv` of owned tensors, so
///   one tensor cannot be both the one sent and the one received.
pub fn unsupported(layer: LayerKind, collective: Collective, mode: Mode) -> Option<&'static str> {
    let safe_api = matches!(
        layer,
        LayerKind::Tensor | LayerKind::Group | LayerKind::GroupCaller
    );
    let call = Call {
        collective,
        mode,
        send: 0,
        recv: 0,
        count: 0,
        dtype: DataType::Float32,
        op: ReduceOp::Sum,
        root: 0,
        rank: 0,
        world: 1,
        rotation: Rotation::fixed(0),
    };
    let out_of_place_only = call
        .ops()
        .iter()
        .any(|op| nccl_tensor::rules(op).layouts == nccl_tensor::Layouts::OutOfPlace);
    if safe_api && mode == Mode::InPlace && out_of_place_only {
        return Some(
            "nccl-tensor's safe API takes its input and output as two buffers, so the input cannot lie inside the output",
        );
    }
    if layer.stream_mode().is_some() && collective == Collective::SendRecv && mode == Mode::InPlace
    {
        return Some(
            "the group's sendrecv is one batch_isend_irecv of owned tensors, so one tensor cannot be both the one \
             sent and the one received",
        );
    }
    None
}

/// A way of issuing NCCL calls.
pub trait Layer {
    /// Which layer this is.
    fn kind(&self) -> LayerKind;

    /// Whether this layer can issue `collective` in `mode`; rows it cannot
    /// print `N/A` (`layer::unsupported` says why).
    fn supports(&self, collective: Collective, mode: Mode) -> bool {
        unsupported(self.kind(), collective, mode).is_none()
    }

    /// Binds `call` on `buffers` into a launcher. Functions are looked up
    /// here, once. What a launcher enqueues may be captured in a CUDA graph
    /// and replayed after the launcher is dropped, until the layer's next
    /// bind (the group layer keeps its tensors that long).
    ///
    /// Checks that `call` lies within `buffers` (its element type, its
    /// pointers, the elements its collective reads and writes on the
    /// communicator's ranks) at every place of `call.rotation`; the
    /// launcher refuses a place past the rotation's last. NCCL leaves it to
    /// every rank to launch matching calls in the same order: the runner
    /// makes the same calls on every rank.
    ///
    /// # Errors
    /// The loaded libnccl lacks a function the call needs, the layer does
    /// not support the call (see [`Layer::supports`]), or the call does
    /// not lie within the buffers.
    fn bind<'s>(
        &'s self,
        call: &Call,
        buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError>;
}

/// The layer `kind` over this rank's communicator, process groups (the
/// group layers use the one of their stream mode) and stream.
///
/// # Errors
/// The communicator was aborted or finalized, or a group layer was asked
/// for without a process group of its stream mode.
pub fn new_layer<'a>(
    kind: LayerKind,
    comm: &'a nccl_tensor::Communicator,
    groups: &'a [ProcessGroup],
    stream: &'a Arc<CudaStream>,
) -> Result<Box<dyn Layer + 'a>, BenchError> {
    Ok(match kind {
        LayerKind::Raw => Box::new(RawLayer::new(comm.core(), stream)?),
        LayerKind::Core => Box::new(CoreLayer::new(comm.core(), stream)),
        LayerKind::Tensor => Box::new(TensorLayer::new(comm, stream)),
        LayerKind::Group | LayerKind::GroupCaller => {
            let group = groups
                .iter()
                .find(|group| Some(group.stream_mode()) == kind.stream_mode())
                .ok_or_else(|| {
                    BenchError::Usage(format!(
                        "internal error: the {} layer needs a process group with its stream mode, but none was created",
                        kind.name()
                    ))
                })?;
            Box::new(GroupLayer::new(group, stream))
        }
    })
}

/// Whether the loaded libnccl has `ncclAlltoAll` (2.28+); without it
/// all_to_all is grouped send/recv, as nccl-tests does, in every layer.
pub fn has_native_all_to_all(library: &nccl_sys::NcclLibrary) -> bool {
    library.functions().has("ncclAlltoAll")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_pointers_follow_nccl_tests_layout() {
        let counts = OpCounts::new(Collective::AllGather, 1 << 10, 4, 4); // 64 per rank
        let oop = Call::new(
            Collective::AllGather,
            Mode::OutOfPlace,
            &counts,
            0x1000,
            0x9000,
            DataType::Float32,
            ReduceOp::Sum,
            0,
            2,
            4,
        );
        assert_eq!((oop.send, oop.recv, oop.count), (0x1000, 0x9000, 64));
        let ip = Call::new(
            Collective::AllGather,
            Mode::InPlace,
            &counts,
            0x1000,
            0x9000,
            DataType::Float32,
            ReduceOp::Sum,
            0,
            2,
            4,
        );
        assert_eq!((ip.send, ip.recv), (0x9000 + 2 * 64 * 4, 0x9000));

        let counts = OpCounts::new(Collective::ReduceScatter, 1 << 10, 2, 4); // 128 per rank
        let ip = Call::new(
            Collective::ReduceScatter,
            Mode::InPlace,
            &counts,
            0x1000,
            0x9000,
            DataType::Float16,
            ReduceOp::Sum,
            0,
            3,
            4,
        );
        assert_eq!(
            (ip.send, ip.recv, ip.count),
            (0x9000, 0x9000 + 3 * 128 * 2, 128)
        );

        let counts = OpCounts::new(Collective::AllReduce, 64, 8, 2);
        let ip = Call::new(
            Collective::AllReduce,
            Mode::InPlace,
            &counts,
            0x1000,
            0x9000,
            DataType::Float64,
            ReduceOp::Sum,
            0,
            1,
            2,
        );
        assert_eq!((ip.send, ip.recv, ip.count), (0x9000, 0x9000, 8));
        assert_eq!(ip.send_ptr() as usize, 0x9000);
        assert_eq!(ip.recv_ptr() as usize, 0x9000);
    }

    #[test]
    fn offsets_and_shifted_pointers() {
        let counts = OpCounts::new(Collective::AllGather, 1 << 10, 4, 4); // 64 per rank
        let call = |mode| {
            Call::new(
                Collective::AllGather,
                mode,
                &counts,
                0x1000,
                0x9000,
                DataType::Float32,
                ReduceOp::Sum,
                0,
                2,
                4,
            )
        };
        let bases = (0x1000, 0x9000);
        assert_eq!(call(Mode::InPlace).offsets(bases).unwrap(), (2 * 64, 0));
        assert_eq!(call(Mode::OutOfPlace).offsets(bases).unwrap(), (0, 0));
        // Buffers elsewhere than the call's: an error, not a wrong offset.
        let error = call(Mode::OutOfPlace)
            .offsets((0x2000, 0x9000))
            .unwrap_err();
        assert!(error.to_string().contains("0x1000"), "{error}");
        assert_eq!(call(Mode::InPlace).rotation, Rotation::fixed(0));
        let rotated = call(Mode::InPlace).rotated(Rotation::new(256, 1024, 0, 20));
        assert_eq!(rotated.rotation.slots(), 4);

        let core = nccl_core::Call {
            op: nccl_core::Op::Send { peer: 1 },
            send: 0x1000 as *const c_void,
            recv: std::ptr::null_mut(),
            count: 2,
            dtype: DataType::Float32,
        };
        let moved = shifted(core, 64);
        assert_eq!(moved.send as usize, 0x1040);
        assert!(moved.recv.is_null(), "an unused null pointer stays null");
        assert_eq!(shifted(core, 0).send, core.send);
    }

    #[test]
    fn calls_are_checked_within_their_buffers() {
        // all_gather of 64 f32 per rank at world size 4: 64 read, 256 written.
        let counts = OpCounts::new(Collective::AllGather, 1 << 10, 4, 4);
        let call = |mode, rank| {
            Call::new(
                Collective::AllGather,
                mode,
                &counts,
                0x1000,
                0x9000,
                DataType::Float32,
                ReduceOp::Sum,
                0,
                rank,
                4,
            )
        };
        let bases = (0x1000, 0x9000);
        let oop = call(Mode::OutOfPlace, 2);
        assert_eq!(oop.lengths(), (64, 256));
        let floats = |len| (DataType::Float32, len);
        assert_eq!(oop.check_within(bases, floats(256), 4).unwrap(), 0);
        // Four places 256 elements apart: the last starts at 768.
        let rotated = oop.rotated(Rotation::new(256, 1024, 0, 20));
        assert_eq!(rotated.check_within(bases, floats(1024), 4).unwrap(), 768);
        // In place, rank 3's input is the last block of the receive buffer.
        let in_place = call(Mode::InPlace, 3);
        assert_eq!(in_place.check_within(bases, floats(256), 4).unwrap(), 0);
        for (call, bases, buffers, world, says) in [
            (
                rotated,
                bases,
                floats(1023),
                4,
                "the receive side of the all_gather call needs 256 elements from element 0 + 768 \
                 (its rotation's last place), but the buffer holds 1023",
            ),
            (
                in_place,
                bases,
                floats(255),
                4,
                "the send side of the all_gather call needs 64 elements from element 192",
            ),
            (oop, bases, (DataType::Float16, 256), 4, "on buffers of"),
            (
                oop,
                bases,
                floats(256),
                8,
                "a call for 4 ranks on a communicator of 8",
            ),
            (
                oop,
                (0x2000, 0x9000),
                floats(256),
                4,
                "the send address 0x1000",
            ),
        ] {
            let error = call.check_within(bases, buffers, world).unwrap_err();
            assert!(error.to_string().contains(says), "{error}");
            assert_eq!(error.exit_code(), 2);
        }
        assert_eq!(
            place_within(
                &Shift {
                    slot: 3,
                    elems: 768
                },
                768
            )
            .unwrap(),
            768
        );
        let past = place_within(
            &Shift {
                slot: 0,
                elems: 769,
            },
            768,
        )
        .unwrap_err();
        assert!(past.to_string().contains("element 769"), "{past}");
    }

    #[test]
    fn ring_peers_and_blocks() {
        let counts = OpCounts::new(Collective::SendRecv, 64, 4, 4);
        let call = |rank| {
            Call::new(
                Collective::SendRecv,
                Mode::OutOfPlace,
                &counts,
                0,
                0,
                DataType::Float32,
                ReduceOp::Sum,
                0,
                rank,
                4,
            )
        };
        assert_eq!(call(0).ring_peers(), (1, 3));
        assert_eq!(call(3).ring_peers(), (0, 2));
        let single = Call {
            world: 1,
            rank: 0,
            ..call(0)
        };
        assert_eq!(single.ring_peers(), (0, 0));
        assert_eq!(call(1).block_bytes(), 64);
    }

    #[test]
    fn layer_names() {
        assert_eq!(LayerKind::Raw.name(), "raw");
        assert_eq!(LayerKind::Core.name(), "core");
        assert_eq!(LayerKind::Tensor.name(), "tensor");
        assert_eq!(LayerKind::Group.name(), "group");
        assert_eq!(LayerKind::GroupCaller.name(), "group-caller");
        assert_eq!(LayerKind::value_variants().len(), 5);
        for kind in LayerKind::value_variants() {
            assert_eq!(kind.to_possible_value().unwrap().get_name(), kind.name());
        }
    }
}
