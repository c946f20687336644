//! The size sweep and nccl-tests' definition of size, count and bandwidth
//! for each collective.

use nccl_tensor::Extent;

use crate::collective::{Collective, Mode, Rounding};

/// The message sizes from `min` to `max` (inclusive): each is `factor`
/// times the previous one, or, with `factor` 1, `step` bytes more, as
/// nccl-tests sweeps. A sweep that starts at 0 continues at 1 (nccl-tests
/// would loop forever there). Empty when `min > max`.
pub fn sweep(min: u64, max: u64, factor: u64, step: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = min;
    while size <= max {
        sizes.push(size);
        let next = if factor > 1 {
            size.checked_mul(factor)
        } else {
            size.checked_add(step.max(1))
        };
        match next {
            Some(next) if next > size => size = next,
            Some(_) => size = 1, // only from 0
            None => break,
        }
    }
    sizes
}

/// Element counts of one collective at one size, as nccl-tests'
/// `getCollByteCount` defines them. Offsets are in elements, per rank (the
/// in-place buffer of rank `r` starts `r * offset` elements in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpCounts {
    /// Elements in the send buffer.
    pub send: usize,
    /// Elements in the receive buffer.
    pub recv: usize,
    /// The count passed to NCCL (and printed in the `count` column).
    pub param: usize,
    /// In-place: where this rank's send data lies in the receive buffer, per rank.
    pub send_in_place_offset: usize,
    /// In-place: where this rank's result lies in the receive buffer, per rank.
    pub recv_in_place_offset: usize,
}

impl OpCounts {
    /// The counts of `collective` for `size_bytes` with `elem_size`-byte
    /// elements on `world` ranks, from its buffers' extents
    /// ([`Collective::sizes`]) and nccl-tests' rounding
    /// (`rounding` in [`Collective::facts`]): a
    /// collective of one block per rank rounds the block down (all_gather
    /// and reduce_scatter to a multiple of 4 elements, all_to_all to whole
    /// 16-byte chunks). In place, the block of one block lies at this
    /// rank's block of the other buffer.
    pub fn new(collective: Collective, size_bytes: u64, elem_size: usize, world: usize) -> Self {
        let world = world.max(1);
        let elem_size = elem_size.max(1);
        let count = usize::try_from(size_bytes / elem_size as u64).unwrap_or(usize::MAX);
        let sizes = collective.sizes();
        let block = match collective.facts().rounding {
            Rounding::None => count,
            Rounding::Elements(align) => count / (align * world) * align,
            Rounding::Bytes(chunk) => {
                let per_chunk = (chunk / elem_size).max(1);
                count / world / per_chunk * per_chunk
            }
        };
        let (send, recv) = sizes.lengths(block, world);
        let offset_if = |spread_into: bool| if spread_into { block } else { 0 };
        Self {
            send,
            recv,
            param: block,
            send_in_place_offset: offset_if(
                sizes.input == Extent::Block && sizes.output == Extent::World,
            ),
            recv_in_place_offset: offset_if(
                sizes.output == Extent::Block && sizes.input == Extent::World,
            ),
        }
    }

    /// The `size` column: the larger of the send and receive buffers, in bytes.
    pub fn printed_bytes(&self, elem_size: usize) -> u64 {
        (self.send.max(self.recv) * elem_size) as u64
    }

    /// Elements each buffer must hold for both modes (in-place uses the
    /// receive buffer for the send data too).
    pub fn buffer_elems(&self) -> usize {
        self.send.max(self.recv)
    }

    /// The element offsets of the send and receive pointers from the start
    /// of their buffers for `rank` in `mode`. In-place, both point into the
    /// receive buffer.
    pub fn pointer_offsets(&self, mode: Mode, rank: usize) -> (usize, usize) {
        match mode {
            Mode::OutOfPlace => (0, 0),
            Mode::InPlace => (
                self.send_in_place_offset * rank,
                self.recv_in_place_offset * rank,
            ),
        }
    }
}

