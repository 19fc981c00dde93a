//! The CPU backend: the benchmark's mechanism with real, noisy timings and no GPU
//! (`evidence_level: cpu_mechanism`). Each rank runs a real ring all-reduce and a blocked f32
//! matmul; the overlap schedule runs the matmul on a second thread per rank, started at the
//! instant the all-reduce starts. It shows whether the pipeline and the overlap arithmetic work on
//! a machine, not what a GPU stack does.
//!
//! Two modes:
//! - one process ([`CpuBackend::open`] without a rendezvous): `plan.world_size` ranks as threads,
//!   spawned once and parked between repeats. The all-reduce is a ring (reduce-scatter, then
//!   all-gather, `world_size − 1` steps each) over per-rank buffers in shared memory, one mutex
//!   per chunk (uncontended: in any step no two ranks touch the same chunk), with a barrier
//!   between steps;
//! - one rank per process (a launcher and a [`Rendezvous`]): the all-reduce is
//!   [`Rendezvous::all_reduce_sum_f32`] over TCP, the rest as above with one local rank.
//!
//! Every element is stored as f32 whatever `plan.dtype` says (std has no 16-bit floats); the
//! caller still reports `payload_elements × dtype size` bytes, so the CPU figures describe the
//! mechanism rather than the dtype's bandwidth. Every buffer is allocated in [`CpuBackend::open`];
//! inside the timed region there are only arithmetic, uncontended locks, barrier waits and channel
//! signals. Before each timed run the payload is refilled with the same small values (outside the
//! timing), so repeated sums never grow towards overflow.
//!
//! A rank thread that panics or exits is reported as `rank_died` with its rank, never propagated
//! as a panic; the barrier is abortable so its peers return instead of waiting forever, and the
//! backend refuses further runs with the same error.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use super::launch::{Launch, Rendezvous};
use super::{Backend, BenchError, HardwareInfo, Plan};
use crate::result::{EvidenceLevel, Schedule};

/// Tile edge of the blocked matmul: three 64×64 f32 tiles are 48 KiB, about an L1 plus a bit of
/// L2 on current cores.
const TILE: usize = 64;

/// The CPU backend. Not `Send` (the trait does not ask for it); its threads live until it drops.
pub struct CpuBackend {
    workers: Vec<Worker>,
    /// The shared ring of the one-process mode, kept to abort its barrier on failure and drop.
    ring: Option<Arc<Ring>>,
    host_cpu: String,
    /// The first failure; every later run returns it.
    failed: Option<BenchError>,
    /// Tests only: the rank that panics in the next run.
    #[cfg(test)]
    inject_panic: Option<u32>,
}

/// The handle on one rank thread.
struct Worker {
    rank: u32,
    commands: SyncSender<Command>,
    results: Receiver<Result<f64, RankFailure>>,
    handle: JoinHandle<()>,
}

struct Command {
    schedule: Schedule,
    /// Tests only: this rank panics inside the timed region.
    #[cfg(test)]
    panic: bool,
}

/// Why a rank thread did not return a time.
enum RankFailure {
    Panicked(String),
    /// Another rank failed and aborted the barrier this rank was waiting on.
    Aborted,
    Error(BenchError),
}

