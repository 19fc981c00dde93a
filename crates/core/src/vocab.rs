//! The gate's vocabulary: the three decisions, the [`Verdict`] every decision in `decide/`
//! returns (a run's own verdict, a comparison's, the trace follow-up's and the gate's), how a
//! command ended ([`Outcome`]), what could not be gathered ([`EvaluationError`]) and what
//! how it exits. Words only: the rules that choose among them are the other
//! files of `decide/`. One type each, so that a decision made in one place reads the same
//! wherever it is stored, displayed or combined; result files and reports below the decision
//! layer name these words and nothing else of it.

use serde::{Deserialize, Serialize};

/// What to do about the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Accept,
    Tune,
    CollectMoreEvidence,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Accept => "accept",
            Decision::Tune => "tune",
            Decision::CollectMoreEvidence => "collect_more_evidence",
        }
    }
}

/// A decision, whether it blocks a merge, and why (most important reason first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    pub blocking: bool,
    pub reasons: Vec<String>,
}

impl Verdict {
    /// A decision that does not block.
    pub fn new(decision: Decision, reasons: Vec<String>) -> Self {
        Verdict { decision, blocking: false, reasons }
    }

    /// A confirmed regression: `tune`, blocking.
    pub fn regression(reasons: Vec<String>) -> Self {
        Verdict { decision: Decision::Tune, blocking: true, reasons }
    }

    /// A decision with one reason, not blocking.
    pub fn because(decision: Decision, reason: String) -> Self {
        Verdict::new(decision, vec![reason])
    }
}

/// How a command ended; `main` maps it to the exit code ([`Outcome::exit_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Passed,
    /// Exit 1: the verdict is one the user asked to block on.
    Blocked,
    /// Exit 2: the gate could not judge the change (the report says why).
    CouldNotEvaluate,
}

/// Why the gate could not judge the change. Part of the check report, so the PR comment and the
/// JSON say exactly what failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("could not evaluate: {} ({message})", kind.summary())]
pub struct EvaluationError {
    pub kind: ErrorKind,
    /// What failed and what to do. It quotes files and the failed run (untrusted): renderers
    /// escape it.
    pub message: String,
}

impl EvaluationError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        EvaluationError { kind, message: message.into() }
    }
}

/// What could not be gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The benchmark ran and failed: a rank died, a collective hung past `--timeout`, … (the
    /// result's `failure`).
    BenchFailed,
    /// The benchmark could not start (the machine lacks what the backend needs) or its result
    /// could not be written.
    BenchUnavailable,
    /// The baselines directory does not exist (a misspelled `--baselines`, say).
    BaselinesMissing,
    /// The baseline file exists but does not parse or validate.
    BaselineInvalid,
    /// `--traces` were given and could not be read.
    TracesUnreadable,
    /// A paired check could not measure one of its arms: the base commit could not be
    /// materialised, or an arm's `prepare`, `capture` or benchmark failed or timed out.
    ArmFailed,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BenchFailed => "bench_failed",
            ErrorKind::BenchUnavailable => "bench_unavailable",
            ErrorKind::BaselinesMissing => "baselines_missing",
            ErrorKind::BaselineInvalid => "baseline_invalid",
            ErrorKind::TracesUnreadable => "traces_unreadable",
            ErrorKind::ArmFailed => "arm_failed",
        }
    }

    /// The failure in a few words, for the report's first line.
    pub fn summary(self) -> &'static str {
        match self {
            ErrorKind::BenchFailed => "the benchmark failed",
            ErrorKind::BenchUnavailable => "the benchmark could not run",
            ErrorKind::BaselinesMissing => "the baselines directory does not exist",
            ErrorKind::BaselineInvalid => "the baseline file cannot be used",
            ErrorKind::TracesUnreadable => "the traces could not be read",
            ErrorKind::ArmFailed => "an arm of the paired check could not be measured",
        }
    }
}

/// What kind of job the evidence describes, for the measurements that exist for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// Aggregated events: the measurements the rules were first written with, whatever the job.
    Aggregated,
    /// Traces with mixture-of-experts markers (`moe`, `expert`, DeepEP kernels, …).
    Moe,
    /// Traces without them: no experts, no tokens routed between ranks.
    Dense,
}

/// The mitigations, as the result, the reports and the PR comment name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    RebalanceRanksOrExperts,
    IncreaseOverlapOrDelaySync,
    ReduceRoutingTraffic,
    InspectCollectivePayloadAndSchedule,
    CollectTrace,
    /// Trace evidence only (`check --traces`): the collective moves its bytes more slowly, with
    /// no rank keeping the others waiting: NCCL's algorithm, protocol and channels, and the
    /// framework's bucket sizes.
    TuneCollectiveTransport,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::RebalanceRanksOrExperts => "rebalance_ranks_or_experts",
            Strategy::IncreaseOverlapOrDelaySync => "increase_overlap_or_delay_sync",
            Strategy::ReduceRoutingTraffic => "reduce_routing_traffic",
            Strategy::InspectCollectivePayloadAndSchedule => "inspect_collective_payload_and_schedule",
            Strategy::CollectTrace => "collect_trace",
            Strategy::TuneCollectiveTransport => "tune_collective_transport",
        }
    }

    /// What to measure next when this mitigation is tried on a job of this kind: expert and
    /// token measurements only where the job routes tokens to experts (and for aggregated events,
    /// whose rules name them).
    pub fn next_measurements(self, job: Job) -> &'static [&'static str] {
        match (self, job) {
            (Strategy::RebalanceRanksOrExperts, Job::Dense) => {
                &["rank_elapsed_ms", "per_rank_payload_bytes", "step_time_ms"]
            }
            (Strategy::ReduceRoutingTraffic, Job::Dense) => {
                &["payload_bytes", "per_rank_payload_bytes", "exposed_comm_ms"]
            }
            (strategy, _) => strategy.measurements_for_any_job(),
        }
    }

    /// The measurements for this mitigation whatever the job (the rules' first list).
    fn measurements_for_any_job(self) -> &'static [&'static str] {
        match self {
            Strategy::RebalanceRanksOrExperts => &["rank_elapsed_ms", "expert_load_skew", "cross_rank_token_ratio"],
            Strategy::IncreaseOverlapOrDelaySync => &["exposed_comm_ms", "overlap_ratio", "step_time_ms"],
            Strategy::ReduceRoutingTraffic => {
                &["dispatch_payload_bytes", "cross_rank_token_ratio", "throughput_tokens_per_s"]
            }
            Strategy::InspectCollectivePayloadAndSchedule => &["payload_bytes", "exposed_comm_ms", "rank_elapsed_ms"],
            Strategy::CollectTrace => &["rank_elapsed_ms", "payload_bytes"],
            Strategy::TuneCollectiveTransport => {
                &["busbw_gbps_by_message_size", "nccl_algo_protocol", "bucket_size_bytes"]
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mitigation {
    pub strategy: Strategy,
    /// The collective it applies to; `None` when there is no priority.
    pub target: Option<String>,
    pub next_measurements: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Followup {
    pub decision: Decision,
    pub reason: String,
    pub next_measurements: Vec<String>,
}

impl Outcome {
    /// The process exit code: 0 passed, 1 blocked, 2 could not evaluate.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Passed => 0,
            Outcome::Blocked => 1,
            Outcome::CouldNotEvaluate => 2,
        }
    }
}
