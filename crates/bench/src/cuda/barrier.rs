//! The timing barrier: every stream of every local GPU waits, on the device, until the host has
//! queued the whole step on all of them, so no schedule's window holds host-side enqueueing.
//!
//! **Why.** Without it a GPU's start event fires as soon as the GPU reaches it, while the host is
//! still queueing the other GPUs' work: in the single-process multi-GPU overlap schedule the later
//! GPUs' windows held the host's launch latency for every GPU before them, and `compute_only`'s
//! (queued GPU by GPU, start right before the matmul) did not — exposed communication came out too
//! high, the more so the more GPUs.
//!
//! **How.** One host word ([`ffi::BarrierWord`]: page-locked, mapped into every context) holds a
//! generation counter. A gated step takes the next generation `g`, queues `cuStreamWaitValue32(word
//! ≥ g)` first on both streams of every GPU (see `step.rs`), then the line-up, the start events and
//! the schedule, and only then stores `g` in the word ([`hold_while`]); the GPUs, polling the word,
//! all start within microseconds. The word is allocated once per run, not per step. Stream memory
//! operations (the `_v2` API) are on by default on every platform the CUDA 12.8+ driver that
//! commgate needs runs on, and no device attribute describes them
//! (`CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` is about the legacy API, off by default, so it
//! is not asked); [`Barrier::open`] asks whether each GPU maps host memory and tries a wait that is
//! already satisfied, and without either the windows stay ungated, with a note.
//!
//! **Why not CUDA graphs.** Capturing each schedule as a graph also removes launch gaps, but NCCL
//! inside stream capture has conditions of its own (every rank of every process must capture and
//! replay the same collectives, with NCCL's graph support and its buffer registration rules), a
//! captured NCCL kernel is not what nccl-tests or the user's training step run, and one process
//! driving several GPUs still launches one graph per GPU from the host, one after another. The
//! barrier leaves the eager path untouched and covers one and many processes alike.
//!
//! **Deadlock guard.** A CUDA, cuBLAS or NCCL call that waited for the GPU while the barrier is held
//! would wait forever (lazy module loading and first-use allocations can): [`Barrier::open`]'s
//! caller primes every schedule once ungated, so every kernel is loaded and every buffer made, and
//! [`hold_while`] opens the barrier from a watchdog thread if queueing one step takes longer than
//! [`HOLD_LIMIT`], and the step then fails with that reason.

use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr};
use cudarc::driver::{CudaContext, DriverError};

use super::ffi;
use super::wait::{self, Waited};

/// Turns the barrier off (`off`) or leaves it to the machine (`on`, the default): the escape hatch
/// should a platform misbehave behind it, and how to measure what the barrier changes.
pub const BARRIER_VARIABLE: &str = commgate_core::environment::CUDA_GATE.name;

/// Whether to try the barrier, from `COMMGATE_CUDA_GATE` and `CUDA_LAUNCH_BLOCKING` (`None`: unset;
/// empty counts as unset): `Ok(None)` try it, `Ok(Some(why))` leave it off, `Err` the variable's
/// value is not understood (one line saying what to set).
pub(super) fn wanted(barrier: Option<&str>, launch_blocking: Option<&str>) -> Result<Option<String>, String> {
    match barrier.map(str::trim) {
        None | Some("" | "on") => {}
        Some("off") => return Ok(Some(format!("{BARRIER_VARIABLE}=off"))),
        Some(other) => {
            return Err(format!("{BARRIER_VARIABLE}={other:?} is not understood: set it to on or off, or unset it"))
        }
    }
    // Every launch then waits for the GPU, which waits for the barrier: it would never open.
    match launch_blocking.map(str::trim) {
        None | Some("" | "0") => Ok(None),
        Some(_) => Ok(Some("CUDA_LAUNCH_BLOCKING makes each launch wait for the GPU".to_string())),
    }
}

/// Longest time queueing one step may hold the GPUs at the barrier (it takes well under a
/// millisecond; only a call that waits for the GPU takes longer).
pub(super) const HOLD_LIMIT: Duration = Duration::from_secs(10);

/// Whether the timing windows open at the barrier, for the result and the run's notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimingBarrier {
    /// Every stream waits for the host's release: windows hold device work only.
    Held,
    /// No barrier, and why: each window opens when the host queues it (what ungated timing does).
    Off(String),
}

impl TimingBarrier {
    /// A short stable word: `gated` or `ungated`.
    pub fn as_str(&self) -> &'static str {
        match self {
            TimingBarrier::Held => "gated",
            TimingBarrier::Off(_) => "ungated",
        }
    }

    /// The one-line note for stderr when the windows are not gated.
    pub fn note(&self) -> Option<String> {
        match self {
            TimingBarrier::Held => None,
            TimingBarrier::Off(why) => Some(format!(
                "the CUDA timing windows are not gated ({why}): each holds the host's launch latency too, more \
                 so with more GPUs per process; compare this run only with other ungated runs"
            )),
        }
    }
}

