//! The result file that `commgate bench` writes and every later command reads
//! (`docs/formats.md`, "Result file"): typed, versioned, all samples kept.
//!
//! Loading is strict where a wrong value would corrupt a verdict (schema version, samples that
//! are empty, negative or missing, rows that are absent) and every error names the file and the
//! field path (`rows[2].samples_ms[5]`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::vocab::{Decision, Verdict};

mod machine;
mod migrate;
pub mod nccl_tests;
pub mod sweep;

pub use machine::{Hardware, Provenance, Software, SoftwareChange};

/// Version 2 split `hardware` into `hardware` and `software` and added `provenance`; version 1
/// files are upgraded as they are read (`migrate::upgrade_v1`).
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: u32,
    pub tool: Tool,
    pub run_label: String,
    pub environment_profile: String,
    pub created_at: String,
    pub workload: Workload,
    pub hardware: Hardware,
    pub software: Software,
    #[serde(default)]
    pub provenance: Provenance,
    pub evidence_level: EvidenceLevel,
    pub failure: Option<Failure>,
    #[serde(default)]
    pub rows: Vec<Row>,
    pub metrics: Metrics,
    pub comparison: RunComparison,
    pub decision: RunDecision,
    /// An nccl-tests run's points (`sweep.rs`); `rows` is then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<sweep::SweepData>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

/// What was measured; two results compare only when these agree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub id: String,
    pub collective: String,
    pub world_size: u32,
    pub dtype: String,
    pub payload_elements: u64,
    pub payload_bytes_per_rank: u64,
    pub compute_dim: u64,
    pub warmup: u32,
    pub repeats: u32,
    pub backend: String,
    /// How the backend's timing windows were taken where that varies (CUDA: `gated`, or
    /// `ungated` when the device-side gate was off); absent for the CPU and mock backends and
    /// in files from before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
}

