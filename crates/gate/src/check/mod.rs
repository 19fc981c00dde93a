//! `commgate check`: every workload's result (measured now or given), each against its own
//! stored baseline, all their metrics as one Holm family, any traces once, one verdict. This module gathers the evidence, and records what could not be gathered as an
//! [`EvaluationError`] in the report (never as a Rust error: a report saying what failed must
//! still be written and posted); [`crate::decide::gate::decide`] decides and [`CheckReport::outcome`]
//! turns the report into the exit code; the report renderers display. GitHub I/O happens in
//! the binary's `commands/check.rs` after the report is on disk.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::baseline::{self, BadStoreName, Baseline, BaselineFile};
use crate::compare::traces::{self as trace_compare, TraceComparison};
use crate::compare::{self, CompareOptions, Comparison, Pending};
use crate::decide::balance::{self, Balance};
use crate::decide::comparison::judge_with_traces;
use crate::decide::gate::{self, Evidence, WorkloadEvidence};
use crate::decide::mitigation::{diagnose, Diagnosis, Thresholds};
use crate::decide::{Decision, ErrorKind, EvaluationError, FailOn, Outcome, Verdict};
use commgate_core::result::{Failure, FileError, RunResult};
use commgate_trace::attribute::whatif::{Busbw, WhatIfOptions};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::attribute_paths;

pub mod paired;
pub mod several;
pub use several::{TrendPoint, WorkloadReport};

/// The report embeds a result (`bench`), so it shares the result file's version.
pub const SCHEMA_VERSION: u32 = commgate_core::result::SCHEMA_VERSION;

/// How `check` measures the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One run of the working tree against the baselines stored in the repository.
    #[default]
    Stored,
    /// The base commit and the working tree measured in alternating rounds on this runner, in
    /// the same job (`check --paired`).
    Paired,
}

/// Settings of the gate beyond the benchmark's (resolved by `config`).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    pub baselines: PathBuf,
    pub traces: Vec<PathBuf>,
    pub trace_name: String,
    pub attribute: AttributeOptions,
    /// The mitigation rules' thresholds, for the traces' mitigation and follow-up.
    pub thresholds: Thresholds,
    pub compare: CompareOptions,
    pub fail_on: FailOn,
    /// `--fail-on-savings-ms`: block when the late rank's cost grew by more than this.
    pub fail_on_savings_ms: Option<f64>,
    /// Set when the baselines and settings are the pull request's base commit's: `baselines`
    /// is then a private copy of that commit's tree.
    pub base: Option<BaseRef>,
}

impl CheckOptions {
    /// `path` (inside `baselines`) as the user knows it: inside the directory they named, not
    /// inside the private copy of the base commit's.
    fn shown(&self, path: &Path) -> PathBuf {
        match (&self.base, path.strip_prefix(&self.baselines)) {
            (Some(base), Ok(rel)) => base.dir.join(rel),
            _ => path.to_path_buf(),
        }
    }
}

/// The commit whose baselines and `commgate.toml` judged a pull request, and what the pull
/// request changed in them (which takes effect only once merged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseRef {
    /// The base commit (full SHA).
    pub sha: String,
    /// The baselines directory as named (`--baselines`, `[baseline] dir`, or `baselines`).
    pub dir: PathBuf,
    /// Files under it, or the settings file, that the pull request changes.
    pub changed: Vec<String>,
}

impl BaseRef {
    /// The reason a report gives when the pull request edits what judges it.
    pub fn edits_reason(&self) -> Option<String> {
        const SHOWN: usize = 5;
        if self.changed.is_empty() {
            return None;
        }
        let list: Vec<&str> = self.changed.iter().take(SHOWN).map(String::as_str).collect();
        let more = self.changed.len().saturating_sub(SHOWN);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let files = format!("{}{more}", list.join(", "));
        Some(format!(
            "this pull request changes {files}: judged with the base commit's baselines and settings ({}); \
             the changes apply once merged",
            &self.sha[..self.sha.len().min(12)]
        ))
    }
}

/// Where the baseline was looked for and what was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineRef {
    pub path: String,
    pub exists: bool,
    pub runs: usize,
    pub fingerprint_match: bool,
}

