//! The paired mode's rules: after each round, each metric's state from its look
//! (`commgate_stats::paired::look`, read by the same four-state rule as the stored comparison,
//! at the look's one-sided level), whether the sequence stops, and the verdict it stops with.
//!
//! **Several metrics, one family.** Every metric is looked at after every round, so the family's
//! α ([`ALPHA`]) is split over them before it is spent over the looks, by weighted Bonferroni:
//! half to the primary metric (the overlap median), a quarter to the fastest serial step
//! ([`PairedMetric::FASTEST`]), which can accept in the primary's place, and the last quarter
//! evenly over the others (which can only block): the benchmark's six, and with `[check]
//! capture` the judged collectives of the arms' own training steps. Every metric's intervals then
//! hold together with probability at least `1 − α`, whichever round the sequence stops at.
//!
//! **When to stop, what to say.** Any metric confirmed regressed (its whole interval above
//! `1 + δ`) stops with `tune`, blocking. Otherwise `accept` when the primary metric is unchanged
//! or improved and no metric regressed; the other metrics are reported as they stand (a noisy row
//! that has not settled does not hold a clean primary back). When the sequence is still undecided
//! at its last planned round: `collect_more_evidence`, with the primary's MDE and the projected
//! rounds that would decide it.
//!
//! **Accepting on the fastest steps.** On a loaded runner (a CPU neighbour, a shared machine) an
//! arm's median step moves with what the machine did during that arm's run, which pairing cannot
//! cancel: on a 2-core machine with one busy loop per core the overlap median's per-round log
//! ratio has a standard deviation of 0.13–0.53, so no number of rounds in a CI job can show ±3 %.
//! A neighbour only adds time to a step, so the fastest of a run's steps is the one it disturbed
//! least (J. Chen & J. Revels, "Robust benchmarking in noisy environments", arXiv:1608.04295,
//! 2016): the fastest serial step's ratio has a spread of about 0.01 under the same load. So when
//! the primary is inconclusive *and shows nothing* (its interval holds 1), the fastest serial step
//! unchanged or improved accepts in its place, and the verdict says it did. What this lets through,
//! by design: a change that slows only the steps a neighbour disturbs, which such a runner cannot
//! measure; any metric whose interval clears `1 + δ` still blocks, and a primary whose interval
//! shows a slowdown (lies above 1) is never overruled.

use super::metric_state::four_states;
use super::vocab::{Decision, Verdict};
use crate::compare::paired::{PairedMetric, Round};
use crate::compare::State;
use commgate_core::units::{change, interval, pct};
use commgate_stats::paired::{further_rounds, look, next, Look, Next, Plan, MIN_ROUNDS};

/// One metric after a round: its look and the state the four-state rule reads from it; `None`
/// before the first look or where the metric is undefined in a round so far.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricLook {
    pub metric: PairedMetric,
    /// The report's name of the metric ("overlap median", "all_reduce exposed (capture)").
    pub label: String,
    pub look: Option<Look>,
    pub state: State,
}

/// Where the sequence stands after a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub metrics: Vec<MetricLook>,
    pub next: Next,
    /// The verdict, once the sequence stops ([`Next::Stop`] or [`Next::BudgetSpent`]).
    pub verdict: Option<Verdict>,
}

/// The paired family's two-sided α over all its metrics and looks: the stored comparison's
/// metrics are judged at 0.01 against runs stored on other days; a paired round cancels the
/// machine's state, and its false-block rate is measured in `docs/performance.md`.
pub const ALPHA: f64 = 0.05;

/// The primary metric's share of the family's α.
const PRIMARY_SHARE: f64 = 0.5;

/// The fastest serial step's share of the family's α; the rest is split evenly over the others.
const FASTEST_SHARE: f64 = 0.25;

/// The plans of a paired sequence: the most rounds it may run, and each metric's α spent over
/// its looks (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plans {
    primary: Plan,
    fastest: Plan,
    /// The family's α less the primary's and the fastest step's shares, split evenly over the
    /// other metrics.
    others_alpha: f64,
}

