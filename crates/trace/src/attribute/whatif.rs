//! What would fix it: each kept step of every rank built into one cross-rank graph
//! ([`crate::critical`]), replayed as observed and under each fix, and the fixes ranked by
//! the milliseconds per step they would buy. Also the critical path and the picture of the
//! median step.
//!
//! The fixes (scenarios):
//! - **the late rank on time**: at every collective, the rank that most often arrived last
//!   arrives no later than the median of the other ranks did (its work before the collective as
//!   long as theirs);
//! - **a collective hidden**: its kernels still run, but nothing waits for them (on a side
//!   stream, its bytes still moved); the saving is an upper bound, since it assumes the transfer
//!   fits under the compute it would overlap;
//! - **a collective's transfer at a bus bandwidth** (`--busbw`, or the benchmark's measured one
//!   in `check`): each instance's transfer (after its last arrival) no longer than its payload ×
//!   nccl-tests' bus factor ÷ that bandwidth;
//! - **a collective's buckets earlier** (`--bucket-earlier-us`): its kernels released that much
//!   sooner by the work on other streams they wait for, their stream order kept.
//!
//! Ranks' clocks are aligned first: the ranks of a collective instance leave it together, so the
//! median difference of their instances' ends is taken as the offset between two ranks' clocks.
//! Pure: analyses in, a [`WhatIf`] out.

use std::collections::{BTreeMap, HashMap};
#[cfg(test)]
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::picture::{self, Bar, BarKind, Picture, RankBars};
use super::timeline::StepTimeline;
use super::{bus_factor, CommKernel, Hotspot, MatchKey, RankAnalysis};
use crate::critical::{self, replay, Changes, Graph, Node, Replay, Role};
use crate::model::Ns;
use crate::narrow::{float_to_i64, float_to_usize, saturating_u32};

/// The most collectives replayed as hidden: those with the most communication time.
pub const MAX_HIDDEN_SCENARIOS: usize = 8;

/// The most steps of the critical path kept in the JSON (consecutive work of one rank is
/// merged first).
pub const MAX_PATH_STEPS: usize = 128;

/// What the caller asks of the replay.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WhatIfOptions {
    /// Replay each collective's transfer at this bus bandwidth, GB/s, and what set it.
    pub busbw: Option<Busbw>,
    /// Replay each collective's buckets released this many µs earlier by the work they wait for.
    pub earlier_us: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Busbw {
    pub gbps: f64,
    /// `--busbw 80` or `the benchmark's all_reduce`.
    pub set_by: String,
    /// Only this collective (the benchmark measures one); `None`: every collective with a bus
    /// factor.
    pub collective: Option<String>,
}

/// The replay's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// Steps replayed (at most [`super::timeline::MAX_REPLAYED_STEPS`], spread over the window).
    pub steps: u32,
    /// Median over those steps of the step's GPU span (first kernel's start to the last end on
    /// any rank), ms.
    pub step_ms: f64,
    /// The rank that most often arrived last, when one stood out (the late-rank scenario's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_rank: Option<u32>,
    /// Largest saving first.
    pub scenarios: Vec<Scenario>,
    pub critical_path: CriticalPath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub picture: Option<Picture>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScenarioKind {
    LateRankOnTime,
    Hidden,
    TransferAtBusbw,
    Earlier,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub kind: ScenarioKind,
    /// The rank it moves (late rank on time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The collective it changes (hidden, transfer at a bandwidth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<String>,
    /// The bandwidth replayed, GB/s, and what set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_set_by: Option<String>,
    /// How much earlier its buckets start, µs (`earlier` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier_us: Option<f64>,
    /// Median predicted step, ms.
    pub step_ms: f64,
    /// Median per-step saving, ms, and its share of the median step.
    pub saving_ms: f64,
    pub saving_pct: f64,
    /// The 10th and 90th percentiles of the per-step savings, ms.
    pub saving_low_ms: f64,
    pub saving_high_ms: f64,
    /// The collective's own communication per step, ms (`hidden` only): a saving above it is
    /// time the work behind the collective waited for what the collective itself waited for,
    /// and the reports say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_comm_ms: Option<f64>,
}

