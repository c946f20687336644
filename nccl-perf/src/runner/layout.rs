//! Where this process's ranks stand in the run, as nccl-tests places them:
//! process `p` of a launch of `P` runs `-t` threads of `-g` GPUs each, so
//! its ranks are `p × t × g + i` of `P × t × g` and its GPUs
//! `local rank × t × g + i` (`i` in `0..t × g`). nccl-perf drives each of
//! those GPUs from a thread of its own (nccl-tests drives a thread's `-g`
//! GPUs in one NCCL group), so `-t` and `-g` only differ in what the
//! preamble prints.
//!
//! Two departures from nccl-tests, both for one process on its own: without
//! a launch, `-g` defaults to every visible GPU (split over the `-t`
//! threads), the way nccl-perf has always run; and under nccl-launch's
//! simulated hosts every rank is its process's one rank, on GPU 0.

use std::ops::Range;

use crate::error::BenchError;
use crate::world::World;

/// This process's ranks and GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// This process's rank in the launch (0 without one).
    pub process: usize,
    /// The processes of the launch (1 without one).
    pub processes: usize,
    /// Threads per process (`-t`).
    pub threads: usize,
    /// GPUs per thread (`-g`).
    pub gpus_per_thread: usize,
    /// The GPU of this process's first rank; the others follow it.
    first_gpu: usize,
    /// Every rank on GPU 0 (nccl-launch's simulated hosts).
    simulated_hosts: bool,
}

/// `a × b`, or a usage error naming `what` when it does not fit NCCL's
/// `int` rank count.
fn product(a: usize, b: usize, what: &str) -> Result<usize, BenchError> {
    a.checked_mul(b)
        .filter(|&n| i32::try_from(n).is_ok())
        .ok_or_else(|| {
            BenchError::Usage(format!(
                "{what} would be {a} x {b}, more ranks than NCCL counts (at most {})",
                i32::MAX
            ))
        })
}

impl Layout {
    /// The layout of `world`'s process with `threads` threads of `gpus`
    /// GPUs each (`None`: 1 in a launch, else every visible GPU over the
    /// threads), on a host where `visible` GPUs are visible.
    ///
    /// # Errors
    /// [`BenchError::Usage`] when the process's GPUs are not all visible,
    /// when simulated hosts are given more than one GPU per process, or
    /// when the ranks would outnumber NCCL's `int`.
    pub fn new(
        world: &World,
        threads: u32,
        gpus: Option<u32>,
        visible: usize,
    ) -> Result<Self, BenchError> {
        let threads = threads.max(1) as usize;
        let gpus_per_thread = match gpus {
            Some(gpus) => gpus.max(1) as usize,
            None if world.launched => 1,
            None if threads > visible => {
                return Err(BenchError::Usage(format!(
                    "-t {threads} needs a GPU per thread, but only {visible} are visible"
                )));
            }
            None => visible / threads,
        };
        let per_process = product(threads, gpus_per_thread, "-t x -g")?;
        let layout = Self {
            process: world.rank,
            processes: world.size.max(1),
            threads,
            gpus_per_thread,
            first_gpu: world.local_rank.saturating_mul(per_process),
            simulated_hosts: world.simulated_hosts,
        };
        product(
            layout.processes,
            per_process,
            "the world size (processes x -t x -g)",
        )?;
        if layout.simulated_hosts {
            if per_process != 1 {
                return Err(BenchError::Usage(format!(
                    "under simulated hosts (NCCL_LAUNCH_SIMULATED_HOSTS=1) every rank shares GPU 0, \
                     one rank per process: -t and -g must be 1 (given -t {threads} -g {gpus_per_thread})"
                )));
            }
            return Ok(layout);
        }
        let needed = layout.first_gpu.saturating_add(per_process);
        if needed > visible {
            let given =
                format!("-t {threads} -g {gpus_per_thread} ({per_process} GPU(s) per process)");
            return Err(BenchError::Usage(if world.launched {
                format!(
                    "process {} is local rank {} of its host: with {given} it needs GPUs {}..{needed}, \
                     but only {visible} are visible (start at most {} process(es) per host, or lower -t or -g)",
                    world.rank,
                    world.local_rank,
                    layout.first_gpu,
                    visible / per_process
                )
            } else {
                format!(
                    "{given} asks for {per_process} GPU(s) but only {visible} are visible (one rank per GPU; \
                     NCCL refuses two ranks on one GPU)"
                )
            }));
        }
        Ok(layout)
    }

    /// One process alone driving `gpus` GPUs from one thread's worth of
    /// ranks, as `nccl-perf -g N` without a launch.
    #[cfg(test)]
    pub fn single_process(gpus: usize) -> Self {
        Self {
            process: 0,
            processes: 1,
            threads: 1,
            gpus_per_thread: gpus,
            first_gpu: 0,
            simulated_hosts: false,
        }
    }

