//! [`Uncapturable`]: why an operation cannot be captured in a CUDA graph.

use std::fmt;

/// Why an operation (or a step of a capture) cannot be captured in a CUDA
/// graph; each says what to do instead.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uncapturable {
    /// The operation runs on the group's own NCCL stream
    /// ([`StreamMode::Separate`](crate::StreamMode::Separate)).
    SeparateStream,
    /// A list form: one part per local GPU, on several streams.
    SeveralDevices,
    /// The group's barrier.
    Barrier,
    /// The communicator the operation needs does not exist yet.
    NoCommunicator {
        /// The device.
        device: usize,
    },
    /// A buffer whose use on the capturing stream needs an event wait.
    UnsettledBuffer,
    /// The stream's capture was invalidated by an earlier call.
    Invalidated,
    /// [`ProcessGroup::begin_capture`](crate::ProcessGroup::begin_capture) on a stream already being captured.
    AlreadyCapturing,
    /// An operation failed after NCCL saw it, during the capture.
    FailedOperation,
    /// [`GroupGraph::replay`](crate::GroupGraph::replay) on a stream being captured.
    ReplayWhileCapturing,
    /// An operation on borrowed memory (`&mut CudaSlice<T>`, `CudaViewMut<T>`):
    /// the graph would use it at every replay, after the borrow ends.
    BorrowedMemory,
}

impl fmt::Display for Uncapturable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uncapturable::SeparateStream => f.write_str(
                "it runs on the group's own NCCL stream (StreamMode::Separate), and the event handoff would join \
                 that stream, which every operation of the device shares, to the capture; issue it with \
                 StreamMode::Caller (GraphCapture::group(), or group.with_stream_mode(StreamMode::Caller))",
            ),
            Uncapturable::SeveralDevices => f.write_str(
                "a list form runs one part per local GPU in one NCCL group, on several streams, and the group \
                 captures on one stream; issue it outside the capture",
            ),
            Uncapturable::Barrier => f.write_str(
                "the barrier's cached buffer is ordered with events, which a capture cannot wait for (and a \
                 barrier in a graph would hold every rank at each replay); capture an all_reduce of a one-element \
                 tensor of your own instead",
            ),
            Uncapturable::NoCommunicator { device } => write!(
                f,
                "the group has no communicator for it on device {device} yet, and creating one meets the other \
                 ranks and allocates GPU memory, which a capture forbids; issue one such operation (a warm-up) \
                 before beginning the capture"
            ),
            Uncapturable::UnsettledBuffer => f.write_str(
                "a buffer of it was last used on another stream, or read through cudarc, so using it on the \
                 capturing stream needs an event wait, which a capture cannot record; issue one operation on it \
                 on this stream before beginning the capture (a warm-up), and leave it alone until the capture",
            ),
            Uncapturable::Invalidated => f.write_str(
                "the stream's capture was invalidated by an earlier call that captures forbid (a \
                 synchronisation, an event query, a wait for an event recorded outside the capture); end it (its \
                 graph is lost) and capture again",
            ),
            Uncapturable::AlreadyCapturing => {
                f.write_str("the stream is already being captured; end that capture first")
            }
            Uncapturable::FailedOperation => f.write_str(
                "an operation failed during the capture after NCCL saw it, so the graph may hold part of it, and \
                 replaying it could leave the other ranks waiting; capture again",
            ),
            Uncapturable::ReplayWhileCapturing => f.write_str(
                "the stream is being captured, so the replay would be captured too, and its end event, which the \
                 watchdog polls, with it; replay on a stream that is not being captured",
            ),
            Uncapturable::BorrowedMemory => f.write_str(
                "its buffers are borrowed (a &mut CudaSlice or a CudaViewMut), and the graph would use them at \
                 every replay, after the borrow has ended; capture owned tensors, which the graph keeps \
                 (Tensor::from_slice takes a CudaSlice over without a copy), or issue it outside the capture",
            ),
        }
    }
}
