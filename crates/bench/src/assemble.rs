//! From per-rank timings to the result file (formats.md, "Result file"): rows with every
//! sample, the derived metrics and comparison, the hardware fingerprint, and where the file
//! goes. Pure except for the clock in [`now_rfc3339`]. The run's own decision is not made here:
//! the caller hands in the rule ([`Judge`], `decide::bench_run::decide`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{HardwareInfo, Plan};
use commgate_core::result::{
    EvidenceLevel, Failure, Hardware, Metrics, Provenance, Row, RunComparison, RunDecision, RunResult, Schedule,
    Software, Tool, Workload, SCHEMA_VERSION,
};
use commgate_core::vocab::{Decision, Verdict};
use commgate_stats::quantile::type7_quantile;

/// The default workload's id (see [`super::workload`]); [`build`] writes it, the caller sets
/// another workload's.
pub const WORKLOAD_ID: &str = super::workload::LEGACY_ID;

/// Timings of the whole job: `times[schedule][rank]` is that rank's time per repeat, in order.
pub type Timings = BTreeMap<Schedule, BTreeMap<u32, Vec<f64>>>;

/// Everything about a run except its timings.
#[derive(Debug, Clone, PartialEq)]
pub struct RunContext {
    pub plan: Plan,
    pub backend: String,
    pub evidence_level: EvidenceLevel,
    pub hardware: HardwareInfo,
    /// Nodes the job spans (1 without a launcher).
    pub nodes: u32,
    /// The run's `NCCL_*` settings ([`nccl_environment`]).
    pub nccl_env: BTreeMap<String, String>,
    pub provenance: Provenance,
    pub run_label: String,
    pub environment_profile: String,
    pub created_at: String,
}

/// The rule that gives a run its own verdict from everything else of its result.
pub type Judge = fn(&RunResult) -> Verdict;

/// Builds the result file of a finished run, or of a failed one (`failure` set, no rows); its
/// `decision` is `judge`'s.
pub fn build(ctx: &RunContext, timings: Option<&Timings>, failure: Option<Failure>, judge: Judge) -> RunResult {
    let rows: Vec<Row> = timings.map(|t| rows(&ctx.plan, t)).unwrap_or_default();
    let medians = Medians::of(&rows);
    let metrics = metrics(&ctx.plan, &medians);
    let comparison = run_comparison(&ctx.plan, &medians);
    // The placeholder decision is replaced at once: the rule reads everything else of the result.
    let mut result = RunResult {
        schema_version: SCHEMA_VERSION,
        tool: Tool { name: "commgate".to_string(), version: env!("CARGO_PKG_VERSION").to_string() },
        run_label: ctx.run_label.clone(),
        environment_profile: ctx.environment_profile.clone(),
        created_at: ctx.created_at.clone(),
        workload: Workload {
            id: WORKLOAD_ID.to_string(),
            collective: "all_reduce".to_string(),
            world_size: ctx.plan.world_size,
            dtype: ctx.plan.dtype.as_str().to_string(),
            payload_elements: ctx.plan.payload_elements,
            payload_bytes_per_rank: ctx.plan.payload_bytes_per_rank(),
            compute_dim: ctx.plan.compute_dim,
            warmup: ctx.plan.warmup,
            repeats: ctx.plan.repeats,
            backend: ctx.backend.clone(),
            timing: ctx.hardware.timing.clone(),
        },
        hardware: hardware(&ctx.hardware, ctx.nodes),
        software: software(&ctx.hardware, ctx.nccl_env.clone()),
        provenance: ctx.provenance.clone(),
        evidence_level: ctx.evidence_level,
        failure,
        rows,
        metrics,
        comparison,
        decision: RunDecision { verdict: Decision::CollectMoreEvidence, reason: String::new() },
        sweep: None,
    };
    result.decision = judge(&result).into();
    result
}

