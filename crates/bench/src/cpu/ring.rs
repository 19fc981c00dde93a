//! The one-process CPU all-reduce: every rank's payload in shared memory, cut into one chunk
//! per rank with a mutex each, reduced by a ring (reduce-scatter, then all-gather) whose steps
//! are separated by an abortable barrier, so a rank that dies releases its peers instead of
//! leaving them waiting.

use std::ops::Range;
use std::sync::{Condvar, Mutex, PoisonError};

use super::lock;

/// The payload's value at `index` on `rank` before each run: small multiples of 1/8, so sums
/// over a few ranks are exact in f32.
pub(super) fn initial_value(rank: usize, index: usize) -> f32 {
    (index % 61) as f32 * 0.125 + rank as f32
}

/// A barrier that can be aborted. std's `Barrier` is the same mutex and condition variable, but a
/// rank that dies would leave its peers waiting in it forever; this one releases them with
/// [`Aborted`], permanently.
pub(super) struct StepBarrier {
    parties: usize,
    state: Mutex<BarrierState>,
    turn: Condvar,
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    aborted: bool,
}

#[derive(Debug, PartialEq)]
pub(super) struct Aborted;

impl StepBarrier {
    pub(super) fn new(parties: usize) -> StepBarrier {
        StepBarrier {
            parties,
            state: Mutex::new(BarrierState { arrived: 0, generation: 0, aborted: false }),
            turn: Condvar::new(),
        }
    }

    pub(super) fn wait(&self) -> Result<(), Aborted> {
        let mut state = lock(&self.state);
        if state.aborted {
            return Err(Aborted);
        }
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.turn.notify_all();
            return Ok(());
        }
        while state.generation == generation && !state.aborted {
            state = self.turn.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        if state.generation == generation {
            Err(Aborted)
        } else {
            Ok(())
        }
    }

    pub(super) fn abort(&self) {
        lock(&self.state).aborted = true;
        self.turn.notify_all();
    }
}

/// The ranks' payloads in shared memory, each cut into `world` chunks (the first `n % world`
/// chunks one element longer), one mutex per chunk.
pub(super) struct Ring {
    world: usize,
    bounds: Vec<Range<usize>>,
    /// `chunks[rank][chunk]`.
    chunks: Vec<Vec<Mutex<Vec<f32>>>>,
    pub(super) barrier: StepBarrier,
}

impl Ring {
    pub(super) fn new(world: usize, elements: usize) -> Ring {
        let (base, extra) = (elements / world, elements % world);
        let mut bounds = Vec::with_capacity(world);
        let mut start = 0;
        for chunk in 0..world {
            let len = base + usize::from(chunk < extra);
            bounds.push(start..start + len);
            start += len;
        }
        let chunks =
            (0..world).map(|_| bounds.iter().map(|range| Mutex::new(vec![0.0; range.len()])).collect()).collect();
        Ring { world, bounds, chunks, barrier: StepBarrier::new(world) }
    }

    /// Sets `rank`'s payload to `value(index)`.
    pub(super) fn fill(&self, rank: usize, value: impl Fn(usize) -> f32) {
        for (chunk, range) in self.chunks.get(rank).into_iter().flatten().zip(&self.bounds) {
            for (x, index) in lock(chunk).iter_mut().zip(range.clone()) {
                *x = value(index);
            }
        }
    }

    /// Rank `rank`'s part of the ring all-reduce; every rank calls it at once. Rank r receives
    /// from its left neighbour r−1. Reduce-scatter step s: r adds the neighbour's chunk r−1−s into
    /// its own, after which r holds the full sum of chunk r+1; all-gather step s: r copies the
    /// neighbour's (complete) chunk r−s. In a step, rank r writes its chunk c and reads the
    /// neighbour's chunk c while rank r+1 reads r's chunk c+1, so the locks never contend; the
    /// barrier orders the steps. No barrier after the last step: a rank is done when its own
    /// buffer is, as with NCCL, and nothing writes the buffers until every rank has reported.
    pub(super) fn all_reduce(&self, rank: usize) -> Result<(), Aborted> {
        let world = self.world;
        if world == 1 {
            return Ok(());
        }
        let left = (rank + world - 1) % world;
        for step in 0..world - 1 {
            if step > 0 {
                self.barrier.wait()?;
            }
            let chunk = (rank + 2 * world - 1 - step) % world;
            let source = lock(self.chunk(left, chunk)?);
            let mut target = lock(self.chunk(rank, chunk)?);
            for (t, s) in target.iter_mut().zip(source.iter()) {
                *t += *s;
            }
        }
        for step in 0..world - 1 {
            self.barrier.wait()?;
            let chunk = (rank + world - step) % world;
            let source = lock(self.chunk(left, chunk)?);
            lock(self.chunk(rank, chunk)?).copy_from_slice(&source);
        }
        Ok(())
    }

    /// `rank`'s copy of chunk `chunk`. Both are below `world` (taken modulo it); a rank outside
    /// the ring would have no part in it, and is released as after an abort.
    fn chunk(&self, rank: usize, chunk: usize) -> Result<&Mutex<Vec<f32>>, Aborted> {
        self.chunks.get(rank).and_then(|chunks| chunks.get(chunk)).ok_or(Aborted)
    }

    #[cfg(test)]
    fn contents(&self, rank: usize) -> Vec<f32> {
        self.chunks[rank].iter().flat_map(|chunk| lock(chunk).clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ring_all_reduce(world: usize, elements: usize) -> Vec<Vec<f32>> {
        let ring = Ring::new(world, elements);
        std::thread::scope(|scope| {
            for rank in 0..world {
                let ring = &ring;
                scope.spawn(move || {
                    ring.fill(rank, |i| initial_value(rank, i));
                    // As `Comm::prepare`: nobody reads a neighbour before it has filled.
                    ring.barrier.wait().unwrap();
                    ring.all_reduce(rank).unwrap();
                });
            }
        });
        (0..world).map(|rank| ring.contents(rank)).collect()
    }

    #[test]
    fn the_ring_all_reduce_sums_on_every_rank() {
        for (world, elements) in [(1, 5), (2, 7), (3, 10), (4, 10), (4, 3), (3, 1000), (2, 0)] {
            let expected: Vec<f32> = (0..elements).map(|i| (0..world).map(|r| initial_value(r, i)).sum()).collect();
            for (rank, got) in ring_all_reduce(world, elements).into_iter().enumerate() {
                assert_eq!(got, expected, "world {world}, {elements} elements, rank {rank}");
            }
        }
    }

    #[test]
    fn a_barrier_abort_releases_its_waiters() {
        let barrier = StepBarrier::new(3);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| barrier.wait());
            std::thread::sleep(Duration::from_millis(20));
            barrier.abort();
            assert_eq!(waiter.join().unwrap(), Err(Aborted));
        });
        assert_eq!(barrier.wait(), Err(Aborted));
    }
}
