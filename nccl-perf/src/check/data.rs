//! What one rank writes before the checked run and what it must read
//! after, for every collective and mode.

use nccl_core::{DataType, ReduceOp};

use super::element::Element;
use super::inputs::{
    MOVEMENT_PERIOD, POISON, REDUCTION_PERIOD, encode_period, movement_input, reduction_input, tile,
};
use crate::collective::{Collective, Mode};
use crate::sizes::OpCounts;

/// What one rank writes before the checked run and what it must read after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckData {
    /// The send buffer's contents from its start (empty in-place).
    pub send: Vec<u8>,
    /// The receive buffer's contents from its start: inputs in-place, and
    /// poison where the result will be written.
    pub recv: Vec<u8>,
    /// Where the result starts in the receive buffer, in elements.
    pub result_offset: usize,
    /// The expected result, or `None` when this rank receives nothing to
    /// check (reduce on a rank other than the root).
    pub expected: Option<Vec<u8>>,
}

/// Everything a rank needs to know to build its check data.
#[derive(Clone, Copy, Debug)]
pub struct CheckSetup {
    /// The collective.
    pub collective: Collective,
    /// Out-of-place or in-place.
    pub mode: Mode,
    /// Its element counts at this size.
    pub counts: OpCounts,
    /// The element type.
    pub dtype: DataType,
    /// The reduction (reducing collectives only).
    pub op: ReduceOp,
    /// The root (broadcast and reduce only).
    pub root: usize,
    /// This rank.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
}

impl CheckSetup {
    /// The check data of this rank, or `None` when this collective and mode
    /// are not checked (in-place all_to_all and sendrecv) or the type is
    /// not covered.
    pub fn data(&self) -> Option<CheckData> {
        if !self.collective.checks(self.mode) {
            return None;
        }
        nccl_core::with_data_type!(self.dtype, T => Some(self.data_typed::<T>()), _ => None)
    }

    fn data_typed<T: Element>(&self) -> CheckData {
        let Self {
            collective,
            mode,
            counts,
            op,
            root,
            rank,
            world,
            ..
        } = *self;
        let size = T::SIZE;
        let pc = counts.param;
        let poison = |elems: usize| vec![POISON; elems * size];
        let reduction = |r: usize, start: usize, len: usize| {
            tile(
                &encode_period::<T>(REDUCTION_PERIOD, |i| reduction_input(op, r, i)),
                size,
                start,
                len,
            )
        };
        let movement = |r: usize, start: usize, len: usize| {
            tile(
                &encode_period::<T>(MOVEMENT_PERIOD, |i| movement_input(r, i)),
                size,
                start,
                len,
            )
        };
        let reduced = |start: usize, len: usize| {
            let period = encode_period::<T>(REDUCTION_PERIOD, |i| {
                T::reduce((0..world).map(|r| reduction_input(op, r, i)), op, world).to_f64()
            });
            tile(&period, size, start, len)
        };
        let in_place = mode == Mode::InPlace;
        let (send, recv, result_offset, expected) = match collective {
            Collective::AllReduce | Collective::Reduce => {
                let input = reduction(rank, 0, pc);
                let expected =
                    (collective == Collective::AllReduce || rank == root).then(|| reduced(0, pc));
                if in_place {
                    (Vec::new(), input, 0, expected)
                } else {
                    (input, poison(pc), 0, expected)
                }
            }
            Collective::Broadcast => {
                let input = movement(rank, 0, pc);
                let expected = Some(movement(root, 0, pc));
                match (in_place, rank == root) {
                    (false, _) => (input, poison(pc), 0, expected),
                    (true, true) => (Vec::new(), input, 0, expected),
                    (true, false) => (Vec::new(), poison(pc), 0, expected),
                }
            }
            Collective::AllGather => {
                let expected: Vec<u8> = (0..world).flat_map(|r| movement(r, 0, pc)).collect();
                let input = movement(rank, 0, pc);
                let mut recv = poison(world * pc);
                if in_place {
                    recv[rank * pc * size..(rank + 1) * pc * size].copy_from_slice(&input);
                    (Vec::new(), recv, 0, Some(expected))
                } else {
                    (input, recv, 0, Some(expected))
                }
            }
            Collective::ReduceScatter => {
                let input = reduction(rank, 0, world * pc);
                let expected = Some(reduced(rank * pc, pc));
                if in_place {
                    (Vec::new(), input, rank * pc, expected)
                } else {
                    (input, poison(pc), 0, expected)
                }
            }
            Collective::AllToAll => {
                let expected: Vec<u8> = (0..world)
                    .flat_map(|r| movement(r, rank * pc, pc))
                    .collect();
                (
                    movement(rank, 0, world * pc),
                    poison(world * pc),
                    0,
                    Some(expected),
                )
            }
            Collective::Gather => {
                let expected: Vec<u8> = (0..world).flat_map(|r| movement(r, 0, pc)).collect();
                let input = movement(rank, 0, pc);
                let mut recv = poison(world * pc);
                let expected = (rank == root).then_some(expected);
                if in_place {
                    recv[rank * pc * size..(rank + 1) * pc * size].copy_from_slice(&input);
                    (Vec::new(), recv, 0, expected)
                } else {
                    (input, recv, 0, expected)
                }
            }
            Collective::Scatter => {
                let input = movement(rank, 0, world * pc);
                let expected = Some(movement(root, rank * pc, pc));
                if in_place {
                    (Vec::new(), input, rank * pc, expected)
                } else {
                    (input, poison(pc), 0, expected)
                }
            }
            Collective::SendRecv => {
                let from = (rank + world - 1) % world;
                (
                    movement(rank, 0, pc),
                    poison(pc),
                    0,
                    Some(movement(from, 0, pc)),
                )
            }
        };
        CheckData {
            send,
            recv,
            result_offset,
            expected,
        }
    }
}

