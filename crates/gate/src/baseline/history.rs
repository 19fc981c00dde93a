//! The store's summary history: one small record per run that `baseline update` evicted from the
//! judged runs (`runs`, the newest `keep`), so that `baseline show` can draw a long trend without
//! the store carrying every sample. A summary holds what a trend needs (when, which commit and
//! software, each schedule's median and P95, bus bandwidth, TFLOP/s) and no samples; it is never
//! judged. This module owns its shape, how a run is summarised ([`summarise`]), how the history
//! is bounded ([`record`]), what a valid history is ([`validate`]), and the run-by-run view shared by
//! the renderers ([`entries`], [`trend_points`]).

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{run_id, BaselineFile};
use commgate_core::result::{RunResult, Schedule};
use commgate_stats::type7_quantile;

/// How many summaries a store keeps by default (`[baseline] history_keep`).
pub const DEFAULT_HISTORY_KEEP: usize = 1000;

/// The most summaries a store may hold, when writing (`history_keep`) and when reading: far
/// beyond any real history, small enough that a forged store cannot make a listing slow.
pub const MAX_HISTORY: usize = 100_000;

/// One schedule's step time, ms (slowest rank per repeat).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSummary {
    pub median_ms: f64,
    pub p95_ms: f64,
}

/// The software a run measured with, as a trend shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftwareSummary {
    #[serde(default)]
    pub driver: Option<String>,
    #[serde(default)]
    pub cuda: Option<String>,
    #[serde(default)]
    pub nccl: Option<String>,
    #[serde(default)]
    pub commgate: String,
}

/// One run, without its samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's full id (64 hex digits), as [`run_id`] computed it while the samples existed.
    pub run_id: String,
    pub created_at: String,
    #[serde(default)]
    pub commit: Option<String>,
    #[serde(default)]
    pub software: SoftwareSummary,
    /// Per schedule present in the run.
    pub schedules: BTreeMap<Schedule, ScheduleSummary>,
    /// The overlap row's interquartile range over its median: how noisy the run was.
    #[serde(default)]
    pub overlap_spread: Option<f64>,
    #[serde(default)]
    pub busbw_gbps: Option<f64>,
    #[serde(default)]
    pub matmul_tflops: Option<f64>,
}

/// A run's summary, computed from its samples (never from the medians a file claims).
pub fn summarise(run: &RunResult) -> RunSummary {
    let mut schedules = BTreeMap::new();
    let mut overlap_spread = None;
    for row in &run.rows {
        let mut sorted = row.samples_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let median = type7_quantile(&sorted, 0.5);
        let p95 = type7_quantile(&sorted, 0.95);
        if median.is_finite() && p95.is_finite() {
            schedules.insert(row.schedule, ScheduleSummary { median_ms: median, p95_ms: p95 });
        }
        if row.schedule == Schedule::Overlap && median > 0.0 {
            let iqr = type7_quantile(&sorted, 0.75) - type7_quantile(&sorted, 0.25);
            overlap_spread = Some(iqr / median).filter(|s| s.is_finite());
        }
    }
    RunSummary {
        run_id: run_id(run).full().to_string(),
        created_at: run.created_at.clone(),
        commit: run.provenance.commit.clone(),
        software: SoftwareSummary {
            driver: run.software.driver.clone(),
            cuda: run.software.cuda.clone(),
            nccl: run.software.nccl.clone(),
            commgate: run.software.commgate.clone(),
        },
        schedules,
        overlap_spread,
        busbw_gbps: run.metrics.busbw_gbps.filter(|x| x.is_finite() && *x >= 0.0),
        matmul_tflops: run.metrics.matmul_tflops.filter(|x| x.is_finite() && *x >= 0.0),
    }
}

/// Appends the summaries of the runs evicted from `runs` (oldest first) and drops the oldest
/// summaries past `history_keep`. A run whose id the history already holds is not added twice.
pub fn record(history: &mut Vec<RunSummary>, evicted: &[RunResult], history_keep: usize) {
    for run in evicted {
        let summary = summarise(run);
        if !history.iter().any(|h| h.run_id == summary.run_id) {
            history.push(summary);
        }
    }
    let dropped = history.len().saturating_sub(history_keep);
    history.drain(..dropped);
}

/// What makes a history valid: bounded, every id a full run id held once (in the history or
/// among the judged runs), every figure finite and ≥ 0. The message names the entry
/// (`history[3]`).
pub fn validate(file: &BaselineFile) -> Result<(), String> {
    if file.history.len() > MAX_HISTORY {
        return Err(format!(
            "`history` holds {} run summaries, more than the {MAX_HISTORY} a store may hold; \
             drop the oldest (lower `[baseline] history_keep`)",
            file.history.len()
        ));
    }
    let judged: HashSet<String> = file.runs.iter().map(|r| run_id(r).full().to_string()).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, h) in file.history.iter().enumerate() {
        let id = &h.run_id;
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(format!("`history[{i}].run_id` is not a run id (64 lowercase hex digits)"));
        }
        if judged.contains(id) {
            return Err(format!(
                "`history[{i}]` summarises run {} that `runs` also holds; a run is in one of them: \
                 delete the summary",
                &id[..12]
            ));
        }
        if !seen.insert(id) {
            return Err(format!("`history[{i}]` repeats run {}; delete one copy", &id[..12]));
        }
        validate_numbers(i, h)?;
    }
    Ok(())
}