/// The row medians the figures derive from: `None` for a row the run lacks (a failed run) or a
/// median that is not a positive step time, so no division below can give NaN or infinity.
struct Medians {
    comm: Option<f64>,
    compute: Option<f64>,
    serial: Option<f64>,
    overlap: Option<f64>,
}

impl Medians {
    fn of(rows: &[Row]) -> Self {
        let median = |s: Schedule| {
            rows.iter().find(|r| r.schedule == s).map(|r| r.median_max_rank_ms).filter(|m| m.is_finite() && *m > 0.0)
        };
        Medians {
            comm: median(Schedule::CommOnly),
            compute: median(Schedule::ComputeOnly),
            serial: median(Schedule::Serial),
            overlap: median(Schedule::Overlap),
        }
    }

    /// The communication time, when there is communication: one rank's all-reduce moves nothing,
    /// so its `comm_only` row times a no-op and describes no link.
    fn communication(&self, plan: &Plan) -> Option<f64> {
        self.comm.filter(|_| plan.world_size > 1)
    }
}

/// `x` when it is a number a file can hold.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// formats.md, "Result file", `metrics`.
fn metrics(plan: &Plan, m: &Medians) -> Metrics {
    let comm = m.communication(plan);
    // Overlap faster than compute alone hid all communication; the difference is noise.
    let exposed = m.overlap.zip(m.compute).map(|(o, c)| (o - c).max(0.0));
    let n = f64::from(plan.world_size);
    Metrics {
        exposed_comm_ms: comm.and(exposed),
        // Beyond [0, 1] the ratio would describe noise (below 0: see `overlap_penalty_ms`).
        overlap_ratio: exposed.zip(comm).map(|(e, c)| (1.0 - e / c).clamp(0.0, 1.0)),
        busbw_gbps: comm
            .and_then(|c| finite(plan.payload_bytes_per_rank() as f64 / (c * 1e-3) / 1e9 * 2.0 * (n - 1.0) / n)),
        matmul_tflops: m.compute.and_then(|c| finite(plan.matmul_flops() / (c * 1e-3) / 1e12)),
    }
}

/// formats.md, "Result file", `comparison`: a saving or a penalty, each ≥ 0.
fn run_comparison(plan: &Plan, m: &Medians) -> RunComparison {
    let difference = m.serial.zip(m.overlap).map(|(s, o)| s - o);
    let saved = difference.map(|d| if d > 0.0 { d } else { 0.0 });
    let hideable = m.communication(plan).zip(m.compute).map(|(c, k)| c.min(k));
    RunComparison {
        saved_ms: saved,
        overlap_gain_ratio: saved.zip(m.serial).map(|(d, s)| d / s),
        overlap_efficiency: saved.zip(hideable).map(|(d, h)| d / h),
        overlap_penalty_ms: difference.map(|d| if d < 0.0 { -d } else { 0.0 }),
    }
}

/// One row per schedule: sample i is repeat i's time on the slowest rank.
fn rows(plan: &Plan, t: &Timings) -> Vec<Row> {
    Schedule::ALL
        .iter()
        .filter_map(|s| t.get(s).map(|per_rank| (*s, per_rank)))
        .map(|(schedule, per_rank)| {
            let repeats = per_rank.values().map(Vec::len).min().unwrap_or(0);
            let samples: Vec<f64> = (0..repeats)
                .map(|i| per_rank.values().filter_map(|v| v.get(i).copied()).fold(f64::NEG_INFINITY, f64::max))
                .collect();
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            Row {
                schedule,
                collective: "all_reduce".to_string(),
                payload_bytes_per_rank: plan.payload_bytes_per_rank(),
                // An empty row (no repeat finished) has no quantiles; 0 keeps the file valid JSON.
                median_max_rank_ms: finite(type7_quantile(&sorted, 0.5)).unwrap_or(0.0),
                p95_max_rank_ms: finite(type7_quantile(&sorted, 0.95)).unwrap_or(0.0),
                rank_mean_ms: per_rank.values().map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64).collect(),
                samples_ms: samples,
            }
        })
        .collect()
}

