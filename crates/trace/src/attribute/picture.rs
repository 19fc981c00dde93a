//! The picture of one replayed step: per rank, the bars a gantt chart draws (compute,
//! communication hidden under compute, exposed communication), the critical path marked, ranks
//! folded past eight and bars merged below a pixel's width so that a step with thousands of
//! kernels and 64 ranks stays a chart a reader can take in (and a PR comment can hold).
//!
//! Pure: bars in, a bounded [`Picture`] out; `report::gantt` draws it.
//!
//! How a rank's bars are bounded ([`picture`]): the exact picture is the union of its compute
//! bars and its communication split by that union into hidden and exposed pieces, each piece
//! critical or not. A chart [`PIXELS`] wide cannot show what is narrower than a pixel (the span
//! over [`PIXELS`]), so at a merge distance of one pixel:
//! - communication is split by the compute union with its gaps under the distance closed: a
//!   launch gap between two kernels is not exposed communication at the chart's resolution (and
//!   thousands of such slivers, merged, would draw one wide exposed bar where a few percent was);
//! - pieces of the same kind and critical flag with less than the distance between them merge;
//! - a piece narrower than the distance joins its nearest neighbour of the same kind within the
//!   distance (one of the same flag first; the neighbour keeps its flag), and one narrower than
//!   a pixel with no such neighbour is dropped;
//!
//! and while a rank has more than [`MAX_BARS_PER_RANK`] bars the distance doubles. Every piece
//! of the exact picture that is not drawn is counted in [`Picture::bars_merged`].

use std::cmp::Reverse;

use serde::{Deserialize, Serialize};

use super::super::intervals::{length, union, Span};
use super::super::model::Ns;

/// Past this many ranks a picture draws three: the late, the fastest and the median.
pub const MAX_RANKS_DRAWN: usize = 8;
/// The most bars drawn for one rank. Eight ranks of 40 bars are 320 gantt tasks, about 15 KB of
/// a PR comment's 65,536 characters, and 40 bars across the ~700 px plot of a comment-wide chart
/// average 17 px each: every bar is wide enough to see and to tell from its neighbours.
pub const MAX_BARS_PER_RANK: u32 = 40;
/// The chart width a pixel is computed from: a PR comment's chart is about this wide, so a bar
/// narrower than the step's span over this many cannot be seen.
pub const PIXELS: u32 = 800;

/// One piece of GPU work of one rank in the step, on any of its streams, at aligned times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    pub start: Ns,
    pub end: Ns,
    pub kind: BarKind,
    /// On the step's critical path (for communication: its transfer or the arrival that held it).
    pub critical: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    Compute,
    Comm,
}

/// One rank's bars in the step, in any order.
#[derive(Debug, Clone, PartialEq)]
pub struct RankBars {
    pub rank: u32,
    pub bars: Vec<Bar>,
}

