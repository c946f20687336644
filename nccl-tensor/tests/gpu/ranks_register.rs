//! User-buffer registration and NCCL-allocated tensors at world size N,
//! one process per rank (`ranks_*` tests: run.sh runs each alone and as
//! every rank of `nccl-launch -n 2` and `-n 4`, on simulated hosts on one
//! GPU):
//!
//! * tensors in cudarc's memory and in NCCL's (`Tensor::nccl_zeros`,
//!   `ncclMemAlloc`), registered with the communicator (`register`,
//!   `ncclCommRegister`): all_reduce in place, all_gather and
//!   reduce_scatter out of place on registered buffers, every element
//!   checked against the host;
//! * deregistration: explicit (`into_inner`) and on drop, after which the
//!   same memory registers again and still computes right;
//! * what is refused: an empty registration, an empty NCCL allocation, a
//!   tensor in NCCL's memory handed to cudarc (`into_parts`).

use nccl_core::ReduceOp;
use nccl_tensor::{Communicator, Registered, Tensor};
use nccl_test_support::tensor::world::{Rank, all_values, reduced};
use nccl_test_support::tensor::{Memory, assert_holds, covering, download, upload_in};

/// Elements per rank (past NCCL's small-message protocols).
const LEN: usize = 4097;

/// A registered tensor, its registration checked against the memory.
#[track_caller]
fn registered<'c>(
    rank: &'c Rank,
    tensor: Tensor<f32>,
    what: &str,
) -> Registered<&'c Communicator, Tensor<f32>> {
    let registered = rank
        .comm
        .register(tensor)
        .unwrap_or_else(|e| panic!("{what}: register: {e}"));
    covering(registered, what)
}

fn collectives_on_registered(rank: &Rank, memory: Memory) {
    let (comm, stream, world, me) = (&rank.comm, &rank.stream, rank.world(), rank.me());
    let what = rank.what::<f32>(LEN, &format!("registered ({memory:?} memory)"));
    let data = all_values::<f32>(71, world, LEN * world);

    // all_reduce in place.
    let mut summed = registered(rank, upload_in(stream, &data[me][..LEN], memory), &what);
    let _ = comm
        .all_reduce(&mut summed, ReduceOp::Sum, stream)
        .unwrap_or_else(|e| panic!("{what}: all_reduce: {e}"));
    let sum = |column: &[f64]| column.iter().sum();
    let expected = reduced(&data, 0, LEN, &sum);
    assert_holds(stream, &summed, &expected, &format!("{what}: all_reduce"));

    // all_gather and reduce_scatter out of place, input and output registered.
    let input = registered(rank, upload_in(stream, &data[me][..LEN], memory), &what);
    let mut gathered = registered(
        rank,
        upload_in(stream, &vec![-7.0; LEN * world], memory),
        &what,
    );
    let _ = comm
        .all_gather_into_tensor(&mut gathered, &input, stream)
        .unwrap_or_else(|e| panic!("{what}: all_gather: {e}"));
    let expected: Vec<f32> = data
        .iter()
        .flat_map(|rank| rank[..LEN].iter().copied())
        .collect();
    assert_holds(stream, &gathered, &expected, &format!("{what}: all_gather"));

    let whole = registered(rank, upload_in(stream, &data[me], memory), &what);
    let mut block = registered(rank, upload_in(stream, &vec![-7.0; LEN], memory), &what);
    let _ = comm
        .reduce_scatter_tensor(&mut block, &whole, ReduceOp::Sum, stream)
        .unwrap_or_else(|e| panic!("{what}: reduce_scatter: {e}"));
    let expected = reduced(&data, me * LEN, LEN, &sum);
    assert_holds(
        stream,
        &block,
        &expected,
        &format!("{what}: reduce_scatter"),
    );

    // Deregistered explicitly, the tensor comes back and registers again;
    // dropped, it is deregistered and freed (NCCL's memory after the
    // device is done with it).
    let summed = summed
        .into_inner()
        .unwrap_or_else(|e| panic!("{what}: deregister: {e}"));
    let mut again = registered(rank, summed, &format!("{what}: again"));
    let _ = comm
        .all_reduce(&mut again, ReduceOp::Max, stream)
        .unwrap_or_else(|e| panic!("{what}: all_reduce again: {e}"));
    // Every rank holds the sum already: the maximum is that sum.
    let expected = reduced(&data, 0, LEN, &sum);
    assert_holds(stream, &again, &expected, &format!("{what}: again"));
    drop((input, gathered, whole, block, again));
    stream.synchronize().expect("synchronize");
}

#[test]
fn ranks_registered_collectives() {
    let Some(rank) = Rank::join("registered") else {
        return;
    };
    for memory in [Memory::Cudarc, Memory::Nccl] {
        collectives_on_registered(&rank, memory);
    }
    rank.ranks.barrier("registered-done");
}

#[test]
fn ranks_registration_refusals() {
    let Some(rank) = Rank::join("registration-refusals") else {
        return;
    };
    let (comm, stream) = (&rank.comm, &rank.stream);
    let empty = Tensor::<f32>::zeros(stream, &[0]).expect("an empty tensor");
    let registration = comm.register(empty).expect_err("an empty registration");
    let allocation = Tensor::<f32>::nccl_zeros(stream, &[0]).expect_err("an empty NCCL allocation");
    for (error, expected) in [
        (
            registration.to_string(),
            "a registration of at least one byte",
        ),
        (allocation.to_string(), "an allocation of at least one byte"),
    ] {
        assert!(error.contains(expected), "{error}");
    }
    let nccl = Tensor::<f32>::nccl_zeros(stream, &[16]).expect("ncclMemAlloc");
    let nccl = match nccl.into_parts() {
        Ok(_) => panic!("cudarc must not get NCCL's memory to free"),
        Err(tensor) => tensor,
    };
    assert_eq!(download(stream, &nccl), vec![0.0; 16], "zeroed, and usable");
    rank.ranks.barrier("registration-refusals-done");
}
