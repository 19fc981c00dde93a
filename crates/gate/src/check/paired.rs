//! The evidence of a paired measurement: rounds of the base arm and the head arm measured one
//! after the other on this runner, in an order drawn at random each round (so neither arm is
//! always first, after a warm cache or into a slow minute), until the rules of
//! [`crate::decide::paired`] stop the sequence, the plan's last round is done or the time
//! budget ends; and the report's `paired` section made of it.
//!
//! How an arm is measured is the caller's (`run`: a benchmark process in the arm's tree, a mock
//! in tests); this module only orders, reduces and asks. A run that fails, or two runs that
//! cannot be compared, end the sequence with an error naming the round and the arm: a paired
//! gate never falls back to anything else.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{no_store, CheckOptions, CheckReport, SCHEMA_VERSION};
use crate::compare::paired::{judged_collectives, round, ArmMedians, PairedMetric, Round};
use crate::compare::State;
use crate::decide::metric_state::four_states;
use crate::decide::paired::{acceptance, standing, Budget, Plans, Standing};
use crate::decide::{Decision, ErrorKind, EvaluationError, Verdict};
use commgate_core::result::{RunResult, Schedule};
use commgate_stats::paired::Next;
use commgate_stats::rng::Rng;

/// Rounds a paired check may run at most by default: at one to two minutes a round on GPUs, a
/// CI job's worth.
pub const DEFAULT_MAX_ROUNDS: usize = 10;

/// The most rounds a paired check may be asked for.
pub const MAX_ROUNDS: usize = 100;

/// Minutes a paired check may run by default before it stops undecided.
pub const DEFAULT_BUDGET_MINUTES: f64 = 20.0;

/// `[check] max_rounds`: from the first look's rounds up to [`MAX_ROUNDS`].
pub fn max_rounds(value: &usize) -> Result<(), String> {
    let first = commgate_stats::paired::MIN_ROUNDS;
    if (first..=MAX_ROUNDS).contains(value) {
        Ok(())
    } else {
        Err(format!(
            "give {first} to {MAX_ROUNDS} rounds (the first look is after {first}; default {DEFAULT_MAX_ROUNDS})"
        ))
    }
}

/// `[check] budget_minutes`: more than 0, at most a day.
pub fn budget_minutes(value: &f64) -> Result<(), String> {
    if value.is_finite() && *value > 0.0 && *value <= 1440.0 {
        Ok(())
    } else {
        Err(format!("give more than 0 and at most 1440 minutes (default {DEFAULT_BUDGET_MINUTES})"))
    }
}

/// `[check] prepare`: one shell command line of at most 4096 bytes.
#[expect(clippy::ptr_arg, reason = "a setting's limit takes `&T`, and this `T` is `String`")]
pub fn prepare(value: &String) -> Result<(), String> {
    command_line(value)
}

/// `[check] capture`: as `prepare`, and it must name `{out}`, the directory its traces go to.
#[expect(clippy::ptr_arg, reason = "a setting's limit takes `&T`, and this `T` is `String`")]
pub fn capture(value: &String) -> Result<(), String> {
    command_line(value)?;
    if value.contains("{out}") {
        Ok(())
    } else {
        Err("it must contain {out}, replaced by the directory the arm's traces are to be written to".to_string())
    }
}

fn command_line(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        Err("it is empty: give a shell command, or remove the key".to_string())
    } else if value.len() > 4096 || value.contains('\0') {
        Err("give one shell command of at most 4096 bytes, without NUL bytes".to_string())
    } else {
        Ok(())
    }
}

/// One side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// The pull request's base commit.
    Base,
    /// The working tree.
    Head,
}

impl Arm {
    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Base => "base",
            Arm::Head => "head",
        }
    }
}

/// A round as measured: which arm ran first, and the round's log ratios.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    pub first: Arm,
    pub round: Round,
}

/// Every round and where the sequence stood after the last.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedEvidence {
    pub rounds: Vec<RoundRecord>,
    pub standing: Standing,
}

/// Why the sequence could not go on: the round (1-based), the arm when one is to blame, and
/// what; with the rounds finished before it.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedError {
    pub round: usize,
    pub arm: Option<Arm>,
    pub message: String,
    pub done: Vec<RoundRecord>,
}

impl fmt::Display for PairedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.arm {
            Some(arm) => write!(f, "round {}, the {} arm: {}", self.round, arm.as_str(), self.message),
            None => write!(f, "round {}: {}", self.round, self.message),
        }
    }
}

