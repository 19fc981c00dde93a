//! The sample limit: what `compare` does with rows far longer than any evidence needs.
//!
//! Result files come from pull requests, so their size is chosen by whoever wrote them. The
//! bootstrap costs O(n) per resample per row and Harrell–Davis O(n) per quantile, so a row of
//! millions of steps would hold a gate for minutes. A row of more than [`SAMPLE_LIMIT`] steps is
//! therefore judged on a seeded stratified subsample of exactly [`SAMPLE_LIMIT`] of them
//! ([`stratified_subsample`]: one step drawn from each of [`SAMPLE_LIMIT`] equal stretches of the
//! run, in time order), and the comparison says so in its reasons. Rows at or under the limit
//! take exactly the path they always took.
//!
//! Why this keeps the statistics honest: at the limit the 95 % interval of a median with 2 %
//! step-to-step noise is about ±0.04 %, and even with 20 % noise ±0.4 %, while the gate never
//! acts on less than δ ≥ 3 %. The gate's power on a change it would act on is already
//! saturated, so the steps left out could only narrow intervals that are already far inside δ.
//! The subsample keeps every stretch of the run in proportion (a slow episode keeps its share),
//! and its random draw inside each stretch means no periodic pattern in the steps can alias
//! with a stride. The slow-episode guard still reads the whole current run.
//!
//! Rows beyond [`commgate_core::result::MAX_SAMPLES_PER_ROW`] never get here: the result reader refuses
//! them as bad input.

use std::borrow::Cow;

use commgate_core::result::{Row, RunResult, Schedule};
use commgate_stats::rng::Rng;
use commgate_stats::subsample::stratified_subsample;

/// The most steps of one row that `compare` judges; longer rows are subsampled to this many.
pub const SAMPLE_LIMIT: usize = 20_000;

/// A stream of its own for the subsample draws, so they never shift the bootstrap's stream.
const SUBSAMPLE_STREAM: u64 = 0x5AB5_A3B1_E000_0001;

/// The rows `compare` reads: all four.
const JUDGED: [Schedule; 4] = [Schedule::Overlap, Schedule::Serial, Schedule::ComputeOnly, Schedule::CommOnly];

/// Which run a row belongs to, for the note.
#[derive(Debug, Clone, Copy)]
pub(super) enum Whose {
    Current,
    Baseline(usize),
}

/// Bounds the runs of one comparison and remembers what it cut, for the note in the reasons.
pub(super) struct Bounder {
    rng: Rng,
    /// The longest row subsampled: its length, the run and the row's schedule.
    largest: Option<(usize, Whose, &'static str)>,
    rows: usize,
}

impl Bounder {
    pub(super) fn new(seed: u64) -> Self {
        Bounder { rng: Rng::new(seed ^ SUBSAMPLE_STREAM), largest: None, rows: 0 }
    }