impl Plans {
    /// `None` unless `max_rounds ≥ MIN_ROUNDS` and `0 < alpha < 1`.
    pub fn new(max_rounds: usize, alpha: f64) -> Option<Plans> {
        let primary = Plan::new(max_rounds, alpha * PRIMARY_SHARE)?;
        let fastest = Plan::new(max_rounds, alpha * FASTEST_SHARE)?;
        Some(Plans { primary, fastest, others_alpha: alpha * (1.0 - PRIMARY_SHARE - FASTEST_SHARE) })
    }

    /// The plan `metric` is looked at with when the family has `count` metrics (the benchmark's
    /// and the judged collectives'): the primary's, the fastest step's, or an even share of the
    /// rest.
    pub fn of(self, metric: PairedMetric, count: usize) -> Plan {
        if metric == PairedMetric::ALL[0] {
            return self.primary;
        }
        if metric == PairedMetric::FASTEST {
            return self.fastest;
        }
        let others = count.saturating_sub(2).max(1) as f64;
        // Valid whenever `new` was: the same rounds, and a positive α below the primary's.
        Plan::new(self.primary.max_rounds(), self.others_alpha / others).unwrap_or(self.primary)
    }

    /// The primary metric's plan.
    pub fn primary(self) -> Plan {
        self.primary
    }

    pub fn max_rounds(self) -> usize {
        self.primary.max_rounds()
    }

    /// The family's α.
    pub fn alpha(self) -> f64 {
        self.primary.alpha() / PRIMARY_SHARE
    }
}

/// Why a sequence that has not settled stops anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Rounds may go on up to the plan's last.
    Left,
    /// The time budget ended: the rounds done are all there will be.
    TimeSpent,
}

/// Where the sequence stands after `rounds` (δ the smallest change worth acting on).
pub fn standing(rounds: &[Round], plans: Plans, delta: f64, budget: Budget) -> Standing {
    // The first round fixes the family: the benchmark's metrics and the judged collectives.
    let family = rounds.first().map_or_else(|| PairedMetric::ALL.to_vec(), Round::metrics);
    let count = family.len();
    let metrics: Vec<MetricLook> = family
        .into_iter()
        .map(|metric| {
            let values: Option<Vec<f64>> = rounds.iter().map(|r| r.of(metric)).collect();
            let look = values.and_then(|v| look(&v, plans.of(metric, count)));
            let state = look
                .map_or(State::Inconclusive, |l| four_states(l.p_slower, l.p_faster, l.ci, delta, l.one_sided_alpha()));
            let label = rounds.first().map_or_else(|| metric.label(), |r| r.label(metric));
            MetricLook { metric, label, look, state }
        })
        .collect();
    let regressed: Vec<&MetricLook> = metrics.iter().filter(|m| m.state == State::Regressed).collect();
    let settled = !regressed.is_empty() || accepted_by(&metrics).is_some();
    let step = match next(settled, rounds.len(), plans.primary) {
        Next::AnotherRound if budget == Budget::TimeSpent => Next::BudgetSpent,
        step => step,
    };
    let verdict = match step {
        Next::AnotherRound => None,
        Next::Stop | Next::BudgetSpent => Some(verdict(&metrics, &regressed, rounds.len(), plans, delta, budget)),
    };
    Standing { metrics, next: step, verdict }
}

/// What may accept (see the module doc), given the primary's state and interval and the fastest
/// serial step's state: the primary unchanged or improved ([`Acceptance::Primary`]); or, with the
/// primary inconclusive and its interval holding 1, the fastest serial step unchanged or improved
/// ([`Acceptance::Fastest`]). The one rule, for the sequence and for a report read back.
pub fn acceptance(primary: State, primary_ci: Option<[f64; 2]>, fastest: Option<State>) -> Option<Acceptance> {
    let settled = |s: State| matches!(s, State::Unchanged | State::Improved);
    if settled(primary) {
        return Some(Acceptance::Primary);
    }
    let shows_nothing = primary == State::Inconclusive && primary_ci.is_some_and(|ci| ci[0] <= 1.0 && 1.0 <= ci[1]);
    (shows_nothing && fastest.is_some_and(settled)).then_some(Acceptance::Fastest)
}

