//! Steps inside the window: which step a kernel belongs to, how long each step is, and each
//! collective's exposed time per step.
//!
//! A kernel belongs to the step whose window holds its anchor (the start of the CPU event that
//! launched it, else its own start), the same anchor that decides whether it is in the window at
//! all. The series are capped at [`MAX_STEP_SAMPLES`] entries so that a trace with a million
//! step markers cannot make the report as long as the trace.

use super::super::intervals::{sweep, Span};
use super::super::model::Ns;

/// The most per-step samples kept per series; later steps still count in the per-step means.
pub const MAX_STEP_SAMPLES: usize = 10_000;

/// The boundaries between steps: every step start but the first and the last (the window's own
/// ends), so that [`step_of`] can binary-search them.
pub(super) fn interior_bounds(starts: &[Ns]) -> &[Ns] {
    match starts {
        [_, interior @ .., _] => interior,
        _ => &[],
    }
}

/// The 0-based step of an anchor: how many interior boundaries lie at or before it. Without
/// boundaries (the whole trace, or a single step) every kernel is in step 0.
pub(super) fn step_of(bounds: &[Ns], anchor: Ns) -> u32 {
    u32::try_from(bounds.partition_point(|&b| b <= anchor)).unwrap_or(u32::MAX)
}

/// Each step's length in time order, capped: consecutive step starts, or, for the whole trace,
/// the span from the first GPU activity's start to the last one's end (empty without any).
pub(super) fn step_lengths(starts: &[Ns], gpu_span: Option<Span>) -> Vec<Ns> {
    if starts.len() >= 2 {
        starts.iter().zip(starts.iter().skip(1)).take(MAX_STEP_SAMPLES).map(|(a, b)| b - a).collect()
    } else {
        gpu_span.map(|(a, b)| vec![b - a]).unwrap_or_default()
    }
}

/// Per label, `(step, exposed ns)` for each step (below the cap) that has the label's kernels:
/// the equal-share sweep run over each step's kernels alone. `labelled[i]` has step `steps[i]`;
/// `compute` is the rank's compute union.
///
/// Each step's sweep uses only the labels present in it, so the cost is linear in the kernels,
/// not steps × labels.
pub(super) fn exposed_by_step(
    labelled: &[(Span, usize)],
    steps: &[u32],
    compute: &[Span],
    labels: usize,
) -> Vec<Vec<(u32, f64)>> {
    let mut out: Vec<Vec<(u32, f64)>> = vec![Vec::new(); labels];
    // (step, span, label) below the cap, by step (stable: in the order given within a step).
    let mut kept: Vec<(u32, Span, usize)> = steps
        .iter()
        .zip(labelled)
        .filter(|&(&step, _)| (step as usize) < MAX_STEP_SAMPLES)
        .map(|(&step, &(span, label))| (step, span, label))
        .collect();
    kept.sort_by_key(|&(step, _, _)| step);
    for group in kept.chunk_by(|a, b| a.0 == b.0) {
        let Some(&(step, _, _)) = group.first() else { continue };
        let mut local: Vec<usize> = group.iter().map(|&(_, _, label)| label).collect();
        local.sort_unstable();
        local.dedup();
        let spans: Vec<(Span, usize)> =
            group.iter().map(|&(_, span, label)| (span, local.binary_search(&label).unwrap_or(0))).collect();
        let shares = sweep(&spans, compute_within(compute, &spans), local.len());
        for (&label, &exposed) in local.iter().zip(&shares.exposed) {
            if let Some(series) = out.get_mut(label) {
                series.push((step, exposed));
            }
        }
    }
    out
}

/// The part of the (sorted, disjoint) compute union that can overlap `spans`: each step's sweep
/// then walks its own compute spans only, not the whole trace's from the start.
fn compute_within<'a>(compute: &'a [Span], spans: &[(Span, usize)]) -> &'a [Span] {
    let lo = spans.iter().map(|&((s, _), _)| s).min().unwrap_or(0);
    let hi = spans.iter().map(|&((_, e), _)| e).max().unwrap_or(0);
    let start = compute.partition_point(|&(_, end)| end <= lo);
    let end = compute.partition_point(|&(begin, _)| begin < hi).max(start);
    compute.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_map_to_the_step_whose_window_holds_them() {
        let starts = [100, 200, 300, 400];
        let bounds = interior_bounds(&starts);
        assert_eq!(bounds, &[200, 300]);
        assert_eq!(step_of(bounds, 100), 0);
        assert_eq!(step_of(bounds, 199), 0);
        assert_eq!(step_of(bounds, 200), 1);
        assert_eq!(step_of(bounds, 399), 2);
        assert_eq!(step_of(interior_bounds(&[]), 5), 0);
        assert_eq!(step_of(interior_bounds(&[0, 10]), 5), 0);
    }

    #[test]
    fn step_lengths_from_starts_or_the_gpu_span() {
        assert_eq!(step_lengths(&[100, 250, 300], None), vec![150, 50]);
        assert_eq!(step_lengths(&[], Some((10, 70))), vec![60]);
        assert!(step_lengths(&[], None).is_empty());
        let many: Vec<Ns> = (0..(MAX_STEP_SAMPLES as Ns + 5)).collect();
        assert_eq!(step_lengths(&many, None).len(), MAX_STEP_SAMPLES);
    }

    #[test]
    fn exposed_time_is_swept_per_step() {
        // Label 0 in step 0 over [0, 10) with compute [0, 4): 6 exposed. Step 1: labels 0 and 1
        // both over [20, 30), no compute: 5 each.
        let labelled = [((0, 10), 0), ((20, 30), 0), ((20, 30), 1)];
        let out = exposed_by_step(&labelled, &[0, 1, 1], &[(0, 4)], 2);
        assert_eq!(out, vec![vec![(0, 6.0), (1, 5.0)], vec![(1, 5.0)]]);
    }

    #[test]
    fn steps_past_the_cap_are_left_out() {
        let cap = u32::try_from(MAX_STEP_SAMPLES).unwrap();
        let out = exposed_by_step(&[((0, 10), 0), ((20, 30), 0)], &[cap - 1, cap], &[], 1);
        assert_eq!(out, vec![vec![(cap - 1, 10.0)]]);
    }
}