/// The check report (formats.md, "Check report"): the JSON written to `--output`, and the
/// data behind the Markdown PR comment and the terminal text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub schema_version: u32,
    /// Set when the gate could not judge the change (exit 2 unless `--fail-on never`). First,
    /// so the JSON leads with it; absent in reports from before it existed.
    #[serde(default)]
    pub error: Option<EvaluationError>,
    pub verdict: Decision,
    pub blocking: bool,
    pub reasons: Vec<String>,
    pub fail_on: FailOn,
    pub bench: Option<RunResult>,
    pub comparison: Option<Comparison>,
    pub attribution: Option<Diagnosis>,
    /// The traces against the stored trace runs of `--trace-name`, when both exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_comparison: Option<TraceComparison>,
    pub baseline: BaselineRef,
    /// In a pull request: the base commit that judged it (`None`: the working tree's files).
    #[serde(default)]
    pub base: Option<BaseRef>,
    /// Every workload, in order, when the gate judged several (absent for one: the top-level
    /// `bench`, `comparison` and `baseline` are always the first workload's, so a report of one
    /// workload, and one written before several existed, reads as it always has).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadReport>,
    /// The commit judged and the job that judged it, for the comment's second line (absent
    /// outside CI and in reports from before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobRef>,
    /// The benchmark's bus bandwidth against an nccl-tests sweep's ceiling of the same
    /// collective and size on the same kind of machine, when the store holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench_ceiling: Option<crate::baseline::ceiling::BenchCeiling>,
    /// The balance rule's figures, when `--fail-on-savings-ms` asked for them and the traces
    /// gave a what-if.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<Balance>,
    /// The paired measurement (`check --paired`): base and head measured in rounds on this
    /// runner, every round kept. The verdict is then the paired sequence's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired: Option<paired::PairedReport>,
}

/// Which commit a report judged and the job run that wrote it, each checked before it is kept:
/// a report may come from a fork's job, and its link ends up in a trusted comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRef {
    /// The head commit, 7 to 40 hex digits.
    pub commit: Option<String>,
    /// `https://HOST/OWNER/REPO/actions/runs/ID`.
    pub run_url: Option<String>,
}

impl JobRef {
    /// From the Actions environment (`GITHUB_SHA`, `GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`,
    /// `GITHUB_RUN_ID`), each part checked; `None` when nothing usable is set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<JobRef> {
        let commit = var("GITHUB_SHA").filter(|c| is_commit(c));
        let run_url = match (var("GITHUB_SERVER_URL"), var("GITHUB_REPOSITORY"), var("GITHUB_RUN_ID")) {
            (Some(server), Some(repo), Some(id)) => {
                runs_prefix(&server, &repo).filter(|_| is_run_id(&id)).map(|prefix| format!("{prefix}{id}"))
            }
            _ => None,
        };
        (commit.is_some() || run_url.is_some()).then_some(JobRef { commit, run_url })
    }

    /// What of a report's job reference (written elsewhere, perhaps by a fork's job) may be shown
    /// here: a commit that is hex, a run link only into this repository's runs (`runs_prefix`).
    pub fn vetted(&self, runs_prefix: Option<&str>) -> Option<JobRef> {
        let commit = self.commit.clone().filter(|c| is_commit(c));
        let run_url = self.run_url.clone().filter(|u| {
            runs_prefix
                .and_then(|p| u.strip_prefix(p))
                .is_some_and(|id| !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()))
        });
        (commit.is_some() || run_url.is_some()).then_some(JobRef { commit, run_url })
    }
}

/// `https://HOST/OWNER/REPO/actions/runs/` when the server is an https URL of plain host
/// characters and the repository an `OWNER/REPO` of name characters.
pub fn runs_prefix(server: &str, repo: &str) -> Option<String> {
    let host = server.strip_prefix("https://")?.trim_end_matches('/');
    let host_ok = !host.is_empty()
        && host.len() <= 200
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    };
    let repo_ok = matches!(repo.split('/').collect::<Vec<_>>().as_slice(), [o, n] if name(o) && name(n));
    (host_ok && repo_ok).then(|| format!("https://{host}/{repo}/actions/runs/"))
}

/// A workflow run's id: 1 to 20 digits.
fn is_run_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())
}

fn is_commit(c: &str) -> bool {
    (7..=40).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_hexdigit())
}

