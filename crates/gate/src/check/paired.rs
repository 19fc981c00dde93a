//! The evidence of a paired measurement: rounds of the base arm and the head arm measured one
//! after the other on this runner, in an order drawn at random each round (so neither arm is
//! always first, after a warm cache or into a slow minute), until the rules of
//! [`crate::decide::paired`] stop the sequence or the plan's last round is done.
//!
//! How an arm is measured is the caller's (`run`: a benchmark process in the arm's tree, a mock
//! in tests); this module only orders, reduces and asks. A run that fails, or two runs that
//! cannot be compared, end the sequence with an error naming the round and the arm: a paired
//! gate never falls back to anything else.

use std::fmt;

use crate::compare::paired::{round, Round};
use crate::decide::paired::{standing, Standing};
use commgate_core::result::RunResult;
use commgate_stats::paired::{Next, Plan};
use commgate_stats::rng::Rng;

/// One side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Why the sequence could not go on: the round (1-based), the arm when one is to blame, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairedError {
    pub round: usize,
    pub arm: Option<Arm>,
    pub message: String,
}

impl fmt::Display for PairedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.arm {
            Some(arm) => write!(f, "round {}, the {} arm: {}", self.round, arm.as_str(), self.message),
            None => write!(f, "round {}: {}", self.round, self.message),
        }
    }
}

/// Runs rounds under `plan` until the rules stop them (δ the smallest change worth acting on),
/// each round's order drawn from `seed`. `run(arm, round)` measures one arm once.
pub fn measure_rounds(
    plan: Plan,
    delta: f64,
    seed: u64,
    mut run: impl FnMut(Arm, usize) -> Result<RunResult, String>,
) -> Result<PairedEvidence, PairedError> {
    let mut rng = Rng::new(seed);
    let mut records: Vec<RoundRecord> = Vec::new();
    loop {
        let number = records.len() + 1;
        let first = if rng.below(2) == 0 { Arm::Base } else { Arm::Head };
        let second = if first == Arm::Base { Arm::Head } else { Arm::Base };
        let measure = |arm: Arm, run: &mut dyn FnMut(Arm, usize) -> Result<RunResult, String>| {
            run(arm, number).map_err(|message| PairedError { round: number, arm: Some(arm), message })
        };
        let a = measure(first, &mut run)?;
        let b = measure(second, &mut run)?;
        let (base, head) = if first == Arm::Base { (a, b) } else { (b, a) };
        let round = round(&base, &head).map_err(|message| PairedError { round: number, arm: None, message })?;
        records.push(RoundRecord { first, round });
        let rounds: Vec<Round> = records.iter().map(|r| r.round.clone()).collect();
        let now = standing(&rounds, plan, delta);
        if now.next != Next::AnotherRound {
            return Ok(PairedEvidence { rounds: records, standing: now });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::paired::metric_plan;
    use commgate_core::vocab::Decision;

    fn run(scale: f64) -> RunResult {
        commgate_testkit::results::run(&[10.0 * scale, 11.0 * scale, 12.5 * scale])
    }

    #[test]
    fn identical_arms_are_accepted_at_the_first_look() {
        let plan = metric_plan(10, 0.01).expect("plan");
        let mut calls = Vec::new();
        let e = measure_rounds(plan, 0.03, 7, |arm, n| {
            calls.push((arm, n));
            Ok(run(1.0))
        })
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
        let plan = metric_plan(30, 0.01).expect("plan");
        // Noisy enough never to settle: both orders turn up over 30 rounds.
        let mut k = 0u32;
        let e = measure_rounds(plan, 0.001, 3, |arm, _| {
            k += 1;
            let wobble = if k % 4 < 2 { 1.05 } else { 0.95 };
            Ok(run(if arm == Arm::Head { wobble } else { 1.0 }))
        })
        .expect("measured");
        assert!(e.rounds.iter().any(|r| r.first == Arm::Base) && e.rounds.iter().any(|r| r.first == Arm::Head));
    }

    #[test]
    fn a_slower_head_blocks_and_a_failing_arm_is_named() {
        let plan = metric_plan(10, 0.01).expect("plan");
        let e = measure_rounds(plan, 0.03, 1, |arm, n| {
            Ok(run(if arm == Arm::Head { 1.10 + 0.001 * n as f64 } else { 1.0 }))
        })
        .expect("measured");
        let v = e.standing.verdict.expect("stopped");
        assert!(v.blocking, "{v:?}");
        let e = measure_rounds(plan, 0.03, 1, |arm, n| {
            if arm == Arm::Base && n == 2 {
                Err("the benchmark exited 2".to_string())
            } else {
                Ok(run(1.0))
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "round 2, the base arm: the benchmark exited 2");
    }
}
