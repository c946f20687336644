//! all_to_all of any sizes, as grouped sends and receives (as PyTorch
//! issues it for uneven splits): `all_to_all_single` with split sizes
//! (one buffer each way, cut in one block per rank) and the list form
//! `all_to_all` (one buffer per peer each way, a [`Batch`](crate::Batch)).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Call, DataType, Op, Status};

use crate::checks;
use crate::communicator::Communicator;
use crate::error::Result;
use crate::operand::{Input, Operands, Output, Pair};

/// The sends and receives of an all_to_all whose input is cut into
/// `input_splits` (block `j` goes to rank `j`) and whose output into
/// `output_splits` (block `i` comes from rank `i`), on buffers at `send`
/// and `recv` of `dtype` elements: per peer in rank order, its send then
/// its receive.
///
/// Empty blocks are calls of count 0, which are not issued.
pub fn exchange_calls<'s>(
    send: *const c_void,
    recv: *mut c_void,
    dtype: DataType,
    input_splits: &'s [usize],
    output_splits: &'s [usize],
) -> impl Iterator<Item = Call<'static>> + 's {
    let element = dtype.size_bytes();
    let starts = |splits: &'s [usize]| {
        splits.iter().scan(0usize, move |offset, &count| {
            let start = *offset;
            *offset = offset.saturating_add(count);
            Some((start.saturating_mul(element), count))
        })
    };
    starts(input_splits)
        .zip(starts(output_splits))
        .zip(0..)
        .flat_map(move |(((send_at, sent), (recv_at, received)), peer)| {
            [
                Call {
                    op: Op::Send { peer },
                    send: send.wrapping_byte_add(send_at),
                    recv: std::ptr::null_mut(),
                    count: sent,
                    dtype,
                },
                Call {
                    op: Op::Recv { peer },
                    send: std::ptr::null(),
                    recv: recv.wrapping_byte_add(recv_at),
                    count: received,
                    dtype,
                },
            ]
        })
}

impl Communicator {
    /// Cuts `input` into one block per rank, `input_split_sizes[j]`
    /// elements for rank `j`, sends each to its rank, and concatenates the
    /// blocks received in rank order into `output`, `output_split_sizes[i]`
    /// elements from rank `i` (`torch.distributed.all_to_all_single` with
    /// `output_split_sizes` and `input_split_sizes`, in elements).
    ///
    /// Issued as grouped sends and receives; empty blocks are left out. Every
    /// rank's input split for rank `j` must equal rank `j`'s output split for
    /// it (only the block a rank sends itself can be checked here).
    ///
    /// Checks ([`checks::all_to_all_splits`]): the stream and both buffers
    /// on this device, contiguous, of one data type the loaded NCCL knows;
    /// one split size per rank in each list, adding up to its buffer's
    /// length; what this rank sends itself equal to what it receives from
    /// itself; not one cell twice.
    ///
    /// # Errors
    /// A failed check (naming the list, what it should be and what it
    /// is), or NCCL's error.
    pub fn all_to_all_single_split(
        &self,
        output: impl Output,
        input: impl Input,
        output_split_sizes: &[usize],
        input_split_sizes: &[usize],
        stream: &Arc<CudaStream>,
    ) -> Result<Status> {
        const OP: &str = "all_to_all_single";
        let info = self.info();
        checks::stream(OP, stream.context().ordinal(), info.device)?;
        let pair = Pair { input, output };
        pair.check_cells(OP)?;
        let dtype = {
            let (input, output) = (pair.input.desc(), pair.output.desc());
            checks::all_to_all_splits(
                &info,
                &input,
                &output,
                input_split_sizes,
                output_split_sizes,
            )?;
            if input.len == 0 && output.len == 0 {
                return Ok(Status::Success);
            }
            input.dtype
        };
        pair.access(stream, |send, recv| {
            let calls = exchange_calls(send, recv, dtype, input_split_sizes, output_split_sizes);
            // SAFETY: the splits add up to the buffers' lengths (checked),
            // so every block lies within them; the peers are the ranks
            // 0..world; the buffers are valid on `stream`, on this device,
            // while `access` runs.
            unsafe { self.issue_grouped(calls, stream) }
        })
    }

    /// Sends `inputs[j]` to rank `j` and receives into `outputs[i]` from
    /// rank `i`, each of any length (`torch.distributed.all_to_all`): one
    /// [`Batch`](crate::Batch) of a send and a receive per rank.
    ///
    /// Rank `i`'s `inputs[j]` must match rank `j`'s `outputs[i]` in length and
    /// type.
    ///
    /// Checks ([`checks::all_to_all_list`], then the batch's): one input
    /// and one output per rank, each on this device, contiguous, of a data
    /// type the loaded NCCL knows; `inputs[rank]` and `outputs[rank]` of
    /// one length and type; no cell twice.
    ///
    /// # Errors
    /// A failed check, or NCCL's error.
    pub fn all_to_all<I: Input, O: Output>(
        &self,
        outputs: impl IntoIterator<Item = O>,
        inputs: impl IntoIterator<Item = I>,
        stream: &Arc<CudaStream>,
    ) -> Result<Status> {
        let outputs: Vec<O> = outputs.into_iter().collect();
        let inputs: Vec<I> = inputs.into_iter().collect();
        {
            let input_descs: Vec<_> = inputs.iter().map(Input::desc).collect();
            let output_descs: Vec<_> = outputs.iter().map(Output::desc).collect();
            checks::all_to_all_list(&self.info(), &input_descs, &output_descs)?;
        }
        let mut batch = self.batch(stream);
        for (peer, (input, output)) in (0..).zip(inputs.into_iter().zip(outputs)) {
            batch.send(input, peer).recv(output, peer);
        }
        batch.enqueue()
    }
}
