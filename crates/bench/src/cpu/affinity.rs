//! Where the CPU backend's threads run: each rank's thread bound to a CPU of its own, as
//! launchers bind ranks (`torchrun`, `mpirun --bind-to core`), and each rank's compute thread to
//! the next CPU after every rank's, both round robin over the CPUs this process may use.
//!
//! Left to the scheduler, two ranks that wake each other at every ring step were stacked on one
//! CPU whenever every CPU was busy (the waker's CPU is where a wakee goes when none is idle), and
//! stayed there for the run: on a 2-core machine with a busy loop per core, most runs of a paired
//! check measured the comm-only step at 0.43–0.50 ms instead of 0.13 ms, a state of the
//! scheduler, not of the ring.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The CPUs this process may run on, ascending (empty when the kernel does not say).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Cpus(Vec<usize>);

impl Cpus {
    /// This process's CPUs, from `sched_getaffinity(2)`.
    pub(super) fn allowed() -> Cpus {
        match sched_getaffinity(None) {
            Ok(set) => Cpus((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()),
            Err(_) => Cpus::default(),
        }
    }

    #[cfg(test)]
    pub(super) fn of(cpus: &[usize]) -> Cpus {
        Cpus(cpus.to_vec())
    }

    /// The CPU of rank `rank`'s thread.
    pub(super) fn of_rank(&self, rank: u32) -> Option<usize> {
        self.slot(u64::from(rank))
    }

    /// The CPU of rank `rank`'s compute thread (the overlap's matmul): after every rank's.
    pub(super) fn of_compute(&self, rank: u32, world: u32) -> Option<usize> {
        self.slot(u64::from(world) + u64::from(rank))
    }

    fn slot(&self, slot: u64) -> Option<usize> {
        let n = u64::try_from(self.0.len()).ok().filter(|&n| n > 0)?;
        self.0.get(usize::try_from(slot % n).ok()?).copied()
    }
}

/// Binds the calling thread to `cpu`; `false` where the kernel refuses (a CPU taken away since,
/// a sandbox without the call): the thread then runs where the scheduler puts it.
pub(super) fn bind_this_thread(cpu: Option<usize>) -> bool {
    let Some(cpu) = cpu.filter(|&c| c < CpuSet::MAX_CPU) else { return false };
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_then_compute_threads_round_robin_over_the_allowed_cpus() {
        let two = Cpus::of(&[4, 5]);
        assert_eq!((two.of_rank(0), two.of_rank(1)), (Some(4), Some(5)));
        assert_eq!((two.of_compute(0, 2), two.of_compute(1, 2)), (Some(4), Some(5)));
        let eight = Cpus::of(&[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!((eight.of_rank(1), eight.of_compute(1, 2)), (Some(1), Some(3)));
        // More ranks than CPUs: round robin.
        assert_eq!(two.of_rank(3), Some(5));
        assert_eq!(Cpus::default().of_rank(0), None);
    }

    #[test]
    fn a_bound_thread_runs_on_its_cpu_only() {
        let cpus = Cpus::allowed();
        let Some(cpu) = cpus.of_rank(0) else { return };
        let seen = std::thread::spawn(move || {
            let bound = bind_this_thread(Some(cpu));
            (bound, Cpus::allowed())
        })
        .join()
        .expect("thread");
        assert_eq!(seen, (true, Cpus::of(&[cpu])));
        // The caller's own set is untouched.
        assert_eq!(Cpus::allowed(), cpus);
        assert!(!bind_this_thread(None));
    }
}