impl Workload {
    /// What to do when a store's runs measured another workload than a new run, by the field
    /// [`Workload::difference`] named: the store answers for one workload only.
    pub fn mismatch_advice(field: &str) -> &'static str {
        match field {
            "timing" => {
                "the stored runs were timed another way (CUDA runs recorded before the timing barrier \
                 existed, or with COMMGATE_CUDA_GATE=off): move the store file aside (git keeps its \
                 history) and record new runs"
            }
            _ => {
                "a store answers for one workload: move the store file aside (git keeps its history) or \
                 use another --environment-profile, then record runs of this workload"
            }
        }
    }

    /// The first field in which two workloads differ in what they measure (not in how often:
    /// warm-up and repeats may change between runs), as `(field, self, other)`.
    pub fn difference(&self, other: &Workload) -> Option<(&'static str, String, String)> {
        let timing = |t: &Option<String>| t.clone().unwrap_or_else(|| "unrecorded".to_string());
        let pairs: [(&'static str, String, String); 8] = [
            ("id", self.id.clone(), other.id.clone()),
            ("collective", self.collective.clone(), other.collective.clone()),
            ("world_size", self.world_size.to_string(), other.world_size.to_string()),
            ("dtype", self.dtype.clone(), other.dtype.clone()),
            ("payload_elements", self.payload_elements.to_string(), other.payload_elements.to_string()),
            ("compute_dim", self.compute_dim.to_string(), other.compute_dim.to_string()),
            ("backend", self.backend.clone(), other.backend.clone()),
            ("timing", timing(&self.timing), timing(&other.timing)),
        ];
        pairs.into_iter().find(|(_, a, b)| a != b)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceLevel {
    GpuNccl,
    /// The CUDA backend on commgate's emulated GPUs (crates/fakegpu): the real calls, their order,
    /// teardown and failures, with CPU arithmetic and simulated speed. Never a GPU's evidence.
    Emulated,
    CpuMechanism,
    Mock,
    DryRun,
}

/// The name every device of commgate's emulated CUDA libraries reports (`cuDeviceGetName`): the
/// CUDA backend recognises it and labels its run [`EvidenceLevel::Emulated`].
pub const EMULATED_GPU_NAME: &str = "commgate emulated GPU (fakegpu, not a GPU)";

impl EvidenceLevel {
    /// What the run's figures are evidence of, as a reviewer reads it.
    pub fn words(self) -> &'static str {
        match self {
            EvidenceLevel::GpuNccl => "GPUs with NCCL",
            EvidenceLevel::Emulated => "the CUDA path on emulated GPUs, no GPU measured",
            EvidenceLevel::CpuMechanism => "the mechanism on a CPU, no GPU",
            EvidenceLevel::Mock => "simulated, no hardware measured",
            EvidenceLevel::DryRun => "a dry run, nothing measured",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub rank: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    CommOnly,
    ComputeOnly,
    Serial,
    Overlap,
}

impl Schedule {
    pub const ALL: [Schedule; 4] = [Schedule::CommOnly, Schedule::ComputeOnly, Schedule::Serial, Schedule::Overlap];

    pub fn as_str(self) -> &'static str {
        match self {
            Schedule::CommOnly => "comm_only",
            Schedule::ComputeOnly => "compute_only",
            Schedule::Serial => "serial",
            Schedule::Overlap => "overlap",
        }
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub schedule: Schedule,
    pub collective: String,
    pub payload_bytes_per_rank: u64,
    /// Repeat i's step time on the slowest rank (max over ranks), ms.
    pub samples_ms: Vec<f64>,
    pub median_max_rank_ms: f64,
    pub p95_max_rank_ms: f64,
    /// Each rank's mean step time, ms.
    #[serde(default)]
    pub rank_mean_ms: Vec<f64>,
}

/// Figures derived from the row medians (formats.md, "Result file"). A figure that is undefined
/// is `None` (JSON `null`), never NaN and never a made-up 0: a failed run has no medians, and
/// one rank communicates nothing, so its bus bandwidth and exposed communication do not apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// median(overlap) − median(compute_only), ≥ 0.
    #[serde(default)]
    pub exposed_comm_ms: Option<f64>,
    /// The share of communication overlapping hid, in [0, 1].
    #[serde(default)]
    pub overlap_ratio: Option<f64>,
    #[serde(default)]
    pub busbw_gbps: Option<f64>,
    #[serde(default)]
    pub matmul_tflops: Option<f64>,
}

/// Overlap against serial. At most one of `saved_ms` and `overlap_penalty_ms` is above 0: an
/// overlap slower than serial is a penalty, never a negative saving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunComparison {
    /// median(serial) − median(overlap) when overlap is faster, else 0.
    #[serde(default)]
    pub saved_ms: Option<f64>,
    /// `saved_ms` / median(serial), ≥ 0.
    #[serde(default)]
    pub overlap_gain_ratio: Option<f64>,
    /// `saved_ms` / min(median(comm_only), median(compute_only)), ≥ 0.
    #[serde(default)]
    pub overlap_efficiency: Option<f64>,
    /// median(overlap) − median(serial) when overlap is slower (the streams interfere), else 0.
    #[serde(default)]
    pub overlap_penalty_ms: Option<f64>,
}

impl RunComparison {
    /// How much slower than serial overlap is, when it is.
    pub fn penalty(&self) -> Option<f64> {
        self.overlap_penalty_ms.filter(|p| *p > 0.0)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDecision {
    pub verdict: Decision,
    pub reason: String,
}

impl RunDecision {
    /// An nccl-tests sweep's: it has no verdict of its own; its sizes are judged against a
    /// baseline.
    pub fn of_sweep() -> RunDecision {
        RunDecision {
            verdict: Decision::Accept,
            reason: "an nccl-tests sweep: each size is judged against the baseline".to_string(),
        }
    }
}

impl RunResult {
    pub fn row(&self, schedule: Schedule) -> Option<&Row> {
        self.rows.iter().find(|r| r.schedule == schedule)
    }

    /// Whether this run can serve as evidence (it finished and measured something).
    pub fn is_usable(&self) -> bool {
        self.failure.is_none() && self.evidence_level != EvidenceLevel::DryRun
    }
}

/// A result or baseline file that cannot be used; the message names the field and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FileError {
    pub path: String,
    pub message: String,
}

impl FileError {
    pub fn new(path: &Path, message: impl Into<String>) -> Self {
        FileError { path: path.display().to_string(), message: message.into() }
    }
}

/// The most a result, baseline or report file may hold (decompressed): far beyond any file
/// commgate writes, far below a profiler trace passed by mistake.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// The most step times one row may hold: 100 × the most `bench --repeats` records. `compare`
/// judges longer rows on a subsample (docs/gate.md, "Sample limit"), but a row past this is not
/// a measurement.
pub const MAX_SAMPLES_PER_ROW: usize = 10_000_000;

/// The range a step time must lie in, ms: from a nanosecond (the clocks' resolution) to a step of
/// eleven days. Outside it the value measured nothing, and ratios of such values overflow to ∞
/// (an inconclusive comparison that would pass).
pub const STEP_MS_RANGE: std::ops::RangeInclusive<f64> = 1e-6..=1e9;

/// Reads a JSON file (plain or gzip) into `T`, checking `schema_version` first; errors carry
/// the field path.
pub fn read_versioned<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T, FileError> {
    let text = crate::input::read_text(path, MAX_FILE_BYTES).map_err(|e| match e {
        crate::input::TextError::NotFound => FileError::new(path, format!("does not exist; pass an existing {what}")),
        other => FileError::new(path, other.to_string()),
    })?;
    parse_versioned(&text, what).map_err(|m| FileError::new(path, m))
}

/// Parses JSON text into `T` after checking that it is the `what` (a check report passed as a
/// result is named as such) and its `schema_version`. Messages are in the user's words: the
/// field path and what was wrong there, never a Rust type.
pub fn parse_versioned<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, String> {
    use crate::input::{json_kind, DocKeys};
    if text.trim().is_empty() {
        return Err(format!("is empty; expected a {what}"));
    }
    let found = json_kind(text.as_bytes());
    if found != "a JSON object" {
        return match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Err(e) if !e.is_data() => Err(not_json(&e, what)),
            _ => Err(format!("is not a {what} ({found}); {}", what_to_pass(what))),
        };
    }
    let keys: std::collections::HashMap<String, serde::de::IgnoredAny> =
        serde_json::from_str(text).map_err(|e| not_json(&e, what))?;
    let mut doc = DocKeys::default();
    keys.keys().for_each(|k| doc.saw(k));
    if let Some(kind) = doc.kind().filter(|k| !k.is(what)) {
        return Err(format!("is a {}, not a {what}; {}", kind.noun(), what_to_pass(what)));
    }
    let version = keys.contains_key("schema_version").then(|| {
        #[derive(Deserialize)]
        struct Version {
            schema_version: serde_json::Value,
        }
        serde_json::from_str::<Version>(text).map(|v| v.schema_version)
    });
    match version {
        None => return Err(format!("has no `schema_version`; is it a {what}? {}", what_to_pass(what))),
        Some(Err(e)) => return Err(not_json(&e, what)),
        Some(Ok(v)) if v.as_u64() == Some(u64::from(SCHEMA_VERSION)) => {}
        Some(Ok(v)) if v.as_u64() == Some(1) => {
            let mut doc: serde_json::Value = serde_json::from_str(text).map_err(|e| not_json(&e, what))?;
            migrate::upgrade_v1(&mut doc);
            return serde_path_to_error::deserialize(doc).map_err(|e| field_error(&e));
        }
        Some(Ok(v)) => {
            return Err(format!(
                "`schema_version` is {v}, this commgate reads {SCHEMA_VERSION}; use the commgate version that wrote it, or re-run it"
            ))
        }
    }
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| field_error(&e))
}