fn validate_numbers(i: usize, h: &RunSummary) -> Result<(), String> {
    let bad = |field: String, x: f64| {
        Err(format!("`history[{i}].{field}` is {x}; a summary's figures must be finite and ≥ 0"))
    };
    for (schedule, s) in &h.schedules {
        for (name, x) in [("median_ms", s.median_ms), ("p95_ms", s.p95_ms)] {
            if !x.is_finite() || x < 0.0 {
                return bad(format!("schedules.{schedule}.{name}"), x);
            }
        }
    }
    for (name, x) in
        [("overlap_spread", h.overlap_spread), ("busbw_gbps", h.busbw_gbps), ("matmul_tflops", h.matmul_tflops)]
    {
        if let Some(x) = x.filter(|x| !x.is_finite() || *x < 0.0) {
            return bad(name.to_string(), x);
        }
    }
    Ok(())
}

/// One run of a store as `baseline show` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Whether the store still holds the run's samples (a judged run) or only its summary.
    pub judged: bool,
}

/// Every run of a store, oldest first: the summary history, then the judged runs.
pub fn entries(file: &BaselineFile) -> Vec<Entry> {
    let old = file.history.iter().map(|s| Entry { summary: s.clone(), judged: false });
    old.chain(file.runs.iter().map(|r| Entry { summary: summarise(r), judged: true })).collect()
}

/// The trend of a store's overlap median, oldest first: `(label, ms)` with the label the run's
/// date (`YYYY-MM-DD`, the first 10 characters of `created_at`; untrusted, escape it where it is
/// shown). Runs without an overlap median are left out.
pub fn trend_points(file: &BaselineFile) -> Vec<(String, f64)> {
    entries(file)
        .iter()
        .filter_map(|e| {
            let ms = e.summary.schedules.get(&Schedule::Overlap)?.median_ms;
            Some((short_date(&e.summary.created_at), ms))
        })
        .collect()
}

/// Labels for runs in a chart, told apart: their dates (`YYYY-MM-DD`) when those differ, else
/// month, day and time (`12-02 13:20`), and a run number (`#3`) on any still alike (runs
/// recorded within one minute). `created_at` is untrusted: escape the labels where shown.
pub fn distinct_labels(created_at: &[&str]) -> Vec<String> {
    let alike = |labels: &[String]| {
        let mut sorted: Vec<&String> = labels.iter().collect();
        sorted.sort();
        sorted.windows(2).any(|w| matches!(w, [a, b] if a == b))
    };
    let dates: Vec<String> = created_at.iter().map(|c| short_date(c)).collect();
    if !alike(&dates) {
        return dates;
    }
    let times: Vec<String> =
        created_at.iter().map(|c| c.chars().skip(5).take(11).collect::<String>().replacen('T', " ", 1)).collect();
    if !alike(&times) {
        return times;
    }
    times.iter().enumerate().map(|(i, t)| format!("{t} #{}", i + 1)).collect()
}

