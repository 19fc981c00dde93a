//! Interval arithmetic on one rank's timeline, in integer nanoseconds: unions, overlap, and the
//! equal-share sweep that splits communication time among concurrent kernels.
//!
//! The sweep (attribution.md, "Per rank"): every instant in which k communication kernels run is
//! split equally among them, and the share is exposed when no compute runs in that instant. The
//! per-label totals therefore add up to |∪ comm| and |∪ comm \ ∪ compute| exactly (up to f64
//! rounding of the 1/k shares).

use super::model::Ns;

/// A half-open interval `[start, end)`.
pub type Span = (Ns, Ns);

/// Sorted, disjoint union of spans; touching spans merge; empty spans vanish.
pub fn union(mut spans: Vec<Span>) -> Vec<Span> {
    spans.retain(|&(s, e)| e > s);
    spans.sort_unstable();
    // Merged in place: a kernel-dense rank has millions of spans, and a second list of them
    // would double what the union costs. `dedup_by` hands each span with the last one kept, and
    // drops it when it returns true.
    spans.dedup_by(|next, last| {
        let overlaps = next.0 <= last.1;
        if overlaps {
            last.1 = last.1.max(next.1);
        }
        overlaps
    });
    spans.shrink_to_fit();
    spans
}

/// HTA's merge keeps what [`union`] drops: an interval that rounding made negative (a sub-µs
/// kernel rounded inward ends 1 µs before it starts) forms a group of its own, of negative
/// length, when no earlier interval (by start, then end) reaches its start; inside another
/// group it adds nothing. Returns those lone negative intervals, by index into `spans`, so that
/// their lengths can be added to the union's as HTA adds them to its totals.
pub fn lone_negatives(spans: &[Span]) -> Vec<usize> {
    let mut order: Vec<(Span, usize)> = spans.iter().copied().zip(0..).collect();
    order.sort_unstable();
    let mut reach = Ns::MIN;
    let mut lone = Vec::new();
    for ((s, e), i) in order {
        if e < s && s > reach {
            lone.push(i);
        }
        reach = reach.max(e);
    }
    lone
}

/// Total length of a union.
pub fn length(union: &[Span]) -> Ns {
    union.iter().map(|&(s, e)| e - s).sum()
}

/// |a ∩ b| for two unions.
pub fn intersection(a: &[Span], b: &[Span]) -> Ns {
    let (mut a, mut b, mut total) = (a, b, 0);
    while let (Some((&(a_start, a_end), a_rest)), Some((&(b_start, b_end), b_rest))) =
        (a.split_first(), b.split_first())
    {
        let s = a_start.max(b_start);
        let e = a_end.min(b_end);
        if e > s {
            total += e - s;
        }
        if a_end < b_end {
            a = a_rest;
        } else {
            b = b_rest;
        }
    }
    total
}

/// Per-label shares of communication time from [`sweep`].
#[derive(Debug, Clone, PartialEq)]
pub struct Shares {
    /// Indexed by label.
    pub total: Vec<f64>,
    pub exposed: Vec<f64>,
}

/// The equal-share sweep. `comm` holds `(span, label)` with labels in `0..labels`; `compute` is a
/// union (sorted, disjoint).
pub fn sweep(comm: &[(Span, usize)], compute: &[Span], labels: usize) -> Shares {
    // Boundaries: (time, +1 start / −1 end, label). Ends sort before starts at the same time,
    // which does not matter for lengths but keeps counts small.
    let mut edges: Vec<(Ns, i8, usize)> = Vec::with_capacity(comm.len() * 2);
    for &((s, e), label) in comm {
        if e > s && label < labels {
            edges.push((s, 1, label));
            edges.push((e, -1, label));
        }
    }
    edges.sort_unstable();
    // Each label's share of a segment is `count / running`, so its total is its count times the
    // running sum of `len / running` over the segments since its count last changed: settling a
    // label only when its count changes keeps the sweep linear in the edges, however many labels
    // are active at once (a scan of every label per segment was quadratic).
    let mut per_label = vec![LabelSweep::default(); labels];
    let mut running = 0u32;
    let mut cursor = ComputeCursor { rest: compute };
    let mut prev: Option<Ns> = None;
    let (mut per_total, mut per_exposed) = (0.0f64, 0.0f64);
    for (t, delta, label) in edges {
        if let Some(p) = prev {
            if t > p && running > 0 {
                let k = f64::from(running);
                per_total += (t - p) as f64 / k;
                per_exposed += (t - p - cursor.covered(p, t)) as f64 / k;
            }
        }
        prev = Some(t);
        // Every edge's label is below `labels` (checked as the edges were gathered).
        let Some(l) = per_label.get_mut(label) else { continue };
        let c = f64::from(l.active);
        let (from_total, from_exposed) = l.settled;
        l.total += c * (per_total - from_total);
        l.exposed += c * (per_exposed - from_exposed);
        l.settled = (per_total, per_exposed);
        if delta > 0 {
            l.active += 1;
            running += 1;
        } else {
            l.active -= 1;
            running -= 1;
        }
    }
    Shares {
        total: per_label.iter().map(|l| l.total).collect(),
        exposed: per_label.iter().map(|l| l.exposed).collect(),
    }
}

