//! A tensor's deferred stream tracking on one GPU: operations on one stream
//! skip cudarc's event records, and every other access still sees them in
//! order. Each test first queues a few milliseconds of copies on the
//! operation's stream, so an access on another stream that failed to wait
//! would run before the operation and see the old values.

use nccl_test_support as support;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::ReduceOp;
use nccl_tensor::{Communicator, Tensor};
use nccl_test_support::tensor::{first, one_rank};

/// 64 Mi f32 (256 MiB): one copy of it takes about 0.2 ms on an H200.
const BUSY_LEN: usize = 64 << 20;
/// Copies queued ahead of the operation under test.
const BUSY_COPIES: usize = 30;
/// Elements of the tensors under test.
const LEN: usize = 1 << 20;

struct Setup {
    comm: Communicator,
    /// The stream the operations run on.
    ops: Arc<CudaStream>,
    /// Another stream of the same device.
    other: Arc<CudaStream>,
    busy_in: Tensor<f32>,
    busy_out: Tensor<f32>,
}

fn setup() -> Option<Setup> {
    let device = first(support::require_gpus(1)?);
    let comm = one_rank(&device);
    let ops = device.new_stream().expect("stream");
    let other = device.new_stream().expect("second stream");
    let busy_in = Tensor::zeros(&ops, &[BUSY_LEN]).expect("busy input");
    let busy_out = Tensor::zeros(&ops, &[BUSY_LEN]).expect("busy output");
    ops.synchronize().expect("synchronize");
    Some(Setup {
        comm,
        ops,
        other,
        busy_in,
        busy_out,
    })
}

impl Setup {
    /// Queues milliseconds of copies on the operation stream.
    fn stall(&mut self) {
        let ops = Arc::clone(&self.ops);
        self.stall_on(&ops);
    }

    /// Queues milliseconds of copies on `stream`.
    fn stall_on(&mut self, stream: &Arc<CudaStream>) {
        for _ in 0..BUSY_COPIES {
            let _ = self
                .comm
                .all_reduce_into(&self.busy_in, &mut self.busy_out, ReduceOp::Sum, stream)
                .expect("busy copy");
        }
    }

    fn filled(&self, value: f32) -> Tensor<f32> {
        let tensor = Tensor::from_host(&self.ops, &vec![value; LEN], &[LEN]).expect("upload");
        self.ops.synchronize().expect("synchronize");
        tensor
    }

    /// A new tensor of zeros into which an operation on the operation
    /// stream, queued behind a [`stall`](Self::stall), copies `from`: its
    /// write is deferred and still running.
    fn copied_late(&mut self, from: &Tensor<f32>) -> Tensor<f32> {
        let mut out = self.filled(0.0);
        self.stall();
        self.copy(from, &mut out, &self.ops);
        out
    }

    fn copy(&self, from: &Tensor<f32>, to: &mut Tensor<f32>, stream: &Arc<CudaStream>) {
        let _ = self
            .comm
            .all_reduce_into(from, to, ReduceOp::Sum, stream)
            .expect("copy");
    }
}

#[track_caller]
fn assert_all(values: &[f32], expected: f32, what: &str) {
    let wrong = values.iter().filter(|&&v| v != expected).count();
    assert_eq!(
        wrong,
        0,
        "{what}: {wrong} of {} elements are not {expected} (first: {:?})",
        values.len(),
        values.iter().find(|&&v| v != expected)
    );
}

/// Asserts that every element of `tensor`, read on `stream`, is
/// `expected`.
#[track_caller]
fn assert_reads(tensor: &Tensor<f32>, stream: &Arc<CudaStream>, expected: f32, what: &str) {
    assert_all(&tensor.to_vec(stream).expect("to_vec"), expected, what);
}

#[test]
fn gpu_deferred_write_is_seen_through_cudarc_on_another_stream() {
    let Some(mut s) = setup() else { return };
    let ones = s.filled(1.0);

    let out = s.copied_late(&ones);
    assert_reads(&out, &s.other, 1.0, "to_vec on another stream");

    let out = s.copied_late(&ones);
    let view = out.view(..).expect("view");
    let read = s.other.clone_dtoh(&view).expect("copy a view");
    assert_all(&read, 1.0, "a view read on another stream");

    let out = s.copied_late(&ones);
    let Ok((slice, _)) = out.into_parts() else {
        panic!("a tensor in cudarc's memory gives its slice back");
    };
    let read = s.other.clone_dtoh(&slice).expect("copy the slice");
    assert_all(&read, 1.0, "the slice of into_parts read on another stream");
}

#[test]
fn gpu_deferred_write_orders_an_operation_on_another_stream() {
    let Some(mut s) = setup() else { return };
    let ones = s.filled(1.0);
    let mut middle = s.filled(0.0);
    let mut out = s.filled(0.0);
    s.stall();
    s.copy(&ones, &mut middle, &s.ops);
    // Reads `middle` on the other stream while its write is deferred.
    s.copy(&middle, &mut out, &s.other);
    assert_reads(&out, &s.other, 1.0, "read after write");
}

