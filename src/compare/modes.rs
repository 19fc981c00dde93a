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

use crate::result::RunResult;

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

/// How NCCL's recorded choice shapes the comparison of `current` with `runs`.
pub(super) fn like_with_like(runs: &[&RunResult], current: &RunResult) -> Choice {
    let Some(choice) = current.software.nccl_choice.as_deref() else {
        return Choice::default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::fixtures;

    fn with(choice: Option<&str>) -> RunResult {
        let mut r = fixtures::run(&[1.0; 40]);
        r.software.nccl_choice = choice.map(String::from);
        r
    }

    #[test]
    fn like_is_compared_with_like() {
        let base = [with(Some("Ring/LL128")), with(Some("Tree/LL")), with(Some("Ring/LL128")), with(None)];
        let refs: Vec<&RunResult> = base.iter().collect();
        let c = like_with_like(&refs, &with(Some("Ring/LL128")));
        assert!(c.group && c.cannot_block.is_none());
        assert!(c.note.as_deref().is_some_and(|n| n.contains("2 of 4 baseline runs")), "{c:?}");
        let c = like_with_like(&refs, &with(Some("Ring/Simple")));
        assert!(!c.group);
        assert!(c.cannot_block.as_deref().is_some_and(|w| w.contains("\"Ring/LL128\", \"Tree/LL\"")), "{c:?}");
        assert_eq!(like_with_like(&refs, &with(None)), Choice::default());
        assert_eq!(like_with_like(&refs[..1], &with(Some("Ring/LL128"))), Choice::default());
    }
}
