//! The description of each NCCL operation (`Op`, `Call`), without a GPU:
//! names, functions, root and peer arguments, and the point-to-point form
//! issued where the loaded libnccl lacks an operation's function.

use std::ffi::c_void;

use nccl_core::{Call, DataType, Op};
use nccl_test_support::ops::every_op;

/// A call of `op` on 3 `f32` per block, send buffer at 0x1000 and receive
/// buffer at 0x9000.
fn call(op: Op<'static>) -> Call<'static> {
    Call {
        op,
        send: 0x1000 as *const c_void,
        recv: 0x9000 as *mut c_void,
        count: 3,
        dtype: DataType::Float32,
    }
}

/// The parts of `op` issued by `rank` of 4, as (op name, peer, send
/// address, receive address, count).
fn parts(op: Op<'static>, rank: usize) -> Vec<(&'static str, usize, usize, usize, usize)> {
    call(op)
        .point_to_point_parts(rank, 4)
        .expect("a point-to-point form")
        .map(|part| {
            let (_, peer) = part.op.rank_argument().expect("a peer");
            (
                part.op.name(),
                peer,
                part.send as usize,
                part.recv as usize,
                part.count,
            )
        })
        .collect()
}

#[test]
fn every_operation_names_itself_its_function_and_its_arguments() {
    let expected = [
        ("all_reduce", "ncclAllReduce", None, true),
        ("broadcast", "ncclBroadcast", Some(("root", 2)), false),
        ("reduce", "ncclReduce", Some(("root", 2)), true),
        ("all_gather", "ncclAllGather", None, false),
        ("reduce_scatter", "ncclReduceScatter", None, true),
        ("all_to_all", "ncclAlltoAll", None, false),
        ("gather", "ncclGather", Some(("root", 2)), false),
        ("scatter", "ncclScatter", Some(("root", 2)), false),
        ("send", "ncclSend", Some(("dst", 2)), false),
        ("recv", "ncclRecv", Some(("src", 2)), false),
    ];
    for (op, (name, function, rank, reduces)) in every_op(2).into_iter().zip(expected) {
        assert_eq!(op.name(), name);
        assert_eq!(op.function(), function, "{name}");
        assert_eq!(op.rank_argument(), rank, "{name}");
        assert_eq!(op.reduction().is_some(), reduces, "{name}");
        assert_eq!(op.is_point_to_point(), matches!(name, "send" | "recv"));
        assert!(
            nccl_core::nccl_sys::FUNCTION_NAMES.contains(&function),
            "{function} is not in the pinned header"
        );
    }
}

#[test]
fn only_block_movers_have_a_point_to_point_form() {
    for op in every_op(2) {
        let has = matches!(op, Op::AllToAll | Op::Gather { .. } | Op::Scatter { .. });
        assert_eq!(op.has_point_to_point_form(), has, "{}", op.name());
        assert_eq!(
            call(op).point_to_point_parts(0, 4).is_some(),
            has,
            "{}",
            op.name()
        );
    }
}

#[test]
fn all_to_all_sends_and_receives_block_by_block() {
    // 3 f32 per block: 12 bytes.
    let expected: Vec<_> = (0..4)
        .flat_map(|peer| {
            let offset = peer * 12;
            [
                ("send", peer, 0x1000 + offset, 0, 3),
                ("recv", peer, 0, 0x9000 + offset, 3),
            ]
        })
        .collect();
    assert_eq!(parts(Op::AllToAll, 1), expected);
}

#[test]
fn gather_sends_to_the_root_which_receives_every_block() {
    // Rank 0 sends its data to root 2 and receives nothing.
    assert_eq!(
        parts(Op::Gather { root: 2 }, 0),
        vec![("send", 2, 0x1000, 0, 3)]
    );
    // The root sends to itself too, and receives block j from rank j.
    let mut expected: Vec<_> = (0..4)
        .map(|peer| ("recv", peer, 0, 0x9000 + peer * 12, 3))
        .collect();
    expected.insert(2, ("send", 2, 0x1000, 0, 3));
    assert_eq!(parts(Op::Gather { root: 2 }, 2), expected);
}

#[test]
fn scatter_sends_every_block_from_the_root_which_each_rank_receives() {
    assert_eq!(
        parts(Op::Scatter { root: 2 }, 3),
        vec![("recv", 2, 0, 0x9000, 3)]
    );
    let mut expected: Vec<_> = (0..4)
        .map(|peer| ("send", peer, 0x1000 + peer * 12, 0, 3))
        .collect();
    expected.insert(3, ("recv", 2, 0, 0x9000, 3));
    assert_eq!(parts(Op::Scatter { root: 2 }, 2), expected);
}
