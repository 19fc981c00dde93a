//! The one-process CPU all-reduce: every rank's payload in shared memory, cut into one chunk
//! per rank with a mutex each, reduced by a ring (reduce-scatter, then all-gather) whose steps
//! are separated by an abortable barrier, so a rank that dies releases its peers instead of
//! leaving them waiting.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::lock;

/// The payload's value at `index` on `rank` before each run: small multiples of 1/8, so sums
/// over a few ranks are exact in f32.
pub(super) fn initial_value(rank: usize, index: usize) -> f32 {
    (index % 61) as f32 * 0.125 + rank as f32
}

/// A barrier that can be aborted. std's `Barrier` is the same mutex and condition variable, but a
/// rank that dies would leave its peers waiting in it forever; this one releases them with
/// [`Aborted`], permanently.
///
/// A waiter first polls the generation for up to [`SPIN`], as NCCL's kernels and proxy threads
/// poll their peers' flags, and only then sleeps on the condition variable. Sleeping at once made
/// the CPU backend's times follow the operating system instead of the ring: on a virtual machine
/// whose idle vCPU halts, waking a sleeper on it takes 0.1–1 ms, as long as the all-reduce itself,
/// and a run's comm-only median jumped between 0.16 and 1.0 ms from one run to the next.
pub(super) struct StepBarrier {
    parties: usize,
    state: Mutex<BarrierState>,
    turn: Condvar,
    /// `state.generation` (and `u64::MAX` once aborted), readable without the lock by the
    /// polling waiters; written under it.
    released: AtomicU64,
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    aborted: bool,
}

#[derive(Debug, PartialEq)]
pub(super) struct Aborted;

/// How long a waiter polls before it sleeps: longer than a ring step's copy of a chunk on an
/// unloaded core, short enough that a waiter whose peer was preempted gives its core back soon.
const SPIN: Duration = Duration::from_micros(200);

/// How long the line-up before a timed run polls: longer than waking a sleeping thread takes
/// (outside the timed region, so only CPU time is spent).
pub(super) const LINE_UP_SPIN: Duration = Duration::from_millis(5);

/// The value of [`StepBarrier::released`] once the barrier is aborted.
const ABORTED: u64 = u64::MAX;

impl StepBarrier {
    pub(super) fn new(parties: usize) -> StepBarrier {
        StepBarrier {
            parties,
            state: Mutex::new(BarrierState { arrived: 0, generation: 0, aborted: false }),
            turn: Condvar::new(),
            released: AtomicU64::new(0),
        }
    }

    /// Waits for every party, polling for up to [`SPIN`] before sleeping.
    pub(super) fn wait(&self) -> Result<(), Aborted> {
        self.wait_polling(SPIN)
    }

    /// Waits for every party, polling for up to `budget` before sleeping: the line-up before a
    /// timed run polls for longer ([`LINE_UP_SPIN`]), so that no rank starts its clock while a
    /// peer is still being woken.
    pub(super) fn wait_polling(&self, budget: Duration) -> Result<(), Aborted> {
        let mut state = lock(&self.state);
        if state.aborted {
            return Err(Aborted);
        }
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.released.store(state.generation, Ordering::Release);
            self.turn.notify_all();
            return Ok(());
        }
        drop(state);
        if let Some(released) = poll(budget, || {
            let now = self.released.load(Ordering::Acquire);
            (now != generation).then_some(now)
        }) {
            return if released == ABORTED { Err(Aborted) } else { Ok(()) };
        }
        let mut state = lock(&self.state);
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
        let mut state = lock(&self.state);
        state.aborted = true;
        self.released.store(ABORTED, Ordering::Release);
        drop(state);
        self.turn.notify_all();
    }
}

/// Calls `ready` until it answers or `budget` has passed (read from the clock every few dozen
/// calls); `None` when the budget ran out.
pub(super) fn poll<T>(budget: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if let Some(answer) = ready() {
                return Some(answer);
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= budget {
            return ready();
        }
    }
}

/// The elements of one of NCCL's loops for a ring all-reduce with buffer size `buffsize` (bytes):
/// NCCL's Simple protocol moves a chunk of `NCCL_STEPS / 2` steps of `buffsize / NCCL_STEPS` bytes
/// each, half the buffer (`ALLREDUCE_CHUNKSTEPS`, `src/include/collectives.h`), and a loop covers
/// one chunk per rank (`loopSize = nChannels · nranks · chunkSize`, one channel here). The
/// payload's bytes are counted at the plan's dtype (`dtype_bytes`), as NCCL counts them. `None`:
/// the whole payload in one loop.
pub(super) fn loop_elements(world: usize, dtype_bytes: u64, buffsize: Option<u64>) -> usize {
    let Some(buffsize) = buffsize else { return usize::MAX };
    let chunk_elements = (buffsize / 2 / dtype_bytes.max(1)).max(1);
    usize::try_from(chunk_elements).unwrap_or(usize::MAX).saturating_mul(world.max(1))
}

/// The ranks' payloads in shared memory, cut into loops of at most `piece` elements (NCCL's,
/// [`loop_elements`]) and each loop into `world` chunks (the first `n % world` chunks of a loop
/// one element longer), one mutex per chunk.
pub(super) struct Ring {
    world: usize,
    /// Each chunk's elements, loop by loop: chunk `c` of loop `l` is `bounds[l · world + c]`.
    bounds: Vec<Range<usize>>,
    /// `chunks[rank][l · world + c]`.
    chunks: Vec<Vec<Mutex<Vec<f32>>>>,
    pub(super) barrier: StepBarrier,
}