/// One arm measured once: its benchmark's result, and with `[check] capture` each collective's
/// exposed time (ms) in its own training step's traces.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmRun {
    pub result: RunResult,
    pub captured: Vec<(String, f64)>,
}

impl From<RunResult> for ArmRun {
    fn from(result: RunResult) -> ArmRun {
        ArmRun { result, captured: Vec::new() }
    }
}

/// Runs rounds under `plans` until the rules stop them (δ the smallest change worth acting on),
/// each round's order drawn from `seed`. `run(arm, round)` measures one arm once; `time_up()`
/// is asked after each round (true: the time budget has ended, stop undecided). The first
/// round's captures fix which collectives are judged (`judged_collectives`).
pub fn measure_rounds(
    plans: Plans,
    delta: f64,
    seed: u64,
    mut time_up: impl FnMut() -> bool,
    mut run: impl FnMut(Arm, usize) -> Result<ArmRun, String>,
) -> Result<PairedEvidence, PairedError> {
    let mut rng = Rng::new(seed);
    let mut records: Vec<RoundRecord> = Vec::new();
    let mut judged: Option<Vec<String>> = None;
    loop {
        let number = records.len() + 1;
        let first = if rng.below(2) == 0 { Arm::Base } else { Arm::Head };
        let second = if first == Arm::Base { Arm::Head } else { Arm::Base };
        let mut measure = |arm: Arm, records: &[RoundRecord]| {
            run(arm, number).map_err(|message| PairedError {
                round: number,
                arm: Some(arm),
                message,
                done: records.to_vec(),
            })
        };
        let a = measure(first, &records)?;
        let b = measure(second, &records)?;
        let (base, head) = if first == Arm::Base { (a, b) } else { (b, a) };
        let names = judged.get_or_insert_with(|| judged_collectives(&base.captured, &head.captured));
        let round = round(&base.result, &head.result)
            .map_err(|message| PairedError { round: number, arm: None, message, done: records.clone() })?
            .with_captures(names, &base.captured, &head.captured);
        records.push(RoundRecord { first, round });
        let rounds: Vec<Round> = records.iter().map(|r| r.round.clone()).collect();
        let budget = if time_up() { Budget::TimeSpent } else { Budget::Left };
        let now = standing(&rounds, plans, delta, budget);
        if now.next != Next::AnotherRound {
            return Ok(PairedEvidence { rounds: records, standing: now });
        }
    }
}

/// How the sequence was set up: what the report says it compared, and under which plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedSetup {
    /// The base commit's SHA.
    pub base: String,
    /// The family's two-sided α over every metric and look.
    pub alpha: f64,
    /// The smallest relative change worth acting on.
    pub delta: f64,
    pub max_rounds: usize,
    pub budget_minutes: f64,
    /// The seed of each round's order.
    pub seed: u64,
    /// The command run once in each arm's tree before its first round, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<String>,
    /// The command run in each arm's tree before its benchmark in every round, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<String>,
}

/// How the sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// A look settled it: `accept` or a confirmed regression.
    Decided,
    /// The plan's last round was done undecided.
    MaxRounds,
    /// The time budget ended undecided.
    TimeBudget,
    /// An arm could not be measured (the report's `error`).
    Failed,
}

/// One round in the report: which arm ran first, each metric's ratio head / base (`null` where
/// undefined), and each schedule's medians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRound {
    pub round: usize,
    pub first: Arm,
    pub ratios: Vec<MetricRatio>,
    pub medians: Vec<ArmMedians>,
    /// With `capture`: each collective's exposed time in the arms' own training steps, as the
    /// attribution of each arm's traces of this round measured it (recorded, not yet judged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capture: Vec<CapturedCollective>,
}

/// One collective of a round's captures: its exposed time (ms, over the capture) in each arm,
/// `None` where that arm's traces did not have it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedCollective {
    pub collective: String,
    pub base_exposed_ms: Option<f64>,
    pub head_exposed_ms: Option<f64>,
}

/// A metric's ratio head / base in one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRatio {
    pub metric: String,
    pub ratio: Option<f64>,
}

/// A metric after the last round: its state, the ratio over the rounds (`exp` of the mean log
/// ratio), its interval at the level the last look spent, the one-sided p-values, and the
/// smallest change the rounds can show. The figures are absent before the first look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedMetricReport {
    pub metric: String,
    pub state: State,
    pub ratio: Option<f64>,
    pub ci: Option<[f64; 2]>,
    /// The two-sided level this look spent (`1 − level` is the interval's confidence).
    pub level_spent: Option<f64>,
    pub p_slower: Option<f64>,
    pub p_faster: Option<f64>,
    pub mde: Option<f64>,
}