impl CpuBackend {
    /// Spawns the rank threads (and one compute thread per rank) and allocates every buffer.
    /// Without `rendezvous`: all `plan.world_size` ranks in this process. With one: this process
    /// is rank `rendezvous.rank()` of a launched job, and `launch`, when given, must agree with
    /// it. A launch without a rendezvous is refused: the caller owns the rendezvous, since it also
    /// gathers the timings.
    pub fn open(
        plan: &Plan,
        launch: Option<&Launch>,
        rendezvous: Option<Rendezvous>,
    ) -> Result<CpuBackend, BenchError> {
        let world_size = plan.world_size;
        if world_size == 0 {
            return Err(BenchError::Unavailable("the plan has 0 ranks: pass --world-size 1 or more".to_string()));
        }
        match (launch, &rendezvous) {
            (Some(launch), None) => {
                return Err(BenchError::Unavailable(format!(
                    "the CPU backend got a launch (rank {} of {}) but no rendezvous: connect one first",
                    launch.rank, launch.world_size
                )));
            }
            (Some(launch), Some(rdzv)) if launch.rank != rdzv.rank() || launch.world_size != rdzv.world_size() => {
                return Err(BenchError::Unavailable(format!(
                    "the launch says rank {} of {}, the rendezvous rank {} of {}",
                    launch.rank,
                    launch.world_size,
                    rdzv.rank(),
                    rdzv.world_size()
                )));
            }
            (_, Some(rdzv)) if rdzv.world_size() != world_size => {
                return Err(BenchError::Unavailable(format!(
                    "the launcher started {} ranks but the plan has --world-size {world_size}: drop --world-size \
                     or make it match",
                    rdzv.world_size()
                )));
            }
            _ => {}
        }
        let too_big = || {
            BenchError::Unavailable(format!(
                "--payload-elements {} and --compute-dim {} do not fit in this machine's address space",
                plan.payload_elements, plan.compute_dim
            ))
        };
        let elements = usize::try_from(plan.payload_elements).map_err(|_| too_big())?;
        let dim = usize::try_from(plan.compute_dim).map_err(|_| too_big())?;
        let local_ranks: Vec<u32> = match &rendezvous {
            Some(rdzv) => vec![rdzv.rank()],
            None => (0..world_size).collect(),
        };
        check_memory(plan, local_ranks.len() as u64, rendezvous.is_some())?;

        enum Mode {
            Ring(Arc<Ring>),
            Tcp(Rendezvous),
        }
        let mode = match rendezvous {
            Some(rdzv) => Mode::Tcp(rdzv),
            None => Mode::Ring(Arc::new(Ring::new(world_size as usize, elements))),
        };
        let mut backend = CpuBackend {
            workers: Vec::with_capacity(local_ranks.len()),
            ring: match &mode {
                Mode::Ring(ring) => Some(Arc::clone(ring)),
                Mode::Tcp(_) => None,
            },
            host_cpu: host_cpu(),
            failed: None,
            #[cfg(test)]
            inject_panic: None,
        };
        // On an error below, dropping `backend` stops the threads already started.
        for &rank in &local_ranks {
            let comm = match &mode {
                Mode::Ring(ring) => Comm::Ring { ring: Arc::clone(ring), rank: rank as usize },
                Mode::Tcp(rdzv) => Comm::Tcp { rendezvous: rdzv.clone(), buffer: vec![0.0; elements], rank },
            };
            let matmul = Arc::new(Mutex::new(Matmul::new(dim, plan.seed.wrapping_add(u64::from(rank)))));
            let compute = ComputeThread::spawn(rank, Arc::clone(&matmul))?;
            let (commands, command_rx) = sync_channel(1);
            let (result_tx, results) = sync_channel(1);
            let state = RankState { comm, matmul, compute };
            let handle = std::thread::Builder::new()
                .name(format!("commgate-cpu-rank-{rank}"))
                .spawn(move || rank_main(state, command_rx, result_tx))
                .map_err(|e| BenchError::Unavailable(format!("could not start the thread of CPU rank {rank}: {e}")))?;
            backend.workers.push(Worker { rank, commands, results, handle });
        }
        Ok(backend)
    }

    fn abort_ring(&self) {
        if let Some(ring) = &self.ring {
            ring.barrier.abort();
        }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn evidence_level(&self) -> EvidenceLevel {
        EvidenceLevel::CpuMechanism
    }

    fn hardware(&self) -> HardwareInfo {
        HardwareInfo { gpu_count: 0, host_cpu: Some(self.host_cpu.clone()), ..HardwareInfo::default() }
    }

    fn local_ranks(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.rank).collect()
    }

