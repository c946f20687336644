//! nccl-core's raw collectives on a real GPU, with values checked against
//! a host computation: every built-in reduction and a pre-multiplied sum,
//! broadcast, reduce, all_gather, reduce_scatter, all_to_all, send/recv to
//! itself in a group, and the argument errors NCCL and nccl-core give.
//! World size 1 on one GPU.

use std::ffi::c_void;

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, DataType, Error, Group, ReduceOp, Status};
use nccl_test_support::raw::{
    check_all_reduce, download, input, one_gpu, ptr, ptr_mut, single_rank, upload,
};
use nccl_test_support::{POISON, assert_same_values};

#[test]
fn gpu_all_reduce_every_builtin_op() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    for op in ReduceOp::ALL {
        check_all_reduce(&comm, &stream, op);
    }
}

#[test]
fn gpu_pre_mul_sum_scales_the_input() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let op = comm.pre_mul_sum(DataType::Float32, 0.5).unwrap();
    for len in [
        1usize,
        2,
        3,
        4,
        5,
        7,
        8,
        1000,
        1001,
        4096,
        4097,
        65537,
        (1 << 20) + 3,
    ] {
        let data = input(len as u64, len);
        let send = upload(&stream, &data);
        let mut recv = upload(&stream, &vec![POISON; len]);
        // SAFETY: both buffers hold `len` f32 and outlive the download.
        let _ = unsafe {
            comm.all_reduce(
                ptr(&send, &stream),
                ptr_mut(&mut recv, &stream),
                len,
                DataType::Float32,
                &op,
                &stream,
            )
        }
        .unwrap();
        let expected: Vec<f32> = data.iter().map(|v| v * 0.5).collect();
        assert_same_values(
            &download(&stream, &recv),
            &expected,
            &format!("pre-mul sum of {len}"),
        );
    }
    // The op is tied to its data type.
    let (send, mut recv) = (upload(&stream, &[1.0]), upload(&stream, &[1.0]));
    // SAFETY: the call is refused before any pointer is used.
    let wrong = unsafe {
        comm.all_reduce(
            ptr(&send, &stream),
            ptr_mut(&mut recv, &stream),
            1,
            DataType::Float64,
            &op,
            &stream,
        )
    };
    assert!(
        matches!(
            wrong,
            Err(Error::InvalidArgument {
                argument: "reduce op",
                ..
            })
        ),
        "{wrong:?}"
    );
}

/// Runs the collective `name` on `len` f32 (with one rank, every block is
/// the whole buffer).
///
/// # Safety
/// `send` and `recv` hold `len` f32 on the communicator's device until the
/// stream is synchronised.
unsafe fn run_op(
    name: &str,
    comm: &Communicator,
    send: *const c_void,
    recv: *mut c_void,
    len: usize,
    stream: &CudaStream,
) -> nccl_core::Result<Status> {
    let f32 = DataType::Float32;
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match name {
            "broadcast" => comm.broadcast(send, recv, len, f32, 0, stream),
            "reduce" => comm.reduce(send, recv, len, f32, ReduceOp::Max, 0, stream),
            "all_gather" => comm.all_gather(send, recv, len, f32, stream),
            "reduce_scatter" => comm.reduce_scatter(send, recv, len, f32, ReduceOp::Sum, stream),
            "all_to_all" => comm.all_to_all(send, recv, len, f32, stream),
            other => panic!("no collective named {other}"),
        }
    }
}

#[test]
fn gpu_broadcast_reduce_gather_scatter_alltoall() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let len = 3333;
    let data = input(77, len);
    let send = upload(&stream, &data);
    for name in [
        "broadcast",
        "reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
    ] {
        let mut recv = upload(&stream, &vec![POISON; len]);
        // SAFETY: `send` and `recv` hold `len` f32 and outlive the download.
        let _ = unsafe {
            run_op(
                name,
                &comm,
                ptr(&send, &stream),
                ptr_mut(&mut recv, &stream),
                len,
                &stream,
            )
        }
        .unwrap();
        assert_same_values(
            &download(&stream, &recv),
            &data,
            &format!("{name} out-of-place"),
        );
        if name == "all_to_all" {
            continue; // NCCL requires distinct buffers for all-to-all.
        }
        let mut inplace = upload(&stream, &data);
        let p = ptr_mut(&mut inplace, &stream);
        // SAFETY: `inplace` holds `len` f32 and outlives the download.
        let _ = unsafe { run_op(name, &comm, p, p, len, &stream) }.unwrap();
        assert_same_values(
            &download(&stream, &inplace),
            &data,
            &format!("{name} in-place"),
        );
    }
}

#[test]
fn gpu_send_recv_to_self_inside_one_group() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let data = input(9, 12345);
    let send = upload(&stream, &data);
    let mut recv = upload(&stream, &vec![POISON; data.len()]);
    let group = Group::start().unwrap();
    assert_eq!(nccl_core::group_depth(), 1);
    // SAFETY: both buffers hold the count of f32 and outlive the download;
    // both halves are in one group, so the self send cannot hang.
    unsafe {
        let _ = comm
            .send(
                ptr(&send, &stream),
                data.len(),
                DataType::Float32,
                0,
                &stream,
            )
            .unwrap();
        let _ = comm
            .recv(
                ptr_mut(&mut recv, &stream),
                data.len(),
                DataType::Float32,
                0,
                &stream,
            )
            .unwrap();
    }
    let _ = group.end().unwrap();
    assert_eq!(nccl_core::group_depth(), 0);
    assert_same_values(&download(&stream, &recv), &data, "result");
}

#[test]
fn gpu_nccls_invalid_argument_surfaces_with_its_text() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let buffer = upload(&stream, &[1.0; 4]);
    let p = ptr(&buffer, &stream) as *mut c_void;
    let lib = comm.library();
    let all_reduce = lib.functions().ncclAllReduce().unwrap();
    // A data type no NCCL knows: only a raw call can pass one, and NCCL
    // must refuse it before touching the buffer.
    // SAFETY: the communicator and stream are live; the buffer holds 4 f32.
    let result = unsafe {
        all_reduce(
            p,
            p,
            4,
            nccl_core::nccl_sys::ncclDataType_t(99),
            nccl_core::nccl_sys::ncclRedOp_t::ncclSum,
            comm.as_raw().unwrap(),
            stream.cu_stream() as nccl_core::nccl_sys::cudaStream_t,
        )
    };
    let error = nccl_core::check(lib, "ncclAllReduce", result).unwrap_err();
    let text = error.to_string();
    println!("{text}");
    assert_eq!(
        error.nccl_code().and_then(|c| c.name()),
        Some("ncclInvalidArgument"),
        "{text}"
    );
    assert!(
        text.starts_with("ncclAllReduce failed: ncclInvalidArgument (4): "),
        "{text}"
    );
    assert!(
        matches!(&error, Error::Nccl { last_error: Some(t), .. } if !t.is_empty()),
        "{text}"
    );
}

#[test]
fn gpu_argument_checks_before_nccl() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    // SAFETY: each call is refused before any pointer is used.
    unsafe {
        let root = comm.broadcast(
            std::ptr::null(),
            std::ptr::null_mut(),
            1,
            DataType::Float32,
            1,
            &stream,
        );
        assert!(matches!(
            root,
            Err(Error::RankOutOfRange {
                what: "root",
                given: 1,
                world_size: 1
            })
        ));
        let peer = comm.send(std::ptr::null(), 1, DataType::Float32, 1 << 31, &stream);
        assert!(matches!(
            peer,
            Err(Error::RankOutOfRange {
                what: "dst",
                given: 2147483648,
                ..
            })
        ));
    }
}