/// What the chart draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Picture {
    /// The step drawn (0-based, in time order), and its span, µs (the first bar's start to the
    /// last bar's end over every rank).
    pub step: u32,
    pub span_us: f64,
    /// Ranks drawn, in rank order.
    pub ranks: Vec<PictureRank>,
    /// Ranks in the step, drawn or folded.
    pub ranks_in_step: u32,
    /// Bars merged into a neighbour because they were narrower than a pixel, or past the cap.
    pub bars_merged: u64,
    /// The most bars drawn per rank (the cap, [`MAX_BARS_PER_RANK`]).
    pub max_bars_per_rank: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PictureRank {
    pub rank: u32,
    /// Why a rank of a folded picture is drawn: `late`, `fastest` or `median`; `None` when every
    /// rank is drawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub bars: Vec<PictureBar>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PictureBar {
    pub kind: PictureKind,
    /// From the step's start, µs.
    pub start_us: f64,
    pub dur_us: f64,
    pub critical: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PictureKind {
    Compute,
    /// Communication while the rank computes.
    Hidden,
    /// Communication while the rank does not compute.
    Exposed,
}

/// The picture of `step` from every rank's bars. `late` names the rank that arrived last (drawn
/// as `late` when ranks are folded); without it, or when no rank has that number, the rank whose
/// work ends last is. A step without a bar of positive length is an empty picture (no ranks).
pub fn picture(step: u32, ranks: &[RankBars], late: Option<u32>) -> Picture {
    let ranks_in_step = u32::try_from(ranks.len()).unwrap_or(u32::MAX);
    let visible = || ranks.iter().flat_map(|r| &r.bars).filter(|b| b.end > b.start);
    let (Some(first), Some(last)) = (visible().map(|b| b.start).min(), visible().map(|b| b.end).max()) else {
        return Picture {
            step,
            span_us: 0.0,
            ranks: Vec::new(),
            ranks_in_step,
            bars_merged: 0,
            max_bars_per_rank: MAX_BARS_PER_RANK,
        };
    };
    let span = last - first;
    let pixel = (span / Ns::from(PIXELS)).max(1);
    let mut bars_merged = 0u64;
    let drawn = drawn_ranks(ranks, late)
        .into_iter()
        .map(|(r, role)| {
            let bounded = bound(&r.bars, pixel, span);
            bars_merged += bounded.merged;
            let bars = bounded
                .pieces
                .iter()
                .map(|p| PictureBar {
                    kind: p.kind,
                    start_us: us(p.start - first),
                    dur_us: us(p.end - p.start),
                    critical: p.critical,
                })
                .collect();
            PictureRank { rank: r.rank, role: role.map(str::to_string), bars }
        })
        .collect();
    Picture { step, span_us: us(span), ranks: drawn, ranks_in_step, bars_merged, max_bars_per_rank: MAX_BARS_PER_RANK }
}

fn us(ns: Ns) -> f64 {
    ns as f64 / 1e3
}

/// The ranks drawn, in rank order, with their role: every rank up to [`MAX_RANKS_DRAWN`] (the
/// late one, when named, marked `late`); past it the late rank, the fastest (least compute: the
/// union of its compute bars) and the median by compute, three distinct ranks. Ties go to the
/// lower rank.
fn drawn_ranks(ranks: &[RankBars], late: Option<u32>) -> Vec<(&RankBars, Option<&'static str>)> {
    let mut order: Vec<&RankBars> = ranks.iter().collect();
    order.sort_by_key(|r| r.rank);
    if order.len() <= MAX_RANKS_DRAWN {
        return order.into_iter().map(|r| (r, (Some(r.rank) == late).then_some("late"))).collect();
    }
    let last_end = |r: &RankBars| r.bars.iter().filter(|b| b.end > b.start).map(|b| b.end).max();
    let late = late
        .and_then(|l| order.iter().position(|r| r.rank == l))
        .or_else(|| order.iter().enumerate().max_by_key(|&(i, r)| (last_end(r), Reverse(i))).map(|(i, _)| i))
        .unwrap_or(0);
    let compute = |r: &RankBars| length(&spans(&r.bars, BarKind::Compute, None));
    let mut by_compute: Vec<(Ns, usize)> = order.iter().enumerate().map(|(i, r)| (compute(r), i)).collect();
    by_compute.sort_unstable();
    let fastest = by_compute.iter().map(|&(_, i)| i).find(|&i| i != late).unwrap_or(0);
    // The median's position, or the nearest position holding a rank not drawn already.
    let middle = (by_compute.len() - 1) / 2;
    let median = (0..by_compute.len())
        .flat_map(|k| [middle.checked_add(k), middle.checked_sub(k)])
        .flatten()
        .filter_map(|p| by_compute.get(p).map(|&(_, i)| i))
        .find(|&i| i != late && i != fastest)
        .unwrap_or(0);
    let mut drawn = [(late, "late"), (fastest, "fastest"), (median, "median")];
    drawn.sort_unstable();
    drawn.into_iter().filter_map(|(i, role)| Some((*order.get(i)?, Some(role)))).collect()
}

/// The union of a rank's bars of one kind; of one critical flag, or of both.
fn spans(bars: &[Bar], kind: BarKind, critical: Option<bool>) -> Vec<Span> {
    union(
        bars.iter()
            .filter(|b| b.kind == kind && critical.is_none_or(|c| b.critical == c))
            .map(|b| (b.start, b.end))
            .collect(),
    )
}

/// One bar being bounded, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    start: Ns,
    end: Ns,
    kind: PictureKind,
    critical: bool,
}

struct Bounded {
    pieces: Vec<Piece>,
    /// Pieces of the exact picture not drawn.
    merged: u64,
}

