//! Runs a benchmark end to end: resolve the backend, measure on a worker thread (so a hung
//! collective can be timed out), gather every rank's timings at rank 0, assemble and write the
//! result file, its decision made by the rule the caller hands in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::launch::{Launch, Rendezvous};
use super::settings::{BackendKind, BenchSettings};
use super::{assemble, cpu, cuda, mock, nccl, Backend, BenchError, HardwareInfo, Plan};
use commgate_core::result::Provenance;
use commgate_core::result::{EvidenceLevel, Failure, RunResult, Schedule};

/// How a benchmark ended.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchOutcome {
    /// Rank 0 wrote a finished run.
    Written { path: PathBuf, result: Box<RunResult> },
    /// The run failed; rank 0 wrote the failure (exit 2).
    Failed { path: PathBuf, result: Box<RunResult> },
    /// Another rank's part is done; rank 0 writes the file.
    Contributed { rank: u32 },
    /// `--dry-run`: the plan, nothing run.
    Planned(String),
}

/// What a run records from, or obeys in, the process environment. The top layer reads it once
/// ([`RunEnvironment::read`]), so that the run itself reads no variable.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnvironment {
    /// Nodes the job spans (1 without a launcher).
    pub nodes: u32,
    /// The `NCCL_*` variables, kept in the result.
    pub nccl_env: BTreeMap<String, String>,
    /// The commit, ref and runner measured (GitHub Actions' variables, else the host name).
    pub provenance: Provenance,
    /// The mock backend's test hook ([`mock::FAULT_VARIABLE`]).
    pub mock_fault: Option<mock::Fault>,
    /// Why the CUDA backend's timing barrier is off (`Ok(None)`: on), or why its variable is not
    /// understood ([`cuda::BARRIER_VARIABLE`], `CUDA_LAUNCH_BLOCKING`).
    pub cuda_barrier_off: Result<Option<String>, String>,
    /// The directory NCCL writes its tuning log to ([`nccl::TuningLog`]), when the command set
    /// it up: a CUDA run then reads NCCL's choice from it.
    pub tuning_log: Option<PathBuf>,
}

impl Default for RunEnvironment {
    fn default() -> Self {
        RunEnvironment::read(None, [], |_| None, None)
    }
}

impl RunEnvironment {
    /// `vars` are every variable (for the `NCCL_*` ones), `var_os` reads one, `host_name` is
    /// the machine's (for the provenance outside CI).
    pub fn read(
        launch: Option<&Launch>,
        vars: impl IntoIterator<Item = (String, String)>,
        var_os: impl Fn(&str) -> Option<std::ffi::OsString>,
        host_name: Option<String>,
    ) -> Self {
        let var = |k: &str| var_os(k).and_then(|v| v.into_string().ok());
        // A value that is not UTF-8 is read lossily, so that it reads as not understood.
        let lossy = |k: &str| var_os(k).map(|v| v.to_string_lossy().into_owned());
        RunEnvironment {
            cuda_barrier_off: cuda::barrier_off(lossy(cuda::BARRIER_VARIABLE), lossy("CUDA_LAUNCH_BLOCKING")),
            nodes: launch.map_or(1, |l| super::launch::node_count(l.world_size, var)),
            nccl_env: assemble::nccl_environment(vars),
            provenance: assemble::provenance(var, host_name, || {
                commgate_core::base_commit::head_commit(std::path::Path::new("."))
            }),
            mock_fault: mock::parse_fault(var(mock::FAULT_VARIABLE).as_deref()),
            tuning_log: None,
        }
    }
}