/// The `paired` section of a check report: the setup, every round, and every metric's standing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedReport {
    pub setup: PairedSetup,
    pub stop: Stop,
    /// Wall time of the whole sequence (prepare included), seconds.
    pub elapsed_s: f64,
    pub rounds: Vec<PairedRound>,
    pub metrics: Vec<PairedMetricReport>,
    /// The head arm's last run against this runner's stored baseline, when there is one: the
    /// runner's history, shown beside the paired verdict and never part of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
}

impl PairedReport {
    /// "head vs base on this runner, 6 rounds, interleaved".
    pub fn compared(&self) -> String {
        let n = self.rounds.len();
        format!("head vs base on this runner, {n} round{}, interleaved", if n == 1 { "" } else { "s" })
    }

    /// Whether the metrics' states contradict the verdict (a report read back from a file):
    /// `Err` names the first contradiction.
    pub fn contradiction(&self, verdict: Decision, blocking: bool) -> Option<String> {
        if let Some(why) = self.figures_against_rounds() {
            return Some(why);
        }
        // Each metric's state is its figures' (the four-state rule at the look's one-sided
        // level): an edited `state` alone cannot move the verdict.
        for m in &self.metrics {
            let figured = match (m.p_slower, m.p_faster, m.ci, m.level_spent) {
                (Some(ps), Some(pf), Some(ci), Some(spent)) => four_states(ps, pf, ci, self.setup.delta, spent / 2.0),
                _ => State::Inconclusive,
            };
            if m.state != figured {
                return Some(format!(
                    "its paired {} is `{}` but its figures say `{}`",
                    m.metric,
                    m.state.as_str(),
                    figured.as_str()
                ));
            }
        }
        let regressed = self.metrics.iter().find(|m| m.state == State::Regressed);
        if let Some(m) = regressed.filter(|_| !(verdict == Decision::Tune && blocking)) {
            return Some(format!("its paired {} is regressed but the verdict is not a blocking `tune`", m.metric));
        }
        let fastest_label = PairedMetric::FASTEST.label();
        let fastest = self.metrics.iter().find(|m| m.metric == fastest_label).map(|m| m.state);
        let may_accept = self.metrics.first().and_then(|p| acceptance(p.state, p.ci, fastest)).is_some();
        if verdict == Decision::Accept && !may_accept {
            return Some(
                "its verdict is `accept` but neither its paired primary metric nor, in its place, the fastest serial \
                 step is settled"
                    .to_string(),
            );
        }
        None
    }
}

impl PairedReport {
    /// Each metric's figures (ratio, interval, level spent, p-values, MDE) against the look its
    /// rounds give under the setup's plan: the figures are a function of `rounds[]`, so rounds
    /// edited towards 1, or figures edited without their rounds, are named. `None` when they
    /// agree (to 10^-9, what a ratio's round trip through `exp` and `ln` leaves).
    fn figures_against_rounds(&self) -> Option<String> {
        let Some(plans) = Plans::new(self.setup.max_rounds, self.setup.alpha) else {
            return Some(format!(
                "its paired setup (α {}, {} rounds) is no plan commgate makes",
                self.setup.alpha, self.setup.max_rounds
            ));
        };
        let count = self.metrics.len();
        for (i, m) in self.metrics.iter().enumerate() {
            let logs: Option<Vec<f64>> = self
                .rounds
                .iter()
                .map(|r| {
                    let ratio = r.ratios.iter().find(|x| x.metric == m.metric)?.ratio?;
                    (ratio.is_finite() && ratio > 0.0).then(|| ratio.ln())
                })
                .collect();
            // The plan depends only on the metric's role: the primary, the fastest step, or
            // one of the rest (the serial median stands for any of those).
            let kind = match i {
                0 => PairedMetric::Median(Schedule::Overlap),
                _ if m.metric == PairedMetric::FASTEST.label() => PairedMetric::FASTEST,
                _ => PairedMetric::Median(Schedule::Serial),
            };
            let look = logs.and_then(|v| commgate_stats::paired::look(&v, plans.of(kind, count)));
            let given = [m.ratio, m.ci.map(|c| c[0]), m.ci.map(|c| c[1]), m.level_spent, m.p_slower, m.p_faster, m.mde];
            let from_rounds = look.map_or([None; 7], |l| {
                [
                    Some(l.ratio),
                    Some(l.ci[0]),
                    Some(l.ci[1]),
                    Some(l.spent),
                    Some(l.p_slower),
                    Some(l.p_faster),
                    Some(l.mde),
                ]
            });
            let agree = given.iter().zip(&from_rounds).all(|(g, r)| match (g, r) {
                (Some(g), Some(r)) => {
                    (g - r).abs() <= 1e-9 * g.abs().max(r.abs()) + 1e-12 || (g.is_nan() && r.is_nan())
                }
                (None, None) => true,
                _ => false,
            });
            if !agree {
                return Some(format!(
                    "its paired {}'s figures are not those its {} rounds give: the report was edited",
                    m.metric,
                    self.rounds.len()
                ));
            }
        }
        None
    }
}

