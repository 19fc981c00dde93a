//! Run-level modes: NCCL picks its algorithm, protocol and channels per run, and runs fall into
//! modes a few percent apart by that choice alone. A baseline that happens to hold one mode has
//! a tiny spread, and a current run in another mode then looks like a regression. Where the
//! result records the choice (`software.nccl_choice`), the comparison is like with like: the
//! runs are grouped by choice (with their runner, `stats::runlevel`), so the current run is held
//! against the baseline runs where NCCL chose the same, with the spread within a choice pooled
//! over every choice (a mode seen once still has a spread to be judged by). Where the current
//! run's choice is recorded and no baseline run shares it while some record another, the
//! difference may be the choice itself: the comparison is shown against every run and cannot
//! block.
//!
//! Where NCCL ran (a multi-rank run that records an NCCL version) but its choice is not recorded
//! (results of older versions, a tuning log that could not be read), the modes are invisible: a
//! baseline of a few runs that all fell into one mode has a tiny spread, and one current run in
//! another mode 6 % away blocks. Measured with `benches/gate_quality.rs` (three choices of
//! probabilities 0.60/0.25/0.15): 3.0 % of unchanged runs blocked with 3 baseline runs, 1.6–2.1 %
//! with 5, 0.1–0.3 % with 10. So one current run with an unrecorded choice blocks only against
//! at least [`UNRECORDED_CHOICE_RUNS`] comparable baseline runs; K ≥ 2 current runs are judged as
//! always.
//!
//! The same holds for the `cpu` backend, whose pace the OS scheduler sets per run: on the 2-core
//! development machine under load, the collective alone (`comm_only`) ran at 0.12–0.17 ms in some
//! unchanged runs and 0.35–0.48 ms in others, and 5 baseline runs that all fell into the fast
//! mode blocked 3 of 59 unchanged runs (`scripts/newcomer.sh`).

use super::CONFIRM_WITH_RUNS;
use commgate_core::result::{EvidenceLevel, RunResult};
use commgate_core::units::plural;

/// What the choice did to the comparison.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Choice {
    /// Whether runs are grouped by their recorded choice (some baseline run shares the current
    /// run's).
    pub(super) group: bool,
    /// Why nothing may block (no baseline run shares the current run's recorded choice).
    pub(super) cannot_block: Option<String>,
    /// A reason saying which runs were compared, when some were left out.
    pub(super) note: Option<String>,
}

/// With NCCL's choice unrecorded, one current run blocks only against at least this many
/// baseline runs (see the module documentation): the store's default `--keep`.
pub const UNRECORDED_CHOICE_RUNS: usize = 10;

/// How NCCL's recorded choice shapes the comparison of `current_runs` runs, the first of which
/// is `current`, with `runs`.
pub(super) fn like_with_like(runs: &[&RunResult], current: &RunResult, current_runs: usize) -> Choice {
    let Some(choice) = current.software.nccl_choice.as_deref() else {
        return unrecorded(runs.len(), current, current_runs);
    };
    let same = runs.iter().filter(|r| r.software.nccl_choice.as_deref() == Some(choice)).count();
    if same == runs.len() {
        return Choice::default();
    }
    if same > 0 {
        let note = format!(
            "held against the {same} of {} baseline runs where NCCL also chose {choice:?} (runs fall into modes by \
             NCCL's choice; the spread within a choice is pooled over every choice)",
            runs.len()
        );
        return Choice { group: true, cannot_block: None, note: Some(note) };
    }
    let mut seen: Vec<&str> = Vec::new();
    for o in runs.iter().filter_map(|r| r.software.nccl_choice.as_deref()) {
        if !seen.contains(&o) {
            seen.push(o);
        }
    }
    if seen.is_empty() {
        return Choice::default();
    }
    let list: Vec<String> = seen.iter().map(|o| format!("{o:?}")).collect();
    let why = format!(
        "NCCL chose {choice:?} in this run and {} in the baseline runs: the difference may be NCCL's choice, not \
         the change; pin it (`--nccl-algo`, `--nccl-proto`) or record baseline runs with this choice",
        list.join(", ")
    );
    Choice { group: false, cannot_block: Some(why), note: None }
}