/// The result's hardware block (what a baseline is only comparable on) with its fingerprint.
pub fn hardware(h: &HardwareInfo, nodes: u32) -> Hardware {
    Hardware {
        gpu_name: h.gpu_name.clone(),
        gpu_count: h.gpu_count,
        gpu_memory_mib: h.gpu_memory_mib,
        topology: h.topology.clone(),
        nodes: nodes.max(1),
        host_cpu: h.host_cpu.clone(),
        fingerprint: String::new(),
    }
    .with_fingerprint()
}

/// The result's software block: what the backend found plus the run's `NCCL_*` settings.
pub fn software(h: &HardwareInfo, nccl_env: BTreeMap<String, String>) -> Software {
    Software {
        driver: h.driver.clone(),
        cuda: h.cuda.clone(),
        nccl: h.nccl.clone(),
        commgate: env!("CARGO_PKG_VERSION").to_string(),
        nccl_env,
        nccl_choice: None,
        nccl_env_unrecorded: false,
    }
}

/// At most this many `NCCL_*` variables are recorded…
const MAX_NCCL_VARS: usize = 64;
/// …each value cut to this many characters: settings, not payloads.
const MAX_NCCL_VALUE_CHARS: usize = 256;

/// `NCCL_*` variables that NCCL never reads: NVIDIA's CUDA container images set `NCCL_VERSION`
/// to the version of the libnccl2 they install (seen on an H200 runner image). The NCCL loaded
/// is recorded in `software.nccl` instead.
const NOT_NCCL_SETTINGS: [&str; 1] = ["NCCL_VERSION"];

/// The `NCCL_*` variables among `vars` (the process environment in production), bounded.
/// They tune NCCL's algorithms and transports, so a change in them is a software change.
pub fn nccl_environment(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = vars
        .into_iter()
        .filter(|(k, _)| k.starts_with("NCCL_") && k.len() <= 64 && !NOT_NCCL_SETTINGS.contains(&k.as_str()))
        .map(|(k, v)| (k, v.chars().take(MAX_NCCL_VALUE_CHARS).collect()))
        .collect();
    while out.len() > MAX_NCCL_VARS {
        out.pop_last();
    }
    out
}

/// Where the run happened, from what CI says (`GITHUB_SHA`, `GITHUB_REF`, `RUNNER_NAME`), else
/// the checked-out commit (`head`, asked only outside CI) and the host name for the runner.
/// Values are cut to 200 characters.
pub fn provenance(
    var: impl Fn(&str) -> Option<String>,
    host_name: Option<String>,
    head: impl FnOnce() -> Option<String>,
) -> Provenance {
    let get = |name: &str| var(name).map(|v| v.trim().chars().take(200).collect::<String>()).filter(|v| !v.is_empty());
    Provenance {
        commit: get("GITHUB_SHA").or_else(head),
        git_ref: get("GITHUB_REF"),
        runner: get("RUNNER_NAME").or_else(|| host_name.map(|h| h.trim().chars().take(200).collect())),
    }
}

pub use commgate_core::units::{now_rfc3339, rfc3339};

