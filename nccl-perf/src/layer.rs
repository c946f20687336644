//! The layers a benchmark can issue its calls through, one implementation
//! each: [`RawLayer`] (nccl-sys function pointers; with an in-band
//! fingerprint grouped with every operation, `raw-fingerprint`), [`CoreLayer`]
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

mod call;
mod core_layer;
mod group_layer;
mod raw;
mod tensor_layer;

use std::sync::Arc;

use clap::ValueEnum;
use cudarc::driver::CudaStream;
use nccl_core::ReduceOp;
use nccl_group::{ProcessGroup, StreamMode};

pub use call::{Call, place_within, shifted};
pub use core_layer::CoreLayer;
pub use group_layer::GroupLayer;
pub use raw::RawLayer;
pub use tensor_layer::TensorLayer;

use crate::buffers::DeviceBuffers;
use crate::collective::{Collective, Mode};
use crate::error::BenchError;
pub use crate::rotation::{Rotation, Shift};

/// Which layer issues the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum LayerKind {
    /// The function pointers of `nccl_sys::library()?.functions()`, called directly.
    Raw,
    /// The raw layer with an in-band fingerprint grouped with every
    /// operation: a MAX all_reduce of two `u64`s in the same NCCL group
    /// (what checking every collective inside NCCL costs).
    RawFingerprint,
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
            LayerKind::RawFingerprint => "raw-fingerprint",
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
            LayerKind::Raw | LayerKind::RawFingerprint | LayerKind::Core | LayerKind::Tensor => {
                None
            }
        }
    }
}

/// One bound operation: each call enqueues it once per place given (in
/// one NCCL group when there are several: nccl-tests' `-m`), each time
/// with both buffers moved by the place's offset, on the rank's stream.
pub type Launch<'a> = Box<dyn FnMut(&[Shift]) -> Result<(), BenchError> + 'a>;

/// What a layer's [`Layer::bind`] returns: the launcher, or why the call
/// cannot be bound.
type Binding<'s> = Result<Launch<'s>, BenchError>;

/// One call at the start of the buffers: the places of a launch without
/// rotation.
pub const AT_START: &[Shift] = &[Shift { slot: 0, elems: 0 }];

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
    // Which buffers an operation takes does not depend on its reduction,
    // root or peers.
    let out_of_place_only = collective
        .ops(ReduceOp::Sum, 0, (0, 0))
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
        LayerKind::RawFingerprint => {
            Box::new(RawLayer::new(comm.core(), stream)?.with_fingerprint(stream)?)
        }
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
    fn layer_names() {
        assert_eq!(LayerKind::Raw.name(), "raw");
        assert_eq!(LayerKind::RawFingerprint.name(), "raw-fingerprint");
        assert_eq!(LayerKind::Core.name(), "core");
        assert_eq!(LayerKind::Tensor.name(), "tensor");
        assert_eq!(LayerKind::Group.name(), "group");
        assert_eq!(LayerKind::GroupCaller.name(), "group-caller");
        assert_eq!(LayerKind::value_variants().len(), 6);
        for kind in LayerKind::value_variants() {
            assert_eq!(kind.to_possible_value().unwrap().get_name(), kind.name());
        }
    }
}