/// The barrier word and where each GPU sees it, or why there is none.
pub(super) struct Barrier {
    word: Option<Rc<ffi::BarrierWord>>,
    status: TimingBarrier,
    /// The generation last released (the word's value).
    generation: u32,
}

impl Barrier {
    /// Sets up the barrier for `contexts` (one per local GPU) and tries it on each, returning each
    /// context's address of the word in order. Anything missing, or a trial wait that does not
    /// pass within [`TRIAL_LIMIT`], leaves the barrier off, with the reason; it never fails the run.
    pub(super) fn open(contexts: &[&Arc<CudaContext>]) -> (Barrier, Vec<CUdeviceptr>) {
        match try_open(contexts) {
            Ok((word, addresses)) => {
                (Barrier { word: Some(Rc::new(word)), status: TimingBarrier::Held, generation: 0 }, addresses)
            }
            Err(why) => (Barrier::off(why), Vec::new()),
        }
    }

    pub(super) fn off(why: String) -> Barrier {
        Barrier { word: None, status: TimingBarrier::Off(why), generation: 0 }
    }

    pub(super) fn status(&self) -> &TimingBarrier {
        &self.status
    }

    /// The word and the generation the next step waits for, when the barrier is held.
    pub(super) fn next(&mut self) -> Option<(Rc<ffi::BarrierWord>, u32)> {
        let word = self.word.clone()?;
        self.generation = self.generation.wrapping_add(1);
        Some((word, self.generation))
    }

    /// Opens the barrier for every step queued so far (before a teardown synchronises).
    pub(super) fn release_all(&self) {
        if let Some(word) = &self.word {
            word.word().store(self.generation, Ordering::SeqCst);
        }
    }

    /// Hands the word over so it can be leaked with GPUs that may still read it.
    pub(super) fn take_word(&mut self) -> Option<Rc<ffi::BarrierWord>> {
        self.word.take()
    }
}

fn try_open(contexts: &[&Arc<CudaContext>]) -> Result<(ffi::BarrierWord, Vec<CUdeviceptr>), String> {
    let Some(first) = contexts.first() else { return Err("no GPU".to_string()) };
    if !super::discovery::barrier_symbol_present() {
        return Err(format!("the driver lacks {}", super::discovery::BARRIER_SYMBOL));
    }
    for ctx in contexts {
        let maps = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
        if maps.map_err(|e| format!("asking whether GPU {} maps host memory: {e}", ctx.ordinal()))? == 0 {
            return Err(format!("GPU {} cannot map host memory", ctx.ordinal()));
        }
    }
    let word = ffi::BarrierWord::new(first).map_err(|e| format!("allocating the barrier's host word: {e}"))?;
    let addresses = contexts
        .iter()
        .map(|ctx| word.device_address(ctx))
        .collect::<Result<Vec<_>, DriverError>>()
        .map_err(|e| format!("mapping the barrier's host word: {e}"))?;
    // The word is 0, so these waits are satisfied at once: they only ask whether the driver takes
    // them (it answers CUDA_ERROR_NOT_SUPPORTED where stream memory operations are off) and
    // whether the GPU sees the word. Each runs on a stream of its own, watched against
    // TRIAL_LIMIT: a wait the GPU never satisfies leaves that stream (never used again) stuck, not
    // the run's.
    for (ctx, &address) in contexts.iter().zip(&addresses) {
        try_wait(ctx, address)?;
    }
    Ok((word, addresses))
}

/// How long the trial wait may take before the barrier is left off: it is satisfied as soon as the
/// GPU reads the word.
pub(super) const TRIAL_LIMIT: Duration = Duration::from_secs(1);

/// One already-satisfied wait on a new stream of `ctx`, watched against [`TRIAL_LIMIT`].
fn try_wait(ctx: &Arc<CudaContext>, address: CUdeviceptr) -> Result<(), String> {
    let ordinal = ctx.ordinal();
    let failed = |e: DriverError| format!("cuStreamWaitValue32 on host memory failed on GPU {ordinal}: {e}");
    let stream = ctx.new_stream().map_err(failed)?;
    ffi::wait_at_barrier(&stream, address, 0).map_err(failed)?;
    let passed = stream.record_event(None).map_err(failed)?;
    match wait::poll_until(TRIAL_LIMIT, wait::POLL_PAUSE, || passed.try_is_complete()) {
        Waited::Done => Ok(()),
        Waited::Failed(e) => Err(failed(e)),
        Waited::TimedOut => {
            // Still waiting on the device: dropping the stream or the event would wait for it.
            std::mem::forget(passed);
            std::mem::forget(stream);
            Err(format!(
                "GPU {ordinal} did not pass a satisfied cuStreamWaitValue32 on host memory within {} s",
                TRIAL_LIMIT.as_secs()
            ))
        }
    }
}