/// The critical path of the median step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticalPath {
    /// The step (0-based in the window) and its span, ms.
    pub step: u32,
    pub step_ms: f64,
    /// Time on the path by part, largest first: `compute` per rank, a collective's transfer,
    /// the wait a late arrival caused, gaps.
    pub parts: Vec<PathPart>,
    /// The path, first step first, consecutive steps of one rank and part merged, at most
    /// [`MAX_PATH_STEPS`].
    pub path: Vec<PathStep>,
    /// Steps merged or left out past the cap.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub path_steps_left_out: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathRole {
    /// Compute (or a collective no other rank joins) running on the path.
    Work,
    /// A collective's data moving after its last participant arrived.
    Transfer,
    /// Time between two steps of the path on no GPU (launch latency, host work).
    Gap,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathPart {
    pub role: PathRole,
    /// `compute`, a collective's name, or `gap`.
    pub what: String,
    /// The rank, for compute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathStep {
    pub rank: u32,
    pub role: PathRole,
    pub what: String,
    /// From the step's start, µs.
    pub start_us: f64,
    pub dur_us: f64,
}

/// A node's origin: which analysis, and which of its communication kernels.
#[derive(Debug, Clone, Copy)]
struct NodeSource {
    rank_idx: usize,
    comm: Option<u32>,
}

/// One step's graph, with where each node came from and the instances' members.
struct StepGraph {
    step: u32,
    graph: Graph,
    origin: Vec<NodeSource>,
    members: BTreeMap<u32, Vec<usize>>,
}

