//! One collective call on one rank ([`Call`]): its arguments and buffers'
//! addresses as nccl-tests lays them out, the operations it issues, and
//! the check that it lies within its buffers at every place of its
//! rotation ([`Call::check_within`], [`place_within`]), which the layers
//! that hand NCCL bare addresses make.

use std::ffi::c_void;

use nccl_core::{DataType, Op, ReduceOp};

use super::{Launch, Shift};
use crate::collective::{Collective, Mode};
use crate::error::BenchError;
use crate::rotation::Rotation;
use crate::sizes::OpCounts;

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
    pub root: usize,
    /// This rank.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
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
        root: usize,
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
            rank,
            world,
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
    pub fn ring_peers(&self) -> (usize, usize) {
        let world = self.world.max(1);
        ((self.rank + 1) % world, (self.rank + world - 1) % world)
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
        sizes.lengths(self.count, self.world)
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
        world: usize,
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

/// What a launcher issues once per place besides the call's operations,
/// in the same NCCL group (the raw layer's in-band fingerprint).
pub(super) type AlongEach<'s> = Box<dyn Fn() -> Result<(), BenchError> + 's>;

/// The launcher of a call bound as `calls` ([`Call::core_calls`]), for the
/// layers that hand NCCL bare addresses: `issue` enqueues one of them at
/// one place, and `along` (if any) is issued once per place after them. A
/// launch of one call at one place with nothing along issues it alone;
/// any other launch issues everything at every place inside `grouped` (one
/// NCCL group).
pub(super) fn launcher<'s>(
    calls: Vec<nccl_core::Call<'static>>,
    issue: impl Fn(nccl_core::Call<'static>, &Shift) -> Result<(), BenchError> + 's,
    along: Option<AlongEach<'s>>,
    grouped: impl Fn(&mut dyn FnMut() -> Result<(), BenchError>) -> Result<(), BenchError> + 's,
) -> Launch<'s> {
    match (calls.as_slice(), along) {
        (&[single], None) => Box::new(move |shifts: &[Shift]| match shifts {
            [shift] => issue(single, shift),
            _ => grouped(&mut || shifts.iter().try_for_each(|shift| issue(single, shift))),
        }),
        (_, along) => Box::new(move |shifts: &[Shift]| {
            grouped(&mut || {
                shifts.iter().try_for_each(|shift| {
                    calls.iter().try_for_each(|&part| issue(part, shift))?;
                    along.as_ref().map_or(Ok(()), |along| along())
                })
            })
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `rank`'s all_gather call of 1 KiB of f32 at world size 4 (64 elements
    /// per rank), its buffers at 0x1000 (send) and 0x9000 (receive).
    fn all_gather_call(mode: Mode, rank: usize) -> Call {
        let counts = OpCounts::new(Collective::AllGather, 1 << 10, 4, 4);
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
    }

    #[test]
    fn call_pointers_follow_nccl_tests_layout() {
        let oop = all_gather_call(Mode::OutOfPlace, 2);
        assert_eq!((oop.send, oop.recv, oop.count), (0x1000, 0x9000, 64));
        let ip = all_gather_call(Mode::InPlace, 2);
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
        let call = |mode| all_gather_call(mode, 2);
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
        let bases = (0x1000, 0x9000);
        let oop = all_gather_call(Mode::OutOfPlace, 2);
        assert_eq!(oop.lengths(), (64, 256));
        let floats = |len| (DataType::Float32, len);
        assert_eq!(oop.check_within(bases, floats(256), 4).unwrap(), 0);
        // Four places 256 elements apart: the last starts at 768.
        let rotated = oop.rotated(Rotation::new(256, 1024, 0, 20));
        assert_eq!(rotated.check_within(bases, floats(1024), 4).unwrap(), 768);
        // In place, rank 3's input is the last block of the receive buffer.
        let in_place = all_gather_call(Mode::InPlace, 3);
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
    fn element_offsets_from_addresses() {
        assert_eq!(element_offset(0x9000, 0x9000, 4), Some(0));
        assert_eq!(element_offset(0x9000 + 2 * 64 * 4, 0x9000, 4), Some(128));
        assert_eq!(element_offset(0x9000 + 6, 0x9000, 2), Some(3));
        // Below the buffer, or between two elements.
        assert_eq!(element_offset(0x8ffc, 0x9000, 4), None);
        assert_eq!(element_offset(0x9002, 0x9000, 4), None);
        // One-byte elements: every address is one.
        assert_eq!(element_offset(0x9003, 0x9000, 1), Some(3));
    }

    #[test]
    fn offsets_of_the_runners_calls() {
        // In place, the input of all_gather is this rank's block of the
        // receive buffer; all_reduce's is its start. Out of place, both
        // start their buffers.
        let (send_base, recv_base) = (0x1000, 0x9000);
        let counts = OpCounts::new(Collective::AllGather, 1 << 10, 4, 4);
        let call = |collective, mode, counts: &OpCounts| {
            Call::new(
                collective,
                mode,
                counts,
                send_base,
                recv_base,
                DataType::Float32,
                ReduceOp::Sum,
                0,
                2,
                4,
            )
        };
        let ip = call(Collective::AllGather, Mode::InPlace, &counts);
        assert_eq!(element_offset(ip.send, recv_base, 4), Some(2 * 64));
        assert_eq!(element_offset(ip.recv, recv_base, 4), Some(0));
        let oop = call(Collective::AllGather, Mode::OutOfPlace, &counts);
        assert_eq!(element_offset(oop.send, send_base, 4), Some(0));
        assert_eq!(element_offset(oop.recv, recv_base, 4), Some(0));
        let counts = OpCounts::new(Collective::AllReduce, 1 << 10, 4, 4);
        let ip = call(Collective::AllReduce, Mode::InPlace, &counts);
        assert_eq!(element_offset(ip.send, recv_base, 4), Some(0));
        assert_eq!(element_offset(ip.recv, recv_base, 4), Some(0));
    }
}