/// The head's run against the stored baseline of its workload (`None` without one, or when the
/// store cannot be read): "this runner now differs from its history", told apart from "this
/// pull request changed it".
fn history(head: &RunResult, opts: &CheckOptions) -> Option<String> {
    let stored = CheckOptions { traces: Vec::new(), ..opts.clone() };
    let report = super::evaluate_runs(vec![vec![head.clone()]], &stored).ok()?;
    if report.error.is_some() {
        return None;
    }
    let c = report.comparison?;
    Some(format!(
        "this runner against its stored history ({} runs in {}): {} (not part of the paired verdict)",
        c.baseline.runs, c.baseline.path, c.headline
    ))
}

fn rounds_of(records: &[RoundRecord]) -> Vec<PairedRound> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| PairedRound {
            round: i + 1,
            first: r.first,
            ratios: r
                .round
                .metrics()
                .into_iter()
                .map(|m| MetricRatio { metric: r.round.label(m), ratio: r.round.of(m).map(f64::exp) })
                .collect(),
            medians: r.round.medians.clone(),
            capture: Vec::new(),
        })
        .collect()
}

fn metrics_of(standing: Option<&Standing>) -> Vec<PairedMetricReport> {
    let Some(s) = standing else { return Vec::new() };
    s.metrics
        .iter()
        .map(|m| PairedMetricReport {
            metric: m.label.clone(),
            state: m.state,
            ratio: m.look.map(|l| l.ratio),
            ci: m.look.map(|l| l.ci),
            level_spent: m.look.map(|l| l.spent),
            p_slower: m.look.map(|l| l.p_slower),
            p_faster: m.look.map(|l| l.p_faster),
            mde: m.look.map(|l| l.mde),
        })
        .collect()
}

/// The check report of a paired sequence that ran to its end; `head` is the head arm's last
/// run (the report's `bench`: what the runner measured).
pub fn report(
    evidence: PairedEvidence,
    setup: PairedSetup,
    elapsed_s: f64,
    head: Option<RunResult>,
    opts: &CheckOptions,
) -> CheckReport {
    let stop = match evidence.standing.next {
        Next::Stop => Stop::Decided,
        _ if evidence.rounds.len() >= setup.max_rounds => Stop::MaxRounds,
        _ => Stop::TimeBudget,
    };
    let verdict = evidence.standing.verdict.clone().unwrap_or_else(|| {
        Verdict::because(Decision::CollectMoreEvidence, "the rounds stopped before a look".to_string())
    });
    let paired = PairedReport {
        stop,
        elapsed_s,
        rounds: rounds_of(&evidence.rounds),
        metrics: metrics_of(Some(&evidence.standing)),
        setup,
        history: head.as_ref().and_then(|h| history(h, opts)),
    };
    build(None, verdict.decision, verdict.blocking, verdict.reasons, paired, head, opts)
}

/// The check report of a paired sequence that could not go on: exit 2, naming the round, the
/// arm and the step; the rounds done before it are kept.
pub fn failed(error: &PairedError, setup: PairedSetup, elapsed_s: f64, opts: &CheckOptions) -> CheckReport {
    failed_with(EvaluationError::new(ErrorKind::ArmFailed, error.to_string()), &error.done, setup, elapsed_s, opts)
}

/// The check report of a paired check that failed before or between rounds (`done`: the rounds
/// finished before it).
pub fn failed_with(
    error: EvaluationError,
    done: &[RoundRecord],
    setup: PairedSetup,
    elapsed_s: f64,
    opts: &CheckOptions,
) -> CheckReport {
    let paired = PairedReport {
        stop: Stop::Failed,
        elapsed_s,
        rounds: rounds_of(done),
        metrics: Vec::new(),
        setup,
        history: None,
    };
    let reasons = vec![format!("could not evaluate: {}", error.message)];
    build(Some(error), Decision::CollectMoreEvidence, false, reasons, paired, None, opts)
}

