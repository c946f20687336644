//! Communicators split off nccl-tensor's `Communicator` (`split_all`,
//! `split_from`) run every operation like their parent: the operation
//! matrix of `gpu_ops` for f32 and bf16 at 1 and 4097 elements, on one GPU.

use nccl_test_support::tensor;
use std::sync::Arc;

use nccl_core::{Config, CudaStream};
use nccl_tensor::{Communicator, Error};
use nccl_test_support::tensor::{matrix, one_rank_on_first_gpu};

const SIZES: [usize; 2] = [1, 4097];

fn smaller_matrix(comm: &mut Communicator, stream: &Arc<CudaStream>) {
    assert_eq!((comm.rank(), comm.world_size()), (0, 1));
    matrix::every_op::<f32>(comm, stream, &SIZES);
    matrix::every_op::<half::bf16>(comm, stream, &SIZES);
}

#[test]
fn gpu_split_all_runs_every_op() {
    let Some((parent, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let mut child = parent.split_all(None).expect("split_all");
    assert_eq!(child.device().ordinal(), parent.device().ordinal());
    smaller_matrix(&mut child, &stream);

    let config = Config::new().with_comm_name("nccl-tensor-gpu-split-all");
    let mut named = parent
        .split_all(Some(&config))
        .expect("split_all with a config");
    smaller_matrix(&mut named, &stream);

    // The parent still works after its children did.
    drop((child, named));
    matrix::data_movement(&parent, &stream, &tensor::values::<f32>(5, 33));
}

#[test]
fn gpu_split_from_runs_every_op() {
    let Some((parent, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let mut child = parent
        .split_from(&[0], None)
        .expect("split_from [0]")
        .expect("rank 0 is listed, so it gets a communicator");
    smaller_matrix(&mut child, &stream);

    // A split of a split.
    let mut grandchild = child.split_all(None).expect("split of a split");
    smaller_matrix(&mut grandchild, &stream);

    // An empty list is NCCL_SPLIT_NOCOLOR: no communicator for this rank.
    assert!(
        parent
            .split_from(&[], None)
            .expect("NOCOLOR split")
            .is_none(),
        "an empty rank list gives no communicator"
    );
    // A rank past the world size is refused before NCCL sees it.
    let refused = parent.split_from(&[1], None);
    assert!(
        matches!(
            refused,
            Err(Error::Core(nccl_core::Error::RankOutOfRange {
                given: 1,
                ..
            }))
        ),
        "{refused:?}"
    );
    // The parent still works.
    matrix::data_movement(&parent, &stream, &tensor::values::<f32>(6, 33));
}

#[test]
fn gpu_split_inherits_the_all_to_all_method() {
    let Some((mut parent, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    parent.set_all_to_all_method(nccl_tensor::AllToAllMethod::SendRecv);
    let child = parent.split_all(None).expect("split_all");
    // The child was derived with SendRecv; it must still move the data.
    let input = tensor::values::<f32>(7, 4097);
    let source = tensor::upload(&stream, &input);
    let mut target = tensor::poisoned::<f32>(&stream, input.len());
    matrix::ok(
        child.all_to_all_single(&mut target, &source, &stream),
        "all_to_all_single on a child of a SendRecv parent",
    );
    tensor::assert_same(
        &tensor::download(&stream, &target),
        &input,
        "all_to_all_single on a child of a SendRecv parent",
    );
}