/// Runs the benchmark (or prints its plan); `judge` gives the result its own decision. `Err`
/// only for what the machine lacks ([`BenchError::Unavailable`]) or a result that cannot be
/// written.
pub fn run(
    settings: &BenchSettings,
    launch: Option<Launch>,
    env: &RunEnvironment,
    judge: assemble::Judge,
) -> Result<BenchOutcome, BenchError> {
    let plan = settings.plan.clone();
    if settings.run.dry_run {
        return Ok(BenchOutcome::Planned(describe_plan(&plan, settings.backend, launch.as_ref())));
    }
    if settings.backend == BackendKind::Cuda && launch.is_some() {
        // Before any socket exists: the fix, when the restart at the start could not load NCCL.
        cuda::nccl_loadable()?;
    }
    let is_rank_zero = launch.as_ref().is_none_or(|l| l.rank == 0);
    // Where NCCL's log stood before this run: the run reads only what it adds.
    let tuning_log = env.tuning_log.as_deref().filter(|_| settings.backend == BackendKind::Cuda && is_rank_zero);
    let log_mark = tuning_log.map(nccl::mark);
    let created_at = assemble::now_rfc3339();
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    {
        let (plan, settings, launch, progress) = (plan.clone(), settings.clone(), launch.clone(), progress.clone());
        let backend_env = BackendEnv {
            fault: env.mock_fault.clone(),
            barrier_off: env.cuda_barrier_off.clone(),
            buffsize: super::settings::buffsize(&env.nccl_env),
        };
        std::thread::Builder::new()
            .name("commgate-bench".to_string())
            .spawn(move || {
                let _ = tx.send(measure(&plan, &settings, launch.as_ref(), backend_env, &progress));
            })
            .map_err(|e| BenchError::failed("internal", format!("cannot start the benchmark thread: {e}"), None))?;
    }
    // Two u32s summed in u64, times four: cannot wrap.
    let total = (u64::from(plan.warmup) + u64::from(plan.repeats)) * Schedule::ALL.len() as u64;
    let bar = settings.run.progress.then(|| progress_bar(total));
    let measured = wait(&rx, &progress, settings.run.timeout, bar.as_ref());
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let (ctx_parts, outcome) = match measured {
        Err(BenchError::Unavailable(m)) => return Err(BenchError::Unavailable(m)),
        Err(BenchError::Failed { kind, message, rank }) => (None, Err(Failure { kind, message, rank })),
        Ok(m) => (Some((m.backend, m.evidence_level, m.hardware)), Ok(m.timings)),
    };
    if !is_rank_zero {
        return match outcome {
            Ok(_) => Ok(BenchOutcome::Contributed { rank: launch.map_or(0, |l| l.rank) }),
            Err(f) => Err(BenchError::Failed { kind: f.kind, message: f.message, rank: f.rank }),
        };
    }
    let (backend, evidence_level, hardware) = ctx_parts.unwrap_or_else(|| fallback_identity(settings.backend));
    let ctx = assemble::RunContext {
        environment_profile: settings.run.environment_profile.clone().unwrap_or_else(|| default_profile(backend)),
        plan,
        backend: backend.to_string(),
        evidence_level,
        hardware,
        nodes: env.nodes,
        // Pinned settings recorded on every backend; the log's own settings never.
        nccl_env: settings.run.nccl.recorded(env.nccl_env.clone(), env.tuning_log.is_some()),
        provenance: env.provenance.clone(),
        run_label: settings.run.run_label.clone(),
        created_at: created_at.clone(),
    };
    let path = match &settings.run.output {
        Some(p) => p.clone(),
        None => assemble::default_output(
            &settings.run.results_dir,
            &created_at,
            &settings.workload_id,
            &settings.run.run_label,
        ),
    };
    let (mut result, failed) = match outcome {
        Ok(timings) => (assemble::build(&ctx, timings.as_ref(), None, judge), false),
        Err(f) => (assemble::build(&ctx, None, Some(f), judge), true),
    };
    result.workload.id.clone_from(&settings.workload_id);
    // What NCCL ran: what was pinned, else what it logged (never a reason to fail the run).
    result.software.nccl_choice = settings.run.nccl.fixed_choice().or_else(|| {
        let (dir, mark) = tuning_log.zip(log_mark.as_ref())?;
        nccl::choice_since(dir, mark, settings.plan.payload_bytes_per_rank()).filter(|_| !failed)
    });
    write_result(&path, &result)?;
    let result = Box::new(result);
    Ok(if failed { BenchOutcome::Failed { path, result } } else { BenchOutcome::Written { path, result } })
}

/// What a finished measurement hands back to the main thread.
struct Measured {
    backend: &'static str,
    evidence_level: EvidenceLevel,
    hardware: HardwareInfo,
    /// The whole job's timings on rank 0 (or in one process); `None` on other ranks.
    timings: Option<assemble::Timings>,
}

/// Waits for the measurement, failing it when no repeat finishes for `timeout`.
/// Set when [`wait`] gave up on a benchmark thread that is still running.
static ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a benchmark thread was given up on while still running (a hang past `--timeout`):
/// the process must then end without running anything at exit (`main` calls
/// `bench::cuda::exit_without_destructors`), since CUDA's and NCCL's static destructors would run
/// while that thread may be inside the driver.
pub fn benchmark_thread_abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

fn wait(
    rx: &mpsc::Receiver<Result<Measured, BenchError>>,
    progress: &AtomicU64,
    timeout: Duration,
    bar: Option<&ProgressBar>,
) -> Result<Measured, BenchError> {
    let mut last = (progress.load(Ordering::Relaxed), Instant::now());
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => return r,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BenchError::failed("internal", "the benchmark thread stopped without a result", None))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let done = progress.load(Ordering::Relaxed);
                if let Some(bar) = bar {
                    bar.set_position(done);
                }
                if done != last.0 {
                    last = (done, Instant::now());
                } else if last.1.elapsed() >= timeout {
                    // The benchmark thread is left where it is (perhaps inside the driver).
                    ABANDONED.store(true, Ordering::SeqCst);
                    return Err(BenchError::failed(
                        "timeout",
                        format!(
                            "no repeat finished for {} s (a rank died or a collective hung); check every rank's log, \
                             or raise --timeout",
                            timeout.as_secs()
                        ),
                        None,
                    ));
                }
            }
        }
    }
}

