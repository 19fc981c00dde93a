//! An nccl-tests run as a result of the result model (`docs/formats.md`, "nccl-tests output"):
//! one result per sweep, each (collective, dtype, redop, size, placement) a *point* whose
//! samples are the per-iteration times (`-I 1`), or the summary time alone without them. The
//! gate judges each point as a workload of its own ([`point_run`] projects one), all points of a
//! sweep in one Holm family.
//!
//! Why one result per sweep and not one per point: a sweep is one run of one program, stored as
//! one run of one baseline file (`baselines/<profile>/nccl-tests-all_reduce-8ranks.json`), so
//! `baseline update --from` adds it once and the store's history, eviction and ceiling read it
//! as the unit it is; 60 files per program would hide that.

use serde::{Deserialize, Serialize};

use super::nccl_tests::{Placement, Sweep};
use super::{
    EvidenceLevel, Hardware, Metrics, Provenance, Row, RunComparison, RunDecision, RunResult, Schedule, Software, Tool,
    Workload, SCHEMA_VERSION, STEP_MS_RANGE,
};

/// The backend a converted sweep names: nccl-tests measured it, not commgate.
pub const BACKEND: &str = "nccl-tests";

/// What an nccl-tests run measured (`sweep` in the result file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepData {
    /// The program that ran (`all_reduce_perf`).
    pub program: String,
    /// Whether the per-iteration times were written (`-I 1`); without them each point holds its
    /// summary time as its one sample.
    pub per_iteration: bool,
    /// The processes, in order: where each ran, to name one that is consistently last.
    #[serde(default)]
    pub processes: Vec<Process>,
    pub points: Vec<SweepPoint>,
}

/// One process of the run (a rank of nccl-tests' device report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub host: String,
    pub device: u64,
}

/// What identifies a point across runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PointKey {
    pub collective: String,
    pub dtype: String,
    pub redop: String,
    /// Bytes, as nccl-tests' `size` column counts them.
    pub size: u64,
    /// `out_of_place` or `in_place`.
    pub placement: String,
}

impl PointKey {
    /// "1 MiB out-of-place" (with the dtype and op when `full`): what a table row or reason names.
    pub fn label(&self, full: bool) -> String {
        let placement = self.placement.replace('_', "-");
        let size = crate::units::bytes(self.size);
        if full {
            format!("{} {size} {} {} {placement}", self.collective, self.dtype, self.redop)
        } else {
            format!("{size} {placement}")
        }
    }
}

/// One point of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    #[serde(flatten)]
    pub key: PointKey,
    pub count: u64,
    /// nccl-tests' summary: the mean time, µs, and its bandwidths, GB/s.
    pub time_us: f64,
    pub alg_bw: f64,
    pub bus_bw: f64,
    /// Per-iteration times, ms (the slowest process's per iteration), or the summary time alone.
    pub samples_ms: Vec<f64>,
    /// Per process, in how many iterations it was the slowest (`per_process_max_times_us`),
    /// when the run wrote each process's times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last: Vec<u32>,
}

impl SweepPoint {
    /// GB/s per (1 / ms): the point's bus bandwidth at a time `t` ms is `work / t`, with the
    /// bytes and bus factor nccl-tests used (its summary's `bus_bw × time`), so that every
    /// collective's size convention is its own. `None` when the summary has no bandwidth.
    pub fn busbw_work(&self) -> Option<f64> {
        let work = self.bus_bw * self.time_us * 1e-3;
        (work.is_finite() && work > 0.0).then_some(work)
    }

    /// The bus bandwidth at the point's median time, GB/s.
    pub fn median_busbw(&self) -> Option<f64> {
        let mut sorted = self.samples_ms.clone();
        sorted.sort_by(f64::total_cmp);
        // The middle value, or the mean of the two middle ones (what `stats::quantile::median`
        // gives; this layer sits below `stats`).
        let n = sorted.len();
        let median = match (sorted.get(n.saturating_sub(1) / 2), sorted.get(n / 2)) {
            (Some(&lower), Some(&upper)) if n.is_multiple_of(2) => (lower + upper) / 2.0,
            (_, Some(&middle)) => middle,
            _ => return None,
        };
        self.busbw_work().map(|w| w / median).filter(|b| b.is_finite() && *b > 0.0)
    }
}

