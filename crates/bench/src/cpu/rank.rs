//! One CPU rank: the thread that runs the schedules on command, its second thread for the
//! overlap schedule's matmul, and the messages between them and the backend. A rank thread that
//! panics reports it as a [`RankFailure`] and aborts the ring's barrier on its way out, so no
//! peer waits for it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::affinity::bind_this_thread;
use super::lock;
use super::matmul::Matmul;
use super::ring::{initial_value, Aborted, Ring, StepBarrier, LINE_UP_SPIN};
use crate::launch::Rendezvous;
use crate::BenchError;
use commgate_core::result::Schedule;

/// The handle on one rank thread.
pub(super) struct Worker {
    pub(super) rank: u32,
    pub(super) commands: SyncSender<Command>,
    pub(super) results: Receiver<Result<f64, RankFailure>>,
    pub(super) handle: JoinHandle<()>,
}

pub(super) struct Command {
    pub(super) schedule: Schedule,
    /// Tests only: this rank panics inside the timed region.
    #[cfg(test)]
    pub(super) panic: bool,
}

/// Why a rank thread did not return a time.
pub(super) enum RankFailure {
    Panicked(String),
    /// Another rank failed and aborted the barrier this rank was waiting on.
    Aborted,
    Error(BenchError),
}

impl Worker {
    /// Starts rank `rank`'s compute thread, then its rank thread, which owns `comm` and `matmul`
    /// until the backend closes its command channel; each binds itself to its CPU of `cpus`
    /// (the rank's, the compute thread's) where it has one.
    pub(super) fn spawn(
        rank: u32,
        comm: Comm,
        matmul: Matmul,
        cpus: (Option<usize>, Option<usize>),
    ) -> Result<Worker, BenchError> {
        let matmul = Arc::new(Mutex::new(matmul));
        let compute = ComputeThread::spawn(rank, Arc::clone(&matmul), cpus.1)?;
        let (commands, command_rx) = sync_channel(1);
        let (result_tx, results) = sync_channel(1);
        let state = RankState { comm, matmul, compute };
        let handle = std::thread::Builder::new()
            .name(format!("commgate-cpu-rank-{rank}"))
            .spawn(move || {
                bind_this_thread(cpus.0);
                rank_main(state, command_rx, result_tx)
            })
            .map_err(|e| BenchError::Unavailable(format!("could not start the thread of CPU rank {rank}: {e}")))?;
        Ok(Worker { rank, commands, results, handle })
    }
}

/// A rank's second thread, for the overlap schedule: armed by `go` before the rank lines up (so a
/// sleeping thread is woken outside the timed region), it polls at `start` until the rank's clock
/// starts, runs one matmul and answers on `done`.
struct ComputeThread {
    go: SyncSender<()>,
    /// The rank thread and its compute thread: the instant the overlap's matmul may start.
    start: Arc<StepBarrier>,
    done: Receiver<Result<(), String>>,
    handle: JoinHandle<()>,
}

impl ComputeThread {
    fn spawn(rank: u32, matmul: Arc<Mutex<Matmul>>, cpu: Option<usize>) -> Result<ComputeThread, BenchError> {
        let (go, go_rx) = sync_channel::<()>(1);
        let (done_tx, done) = sync_channel(1);
        let start = Arc::new(StepBarrier::new(2));
        let started = Arc::clone(&start);
        let handle = std::thread::Builder::new()
            .name(format!("commgate-cpu-compute-{rank}"))
            .spawn(move || {
                bind_this_thread(cpu);
                while go_rx.recv().is_ok() {
                    let outcome = match started.wait_polling(ARMED_SPIN) {
                        Ok(()) => catch_unwind(AssertUnwindSafe(|| lock(&matmul).run())).map_err(panic_text),
                        Err(Aborted) => Err("its rank stopped before the run started".to_string()),
                    };
                    if done_tx.send(outcome).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| {
                BenchError::Unavailable(format!("could not start the compute thread of CPU rank {rank}: {e}"))
            })?;
        Ok(ComputeThread { go, start, done, handle })
    }

    /// The matmul's outcome, once the compute thread has run it.
    fn finish(&self) -> Result<(), String> {
        self.done.recv().unwrap_or_else(|_| Err("its thread exited".to_string()))
    }
}

/// How long an armed compute thread polls for its rank's start before it sleeps: longer than a
/// rank's refill of its payload and line-up take on an unloaded core.
const ARMED_SPIN: Duration = Duration::from_millis(10);

/// How a rank all-reduces: through the shared ring (one process) or the rendezvous (one rank per
/// process).
pub(super) enum Comm {
    Ring {
        ring: Arc<Ring>,
        rank: usize,
    },
    /// `piece`: the elements of one of NCCL's loops ([`super::ring::loop_elements`]).
    Tcp {
        rendezvous: Rendezvous,
        buffer: Vec<f32>,
        rank: u32,
        piece: usize,
    },
}

impl Comm {
    /// Refills the payload and waits for every rank: the line-up before the timed region.
    fn prepare(&mut self) -> Result<(), RankFailure> {
        match self {
            Comm::Ring { ring, rank } => {
                ring.fill(*rank, |i| initial_value(*rank, i));
                ring.barrier.wait_polling(LINE_UP_SPIN).map_err(|_| RankFailure::Aborted)
            }
            Comm::Tcp { rendezvous, buffer, rank, .. } => {
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
            Comm::Tcp { rendezvous, buffer, piece, .. } => buffer
                .chunks_mut((*piece).max(1))
                .try_for_each(|part| rendezvous.all_reduce_sum_f32(part))
                .map_err(RankFailure::Error),
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
        let overlap = command.schedule == Schedule::Overlap;
        // The overlap's compute thread is woken before the line-up, outside the timed region.
        let armed = overlap && self.compute.go.send(()).is_ok();
        let lined_up = self.comm.prepare();
        let start = Instant::now();
        // Releases the armed compute thread (even when the line-up failed, so it is idle again
        // before this rank reports).
        let started = armed && self.compute.start.wait().is_ok();
        if let Err(failure) = lined_up {
            if started {
                let _ = self.compute.finish();
            }
            return Err(failure);
        }
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
                // Wait for the matmul even when the all-reduce fails, so the compute thread is idle
                // again before this rank reports.
                let comm = self.comm.all_reduce();
                let computed = match (armed, started) {
                    (true, true) => self.compute.finish(),
                    (true, false) => {
                        let _ = self.compute.finish();
                        Err("its thread stopped before the run started".to_string())
                    }
                    (false, _) => Err("its thread had exited".to_string()),
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
    compute.start.abort();
    let _ = compute.handle.join();
}