/// The bytes nccl-tests' `getBw` divides by the time: `count * size` for
/// the collectives of one block (all_reduce, broadcast, reduce, sendrecv),
/// `count * size * world` for those with a buffer of one block per rank
/// (all_gather, reduce_scatter, all_to_all), count being the NCCL count.
pub fn algorithm_bytes(
    collective: Collective,
    param_count: usize,
    elem_size: usize,
    world: usize,
) -> f64 {
    let per_rank = (param_count * elem_size) as f64;
    let sizes = collective.sizes();
    if sizes.input == Extent::World || sizes.output == Extent::World {
        per_rank * world.max(1) as f64
    } else {
        per_rank
    }
}

/// The two bandwidths of a measurement, in GB/s (10^9 bytes per second).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bandwidths {
    /// Algorithm bandwidth: [`algorithm_bytes`] over the time.
    pub algbw: f64,
    /// Bus bandwidth: algbw times the collective's bus factor.
    pub busbw: f64,
}

/// The bandwidths of `collective` at `counts` for a time per operation in
/// microseconds. Zero for a zero or invalid time.
pub fn bandwidths(
    collective: Collective,
    counts: &OpCounts,
    elem_size: usize,
    world: usize,
    time_us: f64,
) -> Bandwidths {
    if time_us.is_nan() || time_us <= 0.0 {
        return Bandwidths::default();
    }
    let algbw = algorithm_bytes(collective, counts.param, elem_size, world) / 1.0e3 / time_us;
    Bandwidths {
        algbw,
        busbw: algbw * collective.bus_factor(world),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_by_factor_and_step() {
        assert_eq!(sweep(8, 128, 2, 1), vec![8, 16, 32, 64, 128]);
        assert_eq!(sweep(8, 1 << 30, 4, 1).len(), 14); // the baselines' -b 8 -e 1G -f 4
        assert_eq!(sweep(8, 100, 2, 1), vec![8, 16, 32, 64]);
        assert_eq!(sweep(10, 40, 1, 10), vec![10, 20, 30, 40]);
        assert_eq!(sweep(64, 64, 2, 1), vec![64]);
        assert_eq!(sweep(128, 64, 2, 1), Vec::<u64>::new());
        assert_eq!(sweep(0, 4, 2, 1), vec![0, 1, 2, 4]);
        assert_eq!(
            sweep(u64::MAX / 2 + 1, u64::MAX, 2, 1),
            vec![u64::MAX / 2 + 1]
        );
        assert_eq!(sweep(u64::MAX - 1, u64::MAX, 1, 5), vec![u64::MAX - 1]);
        let default = sweep(8, 128 << 20, 2, 1 << 20);
        assert_eq!(
            (default[0], *default.last().unwrap(), default.len()),
            (8, 128 << 20, 25)
        );
    }

    #[test]
    fn counts_all_reduce_broadcast_reduce_sendrecv() {
        for c in [
            Collective::AllReduce,
            Collective::Broadcast,
            Collective::Reduce,
            Collective::SendRecv,
        ] {
            let counts = OpCounts::new(c, 32, 4, 8);
            assert_eq!((counts.send, counts.recv, counts.param), (8, 8, 8));
            assert_eq!(counts.pointer_offsets(Mode::InPlace, 3), (0, 0));
            assert_eq!(counts.printed_bytes(4), 32);
            // A size that is not a whole number of elements is rounded down.
            assert_eq!(OpCounts::new(c, 10, 4, 1).param, 2);
        }
    }

    /// `collective`'s counts for 1 MiB of floats on 8 ranks (262144
    /// elements in all, 32768 per rank), checked to send `send` and receive
    /// `recv` elements, after checking the baselines' smallest call (8 B of
    /// floats on one rank: size 0, count 0).
    fn a_mebibyte_on_eight_ranks(collective: Collective, send: usize, recv: usize) -> OpCounts {
        let zero = OpCounts::new(collective, 8, 4, 1);
        assert_eq!((zero.printed_bytes(4), zero.param), (0, 0), "{collective}");
        let eight = OpCounts::new(collective, 1 << 20, 4, 8);
        let counts = (eight.send, eight.recv, eight.param);
        assert_eq!(counts, (send, recv, 32768), "{collective}");
        eight
    }

    #[test]
    fn counts_all_gather() {
        let eight = a_mebibyte_on_eight_ranks(Collective::AllGather, 32768, 262144);
        assert_eq!(eight.pointer_offsets(Mode::InPlace, 3), (3 * 32768, 0));
        assert_eq!(eight.pointer_offsets(Mode::OutOfPlace, 3), (0, 0));
        // The baselines' 32 B float on 1 rank gives size 32, count 8.
        let one = OpCounts::new(Collective::AllGather, 32, 4, 1);
        assert_eq!((one.printed_bytes(4), one.param), (32, 8));
        // 100 floats on 3 ranks: 100 / 12 * 4 = 32 per rank.
        let odd = OpCounts::new(Collective::AllGather, 400, 4, 3);
        assert_eq!((odd.param, odd.recv, odd.printed_bytes(4)), (32, 96, 384));
    }

    #[test]
    fn counts_reduce_scatter() {
        let eight = a_mebibyte_on_eight_ranks(Collective::ReduceScatter, 262144, 32768);
        assert_eq!(eight.pointer_offsets(Mode::InPlace, 5), (0, 5 * 32768));
        assert_eq!(eight.buffer_elems(), 262144);
    }

    #[test]
    fn counts_all_to_all() {
        // The baselines: 8 B float on 1 rank gives 0; 32 B gives 8.
        assert_eq!(OpCounts::new(Collective::AllToAll, 8, 4, 1).param, 0);
        let one = OpCounts::new(Collective::AllToAll, 32, 4, 1);
        assert_eq!((one.param, one.printed_bytes(4)), (8, 32));
        // 16-byte chunks per peer: 8-byte elements round to 2, 1-byte to 16.
        assert_eq!(OpCounts::new(Collective::AllToAll, 40, 8, 1).param, 4);
        assert_eq!(OpCounts::new(Collective::AllToAll, 24, 8, 1).param, 2);
        assert_eq!(OpCounts::new(Collective::AllToAll, 31, 1, 1).param, 16);
        // 1000 floats on 3 ranks: 333 per peer, rounded to 332.
        let three = OpCounts::new(Collective::AllToAll, 4000, 4, 3);
        assert_eq!((three.param, three.send, three.recv), (332, 996, 996));
        // Half types: 8 per chunk.
        assert_eq!(OpCounts::new(Collective::AllToAll, 1 << 10, 2, 8).param, 64);
    }

    #[test]
    fn bandwidth_as_nccl_tests() {
        // all_reduce 8 B out-of-place at 6.30 us: algbw 0.00127 GB/s, busbw 0 on one rank.
        let counts = OpCounts::new(Collective::AllReduce, 536870912, 4, 1);
        let one = bandwidths(Collective::AllReduce, &counts, 4, 1, 255.47);
        assert!((one.algbw - 2101.5).abs() < 0.1, "{one:?}");
        assert_eq!(one.busbw, 0.0);
        // Two ranks: busbw = algbw.
        let two = bandwidths(Collective::AllReduce, &counts, 4, 2, 255.47);
        assert!((two.algbw - two.busbw).abs() < 1e-9);
        // all_gather counts the whole gathered buffer.
        let gather = OpCounts::new(Collective::AllGather, 1 << 20, 4, 8);
        let eight = bandwidths(Collective::AllGather, &gather, 4, 8, 1.0);
        assert!((eight.algbw - (1 << 20) as f64 / 1.0e3).abs() < 1e-6);
        assert!((eight.busbw - eight.algbw * 0.875).abs() < 1e-6);
        assert_eq!(
            bandwidths(Collective::AllGather, &gather, 4, 8, 0.0),
            Bandwidths {
                algbw: 0.0,
                busbw: 0.0
            }
        );
    }
}
