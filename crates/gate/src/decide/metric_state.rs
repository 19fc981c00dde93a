//! A metric's state (gate.md, "The four states"): [`four_states`], THE four-state rule from the
//! adjusted p-values, the interval and δ, for benchmark and trace metrics alike; and
//! [`metric_state`], which a benchmark metric goes through, where what the estimate cannot confirm
//! turns `regressed` into `inconclusive` with a "looks regressed, but …" note. `compare` gathers
//! the numbers ([`MetricEvidence`]) and applies the rules it is handed ([`RULES`], through
//! [`StateRules`]), so the state is decided here while `compare` imports nothing of `decide`.

use crate::compare::{MetricEvidence, MetricState, State, StateRules, LOOKS_REGRESSED};

/// The rules the comparison is run with: [`metric_state`] for a benchmark metric, [`four_states`]
/// for a trace quantity. `decide::comparison` hands them to `compare`, which gathers the numbers
/// and never names a rule itself.
pub const RULES: StateRules = StateRules { metric: metric_state, four_states };

/// THE four-state rule (gate.md, "The four states"), for benchmark and trace metrics alike:
/// regressed when the adjusted p-value is significant and the whole interval of the ratio lies
/// above `1 + δ`; improved likewise below `1 − δ`; unchanged when the interval lies within `±δ`;
/// otherwise (or with an undefined interval) inconclusive.
pub fn four_states(p_reg: f64, p_imp: f64, [lo, hi]: [f64; 2], delta: f64, alpha: f64) -> State {
    if !lo.is_finite() || !hi.is_finite() {
        State::Inconclusive
    } else if p_reg <= alpha && lo > 1.0 + delta {
        State::Regressed
    } else if p_imp <= alpha && hi < 1.0 - delta {
        State::Improved
    } else if lo >= 1.0 - delta && hi <= 1.0 + delta {
        State::Unchanged
    } else {
        State::Inconclusive
    }
}

/// A benchmark metric's state: [`four_states`], with `regressed` turned `inconclusive` when the
/// estimate cannot block, when a row it reads is serially dependent beyond the baseline's runs,
/// or when a P95 has fewer than `p95_min_samples` per side; the first of these is the reason.
pub fn metric_state(e: MetricEvidence<'_>) -> MetricState {
    let enough_samples = e.tail_samples.is_none_or(|n| n >= e.p95_min_samples);
    let can_block = enough_samples && e.cannot_block.is_none();
    let state = four_states(e.p_reg, e.p_imp, e.ci, e.delta, e.alpha);
    if state != State::Regressed {
        return MetricState { state, vetoed: None, can_block, enough_samples };
    }
    let why = e.cannot_block.map(str::to_string).or(e.dependence).or_else(|| {
        e.tail_samples.filter(|_| !enough_samples).map(|n| {
            format!(
                "a P95 may block only with ≥ {} steps per side, and this comparison has {n} (after the warm-up \
                 cut): record more steps per row (`--repeats`)",
                e.p95_min_samples
            )
        })
    });
    match why {
        Some(why) => MetricState {
            state: State::Inconclusive,
            vetoed: Some(format!("{LOOKS_REGRESSED}{why}")),
            can_block,
            enough_samples,
        },
        None => MetricState { state, vetoed: None, can_block, enough_samples },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALPHA: f64 = 0.01;
    const DELTA: f64 = 0.03;

    fn evidence(ci: [f64; 2]) -> MetricEvidence<'static> {
        MetricEvidence {
            p_reg: 0.001,
            p_imp: 0.999,
            ci,
            delta: DELTA,
            alpha: ALPHA,
            cannot_block: None,
            dependence: None,
            tail_samples: None,
            p95_min_samples: 100,
        }
    }

    #[test]
    fn the_first_matching_rule_gives_the_state() {
        assert_eq!(four_states(0.001, 0.999, [1.05, 1.10], DELTA, ALPHA), State::Regressed);
        // Significant, but the interval reaches into ±δ.
        assert_eq!(four_states(0.001, 0.999, [1.02, 1.10], DELTA, ALPHA), State::Inconclusive);
        // Beyond δ, but not significant after Holm.
        assert_eq!(four_states(0.02, 0.999, [1.05, 1.10], DELTA, ALPHA), State::Inconclusive);
        assert_eq!(four_states(0.999, 0.001, [0.90, 0.95], DELTA, ALPHA), State::Improved);
        assert_eq!(four_states(0.5, 0.5, [0.98, 1.02], DELTA, ALPHA), State::Unchanged);
        assert_eq!(four_states(0.001, 0.999, [f64::NAN, 1.10], DELTA, ALPHA), State::Inconclusive);
        assert_eq!(four_states(0.001, 0.999, [1.05, f64::INFINITY], DELTA, ALPHA), State::Inconclusive);
    }

    #[test]
    fn a_regression_nothing_vetoes_blocks() {
        let s = metric_state(evidence([1.05, 1.10]));
        assert_eq!(s, MetricState { state: State::Regressed, vetoed: None, can_block: true, enough_samples: true });
    }

    #[test]
    fn what_the_estimate_cannot_confirm_is_named_first() {
        let s = metric_state(MetricEvidence {
            cannot_block: Some("too few runs"),
            dependence: Some("episodes".to_string()),
            tail_samples: Some(60),
            ..evidence([1.05, 1.10])
        });
        assert_eq!(s.state, State::Inconclusive);
        assert_eq!(s.vetoed.as_deref(), Some("looks regressed, but too few runs"));
        assert!(!s.can_block && !s.enough_samples);
    }

    #[test]
    fn the_dependence_guard_vetoes_but_leaves_the_metric_able_to_block() {
        let s = metric_state(MetricEvidence { dependence: Some("episodes".to_string()), ..evidence([1.05, 1.10]) });
        assert_eq!(s.state, State::Inconclusive);
        assert_eq!(s.vetoed.as_deref(), Some("looks regressed, but episodes"));
        assert!(s.can_block);
    }

    #[test]
    fn a_p95_needs_enough_samples_per_side() {
        let few = metric_state(MetricEvidence { tail_samples: Some(60), ..evidence([1.05, 1.10]) });
        assert_eq!(few.state, State::Inconclusive);
        assert!(few
            .vetoed
            .as_deref()
            .is_some_and(|v| v.contains("only with ≥ 100 steps per side, and this comparison has 60")));
        assert!(!few.can_block && !few.enough_samples);
        let enough = metric_state(MetricEvidence { tail_samples: Some(100), ..evidence([1.05, 1.10]) });
        assert_eq!(enough.state, State::Regressed);
    }

    #[test]
    fn only_a_regression_is_vetoed() {
        let s = metric_state(MetricEvidence {
            p_reg: 0.999,
            p_imp: 0.001,
            cannot_block: Some("too few runs"),
            ..evidence([0.90, 0.95])
        });
        assert_eq!(s, MetricState { state: State::Improved, vetoed: None, can_block: false, enough_samples: true });
    }
}