    /// Sends `schedule` to every rank thread and waits for all of them: their times in rank
    /// order, or the most telling failure.
    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        #[cfg(test)]
        let panic_rank = self.inject_panic.take();
        let mut sent = Vec::with_capacity(self.workers.len());
        for worker in &self.workers {
            let command = Command {
                schedule,
                #[cfg(test)]
                panic: panic_rank == Some(worker.rank),
            };
            let ok = worker.commands.send(command).is_ok();
            if !ok {
                // Its peers would wait for it at the first barrier.
                self.abort_ring();
            }
            sent.push(ok);
        }
        let mut times = Vec::with_capacity(self.workers.len());
        // The most telling failure: a dead rank over another error over an abort it caused.
        let mut failure: Option<(u8, BenchError)> = None;
        for (worker, sent) in self.workers.iter().zip(sent) {
            let outcome = if sent {
                worker.results.recv().unwrap_or_else(|_| Err(RankFailure::Panicked("its thread exited".to_string())))
            } else {
                Err(RankFailure::Panicked("its thread had exited before the run".to_string()))
            };
            let (priority, error) = match outcome {
                Ok(ms) => {
                    times.push(ms);
                    continue;
                }
                Err(RankFailure::Panicked(why)) => (
                    0,
                    BenchError::failed("rank_died", format!("CPU rank {} died: {why}", worker.rank), Some(worker.rank)),
                ),
                Err(RankFailure::Error(error)) => (1, error),
                Err(RankFailure::Aborted) => (
                    2,
                    BenchError::failed(
                        "rank_died",
                        format!("CPU rank {} stopped because another rank failed", worker.rank),
                        Some(worker.rank),
                    ),
                ),
            };
            if priority < 2 {
                self.abort_ring();
            }
            if failure.as_ref().is_none_or(|(p, _)| priority < *p) {
                failure = Some((priority, error));
            }
        }
        match failure {
            None => Ok(times),
            Some((_, error)) => {
                self.abort_ring();
                self.failed = Some(error.clone());
                Err(error)
            }
        }
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        // Closing the command channels ends every rank thread's loop; each ends its compute thread.
        self.abort_ring();
        let handles: Vec<JoinHandle<()>> = self.workers.drain(..).map(|w| w.handle).collect();
        for handle in handles {
            // A thread that panicked outside its guard has nothing left to say.
            let _ = handle.join();
        }
    }
}

/// Refuses a plan whose buffers exceed the memory the kernel says is available (when it says).
fn check_memory(plan: &Plan, local_ranks: u64, tcp: bool) -> Result<(), BenchError> {
    let payload = plan.payload_elements.saturating_mul(4);
    // In-process: every rank's payload; over TCP: one payload plus two frame buffers.
    let comm = if tcp { payload.saturating_mul(3) } else { payload.saturating_mul(local_ranks) };
    let matrices = plan.compute_dim.saturating_mul(plan.compute_dim).saturating_mul(12).saturating_mul(local_ranks);
    let need = comm.saturating_add(matrices);
    let Some(available) = mem_available() else { return Ok(()) };
    if need > available {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        return Err(BenchError::Unavailable(format!(
            "the CPU backend needs {:.1} GiB for {local_ranks} rank(s) (--payload-elements {}, --compute-dim {}) \
             but {:.1} GiB is available: lower them or --world-size",
            gib(need),
            plan.payload_elements,
            plan.compute_dim,
            gib(available)
        )));
    }
    Ok(())
}

/// `MemAvailable` from /proc/meminfo, in bytes; `None` where there is no such file.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The first "model name" in /proc/cpuinfo, or "unknown".
fn host_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Locks a mutex whose data (plain floats) stays valid even if a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The payload's value at `index` on `rank` before each run: small multiples of 1/8, so sums
/// over a few ranks are exact in f32.
fn initial_value(rank: usize, index: usize) -> f32 {
    (index % 61) as f32 * 0.125 + rank as f32
}

/// A barrier that can be aborted. std's `Barrier` is the same mutex and condition variable, but a
/// rank that dies would leave its peers waiting in it forever; this one releases them with
/// [`Aborted`], permanently.
struct StepBarrier {
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
struct Aborted;

impl StepBarrier {
    fn new(parties: usize) -> StepBarrier {
        StepBarrier {
            parties,
            state: Mutex::new(BarrierState { arrived: 0, generation: 0, aborted: false }),
            turn: Condvar::new(),
        }
    }