impl Ring {
    pub(super) fn new(world: usize, elements: usize, piece: usize) -> Ring {
        let world = world.max(1);
        let piece = piece.max(world);
        let mut bounds = Vec::new();
        let mut start = 0;
        loop {
            let this = (elements - start).min(piece);
            let (base, extra) = (this / world, this % world);
            for chunk in 0..world {
                let len = base + usize::from(chunk < extra);
                bounds.push(start..start + len);
                start += len;
            }
            if start >= elements {
                break;
            }
        }
        let chunks =
            (0..world).map(|_| bounds.iter().map(|range| Mutex::new(vec![0.0; range.len()])).collect()).collect();
        Ring { world, bounds, chunks, barrier: StepBarrier::new(world) }
    }

    /// How many of NCCL's loops one all-reduce takes.
    pub(super) fn loops(&self) -> usize {
        self.bounds.len() / self.world
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
    /// from its left neighbour r−1. Loop by loop, reduce-scatter step s: r adds the neighbour's
    /// chunk r−1−s into its own, after which r holds the full sum of chunk r+1; all-gather step s:
    /// r copies the neighbour's (complete) chunk r−s. In a step, rank r writes its chunk c and
    /// reads the neighbour's chunk c while rank r+1 reads r's chunk c+1, so the locks never
    /// contend; the barrier orders the steps, and the loops, as NCCL's steps wait for their
    /// slots. No barrier after the last step: a rank is done when its own buffer is, as with
    /// NCCL, and nothing writes the buffers until every rank has reported.
    pub(super) fn all_reduce(&self, rank: usize) -> Result<(), Aborted> {
        let world = self.world;
        if world == 1 {
            return Ok(());
        }
        let left = (rank + world - 1) % world;
        for base in (0..self.loops()).map(|l| l * world) {
            for step in 0..world - 1 {
                if step > 0 || base > 0 {
                    self.barrier.wait()?;
                }
                let chunk = base + (rank + 2 * world - 1 - step) % world;
                let source = lock(self.chunk(left, chunk)?);
                let mut target = lock(self.chunk(rank, chunk)?);
                for (t, s) in target.iter_mut().zip(source.iter()) {
                    *t += *s;
                }
            }
            for step in 0..world - 1 {
                self.barrier.wait()?;
                let chunk = base + (rank + world - step) % world;
                let source = lock(self.chunk(left, chunk)?);
                lock(self.chunk(rank, chunk)?).copy_from_slice(&source);
            }
        }
        Ok(())
    }

    /// `rank`'s copy of chunk `chunk` (of all the loops' chunks). A rank or chunk outside the
    /// ring would have no part in it, and is released as after an abort.
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
    use super::*;

    #[test]
    fn polling_answers_when_ready_and_gives_up_after_its_budget() {
        let mut calls = 0;
        assert_eq!(
            poll(Duration::from_secs(60), || {
                calls += 1;
                (calls == 100).then_some(calls)
            }),
            Some(100)
        );
        assert_eq!(poll(Duration::from_micros(50), || None::<()>), None);
    }

    #[test]
    fn a_waiter_that_polled_past_its_budget_still_wakes_on_the_condition_variable() {
        let barrier = StepBarrier::new(2);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| barrier.wait_polling(Duration::ZERO));
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(barrier.wait(), Ok(()));
            assert_eq!(waiter.join().unwrap(), Ok(()));
        });
        // A polling waiter sees an abort too.
        let barrier = StepBarrier::new(2);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| barrier.wait_polling(Duration::from_secs(60)));
            std::thread::sleep(Duration::from_millis(20));
            barrier.abort();
            assert_eq!(waiter.join().unwrap(), Err(Aborted));
        });
    }

    fn ring_all_reduce(world: usize, elements: usize) -> Vec<Vec<f32>> {
        ring_all_reduce_in(world, elements, usize::MAX)
    }

    fn ring_all_reduce_in(world: usize, elements: usize, piece: usize) -> Vec<Vec<f32>> {
        let ring = Ring::new(world, elements, piece);
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
    fn nccl_loops_cut_the_payload_and_still_sum() {
        // NCCL's default 4 MiB buffer: 2 MiB chunks, so 2 ranks of bf16 move 2 Mi elements a loop.
        assert_eq!(loop_elements(2, 2, Some(4 << 20)), 2 << 20);
        assert_eq!(loop_elements(8, 4, Some(65_536)), 8 * 8_192);
        assert_eq!(loop_elements(2, 2, None), usize::MAX);
        assert_eq!(Ring::new(2, 1 << 20, loop_elements(2, 2, Some(4 << 20))).loops(), 1);
        assert_eq!(Ring::new(2, 1 << 20, loop_elements(2, 2, Some(65_536))).loops(), 32);
        assert_eq!(Ring::new(3, 10, 4).loops(), 3, "10 elements in loops of 4, 4 and 2");
        for (world, elements, piece) in [(2, 7, 2), (3, 10, 4), (4, 10, 8), (3, 1000, 64), (2, 1, 2), (4, 3, 4)] {
            let expected: Vec<f32> = (0..elements).map(|i| (0..world).map(|r| initial_value(r, i)).sum()).collect();
            for (rank, got) in ring_all_reduce_in(world, elements, piece).into_iter().enumerate() {
                assert_eq!(got, expected, "world {world}, {elements} elements in loops of {piece}, rank {rank}");
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
