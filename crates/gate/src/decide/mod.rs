//! Every rule that turns evidence into a verdict, a state of the gate or a mitigation, one file per
//! decision, so that "where is this decided?" has one answer:
//!
//! | file | decides |
//! |---|---|
//! | [`vocab`] | nothing: the words every decision returns (decisions, verdicts, outcomes, evaluation errors, `--fail-on`, mitigations) |
//! | [`bench_run`] | a benchmark run's own verdict on overlap (the result file's `decision`) |
//! | [`metric_state`] | a metric's state: the four-state rule (benchmark and trace metrics), and what keeps a benchmark metric that looks regressed from blocking |
//! | [`comparison`] | a comparison's verdict against its baseline, and the hardware/software wording |
//! | [`mitigation`] | the one evidence → strategy table: the mitigation rules and the trace causes' |
//! | [`late_rank`] | whether a regressed collective's late rank is named (`LATE_RANK_SHARE`) |
//! | [`balance`] | whether the late rank's cost (the what-if's saving) grew past `--fail-on-savings-ms` |
//! | [`gate`] | the gate's verdict over every workload and the traces, and every exit code |
//! | [`paired`] | a paired measurement's metric states after each round, when its rounds stop, and the verdict they stop with |
//!
//! This layer sits above the work (`bench`, `compare`, `trace`): those compute estimates and call
//! no decision. A metric's state is decided by [`metric_state`]'s rules, which [`comparison`]
//! hands to `compare` ([`metric_state::RULES`]) when it runs it, so `compare` never imports this
//! layer; the callers (`check`, the binary's `commands`) hand the rest of the evidence here.

pub mod balance;
pub mod bench_run;
pub mod comparison;
pub mod gate;
pub mod late_rank;
pub mod metric_state;
pub mod mitigation;
pub mod paired;
pub use commgate_core::vocab;

pub use gate::FailOn;
pub use vocab::{Decision, ErrorKind, EvaluationError, Followup, Mitigation, Outcome, Strategy, Verdict};
