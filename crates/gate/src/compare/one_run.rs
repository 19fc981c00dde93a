//! What one current run cannot confirm on its own, however large its change looks: the limits
//! of a single run's evidence that the run-level contrast (`stats::runlevel`) does not see,
//! because they come from how the steps *within* runs behave.
//!
//! The contrast treats each run's statistic as a draw from a normal run-to-run distribution. On a
//! runner with slow episodes (a throttled clock, a noisy neighbour, tens of steps long) a short
//! run's median is not: it is the quiet level in most runs and the episode's level (15–25 %
//! slower) in the few that spent most of their steps inside one. A baseline of a handful of runs
//! that happened to miss that mode has a tight spread, and a current run that sat in an episode
//! then looks like a confirmed regression; nothing inside such a run gives it away (it sits wholly
//! in one level, so it shows no dependence of its own). Measured with `benches/gate_quality.rs`
//! before these limits: 3.3 % of unchanged 20-step runs blocked against 5 runs, 2.0 % of 50-step
//! runs against 10 runs whose own steps showed the episodes. Two limits follow, for one current
//! run only (K ≥ 2 current runs are run-level evidence of their own):
//!
//! - **Short runs.** A row of fewer than [`SHORT_RUN_STEPS`] steps cannot block: below that, the
//!   dependence guard's Ljung–Box test (`min(10, n/5)` lags) cannot see an episode of ten steps,
//!   and one run cannot tell an episode from a slowdown.
//! - **Episodic baselines.** Where some baseline run's steps of a row come in episodes (its
//!   Ljung–Box test on ranks over the run's last three quarters rejects independence at
//!   0.01 / 4 / k, the guard's level Bonferroni-divided over the k baseline runs; the first
//!   quarter is left out because a warm-up's residue is a trend at the start, not an episode),
//!   this machine is known to have them, and a row of fewer than [`EPISODIC_RUN_STEPS`] steps
//!   cannot block: from 100 steps a run holds several episodes' worth of steps and its median
//!   stays in the quiet level.
//!
//! Either way the metric is shown, its state can be `unchanged`, and the reason says what to do:
//! more steps per row (`--repeats`) or K current runs (`check --runs`).

use super::estimate::{DEPENDENCE_ALPHA, ROWS};
use super::CONFIRM_WITH_RUNS;
use commgate_core::result::{RunResult, Schedule};
use commgate_stats::serial::rank_ljung_box;

/// A row of one current run with fewer steps than this cannot block (see the module doc).
pub const SHORT_RUN_STEPS: usize = 50;

/// Where the baseline runs' steps of a row come in episodes, a row of one current run with fewer
/// steps than this cannot block (see the module doc).
pub const EPISODIC_RUN_STEPS: usize = 100;

/// Per row of `rows`, why one current run cannot block on the metrics that read it, if it
/// cannot; all `None` when `current` holds more than one run.
pub(super) fn limits<const N: usize>(
    rows: [Schedule; N],
    current: &[&RunResult],
    base: &[&RunResult],
) -> [Option<String>; N] {
    let [one] = current else { return rows.map(|_| None) };
    // The dependence guard's level (Bonferroni over the rows), divided again over the baseline runs.
    let level = DEPENDENCE_ALPHA / ROWS.len() as f64 / base.len() as f64;
    rows.map(|s| {
        let n = one.row(s).map_or(0, |r| r.samples_ms.len());
        if n < SHORT_RUN_STEPS {
            return Some(format!(
                "one run of {n} steps cannot tell a slow episode from a slowdown: record at least \
                 {SHORT_RUN_STEPS} steps per row (`--repeats`) or {CONFIRM_WITH_RUNS}"
            ));
        }
        if n >= EPISODIC_RUN_STEPS {
            return None;
        }
        let episodic = base
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                b.row(s).map(|r| (i, rank_ljung_box(r.samples_ms.get(r.samples_ms.len() / 4..).unwrap_or_default())))
            })
            .filter(|(_, lb)| lb.p_value < level)
            .min_by(|a, b| a.1.p_value.total_cmp(&b.1.p_value));
        episodic.map(|(i, lb)| {
            format!(
                "the baseline runs' {s} steps come in episodes (baseline run {} of {}: Ljung–Box p = {:.1e}), and one \
                 run of {n} steps can sit wholly in one: record at least {EPISODIC_RUN_STEPS} steps per row \
                 (`--repeats`) or {CONFIRM_WITH_RUNS}",
                i + 1,
                base.len(),
                lb.p_value
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_stats::rng::Rng;
    use commgate_testkit::results as fixtures;

    fn quiet(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| (0.02 * rng.normal()).exp()).collect()
    }

    /// Quiet steps with one slow episode (×1.2) over the middle third.
    fn episodic(n: usize, seed: u64) -> Vec<f64> {
        let mut v = quiet(n, seed);
        v.iter_mut().skip(n / 3).take(n / 3).for_each(|x| *x *= 1.2);
        v
    }

    const ROWS: [Schedule; 2] = [Schedule::Overlap, Schedule::Serial];

    #[test]
    fn a_short_run_cannot_block_and_k_runs_can() {
        let base: Vec<RunResult> = (0..5).map(|i| fixtures::run(&quiet(200, i))).collect();
        let refs: Vec<&RunResult> = base.iter().collect();
        let short = fixtures::run(&quiet(49, 9));
        let [overlap, serial] = limits(ROWS, &[&short], &refs);
        assert!(overlap.as_deref().is_some_and(|w| w.contains("one run of 49 steps cannot tell")), "{overlap:?}");
        assert!(serial.is_some());
        assert_eq!(limits(ROWS, &[&short, &short], &refs), [None, None]);
        assert_eq!(limits(ROWS, &[&fixtures::run(&quiet(50, 9))], &refs), [None, None]);
    }

    #[test]
    fn an_episodic_baseline_needs_a_longer_run() {
        let mut base: Vec<RunResult> = (0..5).map(|i| fixtures::run(&quiet(60, i))).collect();
        let refs: Vec<&RunResult> = base.iter().collect();
        assert_eq!(limits(ROWS, &[&fixtures::run(&quiet(60, 9))], &refs), [None, None]);
        base[3] = fixtures::run(&episodic(60, 3));
        let refs: Vec<&RunResult> = base.iter().collect();
        let [overlap, _] = limits(ROWS, &[&fixtures::run(&quiet(60, 9))], &refs);
        assert!(overlap.as_deref().is_some_and(|w| w.contains("baseline run 4 of 5")), "{overlap:?}");
        // From 100 steps on, the run holds enough of the machine's episodes to block.
        assert_eq!(limits(ROWS, &[&fixtures::run(&quiet(100, 9))], &refs), [None, None]);
    }
}
