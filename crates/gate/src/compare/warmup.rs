//! Warm-up trimming of every judged row before anything is estimated: each row of each run
//! loses the leading steps that MSER-5 (`stats::warmup`) finds to be a transient, never so many
//! that fewer than `min_samples` steps remain. Baseline and current runs take the same rule, so
//! a run that warmed up slowly is compared on its steady state.

use std::borrow::Cow;

use commgate_core::result::{RunResult, Schedule};
use commgate_stats::warmup::mser5_truncation;

const JUDGED: [Schedule; 4] = [Schedule::Overlap, Schedule::Serial, Schedule::ComputeOnly, Schedule::CommOnly];

/// The most steps trimmed from one row of a run, and that row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Trimmed {
    pub(super) steps: usize,
    pub(super) of: usize,
    pub(super) row: Option<Schedule>,
}

/// `run` with each judged row's warm-up cut off (itself when nothing is cut).
pub(super) fn trim(run: &RunResult, keep: usize) -> (Cow<'_, RunResult>, Trimmed) {
    // One MSER pass per row: its cut, or 0 for a row that is not judged.
    let cuts: Vec<usize> = run
        .rows
        .iter()
        .map(|r| {
            let judged = JUDGED.contains(&r.schedule);
            let n = r.samples_ms.len();
            if judged {
                mser5_truncation(&r.samples_ms).min(n.saturating_sub(keep))
            } else {
                0
            }
        })
        .collect();
    let most = run.rows.iter().zip(&cuts).fold(Trimmed::default(), |most, (row, &d)| {
        if d > most.steps {
            Trimmed { steps: d, of: row.samples_ms.len(), row: Some(row.schedule) }
        } else {
            most
        }
    });
    if most.steps == 0 {
        return (Cow::Borrowed(run), most);
    }
    let mut trimmed = run.clone();
    for (row, &d) in trimmed.rows.iter_mut().zip(&cuts) {
        row.samples_ms.drain(..d);
    }
    (Cow::Owned(trimmed), most)
}

impl Trimmed {
    /// "warm-up: the current run's first 15 of 200 overlap steps left out (MSER-5)", when at
    /// least 5 % of a row was cut (a step or two is routine and not worth a line).
    pub(super) fn note(&self) -> Option<String> {
        let row = self.row?;
        (self.steps * 20 >= self.of).then(|| {
            format!(
                "warm-up: the current run's first {} of {} {row} steps left out (MSER-5 truncation)",
                self.steps, self.of
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_stats::rng::Rng;
    use commgate_testkit::results as fixtures;

    #[test]
    fn a_ramp_is_cut_and_a_steady_run_is_borrowed() {
        let mut rng = Rng::new(8);
        let steady: Vec<f64> = (0..100).map(|_| (0.02 * rng.normal()).exp()).collect();
        let run = fixtures::run(&steady);
        let (same, t) = trim(&run, 30);
        assert!(matches!(same, Cow::Borrowed(_)) || t.steps < 10, "{t:?}");
        let ramp: Vec<f64> =
            steady.iter().enumerate().map(|(i, v)| v * (1.0 + 0.6 * (-(i as f64) / 5.0).exp())).collect();
        let ramped = fixtures::run(&ramp);
        let (cut, t) = trim(&ramped, 30);
        assert!(t.steps >= 10, "{t:?}");
        assert!(cut.rows.iter().all(|r| r.samples_ms.len() <= 100 - 5));
        assert!(t.note().is_some_and(|n| n.starts_with("warm-up: the current run's first")));
        // Never below `keep` steps.
        let short = fixtures::run(&ramp[..40]);
        let (cut, _) = trim(&short, 30);
        assert!(cut.rows.iter().all(|r| r.samples_ms.len() >= 30));
    }
}