/// The metric an `accept` rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    Primary,
    /// The fastest serial step, with the primary unable to settle.
    Fastest,
}

/// The metric the sequence may accept on ([`acceptance`]).
fn accepted_by(metrics: &[MetricLook]) -> Option<&MetricLook> {
    let primary = metrics.first()?;
    let fastest = metrics.iter().find(|m| m.metric == PairedMetric::FASTEST);
    match acceptance(primary.state, primary.look.map(|l| l.ci), fastest.map(|m| m.state))? {
        Acceptance::Primary => Some(primary),
        Acceptance::Fastest => fastest,
    }
}

/// The verdict the sequence stops with (see the module doc).
fn verdict(
    metrics: &[MetricLook],
    regressed: &[&MetricLook],
    rounds: usize,
    plans: Plans,
    delta: f64,
    budget: Budget,
) -> Verdict {
    let said = |m: &MetricLook| match &m.look {
        Some(l) => format!("{} {} ({}) over {rounds} rounds", m.label, change(l.ratio), interval(l.ci)),
        None if rounds < MIN_ROUNDS => format!("{} not judged (the first look is after {MIN_ROUNDS} rounds)", m.label),
        None => format!("{} not measured in every round", m.label),
    };
    if !regressed.is_empty() {
        let reasons = regressed.iter().map(|m| format!("head is slower than base: {}", said(m))).collect();
        return Verdict::regression(reasons);
    }
    let Some(primary) = metrics.first() else {
        return Verdict::because(Decision::CollectMoreEvidence, "no metric was judged".to_string());
    };
    if let Some(accepted) = accepted_by(metrics) {
        let on_fastest = accepted.metric != primary.metric;
        let how = match accepted.state {
            State::Improved => "head is faster than base".to_string(),
            _ => format!("head and base are the same within ±{}", pct(delta)),
        };
        let reason = if on_fastest {
            let spread =
                primary.look.map_or(String::new(), |l| format!(" (the smallest change it can show: ±{})", pct(l.mde)));
            format!(
                "{how} on the fastest steps: {}; the {} moved with this runner's load{spread} and shows none",
                said(accepted),
                primary.label
            )
        } else {
            format!("{how}: {}", said(accepted))
        };
        return Verdict::because(Decision::Accept, reason);
    }
    let ended = match budget {
        Budget::Left => format!("undecided after {rounds} of {} rounds", plans.max_rounds()),
        Budget::TimeSpent => format!("undecided when the time budget ended, after {rounds} rounds"),
    };
    let Some(l) = primary.look.as_ref() else {
        return Verdict::because(
            Decision::CollectMoreEvidence,
            format!("{ended}: {}; give the check more time (--budget-minutes)", said(primary)),
        );
    };
    let projection = match further_rounds(l, plans.primary(), delta) {
        Some(n) => format!("; about {n} more rounds would decide it at this spread (a projection)"),
        None => "; at this spread no number of rounds would (the change sits on ±δ)".to_string(),
    };
    // Where the fastest steps could have accepted in the primary's place, how near they came.
    let fastest = metrics
        .iter()
        .find(|m| m.metric == PairedMetric::FASTEST)
        .filter(|m| m.look.is_some() && l.ci[0] <= 1.0 && 1.0 <= l.ci[1])
        .map_or(String::new(), |m| format!("; on the fastest steps {}, not within ±{} yet", said(m), pct(delta)));
    Verdict::because(
        Decision::CollectMoreEvidence,
        format!(
            "{ended}: {}; the smallest change these rounds can show is ±{}{projection}{fastest}",
            said(primary),
            pct(l.mde)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::Schedule;

    /// A round whose every metric moved by `ln_ratio`.
    fn round(ln_ratio: f64) -> Round {
        Round {
            log_ratios: PairedMetric::ALL.iter().map(|&m| (m, Some(ln_ratio))).collect(),
            medians: Vec::new(),
            captured: Vec::new(),
        }
    }

    fn rounds(values: &[f64]) -> Vec<Round> {
        values.iter().map(|&v| round(v)).collect()
    }

    #[test]
    fn unchanged_rounds_accept_once_the_interval_fits_within_delta() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let early = standing(&rounds(&[0.001, -0.002]), plan, 0.03, Budget::Left);
        assert_eq!((early.next, early.verdict.is_none()), (Next::AnotherRound, true), "no look before 3 rounds");
        let quiet = standing(&rounds(&[0.001, -0.002, 0.0015, -0.001, 0.0005]), plan, 0.03, Budget::Left);
        assert_eq!(quiet.next, Next::Stop);
        let v = quiet.verdict.expect("stopped");
        assert_eq!(v.decision, Decision::Accept);
        assert!(v.reasons[0].starts_with("head and base are the same within ±3"), "{:?}", v.reasons);
    }

    #[test]
    fn a_clear_slowdown_blocks_and_names_the_metric() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let slow = standing(&rounds(&[0.10, 0.11, 0.095, 0.105]), plan, 0.03, Budget::Left);
        assert_eq!(slow.next, Next::Stop);
        let v = slow.verdict.expect("stopped");
        assert!(v.blocking && v.decision == Decision::Tune, "{v:?}");
        assert!(v.reasons.iter().any(|r| r.starts_with("head is slower than base: overlap median +10")), "{v:?}");
        assert_eq!(slow.metrics.first().map(|m| m.metric), Some(PairedMetric::Median(Schedule::Overlap)));
    }

    #[test]
    fn noise_that_never_settles_ends_undecided_with_a_projection() {
        let plan = Plans::new(5, ALPHA).expect("plan");
        let noisy = standing(&rounds(&[0.05, -0.04, 0.06, -0.05, 0.04]), plan, 0.03, Budget::Left);
        assert_eq!(noisy.next, Next::BudgetSpent);
        let v = noisy.verdict.expect("stopped");
        assert_eq!((v.decision, v.blocking), (Decision::CollectMoreEvidence, false));
        assert!(v.reasons[0].starts_with("undecided after 5 of 5 rounds: overlap median"), "{:?}", v.reasons);
        assert!(v.reasons[0].contains("the smallest change these rounds can show is ±"), "{:?}", v.reasons);
    }

    #[test]
    fn a_spent_time_budget_ends_undecided_and_says_so() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let one = standing(&rounds(&[0.01]), plan, 0.03, Budget::TimeSpent);
        assert_eq!(one.next, Next::BudgetSpent);
        let v = one.verdict.expect("stopped");
        assert_eq!((v.decision, v.blocking), (Decision::CollectMoreEvidence, false));
        assert!(v.reasons[0].starts_with("undecided when the time budget ended, after 1 rounds"), "{:?}", v.reasons);
        assert!(v.reasons[0].contains("--budget-minutes"), "{:?}", v.reasons);
        // Decided rounds stop as decided, budget or not.
        let quiet = standing(&rounds(&[0.001, -0.002, 0.0015, -0.001, 0.0005]), plan, 0.03, Budget::TimeSpent);
        assert_eq!(quiet.next, Next::Stop);
    }

    #[test]
    fn the_primary_metric_gets_half_of_alpha() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let count = PairedMetric::ALL.len();
        assert!((plan.of(PairedMetric::ALL[0], count).alpha() - 0.025).abs() < 1e-12);
        assert!((plan.of(PairedMetric::FASTEST, count).alpha() - 0.0125).abs() < 1e-12);
        assert!((plan.of(PairedMetric::Exposed, count).alpha() - 0.0125 / 6.0).abs() < 1e-12);
        // Two judged collectives share the last quarter with the benchmark's six.
        assert!((plan.of(PairedMetric::Captured(1), count + 2).alpha() - 0.0125 / 8.0).abs() < 1e-12);
        assert!((plan.of(PairedMetric::ALL[0], count + 2).alpha() - 0.025).abs() < 1e-12);
        assert!((plan.alpha() - ALPHA).abs() < 1e-12);
        assert_eq!(Plans::new(2, ALPHA), None, "the first look is after 3 rounds");
    }

    /// Rounds whose primary swings by `noise` (alternating sign, around `primary_shift`) while
    /// the fastest serial step moves by `fastest` ± 0.2 %, and every other metric by 0.
    fn loaded(primary_shift: f64, noise: f64, fastest: f64, n: usize) -> Vec<Round> {
        (0..n)
            .map(|i| {
                let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
                let mut r = round(0.0);
                for (m, v) in &mut r.log_ratios {
                    if *m == PairedMetric::ALL[0] {
                        *v = Some(primary_shift + sign * noise);
                    } else if *m == PairedMetric::FASTEST {
                        *v = Some(fastest + sign * 0.002);
                    }
                }
                r
            })
            .collect()
    }

    #[test]
    fn a_loaded_runner_accepts_on_the_fastest_steps_and_says_so() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let s = standing(&loaded(0.0, 0.3, 0.0, 6), plan, 0.03, Budget::Left);
        assert_eq!(s.next, Next::Stop);
        assert_eq!(s.metrics[0].state, State::Inconclusive, "the medians cannot settle");
        let v = s.verdict.expect("stopped");
        assert_eq!((v.decision, v.blocking), (Decision::Accept, false));
        assert!(
            v.reasons[0].starts_with("head and base are the same within ±3 % on the fastest steps: serial min"),
            "{:?}",
            v.reasons
        );
        assert!(
            v.reasons[0]
                .contains("the overlap median moved with this runner's load (the smallest change it can show: ±"),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn the_fastest_steps_never_overrule_a_primary_that_shows_a_slowdown() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        // The overlap median +6 % ± 1 %: its interval lies above 1 but not wholly above 1 + δ.
        let s = standing(&loaded(0.06, 0.01, 0.0, 10), plan, 0.03, Budget::Left);
        let primary = s.metrics[0].look.expect("looked");
        assert!(primary.ci[0] > 1.0 && primary.ci[0] < 1.03, "{primary:?}");
        let v = s.verdict.expect("the plan's last round");
        assert_eq!(v.decision, Decision::CollectMoreEvidence, "{v:?}");
        // And a fastest step that moved is no ground to accept either; the reason says how near
        // it came.
        let moved = standing(&loaded(0.0, 0.3, 0.05, 10), plan, 0.03, Budget::Left);
        assert!(moved.verdict.expect("stopped").decision != Decision::Accept);
        let near = standing(&loaded(0.0, 0.3, 0.029, 10), plan, 0.03, Budget::Left);
        let v = near.verdict.expect("the plan's last round");
        assert_eq!(v.decision, Decision::CollectMoreEvidence, "{v:?}");
        assert!(v.reasons[0].contains("; on the fastest steps serial min +2.9 %"), "{:?}", v.reasons);
    }

    #[test]
    fn a_metric_undefined_in_any_round_is_not_judged() {
        let plan = Plans::new(10, ALPHA).expect("plan");
        let mut rs = rounds(&[0.0, 0.001, -0.001, 0.0]);
        if let Some(slot) = rs[1].log_ratios.iter_mut().find(|(m, _)| *m == PairedMetric::Exposed) {
            slot.1 = None;
        }
        let s = standing(&rs, plan, 0.03, Budget::Left);
        let exposed = s.metrics.iter().find(|m| m.metric == PairedMetric::Exposed).expect("listed");
        assert_eq!((exposed.look.is_none(), exposed.state), (true, State::Inconclusive));
    }
}