/// What happened while the barrier was held.
#[derive(Debug, PartialEq)]
pub(super) struct Held<R> {
    /// What `enqueue` returned.
    pub out: R,
    /// The watchdog had to open the barrier: queueing took longer than the limit.
    pub tripped: bool,
}

/// Runs `enqueue` with the barrier at `generation` held, then releases it by storing `generation` in
/// `word`; a watchdog thread stores it first if `enqueue` takes longer than `limit`. The barrier is
/// released even if `enqueue` panics. `Err` only when the watchdog cannot start (then `enqueue`
/// has not run).
pub(super) fn hold_while<R>(
    word: &AtomicU32,
    generation: u32,
    limit: Duration,
    enqueue: impl FnOnce() -> R,
) -> std::io::Result<Held<R>> {
    /// Releases the barrier when dropped: after `enqueue`, or while unwinding from it.
    struct Release<'a>(&'a AtomicU32, u32);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.store(self.1, Ordering::SeqCst);
        }
    }
    std::thread::scope(|scope| {
        let (done, finished) = mpsc::channel::<()>();
        let watchdog = std::thread::Builder::new().name("commgate-barrier".to_string()).spawn_scoped(
            scope,
            move || match finished.recv_timeout(limit) {
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    word.store(generation, Ordering::SeqCst);
                    true
                }
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => false,
            },
        )?;
        let release = Release(word, generation);
        let out = enqueue();
        drop(release);
        drop(done);
        let tripped = watchdog.join().unwrap_or(true);
        Ok(Held { out, tripped })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_step_is_released_by_the_host_not_the_watchdog() {
        let word = AtomicU32::new(4);
        let held = hold_while(&word, 5, Duration::from_secs(3600), || {
            // Still held while queueing.
            word.load(Ordering::SeqCst)
        });
        assert_eq!(held.ok(), Some(Held { out: 4, tripped: false }));
        assert_eq!(word.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_step_stuck_on_the_barrier_is_freed_by_the_watchdog() {
        let word = AtomicU32::new(0);
        // Stands for a call that waits for the GPU: it returns only once the barrier opens, which
        // nothing but the watchdog does.
        let held = hold_while(&word, 1, Duration::from_millis(1), || {
            while word.load(Ordering::SeqCst) != 1 {
                std::thread::yield_now();
            }
            "unblocked"
        });
        assert_eq!(held.ok(), Some(Held { out: "unblocked", tripped: true }));
    }

    #[test]
    fn a_panic_while_queueing_still_opens_the_barrier() {
        let word = AtomicU32::new(7);
        let outcome = std::panic::catch_unwind(|| {
            let _ = hold_while(&word, 8, Duration::from_secs(3600), || panic!("boom"));
        });
        assert!(outcome.is_err());
        assert_eq!(word.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn the_barrier_is_tried_unless_turned_off_or_launches_block() {
        assert_eq!(wanted(None, None), Ok(None));
        assert_eq!(wanted(Some("on"), Some("0")), Ok(None));
        assert_eq!(wanted(Some(" off "), None), Ok(Some("COMMGATE_CUDA_GATE=off".to_string())));
        let blocking = wanted(None, Some("1"));
        assert!(matches!(&blocking, Ok(Some(why)) if why.contains("CUDA_LAUNCH_BLOCKING")), "{blocking:?}");
        let Err(message) = wanted(Some("maybe"), None) else { panic!("accepted") };
        assert_eq!(message, "COMMGATE_CUDA_GATE=\"maybe\" is not understood: set it to on or off, or unset it");
        assert_eq!(wanted(Some(""), Some("")), Ok(None), "empty counts as unset");
    }

    #[test]
    fn an_ungated_run_holds_nothing() {
        let mut barrier = Barrier::off("test".to_string());
        assert!(barrier.next().is_none());
        assert_eq!(barrier.status(), &TimingBarrier::Off("test".to_string()));
        assert!(barrier.take_word().is_none());
        barrier.release_all();
    }

    #[test]
    fn only_an_ungated_run_has_a_note() {
        assert_eq!(TimingBarrier::Held.note(), None);
        assert_eq!(TimingBarrier::Held.as_str(), "gated");
        let off = TimingBarrier::Off("GPU 0 cannot map host memory".to_string());
        assert_eq!(off.as_str(), "ungated");
        let Some(note) = off.note() else { panic!("no note") };
        assert!(note.contains("GPU 0 cannot map host memory") && !note.contains('\n'), "{note}");
    }
}