fn build(
    error: Option<EvaluationError>,
    verdict: Decision,
    blocking: bool,
    reasons: Vec<String>,
    paired: PairedReport,
    head: Option<RunResult>,
    opts: &CheckOptions,
) -> CheckReport {
    CheckReport {
        schema_version: SCHEMA_VERSION,
        error,
        verdict,
        blocking,
        reasons,
        fail_on: opts.fail_on,
        bench: head,
        comparison: None,
        attribution: None,
        trace_comparison: None,
        baseline: no_store(opts),
        base: opts.base.clone(),
        workloads: Vec::new(),
        job: None,
        bench_ceiling: None,
        balance: None,
        paired: Some(paired),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::paired::{Plans, ALPHA};
    use commgate_core::vocab::Decision;

    fn run(scale: f64) -> RunResult {
        commgate_testkit::results::run(&[10.0 * scale, 11.0 * scale, 12.5 * scale])
    }

    #[test]
    fn identical_arms_are_accepted_at_the_first_look() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let mut calls = Vec::new();
        let e = measure_rounds(
            plan,
            0.03,
            7,
            || false,
            |arm, n| {
                calls.push((arm, n));
                Ok(run(1.0).into())
            },
        )
        .expect("measured");
        assert_eq!(e.rounds.len(), 3, "the first look decides");
        assert_eq!(e.standing.verdict.as_ref().map(|v| v.decision), Some(Decision::Accept));
        assert_eq!(calls.len(), 6, "both arms every round");
        for n in 1..=3 {
            let arms: Vec<Arm> = calls.iter().filter(|(_, r)| *r == n).map(|(a, _)| *a).collect();
            assert!(arms.contains(&Arm::Base) && arms.contains(&Arm::Head), "round {n}: {arms:?}");
        }
    }

    #[test]
    fn the_order_is_drawn_each_round() {
        let plan = Plans::new(30, ALPHA).expect("plan");
        // Noisy enough never to settle: both orders turn up over 30 rounds.
        let mut k = 0u32;
        let e = measure_rounds(
            plan,
            0.001,
            3,
            || false,
            |arm, _| {
                k += 1;
                let wobble = if k % 4 < 2 { 1.05 } else { 0.95 };
                Ok(run(if arm == Arm::Head { wobble } else { 1.0 }).into())
            },
        )
        .expect("measured");
        assert!(e.rounds.iter().any(|r| r.first == Arm::Base) && e.rounds.iter().any(|r| r.first == Arm::Head));
    }

    #[test]
    fn a_slower_head_blocks_and_a_failing_arm_is_named() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let e = measure_rounds(
            plan,
            0.03,
            1,
            || false,
            |arm, n| Ok(run(if arm == Arm::Head { 1.10 + 0.001 * n as f64 } else { 1.0 }).into()),
        )
        .expect("measured");
        let v = e.standing.verdict.expect("stopped");
        assert!(v.blocking, "{v:?}");
        let e = measure_rounds(
            plan,
            0.03,
            1,
            || false,
            |arm, n| {
                if arm == Arm::Base && n == 2 {
                    Err("the benchmark exited 2".to_string())
                } else {
                    Ok(run(1.0).into())
                }
            },
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "round 2, the base arm: the benchmark exited 2");
    }

    /// The benchmark unchanged, the training step's all-reduce 20 % more exposed in the head's
    /// captures: blocked by the captured collective, which the report names and lists per round.
    #[test]
    fn a_captured_collective_can_block() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let e = measure_rounds(
            plan,
            0.03,
            3,
            || false,
            |arm, n| {
                let wobble = 1.0 + 0.002 * (n % 3) as f64;
                let all_reduce = if arm == Arm::Head { 1.2 * wobble } else { wobble };
                Ok(ArmRun {
                    result: run(1.0),
                    captured: vec![("all_reduce".into(), all_reduce), ("all_gather".into(), 0.5 * wobble)],
                })
            },
        )
        .expect("measured");
        let v = e.standing.verdict.clone().expect("stopped");
        assert!(v.blocking, "{v:?}");
        assert!(
            v.reasons.iter().any(|r| r.starts_with("head is slower than base: all_reduce exposed (capture) +20")),
            "{v:?}"
        );
        assert!(!v.reasons.iter().any(|r| r.contains("all_gather")), "{v:?}");
        let rounds = rounds_of(&e.rounds);
        let names: Vec<&str> = rounds[0].ratios.iter().map(|m| m.metric.as_str()).collect();
        assert_eq!(names[names.len() - 2..], ["all_reduce exposed (capture)", "all_gather exposed (capture)"]);
    }
}