#[cfg(test)]
mod tests {
    use nccl_tensor::Extent;

    use super::*;
    use crate::check::count_wrong;

    /// Runs `collective` on the host over every rank's check data, writing
    /// each rank's receive image as NCCL would.
    fn simulate<T: Element>(setups: &[CheckSetup], data: &mut [CheckData]) {
        let s = setups[0];
        let (world, pc, size) = (s.world, s.counts.param, T::SIZE);
        let decode = |bytes: &[u8]| {
            bytes
                .chunks_exact(size)
                .map(|c| T::read(c).to_f64())
                .collect::<Vec<f64>>()
        };
        // Each rank's input, as NCCL reads it.
        let inputs: Vec<Vec<f64>> = setups
            .iter()
            .zip(data.iter())
            .map(|(setup, d)| {
                let (send_offset, _) = setup.counts.pointer_offsets(setup.mode, setup.rank);
                let buffer = if setup.mode == Mode::InPlace {
                    &d.recv
                } else {
                    &d.send
                };
                let len = match s.collective.sizes().input {
                    Extent::World => world * pc,
                    Extent::Block => pc,
                };
                decode(&buffer[send_offset * size..(send_offset + len) * size])
            })
            .collect();
        let write = |out: &mut Vec<u8>, offset: usize, values: &[T]| {
            for (k, value) in values.iter().enumerate() {
                value.write(&mut out[(offset + k) * size..]);
            }
        };
        for (rank, d) in data.iter_mut().enumerate() {
            let (_, recv_offset) = setups[rank].counts.pointer_offsets(s.mode, rank);
            let reduce_at = |i: usize| T::reduce(inputs.iter().map(|input| input[i]), s.op, world);
            let result: Vec<T> = match s.collective {
                Collective::AllReduce => (0..pc).map(reduce_at).collect(),
                Collective::Reduce if rank == s.root => (0..pc).map(reduce_at).collect(),
                Collective::Reduce => continue,
                Collective::Broadcast => inputs[s.root].iter().map(|&v| T::from_f64(v)).collect(),
                Collective::AllGather => inputs.iter().flatten().map(|&v| T::from_f64(v)).collect(),
                Collective::ReduceScatter => (rank * pc..(rank + 1) * pc).map(reduce_at).collect(),
                Collective::AllToAll => (0..world)
                    .flat_map(|j| inputs[j][rank * pc..(rank + 1) * pc].to_vec())
                    .map(T::from_f64)
                    .collect(),
                Collective::Gather if rank == s.root => {
                    inputs.iter().flatten().map(|&v| T::from_f64(v)).collect()
                }
                Collective::Gather => continue,
                Collective::Scatter => inputs[s.root][rank * pc..(rank + 1) * pc]
                    .iter()
                    .map(|&v| T::from_f64(v))
                    .collect(),
                Collective::SendRecv => inputs[(rank + world - 1) % world]
                    .iter()
                    .map(|&v| T::from_f64(v))
                    .collect(),
            };
            write(&mut d.recv, recv_offset, &result);
        }
    }