/// The what-if of analysed ranks, `None` when no rank kept a timeline (no compute kernels, a
/// partial file) or the steps hold no GPU work.
pub fn what_if(
    ranks: &[RankAnalysis],
    by_collective: &BTreeMap<String, Hotspot>,
    opts: &WhatIfOptions,
) -> Option<WhatIf> {
    let offsets = clock_offsets(ranks);
    let steps = common_steps(ranks);
    let graphs: Vec<StepGraph> = steps.iter().map(|&s| step_graph(ranks, &offsets, s)).collect();
    let graphs: Vec<StepGraph> = graphs.into_iter().filter(|g| !g.graph.nodes.is_empty()).collect();
    if graphs.is_empty() {
        return None;
    }
    let base: Vec<Replay> = graphs.iter().map(|g| replay(&g.graph, &Changes::default())).collect();
    let base_span: Vec<Ns> = base.iter().zip(&graphs).map(|(r, g)| r.span(&g.graph, &[])).collect();
    let late_rank = late_rank(by_collective);
    let mut scenarios = Vec::new();
    let mut run =
        |kind, rank, collective: Option<&str>, busbw: Option<&Busbw>, change: &dyn Fn(&StepGraph) -> Changes| {
            let spans: Vec<Ns> = graphs
                .iter()
                .map(|g| {
                    let c = change(g);
                    replay(&g.graph, &c).span(&g.graph, &c.detached)
                })
                .collect();
            let mut s = scenario(kind, rank, collective, busbw, &base_span, &spans);
            s.earlier_us = opts.earlier_us.filter(|_| kind == ScenarioKind::Earlier);
            s.collective_comm_ms = collective
                .filter(|_| kind == ScenarioKind::Hidden)
                .and_then(|c| by_collective.get(c))
                .map(|h| h.total_comm_ms);
            scenarios.push(s);
        };
    if let Some(late) = late_rank {
        run(ScenarioKind::LateRankOnTime, Some(late), None, None, &|g| on_time(g, ranks, late));
    }
    for name in busiest_collectives(&graphs, ranks) {
        run(ScenarioKind::Hidden, None, Some(&name), None, &|g| hidden(g, ranks, &name));
        if let Some(us) = opts.earlier_us {
            run(ScenarioKind::Earlier, None, Some(&name), None, &|g| earlier(g, ranks, &name, us));
        }
        if let Some(b) = opts.busbw.as_ref().filter(|b| b.collective.as_ref().is_none_or(|c| *c == name)) {
            if graphs.iter().any(|g| at_busbw(g, ranks, &name, b.gbps).is_some()) {
                run(ScenarioKind::TransferAtBusbw, None, Some(&name), Some(b), &|g| {
                    at_busbw(g, ranks, &name, b.gbps).unwrap_or_default()
                });
            }
        }
    }
    scenarios.sort_by(|a, b| b.saving_ms.total_cmp(&a.saving_ms));
    let (g, median) = median_index(&base_span).and_then(|i| graphs.get(i).zip(base.get(i)))?;
    let path = median.critical_path(&g.graph);
    let critical_path = critical_path(g, median, &path, ranks);
    let picture = Some(picture_of(g, &path, ranks, late_rank));
    let mut sorted = base_span.clone();
    sorted.sort_unstable();
    Some(WhatIf {
        // At most the replayed steps (`MAX_REPLAYED_STEPS`).
        steps: saturating_u32(graphs.len()),
        step_ms: ms(median_ns(&sorted)),
        late_rank,
        scenarios,
        critical_path,
        picture,
    })
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

fn median_ns(sorted: &[Ns]) -> f64 {
    let v: Vec<f64> = sorted.iter().map(|&x| x as f64).collect();
    commgate_stats::quantile::median(&v)
}

/// The index of the step whose span is the median (the lower middle of an even count); `None`
/// without steps.
fn median_index(spans: &[Ns]) -> Option<usize> {
    let mut order: Vec<(Ns, usize)> = spans.iter().copied().zip(0..).collect();
    order.sort_unstable();
    order.get(order.len().checked_sub(1)? / 2).map(|&(_, i)| i)
}

/// The rank the evidence names as arriving last: the last-arriving rank (tested against chance)
/// of the collective that waited longest for it.
fn late_rank(by_collective: &BTreeMap<String, Hotspot>) -> Option<u32> {
    by_collective
        .values()
        .filter(|h| h.last_arrival_rank.is_some())
        .max_by(|a, b| a.wait_ms.unwrap_or(0.0).total_cmp(&b.wait_ms.unwrap_or(0.0)))
        .and_then(|h| h.last_arrival_rank)
}

/// Each rank's clock offset from the first rank's, ns: the median over the instances both kept
/// of the difference of their ends (ranks leave a collective together).
fn clock_offsets(ranks: &[RankAnalysis]) -> Vec<Ns> {
    let Some(first) = ranks.first() else { return Vec::new() };
    let reference = ends(first);
    ranks
        .iter()
        .map(|r| {
            let mut d: Vec<Ns> =
                ends(r).iter().filter_map(|(k, &e)| reference.get(k).map(|&f| e.saturating_sub(f))).collect();
            d.sort_unstable();
            d.get(d.len() / 2).copied().unwrap_or(0)
        })
        .collect()
}

/// The latest end of each instance a rank kept.
fn ends(r: &RankAnalysis) -> HashMap<&MatchKey, Ns> {
    let mut m: HashMap<&MatchKey, Ns> = HashMap::new();
    for seg in r.timeline.iter().flat_map(|t| &t.segs) {
        if let Some(c) = seg.comm.and_then(|c| r.comm_kernels.get(c as usize)) {
            let e = m.entry(&c.key).or_insert(seg.end);
            *e = (*e).max(seg.end);
        }
    }
    m
}

/// The steps every rank kept.
fn common_steps(ranks: &[RankAnalysis]) -> Vec<u32> {
    let mut steps: Vec<u32> = ranks.first().map(|r| r.timeline.iter().map(|t| t.step).collect()).unwrap_or_default();
    for r in ranks.iter().skip(1) {
        steps.retain(|s| r.timeline.iter().any(|t| t.step == *s));
    }
    steps
}

fn step_graph(ranks: &[RankAnalysis], offsets: &[Ns], step: u32) -> StepGraph {
    let mut g = StepGraph { step, graph: Graph::default(), origin: Vec::new(), members: BTreeMap::new() };
    let mut keys: HashMap<&MatchKey, Vec<usize>> = HashMap::new();
    for (ri, r) in ranks.iter().enumerate() {
        let Some(tl) = r.timeline.iter().find(|t| t.step == step) else { continue };
        let base = g.graph.nodes.len();
        add_rank(&mut g, ri, r, tl, offsets.get(ri).copied().unwrap_or(0));
        for (i, seg) in tl.segs.iter().enumerate() {
            if let Some(c) = seg.comm.and_then(|c| r.comm_kernels.get(c as usize)) {
                keys.entry(&c.key).or_default().push(base + i);
            }
        }
    }
    // An instance joins when two or more ranks hold it and, clocks aligned, every one of its
    // kernels ended after the last of them started (ranks that did not overlap in time, as
    // unsynchronised clocks or a point-to-point pair show, did not wait for each other); its id
    // is stable in key order.
    let nodes = &g.graph.nodes;
    let overlapped = |m: &[usize]| {
        let members = || m.iter().filter_map(|&i| nodes.get(i));
        let last = members().map(|n| n.start).max().unwrap_or(0);
        members().all(|n| n.end() >= last)
    };
    let mut joined: Vec<(&MatchKey, Vec<usize>)> =
        keys.into_iter().filter(|(_, m)| distinct_ranks(&g.origin, m) >= 2 && overlapped(m)).collect();
    joined.sort();
    for (id, (_, members)) in joined.into_iter().enumerate() {
        // Fewer instances than nodes, which fit in memory.
        let id = saturating_u32(id);
        for &m in &members {
            if let Some(node) = g.graph.nodes.get_mut(m) {
                node.instance = Some(id);
            }
        }
        g.members.insert(id, members);
    }
    g
}

fn distinct_ranks(origin: &[NodeSource], members: &[usize]) -> usize {
    let mut r: Vec<usize> = members.iter().filter_map(|&m| origin.get(m)).map(|o| o.rank_idx).collect();
    r.sort_unstable();
    r.dedup();
    r.len()
}

fn add_rank(g: &mut StepGraph, ri: usize, r: &RankAnalysis, tl: &StepTimeline, offset: Ns) {
    let base = g.graph.nodes.len();
    let mut streams: Vec<i64> = tl.segs.iter().map(|s| s.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    for seg in &tl.segs {
        let stream = saturating_u32(streams.binary_search(&seg.stream).unwrap_or(0));
        let start = seg.start.saturating_sub(offset);
        g.graph.nodes.push(Node {
            rank: r.rank,
            stream,
            start,
            dur: seg.end.saturating_sub(seg.start).max(0),
            instance: None,
        });
        g.origin.push(NodeSource { rank_idx: ri, comm: seg.comm });
    }
    g.graph.deps.extend(tl.deps.iter().map(|&(a, b)| (base + a as usize, base + b as usize)));
}

/// The collective a node runs, `None` for compute.
fn collective_of<'a>(g: &StepGraph, ranks: &'a [RankAnalysis], node: usize) -> Option<&'a str> {
    comm_kernel_of(g, ranks, node).map(|c| &*c.collective)
}