/// One rank's bars, bounded as the module documentation says.
fn bound(bars: &[Bar], pixel: Ns, span: Ns) -> Bounded {
    let compute = spans(bars, BarKind::Compute, None);
    let compute_critical = spans(bars, BarKind::Compute, Some(true));
    let comm = spans(bars, BarKind::Comm, None);
    let comm_critical = spans(bars, BarKind::Comm, Some(true));
    let parts = Parts {
        compute_critical: compute_critical.clone(),
        compute_other: minus(&compute, &compute_critical),
        comm_other: minus(&comm, &comm_critical),
        comm_critical,
    };
    let exact = parts.pieces(&compute).len();
    let mut distance = pixel;
    loop {
        let mut pieces = parts.pieces(&close(&compute, distance));
        settle(&mut pieces, distance, pixel);
        // Past the span every kind is one bar at most, so the loop ends there.
        if pieces.len() <= MAX_BARS_PER_RANK as usize || distance > span {
            let merged = u64::try_from(exact.saturating_sub(pieces.len())).unwrap_or(u64::MAX);
            return Bounded { pieces, merged };
        }
        distance = distance.saturating_mul(2);
    }
}

/// A rank's compute and communication, each split by the critical flag (disjoint unions).
struct Parts {
    compute_critical: Vec<Span>,
    compute_other: Vec<Span>,
    comm_critical: Vec<Span>,
    comm_other: Vec<Span>,
}

impl Parts {
    /// The pieces with communication split by `compute` into hidden and exposed, in drawing
    /// order.
    fn pieces(&self, compute: &[Span]) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut add = |spans: Vec<Span>, kind: PictureKind, critical: bool| {
            out.extend(spans.into_iter().map(|(start, end)| Piece { start, end, kind, critical }));
        };
        add(self.compute_critical.clone(), PictureKind::Compute, true);
        add(self.compute_other.clone(), PictureKind::Compute, false);
        for (comm, critical) in [(&self.comm_critical, true), (&self.comm_other, false)] {
            add(overlap(comm, compute), PictureKind::Hidden, critical);
            add(minus(comm, compute), PictureKind::Exposed, critical);
        }
        sort(&mut out);
        out
    }
}

/// Drawing order: by start, then kind, end and flag.
fn sort(pieces: &mut [Piece]) {
    let kind = |k: PictureKind| match k {
        PictureKind::Compute => 0,
        PictureKind::Hidden => 1,
        PictureKind::Exposed => 2,
    };
    pieces.sort_unstable_by_key(|p| (p.start, kind(p.kind), p.end, p.critical));
}

/// Merges and absorbs each kind's pieces at `distance` until nothing changes.
fn settle(pieces: &mut Vec<Piece>, distance: Ns, pixel: Ns) {
    let mut out = Vec::with_capacity(pieces.len());
    for kind in [PictureKind::Compute, PictureKind::Hidden, PictureKind::Exposed] {
        // Sorted by start and disjoint: the pieces of one kind never overlap, before or after.
        let mut same: Vec<Piece> = pieces.iter().copied().filter(|p| p.kind == kind).collect();
        loop {
            let before = same.len();
            merge_close(&mut same, distance);
            absorb_narrow(&mut same, distance, pixel);
            if same.len() == before {
                break;
            }
        }
        out.extend(same);
    }
    sort(&mut out);
    *pieces = out;
}

/// Consecutive pieces of one flag with less than `distance` between them become one.
fn merge_close(same: &mut Vec<Piece>, distance: Ns) {
    let mut kept: Vec<Piece> = Vec::with_capacity(same.len());
    for &p in same.iter() {
        match kept.last_mut() {
            Some(last) if last.critical == p.critical && p.start - last.end < distance => last.end = p.end,
            _ => kept.push(p),
        }
    }
    *same = kept;
}

/// A piece narrower than `distance` joins its nearest neighbour within `distance` (one of its
/// own flag first, then the nearer, then the earlier), which keeps its flag; with none, it is
/// dropped when narrower than a pixel and kept otherwise.
fn absorb_narrow(same: &mut Vec<Piece>, distance: Ns, pixel: Ns) {
    let mut i = 0;
    while let Some(&p) = same.get(i) {
        if p.end - p.start >= distance {
            i += 1;
            continue;
        }
        // The neighbours: (position, gap, flag).
        let prev = i.checked_sub(1).and_then(|j| same.get(j).map(|q| (j, p.start - q.end, q.critical)));
        let next = same.get(i + 1).map(|q| (i + 1, q.start - p.end, q.critical));
        let into = [prev, next]
            .into_iter()
            .flatten()
            .filter(|&(_, gap, _)| gap < distance)
            .min_by_key(|&(j, gap, critical)| (critical != p.critical, gap, j))
            .map(|(j, _, _)| j);
        match into.and_then(|j| same.get_mut(j)) {
            Some(q) => {
                q.start = q.start.min(p.start);
                q.end = q.end.max(p.end);
                same.remove(i);
                // A grown next piece now sits at `i` and is looked at again.
            }
            None if p.end - p.start < pixel => {
                same.remove(i);
            }
            None => i += 1,
        }
    }
}