/// "`rows[2].samples_ms[5]`: invalid type…": the field path, then the message in plain words.
pub fn field_error<E: std::fmt::Display>(e: &serde_path_to_error::Error<E>) -> String {
    let path = e.path().to_string();
    let inner = crate::input::plain_message(&e.inner().to_string());
    if path == "." {
        inner
    } else {
        format!("`{path}`: {inner}")
    }
}

/// Malformed JSON: what the parser said and where, in the user's words.
fn not_json(e: &serde_json::Error, what: &str) -> String {
    format!(
        "is not valid JSON (line {}, column {}: {}); expected a {what}",
        e.line(),
        e.column(),
        crate::input::plain_message(&e.to_string())
    )
}

/// Which file belongs where `what` was expected, and which command writes it.
fn what_to_pass(what: &str) -> &'static str {
    match what {
        "commgate result file" => {
            "pass the result (`--result`, `--current` and `--from` take what `commgate bench` writes)"
        }
        "baseline file" => "pass a baseline (baselines/<profile>/<workload>.json, kept by `commgate baseline update`)",
        "commgate check report" => "pass the report that `commgate check --output` wrote",
        _ => "pass the file commgate wrote for it",
    }
}

/// Loads a result file and checks what a comparison relies on. nccl-tests output (its JSON or
/// its text table, told apart by content) is read as a sweep result ([`sweep::to_result`]) with
/// no environment profile: the caller gives it one ([`with_profile`]).
pub fn load_result(path: &Path) -> Result<RunResult, FileError> {
    let text = crate::input::read_text(path, MAX_FILE_BYTES).map_err(|e| match e {
        crate::input::TextError::NotFound => {
            FileError::new(path, "does not exist; pass an existing commgate result file".to_string())
        }
        other => FileError::new(path, other.to_string()),
    })?;
    if nccl_tests::looks_like(&text) {
        let read = nccl_tests::parse_any(&text).map_err(|e| FileError::new(path, e.to_string()))?;
        let r = sweep::to_result(&read, &modified_at(path));
        validate(&r).map_err(|m| FileError::new(path, m))?;
        return Ok(r);
    }
    // nccl-tests output it does not read is said to be that, not "not valid JSON".
    if let Some(why) = nccl_tests::unread_layout(&text) {
        return Err(FileError::new(path, why));
    }
    let r: RunResult = parse_versioned(&text, "commgate result file").map_err(|m| FileError::new(path, m))?;
    validate(&r).map_err(|m| FileError::new(path, m))?;
    Ok(r)
}