/// The communication kernel a node is, `None` for compute.
fn comm_kernel_of<'a>(g: &StepGraph, ranks: &'a [RankAnalysis], node: usize) -> Option<&'a CommKernel> {
    let o = g.origin.get(node)?;
    ranks.get(o.rank_idx)?.comm_kernels.get(o.comm? as usize)
}

/// The collectives with the most kernel time over the replayed steps, at most
/// [`MAX_HIDDEN_SCENARIOS`], most first.
fn busiest_collectives(graphs: &[StepGraph], ranks: &[RankAnalysis]) -> Vec<String> {
    let mut time: HashMap<&str, Ns> = HashMap::new();
    for g in graphs {
        for (i, n) in g.graph.nodes.iter().enumerate() {
            if let Some(name) = collective_of(g, ranks, i) {
                *time.entry(name).or_default() += n.dur;
            }
        }
    }
    let mut v: Vec<(&str, Ns)> = time.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.into_iter().take(MAX_HIDDEN_SCENARIOS).map(|(n, _)| n.to_string()).collect()
}

/// The late rank arrives at each instance no later than the median of the others' arrivals.
fn on_time(g: &StepGraph, ranks: &[RankAnalysis], late: u32) -> Changes {
    let mut forgiven = Vec::new();
    for members in g.members.values() {
        let is_late = |m: usize| g.origin.get(m).and_then(|o| ranks.get(o.rank_idx)).is_some_and(|r| r.rank == late);
        let (mine, others): (Vec<usize>, Vec<usize>) = members.iter().partition(|&&m| is_late(m));
        let start = |m: usize| g.graph.nodes.get(m).map(|n| n.start);
        let mut starts: Vec<Ns> = others.iter().filter_map(|&m| start(m)).collect();
        starts.sort_unstable();
        let Some(&median) = starts.get(starts.len().saturating_sub(1) / 2) else { continue };
        forgiven.extend(mine.iter().filter_map(|&m| Some((m, start(m)?.saturating_sub(median).max(0)))));
    }
    Changes { forgiven, ..Changes::default() }
}