impl CheckReport {
    /// How this report ends the command, under the `--fail-on` it was judged with: the one
    /// place `check`'s exit code is decided ([`FailOn::outcome`]).
    pub fn outcome(&self) -> Outcome {
        let verdict = Verdict { decision: self.verdict, blocking: self.blocking, reasons: Vec::new() };
        self.fail_on.outcome(&verdict, self.error.as_ref())
    }
}

/// Judges `result` against the store under `opts.baselines`: a gate of one workload
/// ([`evaluate_all`]).
pub fn evaluate(result: RunResult, opts: &CheckOptions) -> Result<CheckReport, BadStoreName> {
    evaluate_all(vec![result], opts)
}

/// Judges every result against its own store under `opts.baselines`
/// (`<profile>/<workload id>.json`), all their metrics as one Holm family
/// ([`crate::decide::comparison::judge_together`]), the traces once, and makes one verdict. What cannot be
/// gathered (a run failed, a store directory or file is unusable, the traces cannot be read)
/// becomes the report's [`EvaluationError`], naming the workload when there are several; the
/// only `Err` is a result whose profile or workload id cannot name a baseline file (bad input,
/// exit 2 with no report). Each result is one run of its workload ([`evaluate_runs`] judges
/// several).
pub fn evaluate_all(results: Vec<RunResult>, opts: &CheckOptions) -> Result<CheckReport, BadStoreName> {
    evaluate_runs(results.into_iter().map(|r| vec![r]).collect(), opts)
}

/// [`evaluate_all`] with each workload's current side as K runs (`check --runs K`, or several
/// `--result` files of one workload, grouped by [`several::group_runs`]), judged together
/// ([`compare::prepare_runs`]); the report shows each workload's first run, or its first failed
/// one, whose failure is then the workload's evidence. An empty group is skipped.
pub fn evaluate_runs(workloads: Vec<Vec<RunResult>>, opts: &CheckOptions) -> Result<CheckReport, BadStoreName> {
    evaluate_runs_with(workloads, opts, attribute_traces(opts))
}

/// [`evaluate_runs`] with the traces already attributed ([`preflight`]).
pub fn evaluate_runs_with(
    workloads: Vec<Vec<RunResult>>,
    opts: &CheckOptions,
    traces: Option<Result<Diagnosis, EvaluationError>>,
) -> Result<CheckReport, BadStoreName> {
    let current: Vec<Current> = workloads.into_iter().filter_map(Current::of).collect();
    let several = current.len() > 1;
    let mut gathered = current.into_iter().map(|c| gather(c, opts, several)).collect::<Result<Vec<_>, _>>()?;
    let mut errors: Vec<EvaluationError> = gathered.iter().flat_map(|g| g.errors.iter().cloned()).collect();
    let attribution = traces.and_then(|t| t.map_err(|e| errors.push(e)).ok());
    // The traces are the job's, not a workload's: they are held against the first store that
    // keeps trace runs of this name, in the same Holm family as every workload's metrics.
    let stored_traces = gathered.iter().find_map(|g| g.store.as_ref().and_then(|f| f.traces.get(&opts.trace_name)));
    let traces_expected = stored_traces.is_some() && opts.traces.is_empty();
    let pending_traces = match (stored_traces, &attribution) {
        (Some(runs), Some(cur)) => {
            Some(trace_compare::prepare(&opts.trace_name, &runs.0, &cur.attribution, &opts.compare))
        }
        _ => None,
    };
    let balance = opts.fail_on_savings_ms.map(|limit| {
        let stored = stored_traces.map_or(&[][..], |runs| &runs.0[..]);
        balance::judge(limit, attribution.as_ref().map(|a| &a.attribution), stored)
    });
    let pending = gathered.iter_mut().filter_map(|g| g.pending.take()).collect();
    let (comparisons, trace_comparison) = judge_with_traces(pending, pending_traces, &opts.compare);
    let mut comparisons = comparisons.into_iter();
    for g in gathered.iter_mut().filter(|g| g.compared) {
        // The family's conclusion does not know how many runs each side held: set here.
        g.comparison = comparisons.next().map(|c| Comparison { current_runs: g.runs, ..c });
    }
    let bench_busbw: Vec<(String, f64)> = gathered.iter().filter_map(Gathered::busbw).collect();
    let attribution = attribution.map(|a| with_bench_busbw(a, &bench_busbw, &opts.attribute));
    let evidence: Vec<WorkloadEvidence<'_>> = gathered.iter().map(|g| g.evidence(several)).collect();
    let v = gate::decide(&Evidence {
        workloads: &evidence,
        errors: &errors,
        attribution: attribution.as_ref(),
        traces: trace_comparison.as_ref(),
        bench_busbw: &bench_busbw,
        // Unreadable traces were asked for: their error says so.
        traces_expected,
        balance: balance.as_ref(),
    });
    let mut reasons = v.reasons;
    reasons.extend(opts.base.as_ref().and_then(BaseRef::edits_reason));
    let workloads: Vec<WorkloadReport> =
        if several { gathered.iter().map(Gathered::report).collect() } else { Vec::new() };
    let first = gathered.into_iter().next();
    let baseline = first.as_ref().map_or_else(|| no_store(opts), Gathered::baseline_ref);
    let (bench, comparison) = first.map_or((None, None), |g| (Some(g.result), g.comparison));
    let bench_ceiling = bench.as_ref().and_then(|b| crate::baseline::ceiling::for_bench(&opts.baselines, b));
    Ok(CheckReport {
        paired: None,
        job: None,
        bench_ceiling,
        schema_version: SCHEMA_VERSION,
        error: errors.into_iter().next(),
        verdict: v.decision,
        blocking: v.blocking,
        reasons,
        fail_on: opts.fail_on,
        bench,
        comparison,
        attribution,
        trace_comparison,
        balance: balance.and_then(Result::ok),
        baseline,
        base: opts.base.clone(),
        workloads,
    })
}

