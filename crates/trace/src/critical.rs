//! The cross-rank critical path of a step and what-if replay, the core of "what would fix it":
//! a step as a graph of timed GPU work (each rank's streams in kernel order, the cross-stream
//! dependencies the trace shows, one join per matched collective instance, which finishes no
//! earlier than its last participant's arrival plus its transfer). Replaying the graph with
//! changed durations predicts the step; following each node's binding predecessor back from the
//! step's end gives the critical path.
//!
//! What the replay keeps from the trace, the model's assumptions:
//! - each kernel's gap after its latest predecessor (launch latency, host-bound time) stays as
//!   observed, so a replay with no change reproduces the trace exactly; a kernel that started
//!   before its predecessor ended (programmatic dependent launch, or timestamps rounded to a
//!   microsecond: 2 µs in a real trace) keeps that overlap rather than being pushed after it, so
//!   no change ever makes a replayed step longer than the observed one;
//! - a collective's transfer (a rank's end minus the instance's last arrival) does not depend on
//!   the order of arrival;
//! - work the graph does not hold (host compute, dependencies the trace does not show) is not
//!   modelled: a host-bound step is predicted as if the host kept pace.
//!
//! The replay processes nodes in observed start order, which is a topological order of a
//! consistent trace: a predecessor ends before its successor starts, and every participant of a
//! collective arrives before the collective ends. Pure: no I/O, no decision.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use super::model::Ns;

/// One piece of timed GPU work on one rank's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub rank: u32,
    pub stream: u32,
    /// Observed start and duration, ns.
    pub start: Ns,
    pub dur: Ns,
    /// `Some(i)`: a communication kernel of matched collective instance `i`; its start is this
    /// rank's arrival.
    pub instance: Option<u32>,
}

impl Node {
    pub fn end(&self) -> Ns {
        self.start.saturating_add(self.dur)
    }
}

/// A step's work: the nodes, and the cross-stream dependencies the trace shows (`(before,
/// after)`: `after` starts no earlier than `before` ends; an event record and wait, a
/// `cuda_sync` flow).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub deps: Vec<(usize, usize)>,
}

/// What bound a node's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// No predecessor in the graph: its observed start.
    Start,
    /// The previous kernel on its stream.
    Stream(usize),
    /// A cross-stream dependency's source.
    Dependency(usize),
}

/// The changes of a what-if.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// A node's new duration; for a communication kernel, its new transfer (after the last arrival).
    pub durations: Vec<(usize, Ns)>,
    /// Instances that no longer synchronise: each rank's kernel runs from its own arrival.
    pub unjoined: Vec<u32>,
    /// Nodes nothing waits for any more (a collective hidden on a side stream, its bytes still
    /// moved): they are no node's stream predecessor or dependency, and [`Replay::span`] leaves
    /// them out.
    pub detached: Vec<usize>,
    /// A node's arrival forgiven by this much at its collective's join (a late rank on time: it
    /// arrives as the median rank did); the node itself still starts when its work allows.
    pub forgiven: Vec<(usize, Ns)>,
    /// A node whose cross-stream dependencies release it this much earlier (a bucket that starts
    /// earlier); its stream order is kept.
    pub earlier: Vec<(usize, Ns)>,
}

/// A replay: each node's predicted start and end, what bound its start, and for a communication
/// kernel the participant whose arrival bound its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub start: Vec<Ns>,
    pub end: Vec<Ns>,
    pub bound: Vec<Bound>,
    pub last_arrival: Vec<Option<usize>>,
}

/// One node on the critical path, and the part of it that lies on the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathNode {
    pub node: usize,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Its whole duration.
    Work,
    /// A collective's transfer, after its last participant arrived.
    Transfer,
    /// The arrival that held a collective: the path runs through this rank's start, not its
    /// duration.
    Arrival,
}

impl Replay {
    /// The step's predicted end: the latest end of any node.
    pub fn step_end(&self) -> Ns {
        self.end.iter().copied().max().unwrap_or(0)
    }

