//! Run-level modes: NCCL picks its algorithm, protocol and channels per run, and runs fall into
//! modes a few percent apart by that choice alone. A baseline that happens to hold one mode has
//! a tiny spread, and a current run in another mode then looks like a regression. Where the
//! result records the choice (`software.nccl_choice`), the comparison is like with like: only the
//! baseline runs where NCCL chose the same. Where the current run's choice is recorded and no
//! baseline run shares it while some record another, the difference may be the choice itself:
//! the comparison is shown against every run and cannot block.

use crate::result::RunResult;

/// What the choice did to the comparison.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Choice {
    /// Why nothing may block (no baseline run shares the current run's recorded choice).
    pub(super) cannot_block: Option<String>,
    /// A reason saying which runs were compared, when some were left out.
    pub(super) note: Option<String>,
}

/// The baseline runs comparable with `current` by NCCL's choice, and what that did.
pub(super) fn like_with_like<'a>(runs: Vec<&'a RunResult>, current: &RunResult) -> (Vec<&'a RunResult>, Choice) {
    let Some(choice) = current.software.nccl_choice.as_deref() else {
        return (runs, Choice::default());
    };
    let same: Vec<&RunResult> =
        runs.iter().copied().filter(|r| r.software.nccl_choice.as_deref() == Some(choice)).collect();
    if same.len() == runs.len() {
        return (runs, Choice::default());
    }
    if !same.is_empty() {
        let note = format!(
            "compared with the {} of {} baseline runs where NCCL also chose {choice:?} (runs fall into modes by \
             NCCL's choice)",
            same.len(),
            runs.len()
        );
        return (same, Choice { cannot_block: None, note: Some(note) });
    }
    let others: Vec<&str> = runs.iter().filter_map(|r| r.software.nccl_choice.as_deref()).collect();
    if others.is_empty() {
        return (runs, Choice::default());
    }
    let mut seen: Vec<&str> = Vec::new();
    for o in &others {
        if !seen.contains(o) {
            seen.push(o);
        }
    }
    let list: Vec<String> = seen.iter().map(|o| format!("{o:?}")).collect();
    let why = format!(
        "NCCL chose {choice:?} in this run and {} in the baseline runs: the difference may be NCCL's choice, not \
         the change; pin it (`--nccl-algo`, `--nccl-proto`) or record baseline runs with this choice",
        list.join(", ")
    );
    (runs, Choice { cannot_block: Some(why), note: None })
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
        let (same, c) = like_with_like(refs.clone(), &with(Some("Ring/LL128")));
        assert_eq!(same.len(), 2);
        assert!(c.note.as_deref().is_some_and(|n| n.contains("2 of 4 baseline runs")), "{c:?}");
        assert_eq!(c.cannot_block, None);
        let (all, c) = like_with_like(refs.clone(), &with(Some("Ring/Simple")));
        assert_eq!(all.len(), 4);
        assert!(c.cannot_block.as_deref().is_some_and(|w| w.contains("\"Ring/LL128\", \"Tree/LL\"")), "{c:?}");
        let (all, c) = like_with_like(refs, &with(None));
        assert_eq!((all.len(), c), (4, Choice::default()));
    }
}