/// One label's state in [`sweep`]: its kernels running now, the running sums when its count
/// last changed, and its shares so far.
#[derive(Debug, Clone, Copy, Default)]
struct LabelSweep {
    active: u32,
    settled: (f64, f64),
    total: f64,
    exposed: f64,
}

/// Walks a union forwards, answering "how much of [a, b) is covered" for increasing segments.
struct ComputeCursor<'a> {
    /// The spans not yet passed: none ends at or before the last segment's start.
    rest: &'a [Span],
}

impl ComputeCursor<'_> {
    fn covered(&mut self, a: Ns, b: Ns) -> Ns {
        while let Some((&(_, end), rest)) = self.rest.split_first() {
            if end > a {
                break;
            }
            self.rest = rest;
        }
        self.rest
            .iter()
            .take_while(|&&(start, _)| start < b)
            .map(|&(start, end)| (end.min(b) - start.max(a)).max(0))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn union_merges_touching_and_drops_empty() {
        assert_eq!(union(vec![(5, 7), (0, 2), (2, 3), (4, 4), (6, 9)]), vec![(0, 3), (5, 9)]);
        assert_eq!(length(&union(vec![(0, 10), (3, 4)])), 10);
        assert_eq!(intersection(&[(0, 10), (20, 30)], &[(5, 25)]), 10);
    }

    #[test]
    fn sweep_splits_concurrent_kernels_equally() {
        // Two comm kernels overlap on [5, 10); compute covers [0, 6).
        let comm = [((0, 10), 0), ((5, 15), 1)];
        let s = sweep(&comm, &[(0, 6)], 2);
        assert_eq!(s.total, vec![7.5, 7.5]);
        // Exposed: [6,10) split → 2 each; label 0 nothing else exposed, label 1 [10,15) → 5.
        assert_eq!(s.exposed, vec![2.0, 7.0]);
    }

    proptest! {
        #[test]
        fn sweep_adds_up_to_union(spans in proptest::collection::vec((0i64..1000, 0i64..200, 0usize..3), 0..40),
                                  comp in proptest::collection::vec((0i64..1000, 0i64..200), 0..40)) {
            let comm: Vec<(Span, usize)> = spans.iter().map(|&(s, d, l)| ((s, s + d), l)).collect();
            let cu = union(comm.iter().map(|c| c.0).collect());
            let pu = union(comp.iter().map(|&(s, d)| (s, s + d)).collect());
            let shares = sweep(&comm, &pu, 3);
            let total: f64 = shares.total.iter().sum();
            let exposed: f64 = shares.exposed.iter().sum();
            prop_assert!((total - length(&cu) as f64).abs() < 1e-6);
            prop_assert!((exposed - (length(&cu) - intersection(&cu, &pu)) as f64).abs() < 1e-6);
        }
    }

    #[test]
    fn lone_negative_intervals_are_those_no_earlier_interval_reaches() {
        // [10, 9] alone; [20, 19] inside [15, 30); [40, 39] right after [35, 39] ends (not
        // reached: 39 < 40); [50, 49] and [50, 60): the negative one sorts first and is alone.
        let spans = [(15, 30), (10, 9), (20, 19), (35, 39), (40, 39), (50, 60), (50, 49)];
        assert_eq!(lone_negatives(&spans), vec![1, 4, 6]);
        assert!(lone_negatives(&[(0, 10), (5, 4)]).is_empty());
        assert!(lone_negatives(&[]).is_empty());
    }
}