/// When a file was last written, RFC 3339: the start of an nccl-tests run whose output does not
/// say (the same file read twice is the same run, so the store does not take it twice).
fn modified_at(path: &Path) -> String {
    let secs = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    crate::units::rfc3339(secs)
}

/// `run` with the environment profile nccl-tests output does not name: `profile` (from
/// `--environment-profile`, `COMMGATE_ENVIRONMENT_PROFILE` or `[bench] environment_profile`).
/// A result that names its own keeps it.
pub fn with_profile(mut run: RunResult, profile: Option<&str>, path: &Path) -> Result<RunResult, FileError> {
    if !run.environment_profile.is_empty() {
        return Ok(run);
    }
    match profile {
        Some(p) => {
            run.environment_profile = p.to_string();
            Ok(run)
        }
        None => Err(FileError::new(
            path,
            "is nccl-tests output, which names no environment profile (the baseline directory it belongs to): pass \
             --environment-profile NAME, set COMMGATE_ENVIRONMENT_PROFILE, or set environment_profile under [bench] \
             in commgate.toml",
        )),
    }
}

/// The longest workload id: it is a file name in the store and in the results directory.
pub const MAX_ID_CHARS: usize = 64;

/// Why a workload id cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("empty; give a name of letters, digits, '-', '_', '.' or '+'")]
    Empty,
    #[error("{0} characters; a workload id names a file, at most {MAX_ID_CHARS}")]
    TooLong(usize),
    #[error("starts with '.'; a workload id names a file, and would be hidden")]
    LeadingDot,
    #[error("holds {0:?}; use letters, digits, '-', '_', '.' or '+'")]
    BadChar(char),
}

/// Checks a workload id given by the user: `[A-Za-z0-9._+-]{1,64}`, not starting with a dot
/// (so neither `.` nor `..`, nor a hidden file).
pub fn validate_id(id: &str) -> Result<(), IdError> {
    let chars = id.chars().count();
    if chars == 0 {
        return Err(IdError::Empty);
    }
    if chars > MAX_ID_CHARS {
        return Err(IdError::TooLong(chars));
    }
    if id.starts_with('.') {
        return Err(IdError::LeadingDot);
    }
    match id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))) {
        Some(c) => Err(IdError::BadChar(c)),
        None => Ok(()),
    }
}

/// An RFC 3339 time as commgate writes one (`2026-11-30T00:00:00Z`, fractions and offsets
/// allowed): digits where digits go, at most 40 characters.
pub fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| b.get(range).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let byte = |i: usize, ok: fn(u8) -> bool| b.get(i).copied().is_some_and(ok);
    let fixed = b.len() >= 20
        && b.len() <= 40
        && digits(0..4)
        && byte(4, |c| c == b'-')
        && digits(5..7)
        && byte(7, |c| c == b'-')
        && digits(8..10)
        && byte(10, |c| matches!(c, b'T' | b't'))
        && digits(11..13)
        && byte(13, |c| c == b':')
        && digits(14..16)
        && byte(16, |c| c == b':')
        && digits(17..19);
    let Some(mut rest) = b.get(19..).filter(|_| fixed) else {
        return false;
    };
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = fraction.iter().take_while(|d| d.is_ascii_digit()).count();
        match fraction.get(n..).filter(|_| n > 0) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    }
}