/// The workload id of a sweep: `nccl-tests-<program>-<n>ranks`, the program without `_perf`
/// (without the ranks when the output lists no device).
fn sweep_id(program: &str, ranks: usize) -> String {
    let stem = program.strip_suffix("_perf").unwrap_or(program);
    let clean: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+') { c } else { '_' })
        .take(32)
        .collect();
    let stem = if clean.is_empty() { "sweep" } else { &clean };
    if ranks == 0 {
        format!("nccl-tests-{stem}")
    } else {
        format!("nccl-tests-{stem}-{ranks}ranks")
    }
}

/// nccl-tests' `nccl_version` code (`22703`) as `2.27.3`; codes before 2.9 as `2.8.4` from `2804`.
fn nccl_version(code: u64) -> String {
    if code >= 10_000 {
        format!("{}.{}.{}", code / 10_000, code / 100 % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, code / 100 % 10, code % 100)
    }
}

/// The GPU of a device report (`[0000:07:00] NVIDIA H200` → `NVIDIA H200`).
fn gpu_of(info: &str) -> String {
    let s = info.trim();
    match s.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((_, rest)) => rest.trim().to_string(),
        None => s.to_string(),
    }
}

/// A read sweep as a result of the result model, with no environment profile yet (nccl-tests
/// names none: the caller sets it from `--environment-profile` and its kin). `created_at` is
/// the run's start when the output says, else `fallback`.
pub fn to_result(s: &Sweep, fallback: &str) -> RunResult {
    // The store's name: the program as written, a build suffix (`_mpi`) off; else the collective
    // the table shows; else the table's reduction, so that runs of unnamed programs share a
    // store only with runs of the same kind (never an all-reduce with an alltoall).
    let redop = s.results.first().map_or("none", |r| r.redop.as_str());
    let program = match (&s.program, s.collective) {
        (Some(p), _) => p.strip_suffix("_mpi").unwrap_or(p).to_string(),
        (None, Some(c)) => super::nccl_tests::program_of(c),
        (None, None) => format!("unnamed-{redop}"),
    };
    let ranks = s.devices.len().max(1);
    let collective =
        s.collective.map_or_else(|| program.strip_suffix("_perf").unwrap_or(&program).to_string(), ToString::to_string);
    let points: Vec<SweepPoint> = s
        .results
        .iter()
        .map(|r| {
            let samples_ms = if r.times_us.is_empty() {
                vec![r.time_us * 1e-3]
            } else {
                r.times_us.iter().map(|t| t * 1e-3).collect()
            };
            SweepPoint {
                key: PointKey {
                    collective: collective.clone(),
                    dtype: r.dtype.clone(),
                    redop: r.redop.clone(),
                    size: r.size,
                    placement: r.placement.as_str().to_string(),
                },
                count: r.count,
                time_us: r.time_us,
                alg_bw: r.alg_bw,
                bus_bw: r.bus_bw,
                samples_ms,
                last: last_counts(&r.per_process_us),
            }
        })
        .collect();
    let mut dtypes: Vec<&str> = points.iter().map(|p| p.key.dtype.as_str()).collect();
    dtypes.dedup();
    dtypes.sort_unstable();
    dtypes.dedup();
    let mut gpus: Vec<String> = s.devices.iter().map(|d| gpu_of(&d.device_info)).filter(|g| !g.is_empty()).collect();
    gpus.sort();
    gpus.dedup();
    let mut hosts: Vec<&str> = s.devices.iter().map(|d| d.hostname.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let per_iteration = s.results.iter().any(|r| !r.times_us.is_empty());
    RunResult {
        schema_version: SCHEMA_VERSION,
        tool: Tool { name: BACKEND.to_string(), version: format!("json v{}", s.version) },
        run_label: "nccl-tests".to_string(),
        environment_profile: String::new(),
        created_at: s.start_time.clone().unwrap_or_else(|| fallback.to_string()),
        workload: Workload {
            id: sweep_id(&program, s.devices.len()),
            collective,
            world_size: u32::try_from(ranks).unwrap_or(u32::MAX),
            dtype: if dtypes.is_empty() { "unknown".to_string() } else { dtypes.join("+") },
            payload_elements: 0,
            payload_bytes_per_rank: s.results.iter().map(|r| r.size).max().unwrap_or(0),
            compute_dim: 0,
            warmup: s.warmup.unwrap_or(0),
            repeats: s.iterations.unwrap_or(0),
            backend: BACKEND.to_string(),
            timing: None,
        },
        hardware: Hardware {
            gpu_name: (!gpus.is_empty()).then(|| gpus.join(" + ")),
            gpu_count: u32::try_from(s.devices.len()).unwrap_or(u32::MAX),
            gpu_memory_mib: None,
            topology: None,
            nodes: u32::try_from(hosts.len().max(1)).unwrap_or(u32::MAX),
            host_cpu: None,
            fingerprint: String::new(),
        }
        .with_fingerprint(),
        software: Software {
            nccl: s.nccl_version.map(nccl_version),
            nccl_env: s.nccl_env.clone(),
            nccl_choice: pinned_choice(&s.nccl_env),
            // The text table prints no environment.
            nccl_env_unrecorded: s.version == 0,
            ..Software::default()
        },
        // The runner is the hosts the sweep ran on, not the machine that read the file.
        provenance: Provenance {
            runner: (!hosts.is_empty()).then(|| hosts.join(",").chars().take(200).collect()),
            ..Provenance::default()
        },
        evidence_level: EvidenceLevel::GpuNccl,
        failure: None,
        rows: Vec::new(),
        // The bus bandwidth of the largest size out of place: what `baseline show` lists per run.
        metrics: Metrics {
            exposed_comm_ms: None,
            overlap_ratio: None,
            busbw_gbps: largest_busbw(&points),
            matmul_tflops: None,
        },
        comparison: RunComparison {
            saved_ms: None,
            overlap_gain_ratio: None,
            overlap_efficiency: None,
            overlap_penalty_ms: None,
        },
        decision: RunDecision::of_sweep(),
        sweep: Some(SweepData {
            program,
            per_iteration,
            processes: s.devices.iter().map(|d| Process { host: d.hostname.clone(), device: d.device }).collect(),
            points,
        }),
    }
}

/// NCCL's algorithm and protocol when the run pinned both (`NCCL_ALGO`, `NCCL_PROTO`), as the
/// benchmark records a pinned choice: runs then fall into no modes by NCCL's choice
/// (`compare::modes`). One pinned alone leaves the other to NCCL, so nothing is recorded.
fn pinned_choice(env: &std::collections::BTreeMap<String, String>) -> Option<String> {
    Some(format!("{}/{}", env.get("NCCL_ALGO")?, env.get("NCCL_PROTO")?))
}

/// The median bus bandwidth of the largest size, out of place where it ran so.
fn largest_busbw(points: &[SweepPoint]) -> Option<f64> {
    let out = points.iter().filter(|p| p.key.placement == Placement::OutOfPlace.as_str());
    let largest = out.max_by_key(|p| p.key.size).or_else(|| points.iter().max_by_key(|p| p.key.size))?;
    largest.median_busbw()
}

/// Per process, the iterations in which it was the slowest (ties to the first); empty for fewer
/// than two processes.
fn last_counts(per_process: &[Vec<f64>]) -> Vec<u32> {
    if per_process.len() < 2 {
        return Vec::new();
    }
    let mut counts = vec![0u32; per_process.len()];
    let iterations = per_process.iter().map(Vec::len).min().unwrap_or(0);
    for k in 0..iterations {
        let mut slowest: Option<(usize, f64)> = None;
        for (p, t) in per_process.iter().enumerate().filter_map(|(p, times)| times.get(k).map(|&t| (p, t))) {
            if slowest.is_none_or(|(_, worst)| t > worst) {
                slowest = Some((p, t));
            }
        }
        if let Some(count) = slowest.and_then(|(p, _)| counts.get_mut(p)) {
            *count += 1;
        }
    }
    counts
}

/// The point `i` of a sweep result as a workload of its own: its samples in a `comm_only` row,
/// its size and dtype in the workload. `None` when `run` holds no such point.
pub fn point_run(run: &RunResult, key: &PointKey) -> Option<RunResult> {
    project(run, key, false)
}

/// [`point_run`] with the point's summary time as its one sample: a baseline held against a run
/// without `-I 1` gives its summary too, so that a mean is compared with means, not medians.
pub fn point_summary_run(run: &RunResult, key: &PointKey) -> Option<RunResult> {
    project(run, key, true)
}

fn project(run: &RunResult, key: &PointKey, summary: bool) -> Option<RunResult> {
    let sweep = run.sweep.as_ref()?;
    let point = sweep.points.iter().find(|p| p.key == *key)?;
    let samples_ms = if summary { vec![point.time_us * 1e-3] } else { point.samples_ms.clone() };
    Some(RunResult {
        workload: Workload {
            dtype: point.key.dtype.clone(),
            payload_elements: point.count,
            payload_bytes_per_rank: point.key.size,
            collective: point.key.collective.clone(),
            ..run.workload.clone()
        },
        rows: vec![Row {
            schedule: Schedule::CommOnly,
            collective: point.key.collective.clone(),
            payload_bytes_per_rank: point.key.size,
            samples_ms,
            median_max_rank_ms: 0.0,
            p95_max_rank_ms: 0.0,
            rank_mean_ms: Vec::new(),
        }],
        sweep: None,
        ..run.clone_without_sweep()
    })
}

impl RunResult {
    /// This result without its sweep (cheap to clone for a projection).
    fn clone_without_sweep(&self) -> RunResult {
        RunResult {
            schema_version: self.schema_version,
            tool: self.tool.clone(),
            run_label: self.run_label.clone(),
            environment_profile: self.environment_profile.clone(),
            created_at: self.created_at.clone(),
            workload: self.workload.clone(),
            hardware: self.hardware.clone(),
            software: self.software.clone(),
            provenance: self.provenance.clone(),
            evidence_level: self.evidence_level,
            failure: self.failure.clone(),
            rows: Vec::new(),
            metrics: self.metrics.clone(),
            comparison: self.comparison.clone(),
            decision: self.decision.clone(),
            sweep: None,
        }
    }

    /// Whether this result is a projected point of an nccl-tests sweep ([`point_run`]).
    pub fn is_sweep_point(&self) -> bool {
        self.sweep.is_none() && self.workload.backend == BACKEND
    }
}

/// The most points a sweep result may hold: every size of nccl-tests' limit at both placements.
pub const MAX_POINTS: usize = 2 * super::nccl_tests::MAX_SIZES;

/// Checks a sweep read from a result or baseline file (hand-edited or hostile): points within
/// bounds and unique, samples of a real clock, counts no longer than the processes.
pub fn validate(r: &RunResult, s: &SweepData) -> Result<(), String> {
    if !r.rows.is_empty() {
        return Err("holds both `rows` and a `sweep`; a result is a benchmark run or an nccl-tests sweep".into());
    }
    if r.workload.backend != BACKEND {
        return Err(format!("has a `sweep` but `workload.backend` is {:?}, not {BACKEND:?}", r.workload.backend));
    }
    if s.points.is_empty() || s.points.len() > MAX_POINTS {
        return Err(format!("`sweep.points` holds {} points; a sweep holds 1 to {MAX_POINTS}", s.points.len()));
    }
    if s.processes.len() > super::nccl_tests::MAX_PROCESSES {
        return Err(format!("`sweep.processes` lists more than {}", super::nccl_tests::MAX_PROCESSES));
    }
    let mut keys: Vec<&PointKey> = Vec::with_capacity(s.points.len());
    for (i, p) in s.points.iter().enumerate() {
        let at = |f: &str| format!("`sweep.points[{i}].{f}`");
        if p.samples_ms.is_empty() || p.samples_ms.len() > super::nccl_tests::MAX_ITERATIONS {
            return Err(format!(
                "{} holds {} times; a point holds 1 to {}",
                at("samples_ms"),
                p.samples_ms.len(),
                super::nccl_tests::MAX_ITERATIONS
            ));
        }
        if let Some((j, x)) = p.samples_ms.iter().enumerate().find(|(_, x)| !STEP_MS_RANGE.contains(x)) {
            return Err(format!(
                "{} is {x}; times must lie between {:e} ms (1 ns) and {:e} ms",
                at(&format!("samples_ms[{j}]")),
                STEP_MS_RANGE.start(),
                STEP_MS_RANGE.end()
            ));
        }
        for (name, v) in [("time_us", p.time_us), ("alg_bw", p.alg_bw), ("bus_bw", p.bus_bw)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{} is {v}, not a time or bandwidth", at(name)));
            }
        }
        if p.last.len() > super::nccl_tests::MAX_PROCESSES {
            return Err(format!("{} lists more than {} processes", at("last"), super::nccl_tests::MAX_PROCESSES));
        }
        if p.key.placement != Placement::OutOfPlace.as_str() && p.key.placement != Placement::InPlace.as_str() {
            return Err(format!("{} is {:?}; use out_of_place or in_place", at("placement"), p.key.placement));
        }
        keys.push(&p.key);
    }
    keys.sort();
    if let Some(twice) = keys.windows(2).find_map(|w| match w {
        [a, b] if a == b => Some(*a),
        _ => None,
    }) {
        return Err(format!("`sweep.points` holds {} twice; was the file edited by hand?", twice.label(true)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::nccl_tests::parse;

    const RUN: &str = r#"{"version":3,"start_time":"2026-12-01 10:00:00","args":["./build/all_gather_perf","-I","1"],
"env":["NCCL_ALGO=Ring"],"nccl_version":22703,
"config":{"warmup_iters":5,"iterations":3,"devices":[{"rank":0,"hostname":"node-a","device":0,"device_info":"[0000:07:00] NVIDIA H200"},{"rank":1,"hostname":"node-b","device":0,"device_info":"[0000:07:00] NVIDIA H200"}]},
"results":[{"size":1024,"count":128,"type":"float","redop":"none","root":"-1",
"out_of_place":{"time":20.0,"alg_bw":0.05,"bus_bw":0.025,"nwrong":0},
"out_of_place_per_iter":{"times_us":[19,20,21],"per_process_max_times_us":[[18,20,19],[19,19,21]]},
"in_place":{"time":21.0,"alg_bw":0.048,"bus_bw":0.024,"nwrong":0}}]}"#;

    #[test]
    fn a_sweep_becomes_one_result_with_a_point_per_size_and_placement() {
        let r = to_result(&parse(RUN).expect("reads"), "2026-12-02T00:00:00Z");
        assert_eq!(r.workload.id, "nccl-tests-all_gather-2ranks");
        assert_eq!((r.workload.collective.as_str(), r.workload.world_size), ("all_gather", 2));
        assert_eq!((r.workload.warmup, r.workload.repeats), (5, 3));
        assert_eq!(r.created_at, "2026-12-01T10:00:00Z");
        assert_eq!(r.hardware.gpu_name.as_deref(), Some("NVIDIA H200"));
        assert_eq!((r.hardware.gpu_count, r.hardware.nodes), (2, 2));
        assert_eq!(r.software.nccl.as_deref(), Some("2.27.3"));
        assert_eq!(r.provenance.runner.as_deref(), Some("node-a,node-b"));
        let s = r.sweep.as_ref().expect("a sweep");
        assert!(s.per_iteration);
        assert_eq!(s.points.len(), 2);
        assert_eq!(s.points[0].samples_ms, [0.019, 0.02, 0.021]);
        assert_eq!(s.points[0].last, [1, 2], "node-b was slowest in iterations 0 and 2");
        assert_eq!(s.points[1].samples_ms, [0.021], "in place ran without -I lists: its summary alone");
        assert_eq!(validate(&r, s), Ok(()));
        let p = point_run(&r, &s.points[0].key).expect("a point");
        assert!(p.is_sweep_point());
        assert_eq!(p.row(Schedule::CommOnly).map(|r| r.samples_ms.len()), Some(3));
        assert_eq!((p.workload.payload_bytes_per_rank, p.workload.payload_elements), (1024, 128));
        // busbw at the summary time is the summary's busbw.
        let work = s.points[0].busbw_work().expect("work");
        assert!((work / 0.02 - 0.025).abs() < 1e-12);
    }

    #[test]
    fn damaged_sweeps_are_named() {
        let r = to_result(&parse(RUN).expect("reads"), "2026-12-02T00:00:00Z");
        let mut s = r.sweep.clone().expect("a sweep");
        s.points[1].key = s.points[0].key.clone();
        assert!(validate(&r, &s).unwrap_err().contains("twice"));
        let mut s = r.sweep.clone().expect("a sweep");
        s.points[0].samples_ms[1] = f64::NAN;
        assert!(validate(&r, &s).unwrap_err().contains("`sweep.points[0].samples_ms[1]`"));
        let mut s = r.sweep.clone().expect("a sweep");
        s.points.clear();
        assert!(validate(&r, &s).unwrap_err().contains("holds 0 points"));
    }

    #[test]
    fn versions_and_ids_read_as_people_write_them() {
        assert_eq!(nccl_version(22703), "2.27.3");
        assert_eq!(nccl_version(2804), "2.8.4");
        assert_eq!(sweep_id("all_reduce_perf", 8), "nccl-tests-all_reduce-8ranks");
        assert_eq!(sweep_id("../x y", 1), "nccl-tests-.._x_y-1ranks");
        assert_eq!(sweep_id("all_gather_perf", 0), "nccl-tests-all_gather", "no device listed");
        assert_eq!(gpu_of("[0x1] NVIDIA H200"), "NVIDIA H200");
    }
}