/// The traces' what-if replayed again with the benchmark's measured bus bandwidth for its
/// collective, unless a `busbw` setting already chose one.
fn with_bench_busbw(mut a: Diagnosis, bench: &[(String, f64)], opts: &AttributeOptions) -> Diagnosis {
    if opts.what_if.busbw.is_some() {
        return a;
    }
    if let Some((collective, gbps)) = bench.iter().find(|(_, g)| *g > 0.0) {
        let busbw = Busbw {
            gbps: *gbps,
            set_by: format!("the benchmark's {collective}"),
            collective: Some(collective.clone()),
        };
        a.attribution.replay_what_if(&WhatIfOptions { busbw: Some(busbw), ..opts.what_if.clone() });
    }
    a
}

/// What was gathered for one workload before the family is judged.
struct Gathered {
    /// The run the report shows: the first, or the first that failed.
    result: RunResult,
    /// How many current runs of this workload were gathered.
    runs: usize,
    /// The store as the user knows it.
    shown: PathBuf,
    errors: Vec<EvaluationError>,
    missing: Option<String>,
    store: Option<BaselineFile>,
    /// Taken by the family; `compared` remembers that it was there.
    pending: Option<Pending>,
    compared: bool,
    comparison: Option<Comparison>,
}

impl Gathered {
    fn evidence(&self, several: bool) -> WorkloadEvidence<'_> {
        WorkloadEvidence {
            id: several.then_some(self.result.workload.id.as_str()),
            comparison: self.comparison.as_ref(),
            missing_baseline: self.missing.as_deref(),
        }
    }

    /// The benchmark's current bus bandwidth for its collective (GB/s), when it measured one.
    fn busbw(&self) -> Option<(String, f64)> {
        // A sweep's bandwidth is per size, not the benchmark's at its payload.
        if self.result.sweep.is_some() {
            return None;
        }
        let c = self.comparison.as_ref()?;
        let m = c.metrics.iter().find(|m| {
            m.row == commgate_core::result::Schedule::CommOnly && m.statistic == compare::Statistic::Median
        })?;
        let t = m.throughput.as_ref().filter(|t| t.kind == compare::ThroughputKind::BusbwGbps)?;
        Some((commgate_trace::classify::normalize_collective(&self.result.workload.collective)?, t.current))
    }

    fn baseline_ref(&self) -> BaselineRef {
        BaselineRef {
            path: self.shown.display().to_string(),
            exists: self.store.is_some(),
            runs: self.store.as_ref().map_or(0, |f| f.runs.len()),
            fingerprint_match: self.comparison.as_ref().is_some_and(|c| c.baseline.fingerprint_match),
        }
    }

    /// This workload's own part of the report: its verdict as if it were judged alone (its
    /// metrics still adjusted with the family's), without the job's traces.
    fn report(&self) -> WorkloadReport {
        let own = [self.evidence(false)];
        let v = gate::decide(&Evidence {
            workloads: &own,
            errors: &self.errors,
            attribution: None,
            traces: None,
            bench_busbw: &[],
            traces_expected: false,
            balance: None,
        });
        WorkloadReport {
            id: self.result.workload.id.clone(),
            result: self.result.clone(),
            comparison: self.comparison.clone(),
            baseline: self.baseline_ref(),
            error: self.errors.first().cloned(),
            verdict: v.decision,
            blocking: v.blocking,
            reasons: v.reasons,
            trend: several::trend(self.store.as_ref(), &self.result),
        }
    }
}