/// `benchmarks/results/20261130T091258Z_par-overlap-allreduce-matmul_default.json` under `dir`
/// (the workload's id in the middle), with `-2`, `-3`… when a file of that name exists: history
/// is never overwritten. `workload_id` is a checked id ([`super::workload::validate_id`]) or a
/// derived one, so it is a file name as it stands.
pub fn default_output(dir: &Path, created_at: &str, workload_id: &str, label: &str) -> PathBuf {
    let stamp: String = created_at.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let label: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    let base = format!("{stamp}_{workload_id}_{label}");
    let mut path = dir.join(format!("{base}.json"));
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("{base}-{n}.json"));
        n += 1;
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;
    use commgate_core::result::RunResult;

    /// [`build`] with the run rule `bench` uses.
    fn built(ctx: &RunContext, timings: Option<&Timings>, failure: Option<Failure>) -> RunResult {
        build(ctx, timings, failure, commgate_gate::decide::bench_run::decide)
    }

    fn ctx(world: u32) -> RunContext {
        RunContext {
            plan: Plan {
                world_size: world,
                dtype: Dtype::Bfloat16,
                payload_elements: 1 << 20,
                compute_dim: 1024,
                warmup: 0,
                repeats: 100,
                seed: 0,
            },
            backend: "mock".into(),
            evidence_level: EvidenceLevel::Mock,
            hardware: HardwareInfo { gpu_name: Some("G".into()), gpu_count: world, ..HardwareInfo::default() },
            nodes: 1,
            nccl_env: BTreeMap::new(),
            provenance: Provenance::default(),
            run_label: "t".into(),
            environment_profile: "P".into(),
            created_at: "2026-11-30T00:00:00Z".into(),
        }
    }

    /// `repeats` samples per rank: base × (1 + 0.001·i) so medians are known.
    fn timings(world: u32, repeats: usize, base: [f64; 4], slow_rank: Option<u32>) -> Timings {
        Schedule::ALL
            .iter()
            .zip(base)
            .map(|(&s, b)| {
                let per_rank = (0..world)
                    .map(|r| {
                        let f = if Some(r) == slow_rank { 1.5 } else { 1.0 };
                        (r, (0..repeats).map(|i| b * f * (1.0 + 0.001 * i as f64)).collect())
                    })
                    .collect();
                (s, per_rank)
            })
            .collect()
    }

    #[test]
    fn rows_take_the_slowest_rank_and_metrics_follow_formats_md() {
        let t = timings(2, 100, [1.0, 2.0, 3.0, 2.2], None);
        let r = built(&ctx(2), Some(&t), None);
        assert_eq!(r.rows.len(), 4);
        let overlap = r.row(Schedule::Overlap).expect("overlap");
        assert_eq!(overlap.samples_ms.len(), 100);
        assert!((overlap.median_max_rank_ms - 2.2 * 1.0495).abs() < 1e-9);
        assert_eq!(overlap.rank_mean_ms.len(), 2);
        let m = &r.metrics;
        let (comm, compute, serial, ov) = (1.0495, 2.0 * 1.0495, 3.0 * 1.0495, 2.2 * 1.0495);
        let close = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 1e-6);
        assert!(close(m.exposed_comm_ms, ov - compute));
        assert!(close(m.overlap_ratio, 1.0 - (ov - compute) / comm));
        let algbw = (1u64 << 21) as f64 / (comm * 1e-3) / 1e9;
        assert!(close(m.busbw_gbps, algbw), "2(n−1)/n = 1 at n = 2");
        assert!(close(r.comparison.saved_ms, serial - ov));
        assert!(close(r.comparison.overlap_efficiency, (serial - ov) / comm));
        assert_eq!(r.comparison.overlap_penalty_ms, Some(0.0));
        assert_eq!(r.decision.verdict, Decision::Accept, "{}", r.decision.reason);
        assert_eq!(commgate_core::result::validate(&r), Ok(()));
    }

    #[test]
    fn decisions() {
        let slower = built(&ctx(2), Some(&timings(2, 100, [1.0, 2.0, 3.0, 3.1], None)), None);
        assert_eq!(slower.decision.verdict, Decision::Tune);
        let tail = built(&ctx(4), Some(&timings(4, 100, [1.0, 2.0, 3.0, 2.2], Some(2))), None);
        assert_eq!(tail.decision.verdict, Decision::Tune);
        assert!(tail.decision.reason.contains("rank 2"), "{}", tail.decision.reason);
        let few = built(&ctx(2), Some(&timings(2, 20, [1.0, 2.0, 3.0, 2.2], None)), None);
        assert_eq!(few.decision.verdict, Decision::CollectMoreEvidence);
        let failed =
            built(&ctx(2), None, Some(Failure { kind: "timeout".into(), message: "no progress".into(), rank: None }));
        assert_eq!(failed.decision.verdict, Decision::CollectMoreEvidence);
        assert!(failed.rows.is_empty());
        assert_eq!(
            failed.metrics,
            Metrics { exposed_comm_ms: None, overlap_ratio: None, busbw_gbps: None, matmul_tflops: None }
        );
        assert_eq!(failed.comparison.saved_ms, None);
    }

    #[test]
    fn an_overlap_slower_than_serial_is_a_penalty_not_a_negative_saving() {
        // comm 1, compute 2, serial 3, overlap 3.5: overlapping costs 0.5 ms.
        let r = built(&ctx(2), Some(&timings(2, 100, [1.0, 2.0, 3.0, 3.5], None)), None);
        let c = &r.comparison;
        assert_eq!((c.saved_ms, c.overlap_gain_ratio, c.overlap_efficiency), (Some(0.0), Some(0.0), Some(0.0)));
        assert!(c.penalty().is_some_and(|p| (p - 0.5 * 1.0495).abs() < 1e-9), "{c:?}");
        assert_eq!(r.metrics.overlap_ratio, Some(0.0), "exposed beyond all communication hides none of it");
        assert_eq!(r.decision.verdict, Decision::Tune);
        assert!(
            r.decision.reason.starts_with("overlap is 0.525 ms slower than serial")
                && r.decision.reason.ends_with("the streams interfere"),
            "{}",
            r.decision.reason
        );
        // Overlap faster than compute alone: nothing exposed, everything hidden (not a ratio above 1).
        let r = built(&ctx(2), Some(&timings(2, 100, [1.0, 2.0, 3.0, 1.9], None)), None);
        assert_eq!((r.metrics.exposed_comm_ms, r.metrics.overlap_ratio), (Some(0.0), Some(1.0)));
    }

    #[test]
    fn one_rank_has_no_bus_bandwidth_and_cannot_judge_overlap() {
        // A single-rank all-reduce is nearly free: comm_only 0.001 ms against compute 2 ms.
        let r = built(&ctx(1), Some(&timings(1, 100, [0.001, 2.0, 2.001, 2.3], None)), None);
        let m = &r.metrics;
        assert_eq!((m.busbw_gbps, m.exposed_comm_ms, m.overlap_ratio), (None, None, None));
        assert!(m.matmul_tflops.is_some_and(|t| t > 0.0), "the GEMM is still measured");
        assert_eq!(r.comparison.overlap_efficiency, None);
        assert_eq!(r.decision.verdict, Decision::CollectMoreEvidence);
        assert!(r.decision.reason.starts_with("one rank communicates nothing"), "{}", r.decision.reason);
        let text = serde_json::to_string(&r).expect("serialises");
        assert!(!text.contains("NaN") && !text.contains("inf"), "{text}");
    }

    #[test]
    fn no_figure_is_ever_non_finite() {
        // Zero-length steps (a broken clock) and a failed run: every figure is a number or null.
        let zero = built(&ctx(2), Some(&timings(2, 100, [0.0, 0.0, 0.0, 0.0], None)), None);
        let failed = built(&ctx(2), None, Some(Failure { kind: "x".into(), message: "y".into(), rank: None }));
        for r in [zero, failed] {
            let v = serde_json::to_value(&r).expect("value");
            for block in ["metrics", "comparison"] {
                for (k, x) in v[block].as_object().expect("object") {
                    assert!(x.is_null() || x.as_f64().is_some_and(f64::is_finite), "{block}.{k} = {x}");
                }
            }
            let back: RunResult = serde_json::from_value(v).expect("reads back");
            assert_eq!(back.metrics, r.metrics);
        }
    }

    #[test]
    fn fingerprint_is_stable_and_sensitive() {
        let a = hardware(&HardwareInfo { gpu_name: Some("H200".into()), gpu_count: 8, ..HardwareInfo::default() }, 1);
        let b = hardware(&HardwareInfo { gpu_name: Some("H200".into()), gpu_count: 8, ..HardwareInfo::default() }, 1);
        let c = hardware(&HardwareInfo { gpu_name: Some("H200".into()), gpu_count: 4, ..HardwareInfo::default() }, 1);
        // Software is not hardware: a new NCCL or driver keeps the fingerprint…
        let new_nccl = HardwareInfo {
            gpu_name: Some("H200".into()),
            gpu_count: 8,
            nccl: Some("2.23.4".into()),
            driver: Some("580".into()),
            ..HardwareInfo::default()
        };
        assert_eq!(hardware(&new_nccl, 1).fingerprint, a.fingerprint);
        // …and so does the host CPU of a GPU runner; more nodes do not.
        let other_cpu = HardwareInfo { host_cpu: Some("EPYC".into()), ..new_nccl.clone() };
        assert_eq!(hardware(&other_cpu, 1).fingerprint, a.fingerprint);
        assert_ne!(hardware(&new_nccl, 2).fingerprint, a.fingerprint);
        assert_eq!(software(&new_nccl, BTreeMap::new()).nccl.as_deref(), Some("2.23.4"));
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_eq!(a.fingerprint.len(), 16);
    }

    #[test]
    fn timestamps_and_file_names() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_029_978), "2026-11-30T09:12:58Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = default_output(dir.path(), "2026-11-30T09:12:58Z", WORKLOAD_ID, "my run");
        assert!(p.ends_with("20261130T091258Z_par-overlap-allreduce-matmul_my_run.json"), "{}", p.display());
        std::fs::write(&p, "x").expect("write");
        let q = default_output(dir.path(), "2026-11-30T09:12:58Z", WORKLOAD_ID, "my run");
        assert!(q.ends_with("20261130T091258Z_par-overlap-allreduce-matmul_my_run-2.json"), "{}", q.display());
        let r = default_output(dir.path(), "2026-11-30T09:12:58Z", "allreduce-bf16-2MiB-mm192", "my run");
        assert!(r.ends_with("20261130T091258Z_allreduce-bf16-2MiB-mm192_my_run.json"), "{}", r.display());
    }

    #[test]
    fn nccl_settings_and_provenance_are_recorded_bounded() {
        let vars = vec![
            ("NCCL_ALGO".to_string(), "Ring".to_string()),
            ("PATH".to_string(), "/bin".to_string()),
            ("NCCL_DEBUG".to_string(), "x".repeat(1000)),
            ("GITHUB_TOKEN".to_string(), "secret".to_string()),
            // The CUDA images' label, not a setting: NCCL never reads it.
            ("NCCL_VERSION".to_string(), "2.28.3-1".to_string()),
        ];
        let env = nccl_environment(vars);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["NCCL_ALGO", "NCCL_DEBUG"]);
        assert_eq!(env["NCCL_DEBUG"].len(), MAX_NCCL_VALUE_CHARS);
        let many = (0..100).map(|i| (format!("NCCL_V{i:03}"), "1".to_string()));
        assert_eq!(nccl_environment(many).len(), MAX_NCCL_VARS);

        let ci = |k: &str| match k {
            "GITHUB_SHA" => Some("abc123".to_string()),
            "RUNNER_NAME" => Some("gpu-runner-7".to_string()),
            _ => None,
        };
        let p = provenance(ci, Some("host".into()), || Some("not asked in CI".into()));
        assert_eq!((p.commit.as_deref(), p.runner.as_deref(), p.git_ref), (Some("abc123"), Some("gpu-runner-7"), None));
        let by_hand = provenance(|_| None, Some("host\n".into()), || Some("f".repeat(40)));
        assert_eq!(by_hand.runner.as_deref(), Some("host"));
        assert_eq!(by_hand.commit, Some("f".repeat(40)), "outside CI, the checked-out commit");
    }
}
