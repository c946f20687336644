//! CPU tests of the send and receive checks: the peer in range, a peer
//! that is this rank only inside a group, and the peer checked before the
//! buffer. Every error with all its fields and its exact message
//! (`checks_support` has the common ground). No GPU and no NCCL needed.

use crate::checks_support::*;
use nccl_tensor::checks::{self, CommInfo};

#[test]
fn send_and_recv_refuse_a_peer_out_of_range() {
    for peer in [4, 5, 100, 1 << 31, usize::MAX] {
        rank_out_of_range(
            send(&info(), f32s(8), peer),
            ("send", "dst"),
            peer,
            4,
            &format!("send: dst {peer} is out of range: expected 0..4"),
        );
        rank_out_of_range(
            recv(&info(), f32s(8), peer),
            ("recv", "src"),
            peer,
            4,
            &format!("recv: src {peer} is out of range: expected 0..4"),
        );
    }
    // A group does not make an out-of-range peer valid.
    let grouped = CommInfo {
        in_group: true,
        ..info()
    };
    rank_out_of_range(
        send(&grouped, f32s(8), 4),
        ("send", "dst"),
        4,
        4,
        "send: dst 4 is out of range: expected 0..4",
    );
    rank_out_of_range(
        recv(&grouped, f32s(8), 5),
        ("recv", "src"),
        5,
        4,
        "recv: src 5 is out of range: expected 0..4",
    );
}

#[test]
fn the_last_rank_and_other_world_sizes_are_valid_peers() {
    assert!(send(&info(), f32s(8), 3).is_ok());
    assert!(recv(&info(), f32s(8), 3).is_ok());
    // With one rank the only peer is this rank, inside a group.
    let single_grouped = CommInfo {
        world_size: 1,
        in_group: true,
        ..info()
    };
    assert!(send(&single_grouped, f32s(8), 0).is_ok());
    assert!(recv(&single_grouped, f32s(8), 0).is_ok());
    rank_out_of_range(
        send(&single_grouped, f32s(8), 1),
        ("send", "dst"),
        1,
        1,
        "send: dst 1 is out of range: expected 0..1",
    );
}

#[test]
fn send_and_recv_to_this_rank_need_an_open_group() {
    let rank_2 = CommInfo { rank: 2, ..info() };
    self_peer(
        send(&rank_2, f32s(8), 2),
        "send",
        2,
        &format!("send: {SELF_2_TEXT}"),
    );
    self_peer(
        recv(&rank_2, f32s(8), 2),
        "recv",
        2,
        &format!("recv: {SELF_2_TEXT}"),
    );
    self_peer(
        send(&info(), f32s(8), 0),
        "send",
        0,
        "send: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
    let grouped = CommInfo {
        in_group: true,
        ..rank_2
    };
    assert!(send(&grouped, f32s(8), 2).is_ok());
    assert!(recv(&grouped, f32s(8), 2).is_ok());
    // Other peers are fine either way.
    for peer in [0, 1, 3] {
        assert!(send(&rank_2, f32s(8), peer).is_ok());
        assert!(recv(&rank_2, f32s(8), peer).is_ok());
        assert!(send(&grouped, f32s(8), peer).is_ok());
        assert!(recv(&grouped, f32s(8), peer).is_ok());
    }
}

#[test]
fn peer_check_itself() {
    assert!(checks::peer("op", "dst", 1, &info()).is_ok());
    // `peer` checks the range first: an out-of-range "self" cannot exist,
    // but a bad peer is a range error even inside a group.
    rank_out_of_range(
        checks::peer("op", "dst", 5, &info()),
        ("op", "dst"),
        5,
        4,
        "op: dst 5 is out of range: expected 0..4",
    );
    let grouped = CommInfo {
        in_group: true,
        ..info()
    };
    rank_out_of_range(
        checks::peer("op", "src", 4, &grouped),
        ("op", "src"),
        4,
        4,
        "op: src 4 is out of range: expected 0..4",
    );
    self_peer(
        checks::peer("op", "dst", 0, &info()),
        "op",
        0,
        "op: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
    assert!(checks::peer("op", "dst", 0, &grouped).is_ok());
}

#[test]
fn order_point_to_point_peer_before_buffer() {
    // send and recv check the peer before the buffer (they checked the
    // buffer first before each operation was described once).
    rank_out_of_range(
        send(&info(), f32s_on(8, 1), 9),
        ("send", "dst"),
        9,
        4,
        "send: dst 9 is out of range: expected 0..4",
    );
    let (shape, strides) = ([2, 4], [1, 2]);
    self_peer(
        recv(&info(), strided(&shape, &strides), 0),
        "recv",
        0,
        "recv: peer 0 is this rank; a send or receive to itself must be issued inside one nccl_core::Group together with its other half, or it hangs",
    );
    let nccl_2_9 = CommInfo {
        nccl_version: V2_9_9,
        ..info()
    };
    rank_out_of_range(
        recv(&nccl_2_9, buf(BF16, 8), 5),
        ("recv", "src"),
        5,
        4,
        "recv: src 5 is out of range: expected 0..4",
    );
    // With a valid peer, the buffer's errors are reported.
    wrong_device(
        send(&info(), f32s_on(8, 1), 1),
        ("send", "tensor"),
        0,
        1,
        "send: tensor is on device 1, but the communicator is on device 0",
    );
    not_contiguous(
        recv(&info(), strided(&shape, &strides), 1),
        ("recv", "tensor"),
        &[2, 4],
        &[1, 2],
        "recv: tensor is not contiguous (shape [2, 4], strides [1, 2]); make a contiguous copy first",
    );
}