/// One workload's current runs, in order, and the one the report shows.
struct Current {
    /// The first run, or the first that failed (its failure is then the workload's evidence).
    result: RunResult,
    /// Its index in `runs`.
    shown: usize,
    runs: Vec<RunResult>,
}

impl Current {
    /// `None` for no runs.
    fn of(runs: Vec<RunResult>) -> Option<Current> {
        let shown = runs.iter().position(|r| r.failure.is_some()).unwrap_or(0);
        let result = runs.get(shown)?.clone();
        Some(Current { result, shown, runs })
    }
}

/// One workload's store looked up and its comparison prepared (not yet judged). `runs` are its
/// current runs, at least one; a failed one is the workload's evidence.
fn gather(current: Current, opts: &CheckOptions, several: bool) -> Result<Gathered, BadStoreName> {
    let Current { result, shown: shown_run, runs } = current;
    let count = runs.len();
    let path = baseline::store_path(&opts.baselines, &result)?;
    let shown = opts.shown(&path);
    let mut errors = Vec::new();
    if let Some(f) = &result.failure {
        let which = if count > 1 { format!("run {} of {count}: ", shown_run + 1) } else { String::new() };
        let mut e = bench_failed(f);
        e.message = format!("{which}{}", e.message);
        errors.push(e);
    }
    let lookup = find_store(&opts.baselines, &path, &shown);
    let user_dir = opts.base.as_ref().map_or(opts.baselines.as_path(), |b| b.dir.as_path());
    let (pending, missing) = match &lookup {
        // The store is unusable: its error says so, no second reason.
        Err(_) => (None, None),
        Ok(None) => (None, Some(missing_baseline_reason(&shown, user_dir))),
        // A failed run has nothing to compare: its error is the whole story.
        Ok(Some(_)) if result.failure.is_some() => (None, None),
        Ok(Some(file)) => match file.runs.last().and_then(|last| last.workload.difference(&result.workload)) {
            Some((field, base, cur)) => (
                None,
                Some(format!(
                    "the baseline {} measured another workload (`workload.{field}`: {base} there, {cur} now): {}",
                    shown.display(),
                    commgate_core::result::Workload::mismatch_advice(field)
                )),
            ),
            None => {
                warn_if_stored(&file.runs, &runs, &shown);
                let b = Baseline { path: shown.clone(), runs: file.runs.clone() };
                (Some(compare::prepare_runs_kept(&b, &runs, &opts.compare, &file.ceilings)), None)
            }
        },
    };
    let store = lookup.unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    if several {
        // Which workload could not be evaluated, in the one line that says so.
        for e in &mut errors {
            e.message = format!("workload {}: {}", result.workload.id, e.message);
        }
    }
    let compared = pending.is_some();
    Ok(Gathered { result, runs: count, shown, errors, missing, store, pending, compared, comparison: None })
}

/// Warns when a current run is already in the store (a stored result judged again by hand): it
/// is then compared with itself among the others, which pulls the verdict towards "no change".
fn warn_if_stored(stored: &[RunResult], current: &[RunResult], shown: &Path) {
    let ids: Vec<baseline::RunId> = current.iter().map(baseline::run_id).collect();
    let again = stored.iter().filter(|r| ids.contains(&baseline::run_id(r))).count();
    if again > 0 {
        commgate_core::diag::warn(format_args!(
            "the run being judged is already in the baseline {} ({again} of its {} runs): it is compared with itself, \
             which pulls the verdict towards no change; judge a run that is not stored yet",
            shown.display(),
            stored.len()
        ));
    }
}

/// The baseline reference of a report with no result: the store directory.
pub(crate) fn no_store(opts: &CheckOptions) -> BaselineRef {
    BaselineRef { path: opts.baselines.display().to_string(), exists: false, runs: 0, fingerprint_match: false }
}