/// The date part of a timestamp (at most its first 10 characters).
pub fn short_date(created_at: &str) -> String {
    created_at.chars().take(10).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::SCHEMA_VERSION;
    use commgate_testkit::results as fixtures;

    fn run(i: usize) -> RunResult {
        let mut r = fixtures::run(&[1.0, 2.0, 3.0, 4.0]);
        r.rows[3].samples_ms[0] = 1.0 + i as f64 / 100.0;
        r.created_at = format!("2026-11-{:02}T00:00:00Z", i % 28 + 1);
        r
    }

    fn file(runs: Vec<RunResult>, history: Vec<RunSummary>) -> BaselineFile {
        BaselineFile {
            schema_version: SCHEMA_VERSION,
            environment_profile: "PAR-MOCK".into(),
            workload_id: "par-overlap-allreduce-matmul".into(),
            runs,
            history,
            traces: BTreeMap::new(),
            ceilings: Vec::new(),
        }
    }

    #[test]
    fn a_summary_is_computed_from_the_samples() {
        let mut r = run(0);
        r.rows[3].median_max_rank_ms = 99.0;
        r.provenance.commit = Some("abc123".into());
        let s = summarise(&r);
        assert_eq!(s.run_id, run_id(&r).full());
        assert_eq!(s.commit.as_deref(), Some("abc123"));
        let overlap = s.schedules[&Schedule::Overlap];
        assert_eq!(overlap.median_ms, 2.5, "from the samples, not the stored median");
        assert!((overlap.p95_ms - 3.85).abs() < 1e-12);
        assert_eq!(s.schedules[&Schedule::Serial].median_ms, 2.5 * 1.2);
        assert!((s.overlap_spread.expect("spread") - 1.5 / 2.5).abs() < 1e-12);
    }

    #[test]
    fn record_keeps_the_newest_summaries_once() {
        let mut history = Vec::new();
        let runs: Vec<RunResult> = (0..5).map(run).collect();
        record(&mut history, &runs[..2], 3);
        record(&mut history, &runs[1..4], 3);
        let ids: Vec<&str> = history.iter().map(|h| h.run_id.as_str()).collect();
        let want: Vec<String> = runs[1..4].iter().map(|r| run_id(r).full().to_string()).collect();
        assert_eq!(ids, want, "run 1 once, run 0 dropped past history_keep");
        record(&mut history, &runs[4..], 0);
        assert!(history.is_empty(), "history_keep 0 keeps no history");
    }

    #[test]
    fn check_refuses_forged_histories() {
        let runs: Vec<RunResult> = (0..3).map(run).collect();
        let ok = file(runs[2..].to_vec(), runs[..2].iter().map(summarise).collect());
        assert_eq!(validate(&ok), Ok(()));

        let mut twice = ok.clone();
        twice.history.push(twice.history[0].clone());
        assert!(validate(&twice).unwrap_err().contains("`history[2]` repeats run"));

        let mut judged_too = ok.clone();
        judged_too.history.push(summarise(&runs[2]));
        assert!(validate(&judged_too).unwrap_err().contains("that `runs` also holds"));

        let mut bad_id = ok.clone();
        bad_id.history[1].run_id = "ABC".into();
        assert!(validate(&bad_id).unwrap_err().contains("`history[1].run_id`"));

        for x in [f64::NAN, -1.0, f64::INFINITY] {
            let mut bad = ok.clone();
            bad.history[0].schedules.get_mut(&Schedule::Serial).expect("serial").p95_ms = x;
            assert!(validate(&bad).unwrap_err().contains("`history[0].schedules.serial.p95_ms`"), "{x}");
            let mut bad = ok.clone();
            bad.history[1].busbw_gbps = Some(x);
            assert!(validate(&bad).unwrap_err().contains("`history[1].busbw_gbps`"), "{x}");
        }

        let mut huge = ok.clone();
        huge.history = vec![huge.history[0].clone(); MAX_HISTORY + 1];
        assert!(validate(&huge).unwrap_err().contains("more than the 100000"));
    }

    /// How big a store gets after 1,000 updates with the default `keep` and `history_keep`:
    /// `cargo test --locked --lib store_size_after_1000_runs -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn store_size_after_1000_runs() {
        let mut f = file(Vec::new(), Vec::new());
        for i in 0..1000 {
            let mut r = fixtures::run(&(0..200).map(|k| 1.0 + (k * 7 + i) as f64 % 13.0 / 100.0).collect::<Vec<_>>());
            r.created_at = format!("2026-01-01T00:00:{i:04}Z");
            r.provenance.commit = Some(format!("{i:040x}"));
            f.runs.push(r);
            let dropped = f.runs.len().saturating_sub(crate::baseline::DEFAULT_KEEP);
            let evicted: Vec<RunResult> = f.runs.drain(..dropped).collect();
            record(&mut f.history, &evicted, DEFAULT_HISTORY_KEEP);
        }
        assert_eq!(validate(&f), Ok(()));
        let text = serde_json::to_string_pretty(&f).expect("json");
        let history_only = serde_json::to_string_pretty(&f.history).expect("json");
        println!(
            "1000 runs (200 repeats each): store {} bytes, of which history ({} summaries) {} bytes",
            text.len(),
            f.history.len(),
            history_only.len()
        );
    }

    #[test]
    fn chart_labels_tell_runs_apart() {
        let days = ["2026-11-01T09:00:00Z", "2026-11-02T09:00:00Z"];
        assert_eq!(distinct_labels(&days), ["2026-11-01", "2026-11-02"]);
        let one_day = ["2026-11-01T09:00:00Z", "2026-11-01T17:30:00Z"];
        assert_eq!(distinct_labels(&one_day), ["11-01 09:00", "11-01 17:30"]);
        let one_minute = ["2026-11-01T09:00:01Z", "2026-11-01T09:00:59Z", "2026-11-02T10:00:00Z"];
        assert_eq!(distinct_labels(&one_minute), ["11-01 09:00 #1", "11-01 09:00 #2", "11-02 10:00 #3"]);
        assert!(distinct_labels(&[]).is_empty());
    }

    #[test]
    fn entries_and_the_trend_run_oldest_first() {
        let runs: Vec<RunResult> = (0..3).map(run).collect();
        let f = file(runs[1..].to_vec(), vec![summarise(&runs[0])]);
        let judged: Vec<bool> = entries(&f).iter().map(|e| e.judged).collect();
        assert_eq!(judged, [false, true, true]);
        let points = trend_points(&f);
        assert_eq!(points.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["2026-11-01", "2026-11-02", "2026-11-03"]);
        assert_eq!(points[0].1, summarise(&runs[0]).schedules[&Schedule::Overlap].median_ms);
    }
}