    fn wait(&self) -> Result<(), Aborted> {
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

    fn abort(&self) {
        lock(&self.state).aborted = true;
        self.turn.notify_all();
    }
}

/// The ranks' payloads in shared memory, each cut into `world` chunks (the first `n % world`
/// chunks one element longer), one mutex per chunk.
struct Ring {
    world: usize,
    bounds: Vec<Range<usize>>,
    /// `chunks[rank][chunk]`.
    chunks: Vec<Vec<Mutex<Vec<f32>>>>,
    barrier: StepBarrier,
}

impl Ring {
    fn new(world: usize, elements: usize) -> Ring {
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
    fn fill(&self, rank: usize, value: impl Fn(usize) -> f32) {
        for (chunk, range) in self.chunks[rank].iter().zip(&self.bounds) {
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
    fn all_reduce(&self, rank: usize) -> Result<(), Aborted> {
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
            let source = lock(&self.chunks[left][chunk]);
            let mut target = lock(&self.chunks[rank][chunk]);
            for (t, s) in target.iter_mut().zip(source.iter()) {
                *t += *s;
            }
        }
        for step in 0..world - 1 {
            self.barrier.wait()?;
            let chunk = (rank + world - step) % world;
            let source = lock(&self.chunks[left][chunk]);
            lock(&self.chunks[rank][chunk]).copy_from_slice(&source);
        }
        Ok(())
    }

    #[cfg(test)]
    fn contents(&self, rank: usize) -> Vec<f32> {
        self.chunks[rank].iter().flat_map(|chunk| lock(chunk).clone()).collect()
    }
}

/// C = A·B, all `dim`×`dim`, row-major, A and B fixed at open.
struct Matmul {
    dim: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Matmul {
    fn new(dim: usize, seed: u64) -> Matmul {
        // xorshift64*: values in [-1, 1), far from subnormals, different per rank.
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let bits = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
            bits as f32 / (1u64 << 23) as f32 - 1.0
        };
        let a = (0..dim * dim).map(|_| next()).collect();
        let b = (0..dim * dim).map(|_| next()).collect();
        Matmul { dim, a, b, c: vec![0.0; dim * dim] }
    }

    fn run(&mut self) {
        matmul_blocked(&self.a, &self.b, &mut self.c, self.dim);
    }
}

/// C = A·B for `n`×`n` row-major matrices, in `TILE`×`TILE` blocks so each block of B is reused
/// from cache; the innermost loop runs along contiguous rows of B and C, which the compiler
/// vectorises.
fn matmul_blocked(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    c.fill(0.0);
    for i0 in (0..n).step_by(TILE) {
        let i1 = (i0 + TILE).min(n);
        for k0 in (0..n).step_by(TILE) {
            let k1 = (k0 + TILE).min(n);
            for j0 in (0..n).step_by(TILE) {
                let j1 = (j0 + TILE).min(n);
                for i in i0..i1 {
                    let c_row = &mut c[i * n + j0..i * n + j1];
                    for k in k0..k1 {
                        let a_ik = a[i * n + k];
                        for (c_ij, b_kj) in c_row.iter_mut().zip(&b[k * n + j0..k * n + j1]) {
                            *c_ij += a_ik * b_kj;
                        }
                    }
                }
            }
        }
    }
}

/// A rank's second thread, for the overlap schedule: runs one matmul per `go`, answers on `done`.
struct ComputeThread {
    go: SyncSender<()>,
    done: Receiver<Result<(), String>>,
    handle: JoinHandle<()>,
}

impl ComputeThread {
    fn spawn(rank: u32, matmul: Arc<Mutex<Matmul>>) -> Result<ComputeThread, BenchError> {
        let (go, go_rx) = sync_channel::<()>(1);
        let (done_tx, done) = sync_channel(1);
        let handle = std::thread::Builder::new()
            .name(format!("commgate-cpu-compute-{rank}"))
            .spawn(move || {
                while go_rx.recv().is_ok() {
                    let outcome = catch_unwind(AssertUnwindSafe(|| lock(&matmul).run())).map_err(panic_text);
                    if done_tx.send(outcome).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| {
                BenchError::Unavailable(format!("could not start the compute thread of CPU rank {rank}: {e}"))
            })?;
        Ok(ComputeThread { go, done, handle })
    }
}

enum Comm {
    Ring { ring: Arc<Ring>, rank: usize },
    Tcp { rendezvous: Rendezvous, buffer: Vec<f32>, rank: u32 },
}

impl Comm {
    /// Refills the payload and waits for every rank: the line-up before the timed region.
    fn prepare(&mut self) -> Result<(), RankFailure> {
        match self {
            Comm::Ring { ring, rank } => {
                ring.fill(*rank, |i| initial_value(*rank, i));
                ring.barrier.wait().map_err(|_| RankFailure::Aborted)
            }
            Comm::Tcp { rendezvous, buffer, rank } => {
                for (i, x) in buffer.iter_mut().enumerate() {
                    *x = initial_value(*rank as usize, i);
                }
                rendezvous.barrier().map_err(RankFailure::Error)
            }
        }
    }

    fn all_reduce(&mut self) -> Result<(), RankFailure> {
        match self {
            Comm::Ring { ring, rank } => ring.all_reduce(*rank).map_err(|_| RankFailure::Aborted),
            Comm::Tcp { rendezvous, buffer, .. } => rendezvous.all_reduce_sum_f32(buffer).map_err(RankFailure::Error),
        }
    }
}

/// What a rank thread owns.
struct RankState {
    comm: Comm,
    matmul: Arc<Mutex<Matmul>>,
    compute: ComputeThread,
}

impl RankState {
    /// One timed run of `schedule`: the elapsed milliseconds on this rank.
    fn run(&mut self, command: &Command) -> Result<f64, RankFailure> {
        self.comm.prepare()?;
        let start = Instant::now();
        #[cfg(test)]
        if command.panic {
            panic!("injected by a test");
        }
        match command.schedule {
            Schedule::CommOnly => self.comm.all_reduce()?,
            Schedule::ComputeOnly => lock(&self.matmul).run(),
            Schedule::Serial => {
                self.comm.all_reduce()?;
                lock(&self.matmul).run();
            }
            Schedule::Overlap => {
                let started = self.compute.go.send(());
                // Wait for the matmul even when the all-reduce fails, so the compute thread is idle
                // again before this rank reports.
                let comm = self.comm.all_reduce();
                let computed = match started {
                    Ok(()) => self.compute.done.recv().unwrap_or_else(|_| Err("its thread exited".to_string())),
                    Err(_) => Err("its thread had exited".to_string()),
                };
                comm?;
                computed.map_err(|why| RankFailure::Panicked(format!("the compute thread failed: {why}")))?;
            }
        }
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Aborts the ring's barrier when the rank thread ends, however it ends, so no peer waits for it.
struct ReleasePeers(Option<Arc<Ring>>);

impl Drop for ReleasePeers {
    fn drop(&mut self) {
        if let Some(ring) = &self.0 {
            ring.barrier.abort();
        }
    }
}

fn rank_main(mut state: RankState, commands: Receiver<Command>, results: SyncSender<Result<f64, RankFailure>>) {
    let _release = ReleasePeers(match &state.comm {
        Comm::Ring { ring, .. } => Some(Arc::clone(ring)),
        Comm::Tcp { .. } => None,
    });
    while let Ok(command) = commands.recv() {
        let outcome = match catch_unwind(AssertUnwindSafe(|| state.run(&command))) {
            Ok(outcome) => outcome,
            Err(payload) => {
                if let Comm::Ring { ring, .. } = &state.comm {
                    ring.barrier.abort();
                }
                Err(RankFailure::Panicked(format!("it panicked: {}", panic_text(payload))))
            }
        };
        if results.send(outcome).is_err() {
            break;
        }
    }
    let RankState { compute, .. } = state;
    drop(compute.go);
    let _ = compute.handle.join();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::Dtype;

    fn plan(world_size: u32) -> Plan {
        Plan {
            world_size,
            dtype: Dtype::Bfloat16,
            payload_elements: 64 * 1024,
            compute_dim: 64,
            warmup: 1,
            repeats: 3,
            seed: 7,
        }
    }

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
    fn the_blocked_matmul_equals_the_naive_one() {
        for n in [1, 7, 64, 70] {
            let m = Matmul::new(n, 3);
            let mut c = vec![f32::NAN; n * n];
            matmul_blocked(&m.a, &m.b, &mut c, n);
            for i in 0..n {
                for j in 0..n {
                    let naive: f32 = (0..n).map(|k| m.a[i * n + k] * m.b[k * n + j]).sum();
                    assert!((c[i * n + j] - naive).abs() <= 1e-4 * (1.0 + naive.abs()), "n {n}, ({i}, {j})");
                }
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

    #[test]
    fn every_schedule_returns_one_positive_time_per_rank() {
        for world in [1, 3] {
            let mut backend = CpuBackend::open(&plan(world), None, None).unwrap();
            assert_eq!(backend.local_ranks(), (0..world).collect::<Vec<_>>());
            for _ in 0..2 {
                for schedule in Schedule::ALL {
                    let times = backend.run(schedule).unwrap();
                    assert_eq!(times.len(), world as usize, "{schedule:?}");
                    assert!(times.iter().all(|t| t.is_finite() && *t > 0.0), "{schedule:?}: {times:?}");
                }
            }
        }
    }

    #[test]
    fn the_backend_describes_itself() {
        let backend = CpuBackend::open(&plan(2), None, None).unwrap();
        assert_eq!(backend.name(), "cpu");
        assert_eq!(backend.evidence_level(), EvidenceLevel::CpuMechanism);
        let hardware = backend.hardware();
        assert_eq!(hardware.gpu_count, 0);
        assert!(hardware.host_cpu.is_some_and(|cpu| !cpu.is_empty()));
        assert_eq!((hardware.gpu_name, hardware.driver, hardware.cuda, hardware.nccl), (None, None, None, None));
    }

    fn median(mut xs: Vec<f64>) -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    }

    #[test]
    fn overlap_is_not_much_slower_than_serial() {
        // Not a speed-up assertion: tests share two cores. Only a broken overlap (the matmul run
        // twice, or after a stall) would be twice as slow.
        let mut backend = CpuBackend::open(&plan(2), None, None).unwrap();
        let mut step = |schedule| -> f64 {
            let _ = backend.run(schedule).unwrap();
            median((0..7).map(|_| backend.run(schedule).unwrap().into_iter().fold(0.0, f64::max)).collect())
        };
        let serial = step(Schedule::Serial);
        let overlap = step(Schedule::Overlap);
        assert!(overlap <= 2.0 * serial + 2.0, "overlap {overlap:.3} ms, serial {serial:.3} ms");
    }

    #[test]
    fn a_rank_that_panics_is_reported_not_propagated() {
        let mut backend = CpuBackend::open(&plan(3), None, None).unwrap();
        backend.run(Schedule::Serial).unwrap();
        backend.inject_panic = Some(1);
        let error = backend.run(Schedule::Serial).unwrap_err();
        let BenchError::Failed { kind, message, rank } = &error else { panic!("{error:?}") };
        assert_eq!((kind.as_str(), *rank), ("rank_died", Some(1)));
        assert!(message.contains("injected by a test"), "{message}");
        assert_eq!(backend.run(Schedule::CommOnly), Err(error));
        drop(backend); // joins the threads: must not hang
    }

    #[test]
    fn two_processes_over_tcp_run_every_schedule() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut listener = Some(listener);
        let ranks: Vec<_> = (0..2u32)
            .map(|rank| {
                let listener = if rank == 0 { listener.take() } else { None };
                std::thread::spawn(move || {
                    let launch = Launch {
                        rank,
                        world_size: 2,
                        local_rank: rank,
                        master_addr: "127.0.0.1".to_string(),
                        master_port: port,
                    };
                    let rdzv = Rendezvous::connect_with_listener(&launch, listener, Duration::from_secs(10))?;
                    let mut backend = CpuBackend::open(&plan(2), Some(&launch), Some(rdzv.clone()))?;
                    assert_eq!(backend.local_ranks(), vec![rank]);
                    let mut times = Vec::new();
                    for schedule in Schedule::ALL {
                        times.push(backend.run(schedule)?);
                    }
                    // The runner's use of the same rendezvous between runs.
                    let gathered = rdzv.gather(&rank.to_le_bytes())?;
                    Ok::<_, BenchError>((times, gathered.map(|g| g.len())))
                })
            })
            .collect();
        for (rank, handle) in ranks.into_iter().enumerate() {
            let (times, gathered) = handle.join().unwrap().unwrap();
            assert!(times.iter().all(|t| t.len() == 1 && t[0].is_finite() && t[0] > 0.0), "{times:?}");
            assert_eq!(gathered, (rank == 0).then_some(2));
        }
    }

    #[test]
    fn inconsistent_setups_are_refused() {
        let launch =
            Launch { rank: 0, world_size: 2, local_rank: 0, master_addr: "127.0.0.1".to_string(), master_port: 1 };
        let missing = CpuBackend::open(&plan(2), Some(&launch), None).err().unwrap();
        assert!(missing.to_string().contains("no rendezvous"), "{missing}");
        let zero = CpuBackend::open(&plan(0), None, None).err().unwrap();
        assert!(zero.to_string().contains("--world-size"), "{zero}");
    }

    /// Not a test: prints a small run per schedule. Run it in release:
    /// `cargo test --release --lib bench::cpu -- --ignored --nocapture`.
    #[test]
    #[ignore = "prints timings, asserts nothing"]
    fn prints_a_small_run() {
        let mut plan = plan(2);
        plan.payload_elements = 1 << 20;
        plan.compute_dim = 128;
        let mut backend = CpuBackend::open(&plan, None, None).unwrap();
        for schedule in Schedule::ALL {
            let _ = backend.run(schedule).unwrap();
            let samples: Vec<f64> =
                (0..5).map(|_| backend.run(schedule).unwrap().into_iter().fold(0.0, f64::max)).collect();
            println!("cpu {:<12} median {:.3} ms over {samples:.3?}", schedule.as_str(), median(samples.clone()));
        }
    }
}