/// The comparison of one run whose mode is decided by something it does not record (NCCL's
/// choice, unrecorded; the OS scheduler of the `cpu` backend) with fewer than
/// [`UNRECORDED_CHOICE_RUNS`] baseline runs: it cannot block.
fn unrecorded(baseline_runs: usize, current: &RunResult, current_runs: usize) -> Choice {
    let nccl_ran = current.software.nccl.is_some() && current.workload.world_size > 1;
    let on_cpu = current.evidence_level == EvidenceLevel::CpuMechanism;
    if !(nccl_ran || on_cpu) || current_runs > 1 || baseline_runs >= UNRECORDED_CHOICE_RUNS {
        return Choice::default();
    }
    let more = UNRECORDED_CHOICE_RUNS - baseline_runs;
    let runs = format!("{baseline_runs} baseline run{}", plural(baseline_runs));
    let record = format!("record {more} more baseline run{}", plural(more));
    let why = if nccl_ran {
        format!(
            "NCCL's algorithm/protocol choice is not recorded, and {runs} may all have fallen into one of the modes \
             NCCL picks per run: {record}, pin the choice (`--nccl-algo`, `--nccl-proto`), or {CONFIRM_WITH_RUNS}"
        )
    } else {
        format!(
            "on the cpu backend the OS scheduler sets each run's pace (on a loaded machine the collective alone ran \
             3× slower in some unchanged runs than in others), and {runs} may all have fallen into one mode: \
             {record} or {CONFIRM_WITH_RUNS}"
        )
    };
    Choice { group: false, cannot_block: Some(why), note: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_testkit::results as fixtures;

    fn with(choice: Option<&str>) -> RunResult {
        let mut r = fixtures::run(&[1.0; 40]);
        r.software.nccl_choice = choice.map(String::from);
        r
    }

    #[test]
    fn an_unrecorded_choice_needs_ten_runs_or_a_rerun() {
        let mut nccl = with(None);
        nccl.software.nccl = Some("2.21.5".into());
        nccl.workload.world_size = 8;
        let five: Vec<RunResult> = (0..5).map(|_| nccl.clone()).collect();
        let refs: Vec<&RunResult> = five.iter().collect();
        let c = like_with_like(&refs, &nccl, 1);
        assert!(c.cannot_block.as_deref().is_some_and(|w| w.contains("record 5 more baseline runs")), "{c:?}");
        assert_eq!(like_with_like(&refs, &nccl, 3), Choice::default());
        let ten: Vec<&RunResult> = (0..10).map(|_| &nccl).collect();
        assert_eq!(like_with_like(&ten, &nccl, 1), Choice::default());
        // No NCCL (one rank, or no version): nothing to choose.
        nccl.workload.world_size = 1;
        assert_eq!(like_with_like(&refs, &nccl, 1), Choice::default());
        // The cpu backend: the scheduler decides each run's mode, and nothing records it.
        nccl.evidence_level = EvidenceLevel::CpuMechanism;
        let c = like_with_like(&refs, &nccl, 1);
        assert!(c.cannot_block.as_deref().is_some_and(|w| w.starts_with("on the cpu backend")), "{c:?}");
        let ten_on_cpu: Vec<&RunResult> = (0..10).map(|_| &nccl).collect();
        assert_eq!(like_with_like(&ten_on_cpu, &nccl, 1), Choice::default());
    }

    #[test]
    fn like_is_compared_with_like() {
        let base = [with(Some("Ring/LL128")), with(Some("Tree/LL")), with(Some("Ring/LL128")), with(None)];
        let refs: Vec<&RunResult> = base.iter().collect();
        let c = like_with_like(&refs, &with(Some("Ring/LL128")), 1);
        assert!(c.group && c.cannot_block.is_none());
        assert!(c.note.as_deref().is_some_and(|n| n.contains("2 of 4 baseline runs")), "{c:?}");
        let c = like_with_like(&refs, &with(Some("Ring/Simple")), 1);
        assert!(!c.group);
        assert!(c.cannot_block.as_deref().is_some_and(|w| w.contains("\"Ring/LL128\", \"Tree/LL\"")), "{c:?}");
        assert_eq!(like_with_like(&refs, &with(None), 1), Choice::default());
        assert_eq!(like_with_like(&refs[..1], &with(Some("Ring/LL128")), 1), Choice::default());
    }
}