/// On the benchmark thread: open the backend, run warm-up and repeats, gather the timings.
fn measure(
    plan: &Plan,
    settings: &BenchSettings,
    launch: Option<&Launch>,
    env: BackendEnv,
    progress: &AtomicU64,
) -> Result<Measured, BenchError> {
    let rendezvous = launch.map(|l| Rendezvous::connect(l, settings.run.timeout)).transpose()?;
    let mut backend = open_backend(plan, settings, launch, env, rendezvous.clone())?;
    let ranks = backend.local_ranks();
    let mut local: BTreeMap<Schedule, Vec<Vec<f64>>> =
        Schedule::ALL.iter().map(|&s| (s, vec![Vec::with_capacity(plan.repeats as usize); ranks.len()])).collect();
    // Schedules rotate each repeat, so a drift in the machine touches all of them alike: repeat i
    // starts at the i-th (modulo their number).
    let mut order = Schedule::ALL;
    // Counted in u64: warm-up plus repeats cannot wrap, whatever the plan says.
    for i in 0..u64::from(plan.warmup) + u64::from(plan.repeats) {
        for schedule in order {
            let times = backend.run(schedule)?;
            if times.len() != ranks.len() || times.iter().any(|t| !t.is_finite() || *t < 0.0) {
                return Err(BenchError::failed(
                    "internal",
                    format!("the {} backend returned invalid times {times:?}", backend.name()),
                    None,
                ));
            }
            if i >= u64::from(plan.warmup) {
                if let Some(per_rank) = local.get_mut(&schedule) {
                    for (slot, t) in per_rank.iter_mut().zip(&times) {
                        slot.push(*t);
                    }
                }
            }
            progress.fetch_add(1, Ordering::Relaxed);
        }
        order.rotate_left(1);
    }
    let (name, evidence_level, hardware) = (backend.name(), backend.evidence_level(), backend.hardware());
    let mut timings: assemble::Timings = BTreeMap::new();
    for (schedule, per_rank) in local {
        let entry = timings.entry(schedule).or_default();
        for (rank, times) in ranks.iter().zip(per_rank) {
            entry.insert(*rank, times);
        }
    }
    // Every rank gathers before any tears down: a rank that freed its buffers while a peer still
    // finished its last collective could have them touched (NCCL's condition within a node).
    let gathered = match &rendezvous {
        None => Ok(Some(timings)),
        Some(rv) => gather_timings(rv, timings),
    };
    if gathered.is_err() {
        // A peer is gone: end the shared state as for an error, not in step with it.
        backend.fail();
    }
    drop(backend);
    Ok(Measured { backend: name, evidence_level, hardware, timings: gathered? })
}

/// What the environment tells the backend that opens: the mock's fault, why the CUDA timing
/// barrier is off, and `NCCL_BUFFSIZE` for the CPU ring (from the run's NCCL environment, so
/// `[bench.env]` included).
struct BackendEnv {
    fault: Option<mock::Fault>,
    barrier_off: Result<Option<String>, String>,
    buffsize: Option<u64>,
}

fn open_backend(
    plan: &Plan,
    settings: &BenchSettings,
    launch: Option<&Launch>,
    env: BackendEnv,
    rendezvous: Option<Rendezvous>,
) -> Result<Box<dyn Backend>, BenchError> {
    let ranks = || launch.map_or_else(|| (0..plan.world_size).collect(), |l| vec![l.rank]);
    match settings.backend {
        BackendKind::Mock => Ok(Box::new(mock::MockBackend::new(plan, ranks(), env.fault))),
        BackendKind::Cpu => Ok(Box::new(cpu::CpuBackend::open_with(plan, launch, rendezvous, env.buffsize)?)),
        BackendKind::Cuda => Ok(Box::new(cuda::CudaBackend::open(plan, launch, rendezvous, env.barrier_off)?)),
    }
}