    /// The step's predicted span: its observed first start (a fix does not start the step
    /// sooner) to the latest end of a node something still waits for (`detached` nodes left out
    /// of the end).
    pub fn span(&self, g: &Graph, detached: &[usize]) -> Ns {
        let first = g.nodes.iter().map(|n| n.start).min().unwrap_or(0);
        let detached: HashSet<usize> = detached.iter().copied().collect();
        let kept = self.end.iter().enumerate().filter(|(i, _)| !detached.contains(i));
        let last = kept.map(|(_, &end)| end).max().unwrap_or(first);
        last.saturating_sub(first)
    }

    /// The critical path, first step first: from the node that ends the step back through what
    /// bound each end and start.
    pub fn critical_path(&self, g: &Graph) -> Vec<PathNode> {
        let last = self.end.iter().enumerate().max_by_key(|&(i, &end)| (end, Reverse(i)));
        let Some((mut at, _)) = last else {
            return Vec::new();
        };
        let mut path = Vec::new();
        // Each move goes to a node that started earlier, so the path has at most one step per
        // node and two per collective.
        for _ in 0..=2 * self.end.len() {
            let instance = g.nodes.get(at).and_then(|node| node.instance);
            match (instance, self.last_arrival.get(at).copied().flatten()) {
                (Some(_), Some(m)) if m != at => {
                    path.push(PathNode { node: at, role: Role::Transfer });
                    path.push(PathNode { node: m, role: Role::Arrival });
                    at = m;
                }
                (Some(_), _) => path.push(PathNode { node: at, role: Role::Transfer }),
                (None, _) => path.push(PathNode { node: at, role: Role::Work }),
            }
            match self.bound.get(at) {
                Some(&(Bound::Stream(p) | Bound::Dependency(p))) => at = p,
                Some(Bound::Start) | None => break,
            }
        }
        path.reverse();
        path
    }
}