/// Nothing waits for the collective's kernels any more.
fn hidden(g: &StepGraph, ranks: &[RankAnalysis], name: &str) -> Changes {
    let detached = (0..g.graph.nodes.len()).filter(|&i| collective_of(g, ranks, i) == Some(name)).collect();
    Changes { detached, ..Changes::default() }
}

/// The collective's kernels released `us` µs earlier by the work on other streams they wait
/// for (buckets that fill sooner); their stream order is kept.
fn earlier(g: &StepGraph, ranks: &[RankAnalysis], name: &str, us: f64) -> Changes {
    let ns = float_to_i64((us * 1e3).round());
    let earlier =
        (0..g.graph.nodes.len()).filter(|&i| collective_of(g, ranks, i) == Some(name)).map(|i| (i, ns)).collect();
    Changes { earlier, ..Changes::default() }
}

/// Each instance's transfer no longer than payload × bus factor ÷ `gbps`; `None` when the
/// collective has no bus factor or no instance a known payload.
fn at_busbw(g: &StepGraph, ranks: &[RankAnalysis], name: &str, gbps: f64) -> Option<Changes> {
    let mut durations = Vec::new();
    for members in g.members.values() {
        if members.first().is_none_or(|&m| collective_of(g, ranks, m) != Some(name)) {
            continue;
        }
        let last = members.iter().filter_map(|&m| g.graph.nodes.get(m)).map(|n| n.start).max().unwrap_or(0);
        for &m in members {
            let (Some(c), Some(node)) = (comm_kernel_of(g, ranks, m), g.graph.nodes.get(m)) else { continue };
            let n = c.group_size.map_or(members.len(), |s| s as usize);
            let (Some(bytes), Some(factor)) = (c.payload, bus_factor(name, n)) else { continue };
            let observed = node.end().saturating_sub(last).max(0);
            let at = float_to_i64((bytes as f64 * factor / (gbps * 1e9) * 1e9).round());
            durations.push((m, observed.min(at)));
        }
    }
    (!durations.is_empty()).then_some(Changes { durations, ..Changes::default() })
}