#[test]
fn gpu_deferred_read_orders_a_later_write_on_another_stream() {
    let Some(mut s) = setup() else { return };
    let mut source = s.filled(1.0);
    let out = s.copied_late(&source);
    // Overwrites `source` on the other stream while its read is deferred.
    source
        .copy_from_host(&s.other, &vec![2.0; LEN])
        .expect("overwrite");
    assert_reads(&out, &s.ops, 1.0, "write after read");
    assert_reads(&source, &s.other, 2.0, "the overwrite");

    // The same through an operation on the other stream.
    let mut source = s.filled(1.0);
    let twos = s.filled(2.0);
    let out = s.copied_late(&source);
    s.copy(&twos, &mut source, &s.other);
    assert_reads(&out, &s.ops, 1.0, "operation write after read");
}

#[test]
fn gpu_deferred_write_orders_a_write_on_another_stream() {
    let Some(mut s) = setup() else { return };
    let ones = s.filled(1.0);
    let twos = s.filled(2.0);
    let mut out = s.copied_late(&ones);
    s.copy(&twos, &mut out, &s.other);
    s.ops.synchronize().expect("synchronize");
    assert_reads(&out, &s.other, 2.0, "write after write");
}

#[test]
fn gpu_foreign_read_orders_a_later_write_on_the_deferred_stream() {
    let Some(mut s) = setup() else { return };
    let ones = s.filled(1.0);
    let twos = s.filled(2.0);
    let mut tensor = s.filled(0.0);
    let mut seen = s.filled(0.0);
    // `tensor` is deferred on `ops` (written); the other stream stalls,
    // then reads it; the next write on `ops` must wait for that read.
    s.copy(&ones, &mut tensor, &s.ops);
    let other = Arc::clone(&s.other);
    s.stall_on(&other);
    s.copy(&tensor, &mut seen, &s.other);
    s.copy(&twos, &mut tensor, &s.ops);
    assert_reads(&seen, &s.other, 1.0, "the foreign read");
    assert_reads(&tensor, &s.ops, 2.0, "the later write");
}

#[test]
fn gpu_cudarc_read_of_a_borrowed_slice_orders_a_later_write() {
    let Some(mut s) = setup() else { return };
    let ones = s.filled(1.0);
    let twos = s.filled(2.0);
    let mut seen = s.filled(0.0);
    let mut scratch = s.filled(0.0);
    let other = Arc::clone(&s.other);

    // A write is deferred; cudarc reads the borrowed slice on the other
    // stream, late; the next write on the deferred stream must wait.
    let mut tensor = s.filled(0.0);
    s.copy(&ones, &mut tensor, &s.ops);
    s.stall_on(&other);
    other
        .memcpy_dtod(tensor.as_slice(), &mut seen.as_slice_mut())
        .expect("cudarc read");
    s.copy(&twos, &mut tensor, &s.ops);
    assert_reads(
        &seen,
        &s.other,
        1.0,
        "read through cudarc, then a deferred write",
    );
    assert_reads(&tensor, &s.ops, 2.0, "the later write");

    // cudarc reads first, late; a read on the operation stream then starts
    // the deferral (it waits for writes only); the write after it must
    // still wait for cudarc's read.
    let mut tensor = s.filled(1.0);
    s.stall_on(&other);
    other
        .memcpy_dtod(tensor.as_slice(), &mut seen.as_slice_mut())
        .expect("cudarc read");
    s.copy(&tensor, &mut scratch, &s.ops);
    s.copy(&twos, &mut tensor, &s.ops);
    assert_reads(
        &seen,
        &s.other,
        1.0,
        "read through cudarc, then a deferral begun by a read",
    );
    assert_reads(&tensor, &s.ops, 2.0, "the later write");
}

#[test]
fn gpu_parts_read_and_write_their_range() {
    let Some(s) = setup() else { return };
    let values: Vec<f32> = (0..LEN).map(|i| i as f32).collect();
    let source = Tensor::from_host(&s.ops, &values, &[LEN]).expect("upload");
    let mut out = s.filled(-1.0);
    let half = LEN / 2;
    let _ = s
        .comm
        .all_reduce_into(
            &source.part(half..).expect("part"),
            &mut out.part_mut(..half).expect("part_mut"),
            ReduceOp::Sum,
            &s.ops,
        )
        .expect("all_reduce on parts");
    let read = out.to_vec(&s.other).expect("to_vec");
    assert_eq!(&read[..half], &values[half..], "the written part");
    assert_all(&read[half..], -1.0, "the rest");
    let error = out.part(half..LEN + 1).expect_err("past the end");
    assert!(
        error.to_string().contains(&format!("{}", LEN + 1)),
        "{error}"
    );
}
