//! A benchmark run's own verdict on overlap: the result file's `decision`, made from everything
//! else the result holds (formats.md, "Result file"). The runner builds the result and hands it
//! here through `bench::assemble::Judge`.

use super::vocab::{Decision, Verdict};
use commgate_core::result::{Row, RunResult, Schedule};
use commgate_stats::mann_whitney::mann_whitney_u;
use commgate_stats::quantile::P95_MIN_SAMPLES as MIN_REPEATS_FOR_P95;

/// A rank whose mean overlap step exceeds the other ranks' mean by this factor grew a tail.
const RANK_TAIL_FACTOR: f64 = 1.10;

/// The run's own verdict on overlap (formats.md, `decision`): accept when overlap beats serial
/// in median and P95 beyond the run's own noise and no rank grows a tail; tune otherwise, saying
/// so when overlap is slower than serial; collect more evidence for failed runs, one-rank smoke
/// runs or too few repeats.
pub fn decide(result: &RunResult) -> Verdict {
    let (world_size, rows, c) = (result.workload.world_size, &result.rows, &result.comparison);
    let verdict = Verdict::because;
    if let Some(f) = &result.failure {
        return verdict(Decision::CollectMoreEvidence, format!("the run failed ({}): {}", f.kind, f.message));
    }
    let row = |s: Schedule| rows.iter().find(|r| r.schedule == s);
    let (Some(serial), Some(overlap)) = (row(Schedule::Serial), row(Schedule::Overlap)) else {
        return verdict(Decision::CollectMoreEvidence, "the run has no serial and overlap rows".to_string());
    };
    if world_size < 2 {
        return verdict(
            Decision::CollectMoreEvidence,
            "one rank communicates nothing: a smoke run (loading, timing and GEMM) says nothing about overlap; \
             run on 2 or more GPUs"
                .to_string(),
        );
    }
    let n = overlap.samples_ms.len().min(serial.samples_ms.len());
    if n < MIN_REPEATS_FOR_P95 {
        return verdict(
            Decision::CollectMoreEvidence,
            format!("{n} repeats; a P95 needs at least {MIN_REPEATS_FOR_P95} (--repeats)"),
        );
    }
    if let Some((rank, ratio)) = rank_tail(overlap) {
        return verdict(
            Decision::Tune,
            format!("rank {rank}'s mean overlap step is {ratio:.2}× the other ranks': find what slows it first"),
        );
    }
    let mw = mann_whitney_u(&overlap.samples_ms, &serial.samples_ms);
    let medians = (overlap.median_max_rank_ms, serial.median_max_rank_ms);
    if let Some(penalty) = c.penalty().filter(|_| mw.p_greater <= 0.01) {
        return verdict(
            Decision::Tune,
            format!(
                "overlap is {penalty:.3} ms slower than serial (median {:.3} vs {:.3} ms, p = {:.3}): \
                 the streams interfere",
                medians.0, medians.1, mw.p_greater
            ),
        );
    }
    let p = mw.p_less;
    let beats_median = medians.0 < medians.1 && p <= 0.01;
    let beats_p95 = overlap.p95_max_rank_ms < serial.p95_max_rank_ms;
    match (beats_median, beats_p95) {
        (true, true) => verdict(
            Decision::Accept,
            format!(
                "overlap saves {:.3} ms per step ({:.1} % of serial){}",
                c.saved_ms.unwrap_or(0.0),
                100.0 * c.overlap_gain_ratio.unwrap_or(0.0),
                c.overlap_efficiency
                    .map(|e| format!(" and hides {:.0} % of what it could", 100.0 * e))
                    .unwrap_or_default()
            ),
        ),
        (false, _) => verdict(
            Decision::Tune,
            format!(
                "overlap does not beat serial beyond the run's noise (median {:.3} vs {:.3} ms, p = {p:.3}): \
                 communication is not hidden behind compute",
                medians.0, medians.1
            ),
        ),
        (true, false) => verdict(
            Decision::Tune,
            format!(
                "overlap beats serial in the median but not in P95 ({:.3} vs {:.3} ms): overlapped steps have a long tail",
                overlap.p95_max_rank_ms, serial.p95_max_rank_ms
            ),
        ),
    }
}

/// The rank whose mean overlap step most exceeds the mean of the others, if it does by more
/// than [`RANK_TAIL_FACTOR`].
fn rank_tail(overlap: &Row) -> Option<(u32, f64)> {
    let means = &overlap.rank_mean_ms;
    if means.len() < 2 {
        return None;
    }
    let total: f64 = means.iter().sum();
    let (i, ratio) = means
        .iter()
        .enumerate()
        .map(|(i, m)| (i, m / ((total - m) / (means.len() - 1) as f64)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    u32::try_from(i).ok().filter(|_| ratio > RANK_TAIL_FACTOR).map(|i| (i, ratio))
}