fn scenario(
    kind: ScenarioKind,
    rank: Option<u32>,
    collective: Option<&str>,
    busbw: Option<&Busbw>,
    base: &[Ns],
    spans: &[Ns],
) -> Scenario {
    let mut savings: Vec<f64> = base.iter().zip(spans).map(|(&b, &s)| (b - s) as f64).collect();
    savings.sort_by(f64::total_cmp);
    let mut sorted_spans = spans.to_vec();
    sorted_spans.sort_unstable();
    let mut sorted_base = base.to_vec();
    sorted_base.sort_unstable();
    let saving = commgate_stats::quantile::median(&savings);
    let base_ms = ms(median_ns(&sorted_base));
    let last = savings.len().saturating_sub(1);
    let nearest = |p: f64| savings.get(float_to_usize((p * last as f64).round()).min(last)).copied().unwrap_or(0.0);
    Scenario {
        kind,
        rank,
        collective: collective.map(str::to_string),
        busbw_gbps: busbw.map(|b| b.gbps),
        busbw_set_by: busbw.map(|b| b.set_by.clone()),
        earlier_us: None,
        step_ms: ms(median_ns(&sorted_spans)),
        saving_ms: ms(saving),
        saving_pct: if base_ms > 0.0 { 100.0 * ms(saving) / base_ms } else { 0.0 },
        saving_low_ms: ms(nearest(0.1)),
        saving_high_ms: ms(nearest(0.9)),
        collective_comm_ms: None,
    }
}

/// The path as the JSON and the reports show it: gaps between its steps made explicit,
/// consecutive steps of one rank and part merged, the time on it summed by part.
fn critical_path(g: &StepGraph, r: &Replay, path: &[critical::PathNode], ranks: &[RankAnalysis]) -> CriticalPath {
    let first = r.start.iter().copied().min().unwrap_or(0);
    let mut steps: Vec<PathStep> = Vec::new();
    let mut merged = 0u64;
    let mut cursor: Option<(Ns, u32)> = None;
    for s in path {
        let (Some(node), Some(&start), Some(&end)) =
            (g.graph.nodes.get(s.node), r.start.get(s.node), r.end.get(s.node))
        else {
            continue;
        };
        let what = collective_of(g, ranks, s.node).unwrap_or("compute").to_string();
        let (role, from, to) = match s.role {
            Role::Arrival => continue,
            Role::Transfer => {
                let last = r.last_arrival.get(s.node).copied().flatten();
                let arrival = last.and_then(|m| r.start.get(m).copied()).unwrap_or(start);
                (PathRole::Transfer, arrival.max(start), end)
            }
            Role::Work => (PathRole::Work, start, end),
        };
        if let Some((at, rank)) = cursor.filter(|&(at, _)| from > at) {
            push_step(
                &mut steps,
                &mut merged,
                PathStep {
                    rank,
                    role: PathRole::Gap,
                    what: "gap".into(),
                    start_us: us(at.saturating_sub(first)),
                    dur_us: us(from.saturating_sub(at)),
                },
            );
        }
        push_step(
            &mut steps,
            &mut merged,
            PathStep {
                rank: node.rank,
                role,
                what,
                start_us: us(from.saturating_sub(first)),
                dur_us: us(to.saturating_sub(from)),
            },
        );
        cursor = Some((to, node.rank));
    }
    // Each part found by its key, not by a pass over the parts: a path through thousands of
    // distinct collectives has as many parts.
    let mut parts: Vec<PathPart> = Vec::new();
    let mut part_of: HashMap<(PathRole, &str, Option<u32>), usize> = HashMap::new();
    for s in &steps {
        let rank = ((s.role == PathRole::Work && s.what == "compute") || s.role == PathRole::Gap).then_some(s.rank);
        let at = *part_of.entry((s.role, s.what.as_str(), rank)).or_insert_with(|| {
            parts.push(PathPart { role: s.role, what: s.what.clone(), rank, ms: 0.0 });
            parts.len() - 1
        });
        if let Some(p) = parts.get_mut(at) {
            p.ms += s.dur_us / 1e3;
        }
    }
    parts.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    if steps.len() > MAX_PATH_STEPS {
        merged += (steps.len() - MAX_PATH_STEPS) as u64;
        steps.truncate(MAX_PATH_STEPS);
    }
    CriticalPath {
        step: g.step,
        step_ms: ms(r.span(&g.graph, &[]) as f64),
        parts,
        path: steps,
        path_steps_left_out: merged,
    }
}