/// The report of a `check` whose benchmark could not even start (the machine lacks what the
/// backend needs, or its result could not be written): no result to judge, so no baseline was
/// looked up; `baseline.path` is the store directory.
pub fn could_not_run(message: impl Into<String>, opts: &CheckOptions) -> CheckReport {
    not_started(EvaluationError::new(ErrorKind::BenchUnavailable, message), opts)
}

/// What `check` can find wrong with its inputs before the benchmark runs (which can take
/// minutes on GPUs): the store directory and each workload's store file (`stores`: profile and
/// workload id), and the traces, read and attributed here once. The first problem is an error
/// for the report ([`not_started`]); else the traces' attribution, when there are traces.
pub fn preflight<'a>(
    opts: &CheckOptions,
    stores: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Option<Diagnosis>, EvaluationError> {
    for (profile, workload) in stores {
        // A name that cannot be a store file is the benchmark's own error, reported after it.
        let Ok(path) = baseline::store_path_for(&opts.baselines, profile, workload) else { continue };
        find_store(&opts.baselines, &path, &opts.shown(&path))?;
    }
    attribute_traces(opts).transpose()
}

/// The `--traces`, attributed (`None` without any).
fn attribute_traces(opts: &CheckOptions) -> Option<Result<Diagnosis, EvaluationError>> {
    (!opts.traces.is_empty()).then(|| {
        attribute_paths(&opts.traces, &opts.attribute)
            .map(|a| diagnose(a, &opts.thresholds))
            .map_err(|e| EvaluationError::new(ErrorKind::TracesUnreadable, e.to_string()))
    })
}

/// The report of a `check` that did not start its benchmark: `error` says why.
pub fn not_started(error: EvaluationError, opts: &CheckOptions) -> CheckReport {
    let errors = [error];
    let v = gate::decide(&Evidence {
        workloads: &[],
        errors: &errors,
        attribution: None,
        traces: None,
        bench_busbw: &[],
        traces_expected: false,
        balance: None,
    });
    let [error] = errors;
    CheckReport {
        job: None,
        bench_ceiling: None,
        balance: None,
        paired: None,
        schema_version: SCHEMA_VERSION,
        error: Some(error),
        verdict: v.decision,
        blocking: v.blocking,
        reasons: v.reasons,
        fail_on: opts.fail_on,
        bench: None,
        comparison: None,
        attribution: None,
        trace_comparison: None,
        baseline: no_store(opts),
        base: opts.base.clone(),
        workloads: Vec::new(),
    }
}

fn bench_failed(f: &Failure) -> EvaluationError {
    let rank = f.rank.map(|r| format!(" on rank {r}")).unwrap_or_default();
    EvaluationError::new(ErrorKind::BenchFailed, format!("{}{rank}: {}", f.kind, f.message))
}

/// The baseline file at `path` inside the store `dir`: `None` when there is none yet (honestly
/// missing evidence); an error when the directory itself is missing (a misspelled
/// `--baselines` must not pass as "no baseline yet") or the file cannot be used. Errors name the
/// file as `shown` (the path the user knows, not a private copy of the base commit's).
fn find_store(dir: &Path, path: &Path, shown: &Path) -> Result<Option<BaselineFile>, EvaluationError> {
    if !dir.is_dir() {
        let what = if dir.exists() { "is not a directory" } else { "does not exist" };
        return Err(EvaluationError::new(
            ErrorKind::BaselinesMissing,
            format!(
                "{} {what}: check --baselines (or COMMGATE_BASELINES, or `[baseline] dir` in commgate.toml); \
                 for a first baseline, create the directory and record one with \
                 `commgate baseline update --from RESULT --baselines {}`",
                dir.display(),
                dir.display()
            ),
        ));
    }
    // Only "no such file" is "no baseline yet": a profile directory that is a file, a link loop
    // or a directory the runner cannot read must not pass as missing evidence.
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(EvaluationError::new(
                ErrorKind::BaselineInvalid,
                format!(
                    "{} cannot be read ({}): the store's directories must be readable directories and the store a \
                     plain file; fix them, or restore them from the main branch's history",
                    shown.display(),
                    commgate_core::input::plain_message(&e.to_string())
                ),
            ))
        }
    }
    let file = baseline::load_store(path).map_err(|e: FileError| {
        let e = FileError { path: shown.display().to_string(), ..e };
        EvaluationError::new(
            ErrorKind::BaselineInvalid,
            format!("{e} (fix the file, or restore it from the main branch's history)"),
        )
    })?;
    // A store judges only where it belongs: one copied under another profile's or workload's
    // name would judge that one.
    let profile = path.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
    let workload = path.file_stem().map(|n| n.to_string_lossy().into_owned());
    if profile.as_deref() != Some(file.environment_profile.as_str())
        || workload.as_deref() != Some(file.workload_id.as_str())
    {
        return Err(EvaluationError::new(
            ErrorKind::BaselineInvalid,
            format!(
                "{} holds the baseline of profile {:?} and workload {:?}, not of the ones its path names: a store is \
                 judged only where `baseline update` put it (restore it from the main branch's history)",
                shown.display(),
                file.environment_profile,
                file.workload_id
            ),
        ));
    }
    Ok(Some(file))
}