/// Sends every rank's timings to rank 0 as little-endian f64s, schedule by schedule.
fn gather_timings(rv: &Rendezvous, mine: assemble::Timings) -> Result<Option<assemble::Timings>, BenchError> {
    let mut bytes = Vec::new();
    for per_rank in mine.values() {
        for times in per_rank.values() {
            bytes.extend_from_slice(&(times.len() as u64).to_le_bytes());
            for t in times {
                bytes.extend_from_slice(&t.to_le_bytes());
            }
        }
    }
    let Some(all) = rv.gather(&bytes)? else { return Ok(None) };
    let mut timings: assemble::Timings = BTreeMap::new();
    for (rank, frame) in (0u32..).zip(&all) {
        let mut words = frame.chunks_exact(8).map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            b
        });
        for schedule in Schedule::ALL {
            let len = words.next().map(u64::from_le_bytes).ok_or_else(|| short_frame(rank))?;
            // More than this machine can hold is more than the frame holds.
            let len = usize::try_from(len).map_err(|_| short_frame(rank))?;
            let times: Vec<f64> = words.by_ref().take(len).map(f64::from_le_bytes).collect();
            if times.len() != len {
                return Err(short_frame(rank));
            }
            timings.entry(schedule).or_default().insert(rank, times);
        }
    }
    Ok(Some(timings))
}

fn short_frame(rank: u32) -> BenchError {
    BenchError::failed("rendezvous", "its timings arrived incomplete", Some(rank))
}

/// The identity of a run that failed before its backend said who it was.
fn fallback_identity(kind: BackendKind) -> (&'static str, EvidenceLevel, HardwareInfo) {
    let level = match kind {
        BackendKind::Mock => EvidenceLevel::Mock,
        BackendKind::Cpu => EvidenceLevel::CpuMechanism,
        BackendKind::Cuda => EvidenceLevel::GpuNccl,
    };
    (kind.as_str(), level, HardwareInfo::default())
}

/// The profile a run of `settings` is filed under: the setting, else the backend's default.
pub fn profile_of(settings: &BenchSettings) -> String {
    settings.run.environment_profile.clone().unwrap_or_else(|| default_profile(settings.backend.as_str()))
}

/// `PAR-CUDA-MECHANISM`, `PAR-CPU-MECHANISM`, `PAR-MOCK`: set `--environment-profile` to tell
/// fleets apart.
pub fn default_profile(backend: &str) -> String {
    match backend {
        "cuda" => "PAR-CUDA-MECHANISM",
        "cuda-emulated" => "PAR-CUDA-EMULATED",
        "cpu" => "PAR-CPU-MECHANISM",
        _ => "PAR-MOCK",
    }
    .to_string()
}

fn write_result(path: &Path, result: &RunResult) -> Result<(), BenchError> {
    let unwritable = |e: String| BenchError::Unavailable(format!("{}: cannot write the result: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| unwritable(e.to_string()))?;
    }
    let mut text = serde_json::to_string_pretty(result).map_err(|e| unwritable(e.to_string()))?;
    text.push('\n');
    commgate_core::output::write_atomic(path, text.as_bytes()).map_err(|e| unwritable(e.to_string()))
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} schedule runs ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("benchmarking");
    bar
}

/// A backend as a person reads it.
fn backend_words(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Cuda => "cuda (NCCL and cuBLAS on the GPUs)",
        BackendKind::Cpu => "cpu (real timings of the mechanism on this CPU, no GPU)",
        BackendKind::Mock => "mock (simulated, exact timings; no hardware measured)",
    }
}

/// The `--dry-run` text: sizes, bytes, expected FLOPs and the schedules, nothing run.
pub fn describe_plan(plan: &Plan, backend: BackendKind, launch: Option<&Launch>) -> String {
    let bytes = plan.payload_bytes_per_rank();
    let n = f64::from(plan.world_size.max(1));
    let launch_line = match launch {
        Some(l) => format!(
            "one process per rank: this is rank {} of {} (local rank {}), rendezvous at {}:{}",
            l.rank, l.world_size, l.local_rank, l.master_addr, l.master_port
        ),
        None => format!("one process driving {} rank(s)", plan.world_size),
    };
    format!(
        "commgate bench (dry run: nothing is run)\n\
         backend            {}\n\
         launch             {launch_line}\n\
         all-reduce         {} elements of {} = {} bytes per rank; bus traffic {:.0} bytes per rank (2(n−1)/n)\n\
         matmul             {d}×{d}×{d} in {} = {:.3e} FLOPs per step\n\
         schedules          comm_only, compute_only, serial (one stream), overlap (two streams, joined by events)\n\
         repeats            {} warm-up + {} timed, schedules rotated each repeat; sample = slowest rank\n",
        backend_words(backend),
        plan.payload_elements,
        plan.dtype.as_str(),
        bytes,
        bytes as f64 * 2.0 * (n - 1.0) / n,
        plan.dtype.as_str(),
        plan.matmul_flops(),
        plan.warmup,
        plan.repeats,
        d = plan.compute_dim,
    )
}