fn us(ns: Ns) -> f64 {
    ns as f64 / 1e3
}

fn push_step(steps: &mut Vec<PathStep>, merged: &mut u64, s: PathStep) {
    match steps.last_mut() {
        Some(last) if last.rank == s.rank && last.role == s.role && last.what == s.what => {
            last.dur_us = s.start_us + s.dur_us - last.start_us;
            *merged += 1;
        }
        _ => steps.push(s),
    }
}

/// The step's bars per rank, the path's nodes marked.
fn picture_of(g: &StepGraph, path: &[critical::PathNode], ranks: &[RankAnalysis], late: Option<u32>) -> Picture {
    let on_path: std::collections::HashSet<usize> = path.iter().map(|s| s.node).collect();
    let mut by_rank: BTreeMap<u32, Vec<Bar>> = BTreeMap::new();
    for (i, n) in g.graph.nodes.iter().enumerate() {
        let kind = if collective_of(g, ranks, i).is_some() { BarKind::Comm } else { BarKind::Compute };
        by_rank.entry(n.rank).or_default().push(Bar {
            start: n.start,
            end: n.end(),
            kind,
            critical: on_path.contains(&i),
        });
    }
    let bars: Vec<RankBars> = by_rank.into_iter().map(|(rank, bars)| RankBars { rank, bars }).collect();
    picture::picture(g.step, &bars, late)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::attribute_paths;

    fn analyses(dir: &str) -> Arc<Vec<RankAnalysis>> {
        let path = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../")).join(dir);
        let a = attribute_paths(&[path], &Default::default()).unwrap_or_else(|e| panic!("{dir}: {e}"));
        a.replayable.0.unwrap_or_else(|| panic!("{dir}: nothing to replay"))
    }

    /// On real traces (Holistic Trace Analysis's test data, TraceLens's MI300 trace) and the
    /// example job: the graph read from every kept step is consistent, so a replay without change
    /// gives back every node's observed start and end, and no fix makes any step slower.
    #[test]
    fn a_replay_without_change_reproduces_every_real_step_and_no_fix_costs_time() {
        for dir in [
            "tests/fixtures/hta/sampled_2rank",
            "tests/fixtures/hta/nccl_parser_config",
            "tests/fixtures/hta/negative_queue_rank0",
            "tests/fixtures/hta/trace_diff_control",
            "tests/fixtures/hta/modern_synthetic",
            "tests/fixtures/hta/tracelens_mi300_resnet",
            "examples/traces",
        ] {
            let ranks = analyses(dir);
            let offsets = clock_offsets(&ranks);
            for step in common_steps(&ranks) {
                let g = step_graph(&ranks, &offsets, step);
                let r = replay(&g.graph, &Changes::default());
                let starts: Vec<Ns> = g.graph.nodes.iter().map(|n| n.start).collect();
                let ends: Vec<Ns> = g.graph.nodes.iter().map(Node::end).collect();
                assert_eq!(r.start, starts, "{dir} step {step}");
                // A collective's end is its last arrival plus its transfer: equal to the observed end
                // where the ranks' clocks agree on when they left it.
                let off: Vec<usize> = (0..ends.len()).filter(|&i| (r.end[i] - ends[i]).abs() > 1_000).collect();
                assert!(
                    off.is_empty(),
                    "{dir} step {step}: {} nodes end elsewhere, first {:?}",
                    off.len(),
                    off.first()
                );
            }
            let by_collective = attribute_paths(
                &[std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../")).join(dir)],
                &Default::default(),
            )
            .map(|a| a.by_collective)
            .unwrap_or_default();
            let busbw = Busbw { gbps: 1e6, set_by: "test".into(), collective: None };
            let opts = WhatIfOptions { busbw: Some(busbw), earlier_us: Some(200.0) };
            let w = what_if(&ranks, &by_collective, &opts).expect("a what-if");
            for s in &w.scenarios {
                assert!(s.saving_low_ms >= -1e-9, "{dir}: {s:?}");
            }
        }
    }
}