/// Replays `g` with `changes` (see the module documentation). With no change it reproduces the
/// observed starts and ends.
pub fn replay(g: &Graph, changes: &Changes) -> Replay {
    let n = g.nodes.len();
    let mut order: Vec<(usize, &Node)> = g.nodes.iter().enumerate().collect();
    order.sort_unstable_by_key(|&(i, node)| (node.start, i));
    let mut detached = vec![false; n];
    for &i in &changes.detached {
        put(&mut detached, i, true);
    }
    let by_node = |list: &[(usize, Ns)]| {
        let mut v: Vec<Ns> = vec![0; n];
        for &(i, d) in list {
            put(&mut v, i, d.max(0));
        }
        v
    };
    let (forgiven, earlier) = (by_node(&changes.forgiven), by_node(&changes.earlier));
    // The observed chain on each stream, and the chain a replay follows (detached nodes are no
    // longer anyone's predecessor).
    let mut stream_prev: Vec<Option<usize>> = vec![None; n];
    let mut observed_prev: Vec<Option<usize>> = vec![None; n];
    let mut last_on: HashMap<(u32, u32), usize> = HashMap::new();
    let mut last_kept: HashMap<(u32, u32), usize> = HashMap::new();
    for &(i, node) in &order {
        let key = (node.rank, node.stream);
        let observed = last_on.insert(key, i);
        put(&mut observed_prev, i, observed);
        put(&mut stream_prev, i, if at(&detached, i) { observed } else { last_kept.insert(key, i) });
    }
    let mut deps_of: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut observed_deps: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in g.deps.iter().filter(|&&(a, b)| a < n && a != b) {
        let (Some(observed), Some(kept)) = (observed_deps.get_mut(b), deps_of.get_mut(b)) else { continue };
        observed.push(a);
        if !at(&detached, a) {
            kept.push(a);
        }
    }
    // Each instance's latest observed start; during the replay, its latest arrival so far and the
    // member that made it. Running maxima, so that settling a member costs one lookup rather than
    // a pass over its instance (16,000 members of one instance took 17–25 s that way).
    let mut observed_last: HashMap<u32, Ns> = HashMap::new();
    for node in &g.nodes {
        if let Some(inst) = node.instance {
            let last = observed_last.entry(inst).or_insert(node.start);
            *last = (*last).max(node.start);
        }
    }
    let mut latest: HashMap<u32, (Ns, Reverse<usize>)> = HashMap::new();
    let unjoined: HashSet<u32> = changes.unjoined.iter().copied().collect();
    let joined = |i: usize| g.nodes.get(i).and_then(|node| node.instance).filter(|inst| !unjoined.contains(inst));
    let preds = |i: usize| {
        let deps = deps_of.get(i).into_iter().flatten();
        at(&stream_prev, i).map(Bound::Stream).into_iter().chain(deps.map(|&d| Bound::Dependency(d)))
    };
    let source = |b: Bound| match b {
        Bound::Stream(p) | Bound::Dependency(p) => Some(p),
        Bound::Start => None,
    };
    let end_of = |p: usize| g.nodes.get(p).map(Node::end);
    // Observed: the gap after the latest predecessor, and a collective's transfer.
    let gap: Vec<Ns> = g
        .nodes
        .iter()
        .zip(&observed_prev)
        .zip(&observed_deps)
        .map(|((node, &prev), deps)| {
            let ready = prev.into_iter().chain(deps.iter().copied()).filter_map(end_of).max();
            ready.map_or(0, |r| node.start.saturating_sub(r))
        })
        .collect();
    let mut work: Vec<Ns> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| match joined(i) {
            Some(inst) => node.end().saturating_sub(observed_last.get(&inst).copied().unwrap_or_default()).max(0),
            None => node.dur,
        })
        .collect();
    for &(i, d) in &changes.durations {
        put(&mut work, i, d.max(0));
    }
    let mut r =
        Replay { start: vec![0; n], end: vec![0; n], bound: vec![Bound::Start; n], last_arrival: vec![None; n] };
    let mut known = vec![false; n];
    // A joined node's last participant so far: the member of its instance that arrived latest
    // (the earliest such member on a tie), or the node itself before any has.
    let last_of = |i: usize, latest: &HashMap<u32, (Ns, Reverse<usize>)>| {
        joined(i).map(|inst| latest.get(&inst).map_or(i, |&(_, Reverse(m))| m))
    };
    for &(i, node) in &order {
        let mut bound: Option<(Ns, Bound)> = None;
        for b in preds(i) {
            let Some(p) = source(b) else { continue };
            if !at(&known, p) {
                settle(p, last_of(p, &latest), &work, &forgiven, &mut r);
                put(&mut known, p, true);
            }
            let ready = match b {
                Bound::Dependency(_) => at(&r.end, p).saturating_sub(at(&earlier, i)),
                _ => at(&r.end, p),
            };
            if bound.is_none_or(|(e, _)| ready > e) {
                bound = Some((ready, b));
            }
        }
        let start = bound.map_or(node.start, |(e, _)| e.saturating_add(at(&gap, i)));
        put(&mut r.start, i, start);
        put(&mut r.bound, i, bound.map_or(Bound::Start, |(_, b)| b));
        if let Some(inst) = node.instance {
            let arrival = (start.saturating_sub(at(&forgiven, i)), Reverse(i));
            let last = latest.entry(inst).or_insert(arrival);
            *last = (*last).max(arrival);
        }
        if joined(i).is_none() {
            put(&mut r.end, i, start.saturating_add(at(&work, i)));
            put(&mut known, i, true);
        }
    }
    for (i, _) in known.iter().enumerate().filter(|(_, k)| !**k) {
        settle(i, last_of(i, &latest), &work, &forgiven, &mut r);
    }
    r
}

/// Sets the end of node `i`; for a collective's kernel, `last` is its instance's last participant
/// to arrive so far (in a consistent trace, all of them have): its arrival (less what is
/// `forgiven` it) or the node's own, whichever is later, plus its transfer.
fn settle(i: usize, last: Option<usize>, work: &[Ns], forgiven: &[Ns], r: &mut Replay) {
    let arrival = |m: usize| at(&r.start, m).saturating_sub(at(forgiven, m));
    let joined_at = match last {
        Some(last) => arrival(last).max(arrival(i)),
        None => at(&r.start, i),
    };
    put(&mut r.end, i, joined_at.saturating_add(at(work, i)));
    put(&mut r.last_arrival, i, last);
}