    /// The ranks (and GPUs) of this process: `threads × gpus_per_thread`.
    pub fn per_process(&self) -> usize {
        self.threads * self.gpus_per_thread
    }

    /// The ranks of the run, over every process.
    pub fn world(&self) -> usize {
        self.processes * self.per_process()
    }

    /// This process's ranks.
    pub fn ranks(&self) -> Range<usize> {
        let first = self.process * self.per_process();
        first..first + self.per_process()
    }

    /// The GPU of this process's `index`-th rank.
    pub fn gpu(&self, index: usize) -> usize {
        if self.simulated_hosts {
            0
        } else {
            self.first_gpu + index
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nccl_group::InProcessStore;

    use super::*;

    /// Process `rank` of `size`, local rank `local`, simulated hosts or not.
    fn world(rank: usize, size: usize, local: usize, simulated_hosts: bool) -> World {
        let mut world = World::in_store(rank, size, Arc::new(InProcessStore::new()), "in-process");
        world.local_rank = local;
        world.simulated_hosts = simulated_hosts;
        world
    }

    fn alone() -> World {
        let mut world = world(0, 1, 0, false);
        world.launched = false;
        world
    }

    #[test]
    fn ranks_and_gpus_follow_nccl_tests() {
        // Process 3 of 4, local rank 1 of a host of 8 GPUs, -t 2 -g 2:
        // ranks 12..16 of 16 on GPUs 4..8.
        let layout = Layout::new(&world(3, 4, 1, false), 2, Some(2), 8).unwrap();
        assert_eq!((layout.per_process(), layout.world()), (4, 16));
        assert_eq!(layout.ranks(), 12..16);
        assert_eq!(
            (0..4).map(|i| layout.gpu(i)).collect::<Vec<_>>(),
            [4, 5, 6, 7]
        );
        // One GPU per process by default in a launch, as nccl-tests.
        let layout = Layout::new(&world(1, 2, 1, false), 1, None, 8).unwrap();
        assert_eq!(
            (layout.ranks(), layout.gpu(0), layout.world()),
            (1..2, 1, 2)
        );
        // Simulated hosts: every rank its process's one rank, on GPU 0.
        let layout = Layout::new(&world(3, 4, 0, true), 1, None, 1).unwrap();
        assert_eq!(
            (layout.ranks(), layout.gpu(0), layout.world()),
            (3..4, 0, 4)
        );
    }

    #[test]
    fn alone_it_takes_every_visible_gpu_by_default() {
        let layout = Layout::new(&alone(), 1, None, 8).unwrap();
        assert_eq!(
            (layout.threads, layout.gpus_per_thread, layout.world()),
            (1, 8, 8)
        );
        assert_eq!(layout.ranks(), 0..8);
        assert_eq!(layout.gpu(7), 7);
        let layout = Layout::new(&alone(), 3, None, 8).unwrap();
        assert_eq!(
            (layout.threads, layout.gpus_per_thread, layout.world()),
            (3, 2, 6)
        );
        let layout = Layout::new(&alone(), 1, Some(2), 8).unwrap();
        assert_eq!(layout.world(), 2);
        assert_eq!(
            Layout::new(&alone(), 1, Some(2), 8).unwrap(),
            Layout::single_process(2)
        );
    }

    #[test]
    fn what_cannot_run_is_a_usage_error() {
        let message = |result: Result<Layout, BenchError>| {
            let error = result.unwrap_err();
            assert_eq!(error.exit_code(), 2, "{error}");
            error.to_string()
        };
        let text = message(Layout::new(&alone(), 1, Some(9), 8));
        assert!(
            text.starts_with("-t 1 -g 9 (9 GPU(s) per process) asks for 9 GPU(s) but only 8"),
            "{text}"
        );
        let text = message(Layout::new(&alone(), 4, None, 2));
        assert_eq!(text, "-t 4 needs a GPU per thread, but only 2 are visible");
        // Local rank 2 with 2 GPUs per process needs GPUs 4..6 of 4.
        let text = message(Layout::new(&world(2, 4, 2, false), 1, Some(2), 4));
        assert!(text.contains("process 2 is local rank 2"), "{text}");
        assert!(
            text.contains("needs GPUs 4..6, but only 4 are visible"),
            "{text}"
        );
        assert!(text.contains("at most 2 process(es) per host"), "{text}");
        let text = message(Layout::new(&world(0, 2, 0, true), 1, Some(2), 1));
        assert!(text.contains("NCCL_LAUNCH_SIMULATED_HOSTS=1"), "{text}");
        assert!(text.contains("(given -t 1 -g 2)"), "{text}");
        let text = message(Layout::new(&world(0, 2, 0, true), 2, None, 1));
        assert!(text.contains("(given -t 2 -g 1)"), "{text}");
        let text = message(Layout::new(
            &world(0, 1 << 20, 0, true),
            1,
            Some(1 << 12),
            1,
        ));
        assert!(text.contains("more ranks than NCCL counts"), "{text}");
    }
}
