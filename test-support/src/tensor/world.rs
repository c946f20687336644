//! nccl-tensor at world size N, one process per rank (the `ranks_*`
//! tests): a rank's communicator of the launch, per-rank data, and the
//! host's reductions of every rank's data.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_tensor::Communicator;

use super::Elem;
use crate::Ranks;

/// The per-rank data repeats with this period (a prime above 4097, so the
/// 4097-element case has no repeat and 64 MiB needs no per-element work).
pub const PERIOD: usize = 4099;

/// One rank's communicator and stream in a test.
pub struct Rank {
    /// Where this process stands in the launch.
    pub ranks: Ranks,
    /// A blocking communicator of every rank.
    pub comm: Communicator,
    /// A stream on this rank's GPU.
    pub stream: Arc<CudaStream>,
}

impl Rank {
    /// This rank of the launch (or the only one), with a blocking
    /// communicator of every rank meeting under `tag`; `None` on a machine
    /// without a GPU (after SKIP).
    pub fn join(tag: &str) -> Option<Self> {
        crate::require_gpus(1)?;
        let ranks = crate::ranks();
        let device = ranks.device();
        let comm = Communicator::new(
            device.clone(),
            ranks.world,
            ranks.unique_id(tag),
            ranks.rank,
        )
        .unwrap_or_else(|e| panic!("{}: init: {e}", ranks.label()));
        assert_eq!((comm.rank(), comm.world_size()), (ranks.rank, ranks.world));
        let stream = device.new_stream().expect("stream");
        Some(Self {
            ranks,
            comm,
            stream,
        })
    }

    /// The world size.
    pub fn world(&self) -> usize {
        self.ranks.world
    }

    /// This rank.
    pub fn me(&self) -> usize {
        self.ranks.rank
    }

    /// `rank r of N (...): T xlen: op`, for messages.
    pub fn what<T: Elem>(&self, len: usize, op: &str) -> String {
        format!("{}: {} x{len}: {op}", self.ranks.label(), T::NAME)
    }
}

/// Rank `rank`'s `len` elements of `T` for stream `seed`: +-1 or +-2 (2
/// only on ranks 0 and 1; no signs on unsigned types), periodic.
pub fn rank_values<T: Elem>(seed: u64, rank: usize, len: usize) -> Vec<T> {
    let period: Vec<T> = (0..PERIOD.min(len))
        .map(|i| {
            let mut h = (seed ^ T::SEED.rotate_left(17) ^ (rank as u64).rotate_left(40))
                .wrapping_add(i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            h ^= h >> 32;
            let magnitude = if rank < 2 && h & 1 == 1 { 2.0 } else { 1.0 };
            let negative = T::SIGNED && h & 2 == 2;
            T::from_f64(if negative { -magnitude } else { magnitude })
        })
        .collect();
    period.iter().copied().cycle().take(len).collect()
}

/// Every rank's data for `seed`, in rank order.
pub fn all_values<T: Elem>(seed: u64, world: usize, len: usize) -> Vec<Vec<T>> {
    (0..world).map(|r| rank_values(seed, r, len)).collect()
}

/// `fold` of every rank's element `offset + i`, for `i < len`.
pub fn reduced<T: Elem>(
    data: &[Vec<T>],
    offset: usize,
    len: usize,
    fold: &dyn Fn(&[f64]) -> f64,
) -> Vec<T> {
    let mut column = vec![0.0; data.len()];
    let mut one = |i: usize| {
        for (slot, rank) in column.iter_mut().zip(data) {
            *slot = rank[offset + i].to_f64();
        }
        T::from_f64(fold(&column))
    };
    if len <= PERIOD {
        return (0..len).map(&mut one).collect();
    }
    // Every rank's data repeats with PERIOD, and so does the result.
    assert_eq!(offset % PERIOD, 0, "a long reduction starts at a period");
    let period: Vec<T> = (0..PERIOD).map(&mut one).collect();
    period.iter().copied().cycle().take(len).collect()
}