/// What a comparison relies on: not a dry run; a workload id that names a file; one row per
/// schedule; step times within [`STEP_MS_RANGE`] (a step takes
/// time); a timed row whose samples are all equal comes only from the mock backend (a real clock
/// always varies). A usable run needs non-empty overlap, serial and compute_only rows.
pub fn validate(r: &RunResult) -> Result<(), String> {
    if r.evidence_level == EvidenceLevel::DryRun {
        return Err(
            "is a dry run (`evidence_level: dry_run`): it measured nothing, so nothing can be judged or stored; \
             run the benchmark without --dry-run"
                .to_string(),
        );
    }
    if !is_rfc3339(&r.created_at) {
        let shown: String = r.created_at.chars().take(40).collect();
        return Err(format!(
            "`created_at` ({:?}{}) is not an RFC 3339 time such as 2026-11-30T00:00:00Z",
            shown,
            if r.created_at.chars().count() > 40 { "…" } else { "" }
        ));
    }
    validate_id(&r.workload.id).map_err(|e| {
        format!("`workload.id` is {e}; it names the baseline store's file (was the result edited by hand?)")
    })?;
    if let Some(s) = &r.sweep {
        return sweep::validate(r, s);
    }
    for (i, row) in r.rows.iter().enumerate() {
        if let Some(first) = r.rows.iter().take(i).position(|earlier| earlier.schedule == row.schedule) {
            return Err(format!(
                "`rows[{i}]` repeats the `{}` row of `rows[{first}]`; a result holds one row per schedule \
                 (was the file edited by hand?)",
                row.schedule.as_str()
            ));
        }
        if row.samples_ms.len() > MAX_SAMPLES_PER_ROW {
            return Err(format!(
                "`rows[{i}].samples_ms` ({}) holds {} step times, more than the {MAX_SAMPLES_PER_ROW} a row may hold; \
                 record the run with fewer repeats",
                row.schedule.as_str(),
                row.samples_ms.len()
            ));
        }
        for (j, &x) in row.samples_ms.iter().enumerate() {
            if !STEP_MS_RANGE.contains(&x) {
                return Err(format!(
                    "`rows[{i}].samples_ms[{j}]` ({}) is {x}; step times must lie between {:e} ms (1 ns) and {:e} ms",
                    row.schedule.as_str(),
                    STEP_MS_RANGE.start(),
                    STEP_MS_RANGE.end()
                ));
            }
        }
        let constant = row.samples_ms.len() >= 2 && row.samples_ms.windows(2).all(|w| w.first() == w.last());
        if constant && r.workload.backend != "mock" {
            return Err(format!(
                "`rows[{i}].samples_ms` ({}) holds {} identical step times; a real clock always varies, \
                 so the run did not measure: re-run the benchmark",
                row.schedule.as_str(),
                row.samples_ms.len()
            ));
        }
    }
    if !r.is_usable() {
        return Ok(());
    }
    for schedule in [Schedule::Overlap, Schedule::Serial, Schedule::ComputeOnly] {
        match r.row(schedule) {
            None => {
                return Err(format!(
                    "has no `{}` row; a finished run needs overlap, serial and compute_only rows",
                    schedule.as_str()
                ))
            }
            Some(row) if row.samples_ms.is_empty() => {
                return Err(format!("the `{}` row has empty `samples_ms`; re-run the benchmark", schedule.as_str()))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Whether `s` may name a directory or file of the baseline store (an environment profile, a
/// workload id): letters, digits, `-`, `_`, `.` and `+`, and not `.` or `..`. The store applies it
/// to every path it builds; `bench` checks `--environment-profile` with it before a run.
pub fn is_store_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
}

impl From<Verdict> for RunDecision {
    /// The file keeps one reason: the reasons joined.
    fn from(v: Verdict) -> Self {
        RunDecision { verdict: v.decision, reason: v.reasons.join("; ") }
    }
}