    fn run_simulation(
        collective: Collective,
        mode: Mode,
        dtype: DataType,
        op: ReduceOp,
        world: usize,
        root: usize,
    ) {
        let counts = OpCounts::new(collective, 4096, dtype.size_bytes(), world);
        let setups: Vec<CheckSetup> = (0..world)
            .map(|rank| CheckSetup {
                collective,
                mode,
                counts,
                dtype,
                op,
                root,
                rank,
                world,
            })
            .collect();
        let mut data: Vec<CheckData> = setups
            .iter()
            .map(|s| s.data().expect("checkable"))
            .collect();
        // Before the run, every rank that must receive something sees it as wrong
        // (all but in-place all_reduce/reduce/reduce_scatter, whose input is already
        // the answer on one rank).
        nccl_core::with_data_type!(dtype, T => simulate::<T>(&setups, &mut data), _ => panic!("{dtype} is not in the table"));
        for (rank, d) in data.iter().enumerate() {
            if let Some(expected) = &d.expected {
                let size = dtype.size_bytes();
                let got = &d.recv[d.result_offset * size..d.result_offset * size + expected.len()];
                assert_eq!(
                    count_wrong(dtype, got, expected),
                    0,
                    "{collective} {mode:?} {dtype} {op} world {world} rank {rank}"
                );
                if !expected.is_empty() {
                    let mut corrupted = got.to_vec();
                    corrupted[..size].fill(POISON);
                    assert_eq!(count_wrong(dtype, &corrupted, expected), 1);
                }
            } else {
                let rooted = matches!(collective, Collective::Reduce | Collective::Gather);
                assert!(rooted && rank != root, "{collective} rank {rank}");
            }
        }
    }

    #[test]
    fn layouts_check_out_on_a_simulated_run() {
        for collective in Collective::ALL {
            for mode in Mode::BOTH {
                if !collective.checks(mode) {
                    let counts = OpCounts::new(collective, 64, 4, 2);
                    let setup = CheckSetup {
                        collective,
                        mode,
                        counts,
                        dtype: DataType::Float32,
                        op: ReduceOp::Sum,
                        root: 0,
                        rank: 0,
                        world: 2,
                    };
                    assert_eq!(setup.data(), None);
                    continue;
                }
                for world in [1, 2, 3, 8] {
                    for dtype in DataType::ALL {
                        let ops: &[ReduceOp] = if collective.reduces() {
                            &ReduceOp::ALL
                        } else {
                            &[ReduceOp::Sum]
                        };
                        for &op in ops {
                            let root = if collective.has_root() { world - 1 } else { 0 };
                            run_simulation(collective, mode, dtype, op, world, root);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn outputs_are_poisoned_before_the_run() {
        let counts = OpCounts::new(Collective::AllGather, 256, 4, 4);
        let setup = CheckSetup {
            collective: Collective::AllGather,
            mode: Mode::InPlace,
            counts,
            dtype: DataType::Float32,
            op: ReduceOp::Sum,
            root: 0,
            rank: 2,
            world: 4,
        };
        let data = setup.data().unwrap();
        let expected = data.expected.as_ref().unwrap();
        // Only this rank's own block is right before the run.
        assert_eq!(
            count_wrong(DataType::Float32, &data.recv, expected),
            (3 * counts.param) as u64
        );
        assert!(data.send.is_empty());
        let out_of_place = CheckSetup {
            mode: Mode::OutOfPlace,
            ..setup
        }
        .data()
        .unwrap();
        assert_eq!(out_of_place.send.len(), counts.param * 4);
        assert!(out_of_place.recv.iter().all(|&b| b == POISON));
    }
}