    /// `run` itself when no row is over the limit; otherwise a copy with every such row
    /// subsampled to [`SAMPLE_LIMIT`] steps.
    pub(super) fn run<'a>(&mut self, run: &'a RunResult, whose: Whose) -> Cow<'a, RunResult> {
        let over = |r: &Row| JUDGED.contains(&r.schedule) && r.samples_ms.len() > SAMPLE_LIMIT;
        if !run.rows.iter().any(over) {
            return Cow::Borrowed(run);
        }
        let mut bounded = run.clone();
        for row in bounded.rows.iter_mut().filter(|r| over(r)) {
            let n = row.samples_ms.len();
            row.samples_ms = stratified_subsample(&row.samples_ms, SAMPLE_LIMIT, &mut self.rng);
            self.rows += 1;
            if self.largest.is_none_or(|(most, _, _)| n > most) {
                self.largest = Some((n, whose, row.schedule.as_str()));
            }
        }
        Cow::Owned(bounded)
    }

    /// "3 rows longer than 20000 steps (the longest: the current run's overlap row, 5000000)
    /// were judged on a seeded stratified subsample of 20000 steps each …", when any was.
    pub(super) fn note(&self) -> Option<String> {
        let (n, whose, schedule) = self.largest?;
        let run = match whose {
            Whose::Current => "the current run".to_string(),
            Whose::Baseline(i) => format!("baseline run {}", i + 1),
        };
        let rows = if self.rows == 1 { "1 row".to_string() } else { format!("{} rows", self.rows) };
        Some(format!(
            "{rows} longer than {SAMPLE_LIMIT} steps (the longest: {run}'s {schedule} row, {n}) judged on a seeded \
             stratified subsample of {SAMPLE_LIMIT} steps each; the gate's intervals are already far inside δ at that size"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::Baseline;
    use crate::compare::CompareOptions;
    use crate::decide::comparison::judge;
    use crate::decide::Decision;
    use commgate_testkit::results as fixtures;
    use std::path::PathBuf;

    /// `n` log-normal step times around `level` ms with 2 % noise.
    fn samples(n: usize, level: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| level * (0.02 * rng.normal()).exp()).collect()
    }

    fn baseline(runs: u64, n: usize) -> Baseline {
        Baseline {
            path: PathBuf::from("b.json"),
            runs: (0..runs).map(|i| fixtures::run(&samples(n, 1.0, 100 + i))).collect(),
        }
    }

    #[test]
    fn rows_at_the_limit_take_the_old_path_untouched() {
        let run = fixtures::run(&samples(SAMPLE_LIMIT, 1.0, 1));
        let mut bounder = Bounder::new(0);
        assert!(matches!(bounder.run(&run, Whose::Current), Cow::Borrowed(_)));
        assert_eq!(bounder.note(), None);
    }

    #[test]
    fn a_huge_row_takes_the_bounded_path_with_the_same_verdicts() {
        // Few resamples: each comparison sorts that many resamples of SAMPLE_LIMIT steps, and an
        // 8 % shift under 2 % noise is decided by any of them.
        let opts = CompareOptions { resamples: 30, ..CompareOptions::default() };
        let huge_n = 2 * SAMPLE_LIMIT + 17;
        // Three baseline runs floor their spread with the current run's bootstrap, five do not.
        for runs in [3, 5] {
            let (huge_base, small_base) = (baseline(runs, huge_n), baseline(runs, 2000));
            for (level, verdict) in [(1.08, Decision::Tune), (1.0, Decision::Accept)] {
                let huge = judge(&huge_base, &fixtures::run(&samples(huge_n, level, 7)), &opts);
                let small = judge(&small_base, &fixtures::run(&samples(2000, level, 7)), &opts);
                let case = format!("{runs} runs, level {level}: {:?}", huge.reasons);
                assert_eq!(huge.verdict, verdict, "{case}");
                assert_eq!(small.verdict, verdict, "{case}");
                assert_eq!(huge.regression, level > 1.0, "{case}");
                assert!(huge.metrics.iter().all(|m| m.judged.n_current == SAMPLE_LIMIT), "{case}");
                let note = huge.reasons.last().expect("a note");
                assert!(note.contains(&format!("stratified subsample of {SAMPLE_LIMIT} steps")), "{case}");
                assert!(note.contains(&format!("{} rows longer", 4 * (runs + 1))), "{case}");
                assert!(note.contains(&format!(" row, {huge_n})")), "{case}");
                assert!(small.reasons.iter().all(|r| !r.contains("subsample")), "{:?}", small.reasons);
            }
        }
    }

    /// The draw itself, not a whole comparison: `compare` seeds its `Bounder` from the options'
    /// seed alone, so the same seed gives the same subsample and so the same verdict.
    #[test]
    fn the_subsample_is_fixed_by_the_seed() {
        let run = fixtures::run(&samples(SAMPLE_LIMIT + 500, 1.02, 7));
        let draw = |seed: u64| Bounder::new(seed).run(&run, Whose::Current).into_owned();
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        assert!(draw(1).rows.iter().all(|r| r.samples_ms.len() == SAMPLE_LIMIT));
    }
}