/// A union with its gaps narrower than `distance` closed.
fn close(spans: &[Span], distance: Ns) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for &(s, e) in spans {
        match out.last_mut() {
            Some(last) if s - last.1 < distance => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// `a ∩ b` for two unions (sorted, disjoint), as spans.
fn overlap(a: &[Span], b: &[Span]) -> Vec<Span> {
    let (mut a, mut b, mut out) = (a, b, Vec::new());
    while let (Some((&(a_start, a_end), a_rest)), Some((&(b_start, b_end), b_rest))) =
        (a.split_first(), b.split_first())
    {
        let s = a_start.max(b_start);
        let e = a_end.min(b_end);
        if e > s {
            out.push((s, e));
        }
        if a_end < b_end {
            a = a_rest;
        } else {
            b = b_rest;
        }
    }
    out
}

/// `a \ b` for two unions (sorted, disjoint), as spans.
fn minus(a: &[Span], b: &[Span]) -> Vec<Span> {
    let mut out = Vec::new();
    // The spans of `b` that end after the current span of `a` starts.
    let mut rest = b;
    for &(s, e) in a {
        let mut from = s;
        while let Some((&(_, b_end), tail)) = rest.split_first() {
            if b_end > from {
                break;
            }
            rest = tail;
        }
        for &(b_start, b_end) in rest.iter().take_while(|&&(b_start, _)| b_start < e) {
            if b_start > from {
                out.push((from, b_start));
            }
            from = from.max(b_end);
        }
        if e > from {
            out.push((from, e));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::intervals::intersection;
    use super::*;

    const US: Ns = 1_000;

    fn bar(start_us: Ns, end_us: Ns, kind: BarKind, critical: bool) -> Bar {
        Bar { start: start_us * US, end: end_us * US, kind, critical }
    }

    fn compute(start_us: Ns, end_us: Ns) -> Bar {
        bar(start_us, end_us, BarKind::Compute, false)
    }

    fn comm(start_us: Ns, end_us: Ns, critical: bool) -> Bar {
        bar(start_us, end_us, BarKind::Comm, critical)
    }

    /// A rank's bars as (kind, start µs, end µs, critical), ends rounded to the ns.
    fn drawn(r: &PictureRank) -> Vec<(PictureKind, f64, f64, bool)> {
        r.bars.iter().map(|b| (b.kind, b.start_us, ((b.start_us + b.dur_us) * 1e3).round() / 1e3, b.critical)).collect()
    }

    use PictureKind::{Compute, Exposed, Hidden};

    #[test]
    fn two_ranks_draw_every_bar_with_exact_times_from_the_first_start() {
        let ranks = [
            RankBars { rank: 1, bars: vec![compute(110, 390), comm(390, 500, false)] },
            RankBars {
                rank: 0,
                bars: vec![compute(100, 200), bar(250, 400, BarKind::Compute, true), comm(180, 300, true)],
            },
        ];
        let p = picture(7, &ranks, Some(1));
        assert_eq!((p.step, p.span_us, p.ranks_in_step, p.bars_merged, p.max_bars_per_rank), (7, 400.0, 2, 0, 40));
        assert_eq!(
            p.ranks.iter().map(|r| (r.rank, r.role.clone())).collect::<Vec<_>>(),
            [(0, None), (1, Some("late".to_string()))]
        );
        assert_eq!(
            drawn(&p.ranks[0]),
            [
                (Compute, 0.0, 100.0, false),
                (Hidden, 80.0, 100.0, true),
                (Exposed, 100.0, 150.0, true),
                (Compute, 150.0, 300.0, true),
                (Hidden, 150.0, 200.0, true),
            ]
        );
        assert_eq!(drawn(&p.ranks[1]), [(Compute, 10.0, 290.0, false), (Exposed, 290.0, 400.0, false)]);
    }

    #[test]
    fn communication_splits_into_hidden_under_compute_and_exposed_outside_it() {
        // Two compute streams overlap at 18–22 µs; one collective spans a compute gap, a
        // critical one runs past the last kernel.
        let bars = vec![
            compute(10, 20),
            compute(18, 22),
            compute(30, 40),
            comm(15, 35, false),
            comm(38, 50, true),
            comm(45, 46, false),
        ];
        let p = picture(0, &[RankBars { rank: 3, bars: bars.clone() }], None);
        assert_eq!(p.span_us, 40.0);
        assert_eq!(
            drawn(&p.ranks[0]),
            [
                (Compute, 0.0, 12.0, false),
                (Hidden, 5.0, 12.0, false),
                (Exposed, 12.0, 20.0, false),
                (Compute, 20.0, 30.0, false),
                (Hidden, 20.0, 25.0, false),
                (Hidden, 28.0, 30.0, true),
                (Exposed, 30.0, 40.0, true),
            ]
        );
        // The hidden bars add up to the overlap of the two unions, the exposed ones to the rest.
        let sum = |kind| p.ranks[0].bars.iter().filter(|b| b.kind == kind).map(|b| b.dur_us).sum::<f64>();
        let (compute_union, comm_union) = (spans(&bars, BarKind::Compute, None), spans(&bars, BarKind::Comm, None));
        let hidden = intersection(&comm_union, &compute_union);
        assert_eq!(sum(Hidden), us(hidden));
        assert_eq!(sum(Exposed), us(length(&comm_union) - hidden));
    }

    /// 64 ranks: rank r computes ((37 r + 5) mod 64 + 1) × 10 µs, a permutation, so the fastest
    /// is rank 31 (37 × 31 + 5 ≡ 0) and the median, the 32nd least, rank 18 (≡ 31); rank 9's
    /// communication ends last.
    fn sixty_four() -> Vec<RankBars> {
        (0..64u32)
            .rev()
            .map(|rank| {
                let busy = Ns::from((37 * rank + 5) % 64 + 1) * 10;
                let comm_end = if rank == 9 { 2_000 } else { 1_500 };
                RankBars { rank, bars: vec![compute(0, busy), comm(busy, 1_000, true), comm(1_200, comm_end, false)] }
            })
            .collect()
    }

    fn roles(p: &Picture) -> Vec<(u32, Option<&str>)> {
        p.ranks.iter().map(|r| (r.rank, r.role.as_deref())).collect()
    }

    #[test]
    fn past_eight_ranks_only_the_late_the_fastest_and_the_median_are_drawn() {
        let ranks = sixty_four();
        let p = picture(2, &ranks, Some(50));
        assert_eq!(roles(&p), [(18, Some("median")), (31, Some("fastest")), (50, Some("late"))]);
        assert_eq!((p.ranks_in_step, p.span_us), (64, 2_000.0));
        // Without a late rank named (or with one not in the step), the rank that ends last.
        let expected = [(9, Some("late")), (18, Some("median")), (31, Some("fastest"))];
        assert_eq!(roles(&picture(2, &ranks, None)), expected);
        assert_eq!(roles(&picture(2, &ranks, Some(640))), expected);
        // The late rank is the fastest or the median: the next in line takes its place (rank 12
        // computes 20 µs; rank 63, 330 µs, is next above the median).
        let p = picture(2, &ranks, Some(31));
        assert_eq!(roles(&p), [(12, Some("fastest")), (18, Some("median")), (31, Some("late"))]);
        let p = picture(2, &ranks, Some(18));
        assert_eq!(roles(&p), [(18, Some("late")), (31, Some("fastest")), (63, Some("median"))]);
        // Eight ranks are all drawn, the late one named.
        let p = picture(2, &ranks[..8], Some(60));
        assert_eq!(p.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), (56..64).collect::<Vec<_>>());
        assert!(p.ranks.iter().all(|r| r.role.is_none() == (r.rank != 60)), "{:?}", p.ranks);
    }

    #[test]
    fn five_thousand_tiny_kernels_per_rank_merge_below_a_pixel_and_are_counted() {
        // Per rank: 5,000 kernels of 1 µs, 1 µs apart, with a 200 µs pause after each
        // thousand (10,800 µs in all: a pixel is 13.5 µs); a collective over the first thousand
        // kernels and their launch gaps (1,000 hidden and 1,000 exposed slivers exactly: hidden
        // at the chart's resolution), a critical one exposed in the first pause.
        let rank = |rank: u32| {
            let mut bars: Vec<Bar> = (0..5_000)
                .map(|k| {
                    let start = 2 * k + 200 * (k / 1_000);
                    compute(start, start + 1)
                })
                .collect();
            bars.push(comm(0, 2_000, false));
            bars.push(comm(2_020, 2_150, true));
            RankBars { rank, bars }
        };
        let p = picture(0, &[rank(0), rank(1)], None);
        assert_eq!(p.span_us, 10_799.0);
        for r in &p.ranks {
            assert!(r.bars.len() <= MAX_BARS_PER_RANK as usize, "{} bars", r.bars.len());
            let compute_bars: Vec<(f64, f64)> =
                r.bars.iter().filter(|b| b.kind == Compute).map(|b| (b.start_us, b.dur_us)).collect();
            assert_eq!(
                compute_bars,
                [(0.0, 1_999.0), (2_200.0, 1_999.0), (4_400.0, 1_999.0), (6_600.0, 1_999.0), (8_800.0, 1_999.0)]
            );
            let comm_bars: Vec<_> = r
                .bars
                .iter()
                .filter(|b| b.kind != Compute)
                .map(|b| (b.kind, b.start_us, b.dur_us, b.critical))
                .collect();
            assert_eq!(comm_bars, [(Hidden, 0.0, 1_999.0, false), (Exposed, 2_020.0, 130.0, true)]);
        }
        // Each rank's exact picture: 5,000 compute pieces, 1,000 hidden and 1,000 exposed for
        // the first collective (the last exposed ends it, 1 µs with no exposed bar within a
        // pixel: dropped), 1 for the second; 7 drawn.
        assert_eq!(p.bars_merged, 2 * (7_001 - 7));
    }

    #[test]
    fn a_rank_past_the_cap_merges_at_a_doubled_distance_until_it_fits() {
        // 100 kernels of 40 µs with 60 µs between them: each a few pixels wide and apart.
        let bars: Vec<Bar> = (0..100).map(|k| compute(100 * k, 100 * k + 40)).collect();
        let p = picture(0, &[RankBars { rank: 0, bars }], None);
        let r = &p.ranks[0];
        assert!(r.bars.len() <= MAX_BARS_PER_RANK as usize);
        assert_eq!(drawn(r), [(Compute, 0.0, 9_940.0, false)]);
        assert_eq!(p.bars_merged, 99);
    }

    #[test]
    fn alternating_critical_kernels_still_fit_the_cap() {
        let bars: Vec<Bar> = (0..200).map(|k| bar(50 * k, 50 * k + 50, BarKind::Compute, k % 2 == 0)).collect();
        let p = picture(0, &[RankBars { rank: 0, bars }], None);
        let r = &p.ranks[0];
        assert!(r.bars.len() <= MAX_BARS_PER_RANK as usize, "{} bars", r.bars.len());
        assert_eq!(p.bars_merged, 200 - r.bars.len() as u64);
        // Still covering the whole step, without overlap.
        let total: f64 = r.bars.iter().map(|b| b.dur_us).sum();
        assert_eq!((r.bars[0].start_us, total), (0.0, 10_000.0));
    }

    #[test]
    fn a_step_without_work_is_an_empty_picture() {
        let empty = picture(4, &[], Some(1));
        assert_eq!((empty.step, empty.span_us, empty.ranks_in_step, empty.ranks.len()), (4, 0.0, 0, 0));
        let idle = [RankBars { rank: 0, bars: vec![] }, RankBars { rank: 1, bars: vec![compute(5, 5)] }];
        let p = picture(4, &idle, None);
        assert_eq!((p.ranks_in_step, p.ranks.len(), p.bars_merged), (2, 0, 0));
    }

    #[test]
    fn the_same_bars_in_any_order_draw_the_same_picture() {
        let ranks = sixty_four();
        let mut shuffled: Vec<RankBars> = ranks.iter().rev().cloned().collect();
        for r in &mut shuffled {
            r.bars.reverse();
        }
        assert_eq!(picture(1, &ranks, None), picture(1, &shuffled, None));
    }
}