// The replay keeps one value per node in each of several lists, all as long as `g.nodes`, and
// reads them at node indexes: a node's own, its predecessors' and its collective's members',
// all below that length (changes and dependencies past it are dropped on entry). These two read
// and write such a list without an index that could panic.

/// `v[i]`; the default past the end (which no node index reaches).
fn at<T: Copy + Default>(v: &[T], i: usize) -> T {
    v.get(i).copied().unwrap_or_default()
}

/// Sets `v[i]`; nothing past the end (an index a change names past the graph is dropped).
fn put<T>(v: &mut [T], i: usize, x: T) {
    if let Some(slot) = v.get_mut(i) {
        *slot = x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rank: u32, stream: u32, start: Ns, end: Ns, instance: Option<u32>) -> Node {
        Node { rank, stream, start, dur: end - start, instance }
    }

    /// One instance of `per_rank` overlapping kernels on each of two ranks (as a trace whose
    /// kernels share one sequence number gives): each member ends at the instance's last arrival
    /// plus its own transfer, and names that arrival; the replay reproduces the observed ends.
    #[test]
    fn one_large_instance_settles_every_member_on_its_last_arrival() {
        let per_rank = 4_000;
        let nodes: Vec<Node> = (0..2u32)
            .flat_map(|rank| {
                (0..per_rank).map(move |i| node(rank, i, 1_000 * Ns::from(i) + Ns::from(rank), 10_000_000, Some(0)))
            })
            .collect();
        let g = Graph { nodes, deps: Vec::new() };
        let r = replay(&g, &Changes::default());
        let last = g.nodes.iter().enumerate().max_by_key(|(i, n)| (n.start, Reverse(*i))).map(|(i, _)| i);
        assert_eq!(last, Some(2 * per_rank as usize - 1));
        for (i, n) in g.nodes.iter().enumerate() {
            assert_eq!(r.end[i], n.end(), "node {i}");
            assert_eq!(r.last_arrival[i], last, "node {i}");
        }
    }

    /// Kernels of one stream that overlap (each starts before the previous one ends, by up to
    /// 2^61 ns, all a partial file allowed): the replay keeps each overlap instead of chaining
    /// the durations (it printed a median step of −9223372036854.775 ms, and a debug build
    /// panicked), and changed durations past i64 saturate instead of wrapping.
    #[test]
    fn overlapping_kernels_of_one_stream_keep_their_overlap_and_sums_saturate() {
        let edge: Ns = 1 << 61;
        let nodes: Vec<Node> = (0..4).map(|i| node(0, 0, -edge + i, edge, None)).collect();
        let g = Graph { nodes, deps: vec![(0, 3)] };
        let r = replay(&g, &Changes::default());
        assert_eq!(r.end, vec![edge; 4], "reproduced as observed");
        assert_eq!(r.span(&g, &[]), 2 * edge);
        // Two microseconds of overlap, as a real trace's rounding shows, replayed with the first
        // kernel halved: the second keeps its overlap and moves earlier with it.
        let g = Graph { nodes: vec![node(0, 0, 0, 10_000, None), node(0, 0, 8_000, 20_000, None)], deps: Vec::new() };
        let r = replay(&g, &Changes { durations: vec![(0, 5_000)], ..Changes::default() });
        assert_eq!((r.start[1], r.end[1]), (3_000, 15_000));
        let huge = Changes { durations: (0..4).map(|i| (i, Ns::MAX)).collect(), ..Changes::default() };
        let nodes: Vec<Node> = (0..4).map(|i| node(0, 0, i * 10, i * 10 + 5, None)).collect();
        let r = replay(&Graph { nodes, deps: Vec::new() }, &huge);
        assert!(r.end.iter().all(|&e| e == Ns::MAX), "{:?}", r.end);
    }

    /// Two ranks: compute, an all-reduce (instance 0), compute. Rank 1's first compute takes
    /// `late` ns, rank 0's 1,000; the all-reduce's transfer is 500 ns; rank 0 starts its second
    /// compute 100 ns after the all-reduce (a launch gap). Written as the trace of that job.
    fn job(late: Ns) -> Graph {
        let arrive = late.max(1000);
        Graph {
            nodes: vec![
                node(0, 0, 0, 1000, None),
                node(0, 0, 1000, arrive + 500, Some(0)),
                node(0, 0, arrive + 600, arrive + 1600, None),
                node(1, 0, 0, late, None),
                node(1, 0, late, arrive + 500, Some(0)),
                node(1, 0, arrive + 500, arrive + 1500, None),
            ],
            deps: Vec::new(),
        }
    }

    #[test]
    fn a_replay_without_change_reproduces_the_trace() {
        for late in [1000, 3000] {
            let g = job(late);
            let r = replay(&g, &Changes::default());
            assert_eq!(r.start, g.nodes.iter().map(|x| x.start).collect::<Vec<_>>(), "late {late}");
            assert_eq!(r.end, g.nodes.iter().map(Node::end).collect::<Vec<_>>(), "late {late}");
        }
    }

    #[test]
    fn the_late_rank_on_time_predicts_the_job_without_it() {
        // Rank 1's compute as long as rank 0's: the truth is the trace of the job without the straggler.
        let predicted = replay(&job(3000), &Changes { durations: vec![(3, 1000)], ..Changes::default() });
        let truth = job(1000);
        assert_eq!(predicted.step_end(), truth.nodes.iter().map(Node::end).max().unwrap_or(0));
        assert_eq!(predicted.step_end(), 2600);
        assert_eq!(replay(&job(3000), &Changes::default()).step_end(), 4600, "2 ms per step to gain");
    }

    #[test]
    fn the_critical_path_runs_through_the_late_arrival() {
        let g = job(3000);
        let path = replay(&g, &Changes::default()).critical_path(&g);
        let roles: Vec<(usize, Role)> = path.iter().map(|s| (s.node, s.role)).collect();
        // Rank 1's compute, its late arrival at the all-reduce, the transfer on rank 0, rank 0's compute.
        assert_eq!(roles, [(3, Role::Work), (4, Role::Arrival), (1, Role::Transfer), (2, Role::Work)]);
        // On time, rank 0's arrival is as late as rank 1's: the tie goes to the first participant.
        let on_time = job(1000);
        let path = replay(&on_time, &Changes::default()).critical_path(&on_time);
        assert_eq!(path.first().map(|s| (s.node, s.role)), Some((0, Role::Work)));
    }

    #[test]
    fn a_hidden_collective_no_longer_holds_either_rank() {
        // Unjoined, with no transfer on the compute stream: each rank runs on from its own arrival.
        let changes = Changes { durations: vec![(1, 0), (4, 0)], unjoined: vec![0], ..Changes::default() };
        let r = replay(&job(3000), &changes);
        assert_eq!((r.end[2], r.end[5]), (2100, 4000), "rank 0 keeps its launch gap; rank 1 is its own path");
        assert_eq!(r.step_end(), 4000);
    }

    #[test]
    fn a_cross_stream_dependency_binds_a_side_stream() {
        // Rank 0 records an event after compute (node 0) and a side stream waits on it before an
        // all-gather (node 1) that overlaps the next compute (node 2).
        let g = Graph {
            nodes: vec![node(0, 0, 0, 1000, None), node(0, 1, 1000, 1800, None), node(0, 0, 1000, 2000, None)],
            deps: vec![(0, 1)],
        };
        let r = replay(&g, &Changes { durations: vec![(0, 1500)], ..Changes::default() });
        assert_eq!((r.start[1], r.end[1]), (1500, 2300));
        assert_eq!(r.bound[1], Bound::Dependency(0));
        assert_eq!(r.step_end(), 2500);
        let path = r.critical_path(&g);
        assert_eq!(path.iter().map(|s| s.node).collect::<Vec<_>>(), [0, 2]);
    }
}