/// A missing baseline says exactly which command creates it.
fn missing_baseline_reason(path: &Path, dir: &Path) -> String {
    format!(
        "no baseline at {}: record one on this hardware with `commgate baseline update --from RESULT --baselines {}` \
         (on main, after a trusted run)",
        path.display(),
        dir.display()
    )
}

/// Loads a check report written earlier (for `commgate comment --report`).
pub fn load_report(path: &Path) -> Result<CheckReport, FileError> {
    let report: CheckReport = commgate_core::result::read_versioned(path, "commgate check report")?;
    consistent(&report).map_err(|why| {
        FileError::new(
            path,
            format!(
                "contradicts itself: {why}; it was not written by `commgate check` as it stands: run the check again"
            ),
        )
    })?;
    Ok(report)
}

/// Whether a report's verdict follows from its own evidence ([`gate::contradiction`], the rule):
/// `Err` names the first contradiction.
pub fn consistent(r: &CheckReport) -> Result<(), String> {
    let comparisons = r.comparison.iter().chain(r.workloads.iter().filter_map(|w| w.comparison.as_ref()));
    let errors = r.error.iter().chain(r.workloads.iter().filter_map(|w| w.error.as_ref()));
    let paired = r.paired.as_ref().and_then(|p| p.contradiction(r.verdict, r.blocking));
    match paired
        .or_else(|| gate::contradiction(r.verdict, r.blocking, errors, comparisons, r.trace_comparison.as_ref()))
    {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_testkit::results as fixtures;

    fn options(baselines: &Path) -> CheckOptions {
        CheckOptions {
            baselines: baselines.to_path_buf(),
            traces: Vec::new(),
            trace_name: "default".into(),
            attribute: AttributeOptions::default(),
            thresholds: Thresholds::default(),
            compare: CompareOptions::default(),
            fail_on: FailOn::Regression,
            fail_on_savings_ms: None,
            base: None,
        }
    }

    fn run() -> RunResult {
        fixtures::run(&(0..60).map(|i| 10.0 + f64::from(i % 7) * 0.01).collect::<Vec<_>>())
    }

    fn kind(r: &CheckReport) -> Option<ErrorKind> {
        r.error.as_ref().map(|e| e.kind)
    }

    #[test]
    fn no_baseline_yet_is_missing_evidence_that_passes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = evaluate(run(), &options(tmp.path())).expect("evaluates");
        assert_eq!((r.error.as_ref(), r.verdict, r.outcome()), (None, Decision::CollectMoreEvidence, Outcome::Passed));
        assert!(r.reasons[0].contains("commgate baseline update --from RESULT --baselines"), "{:?}", r.reasons);
    }

    #[test]
    fn a_missing_baselines_directory_could_not_be_evaluated() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = evaluate(run(), &options(&tmp.path().join("baselnes"))).expect("evaluates");
        assert_eq!(kind(&r), Some(ErrorKind::BaselinesMissing));
        assert_eq!(r.outcome(), Outcome::CouldNotEvaluate);
        assert!(r.reasons[0].starts_with("could not evaluate: the baselines directory does not exist ("), "{r:?}");
        assert_eq!(r.reasons.len(), 1, "no second 'no baseline' reason: {:?}", r.reasons);
        let never = CheckReport { fail_on: FailOn::Never, ..r };
        assert_eq!(never.outcome(), Outcome::Passed);
    }

    /// The profile's directory is a file, or a link to itself: the store cannot be read, which
    /// is not the same as "no baseline yet".
    #[test]
    fn a_store_behind_a_file_or_a_link_loop_could_not_be_evaluated() {
        for make in [
            |dir: &Path| std::fs::write(dir, "not a directory").expect("write"),
            |dir: &Path| std::os::unix::fs::symlink(dir, dir).expect("symlink"),
        ] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let path = baseline::store_path(tmp.path(), &run()).expect("path");
            let profile = path.parent().expect("dir");
            std::fs::create_dir_all(profile.parent().expect("parent")).expect("mkdir");
            make(profile);
            let r = evaluate(run(), &options(tmp.path())).expect("evaluates");
            assert_eq!(kind(&r), Some(ErrorKind::BaselineInvalid), "{r:?}");
            assert_eq!(r.outcome(), Outcome::CouldNotEvaluate);
            assert!(r.reasons.iter().all(|x| !x.contains("no baseline at")), "{:?}", r.reasons);
        }
    }

    /// A store copied to another profile's path would judge that profile: refused.
    #[test]
    fn a_store_under_another_name_could_not_be_evaluated() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = baseline::store_path(tmp.path(), &run()).expect("path");
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        let mut other = run();
        other.environment_profile = "OTHER-PROFILE".into();
        let store = BaselineFile {
            schema_version: commgate_core::result::SCHEMA_VERSION,
            environment_profile: other.environment_profile.clone(),
            workload_id: other.workload.id.clone(),
            runs: vec![other],
            history: Vec::new(),
            traces: Default::default(),
            ceilings: Vec::new(),
        };
        std::fs::write(&path, serde_json::to_string(&store).expect("json")).expect("write");
        let r = evaluate(run(), &options(tmp.path())).expect("evaluates");
        assert_eq!(kind(&r), Some(ErrorKind::BaselineInvalid), "{r:?}");
        assert!(r.error.as_ref().is_some_and(|e| e.message.contains("not of the ones its path names")), "{r:?}");
    }

    #[test]
    fn a_corrupt_store_could_not_be_evaluated() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = baseline::store_path(tmp.path(), &run()).expect("path");
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, "{\"schema_version\": 1, \"runs\": [").expect("write");
        let r = evaluate(run(), &options(tmp.path())).expect("evaluates");
        assert_eq!(kind(&r), Some(ErrorKind::BaselineInvalid));
        assert!(r.error.as_ref().is_some_and(|e| e.message.contains(&path.display().to_string())), "{r:?}");
        assert_eq!(r.outcome(), Outcome::CouldNotEvaluate);
    }

    #[test]
    fn a_failed_run_could_not_be_evaluated_and_unreadable_traces_follow_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut failed = run();
        failed.failure = Some(Failure { kind: "timeout".into(), message: "no repeat finished".into(), rank: Some(1) });
        let opts = CheckOptions { traces: vec![tmp.path().join("no-such-trace.json")], ..options(tmp.path()) };
        let r = evaluate(failed, &opts).expect("evaluates");
        let error = r.error.as_ref().expect("an error");
        assert_eq!(
            error.to_string(),
            "could not evaluate: the benchmark failed (timeout on rank 1: no repeat finished)"
        );
        assert_eq!(r.reasons[0], error.to_string());
        assert!(r.reasons[1].starts_with("could not evaluate: the traces could not be read ("), "{:?}", r.reasons);
        assert!(r.comparison.is_none() && !r.blocking);
        assert_eq!(r.outcome(), Outcome::CouldNotEvaluate);
    }

    #[test]
    fn a_benchmark_that_could_not_run_still_gets_a_report() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = could_not_run("no CUDA device", &options(tmp.path()));
        assert_eq!(kind(&r), Some(ErrorKind::BenchUnavailable));
        assert_eq!(r.reasons, ["could not evaluate: the benchmark could not run (no CUDA device)"]);
        assert_eq!(r.outcome(), Outcome::CouldNotEvaluate);
    }

    #[test]
    fn reports_without_an_error_field_still_load() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = evaluate(run(), &options(tmp.path())).expect("evaluates");
        let mut json = serde_json::to_value(&r).expect("json");
        json.as_object_mut().expect("object").remove("error");
        let path = tmp.path().join("old-report.json");
        std::fs::write(&path, json.to_string()).expect("write");
        assert_eq!(load_report(&path).expect("loads").error, None);
    }
}
