//! What one rank keeps of its steps for what-if replay: for a bounded set of steps, the rank's
//! GPU work per stream as segments (consecutive kernels merged between the points a dependency
//! touches and across gaps no longer than [`HELD_AFTER_NS`], each communication kernel alone)
//! and the cross-stream dependencies read from the trace.
//!
//! Which dependencies, since a Kineto trace does not say which event a stream waited on:
//! - a communication kernel waits for the work its launching thread had launched on another
//!   stream before it (PyTorch's process groups make the NCCL stream wait on the current stream
//!   before every collective): the kernel launched last before it, on another stream;
//! - a kernel that starts more than [`HELD_AFTER_NS`] after its stream was free and after its
//!   launch waited for another stream: it was held by the rank's kernel on another stream that
//!   ended last before it started (a `wait()` on a collective's work, an event between streams).
//!
//! Everything else is same-stream order. A dependency the trace shows neither way (an event
//! recorded and waited on between two compute streams) is not modelled.
//!
//! Bounded: at most [`MAX_REPLAYED_STEPS`] steps, spread evenly over the window; the per-kernel
//! cost while choosing them is one small record per kernel of a kept step.

use super::super::model::{Kernel, Ns, RankTrace};
use crate::narrow::saturating_u32;

/// The most steps a rank keeps for replay, spread evenly over its window.
pub const MAX_REPLAYED_STEPS: u64 = 32;

/// The most kernels a rank keeps for replay, as a budget over its steps: a kernel-dense trace
/// keeps fewer steps (at least one), so that replay costs a bounded share of attribution.
pub const MAX_REPLAYED_KERNELS: u64 = 200_000;

/// How long after its stream was free and its launch a kernel may start without having waited
/// for another stream (well above the launch latency of an idle GPU, a few µs).
pub const HELD_AFTER_NS: Ns = 20_000;

/// One step of one rank as the replay takes it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepTimeline {
    /// The step, 0-based in time order.
    pub step: u32,
    /// In stream order, then start.
    pub segs: Vec<Seg>,
    /// `(before, after)` indices into `segs`: `after` starts no earlier than `before` ends.
    pub deps: Vec<(u32, u32)>,
}

/// Consecutive GPU work on one stream, or one communication kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub stream: i64,
    pub start: Ns,
    pub end: Ns,
    /// For a communication kernel: its index in the rank's `comm_kernels`.
    pub comm: Option<u32>,
}

/// How many of a rank's `samples` steps are replayed when it has `kernels` kernels: at most
/// [`MAX_REPLAYED_STEPS`], and about [`MAX_REPLAYED_KERNELS`] kernels in all, at least one.
pub fn replayed_steps(samples: u64, kernels: u64) -> u64 {
    let samples = samples.max(1);
    let per_step = kernels.div_ceil(samples).max(1);
    (MAX_REPLAYED_KERNELS / per_step).clamp(1, MAX_REPLAYED_STEPS).min(samples)
}

/// Whether step `s` of `samples` is one of the `k` kept ones, evenly spaced.
pub fn kept(step: u32, samples: u64, k: u64) -> bool {
    let s = u64::from(step);
    let (samples, k) = (samples.max(1), k.max(1));
    if samples <= k {
        return s < samples;
    }
    // The kept steps are ⌊j·samples/k⌋ for j < k: step s is one when the least j with
    // j·samples ≥ s·k also has j·samples < (s + 1)·k.
    let j = (s * k).div_ceil(samples);
    j < k && j * samples < (s + 1) * k
}

/// A kernel of a kept step, as attribution's pass over the trace met it: 12 bytes, since a
/// kernel-dense trace keeps hundreds of thousands.
#[derive(Debug, Clone, Copy)]
pub(super) struct Met {
    pub step: u32,
    /// Index into the trace's kernels.
    pub kernel: u32,
    /// For a communication kernel, its index in the rank's `comm_kernels`; else [`NOT_COMM`].
    pub comm: u32,
}

/// [`Met::comm`] of a kernel that is not communication.
pub(super) const NOT_COMM: u32 = u32::MAX;

/// The kept steps' timelines from the kernels met in them.
pub(super) fn build(t: &RankTrace, mut met: Vec<Met>) -> Vec<StepTimeline> {
    let key = |m: &Met| {
        let k = t.kernels.get(m.kernel as usize);
        (m.step, k.map(|k| k.stream), k.map(|k| k.ts), m.kernel)
    };
    met.sort_unstable_by_key(key);
    met.chunk_by(|a, b| a.step == b.step).map(|group| step_timeline(t, group)).collect()
}

/// One step: dependencies read on the kernels, then the kernels merged into segments. Kernels
/// are named by their position in the step (`usize`), in stream order, then start.
fn step_timeline(t: &RankTrace, met: &[Met]) -> StepTimeline {
    // Each kernel with its launch (the CPU call's start) and communication kernel, for this step only.
    let group: Vec<Kernelled> = met
        .iter()
        .filter_map(|m| {
            let kernel = t.kernels.get(m.kernel as usize)?;
            Some(Kernelled {
                kernel,
                launch: kernel.correlation().and_then(|c| t.launches.get(&c)).map(|l| l.ts),
                comm: (m.comm != NOT_COMM).then_some(m.comm),
            })
        })
        .collect();
    let mut edges: Vec<(usize, usize)> = Vec::new();
    // Launched before a collective, on another stream: (launch, kernel, stream), by launch.
    let mut compute_by_launch: Vec<(Ns, usize, i64)> = group
        .iter()
        .enumerate()
        .filter(|(_, g)| g.comm.is_none())
        .filter_map(|(i, g)| g.launch.map(|l| (l, i, g.kernel.stream)))
        .collect();
    compute_by_launch.sort_unstable();
    for (c, collective) in group.iter().enumerate().filter(|(_, g)| g.comm.is_some()) {
        let Some(at) = collective.launch else { continue };
        let before = compute_by_launch.partition_point(|&(l, _, _)| l < at);
        if let Some(&(_, p, stream)) = before.checked_sub(1).and_then(|b| compute_by_launch.get(b)) {
            if stream != collective.kernel.stream {
                edges.push((p, c));
            }
        }
    }
    // Held: started after its stream was free and after its launch, so something on another
    // stream released it: the latest of the rank's kernels to end in between.
    let mut by_end: Vec<(Ns, usize)> = group.iter().enumerate().map(|(i, g)| (g.kernel.end(), i)).collect();
    by_end.sort_unstable();
    for (i, g) in group.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|p| group.get(p));
        let prev_end = prev.filter(|p| p.kernel.stream == g.kernel.stream).map(|p| p.kernel.end());
        let free = prev_end.into_iter().chain(g.launch).max().unwrap_or(Ns::MIN);
        if g.kernel.ts <= free.saturating_add(HELD_AFTER_NS) {
            continue;
        }
        let upto = by_end.partition_point(|&(e, _)| e <= g.kernel.ts);
        let holder = by_end.iter().take(upto).rev().take_while(|&&(e, _)| e > free).find(|&&(_, h)| {
            group.get(h).is_some_and(|held| held.kernel.stream != g.kernel.stream && launched_before(held, g))
        });
        if let Some(&(_, h)) = holder {
            edges.push((h, i));
        }
    }
    // A dependency the trace contradicts (the later kernel started before the earlier ended)
    // was not one: keeping it would stop a replay without change from reproducing the trace.
    edges.retain(|&(a, b)| match (group.get(a), group.get(b)) {
        (Some(a), Some(b)) => a.kernel.end() <= b.kernel.ts,
        _ => false,
    });
    // Segments: a communication kernel alone; other kernels merged on their stream, cut where a
    // dependency starts or ends.
    let mut starts_seg = vec![false; group.len()];
    let mut ends_seg = vec![false; group.len()];
    for &(a, b) in &edges {
        if let (Some(ends), Some(starts)) = (ends_seg.get_mut(a), starts_seg.get_mut(b)) {
            (*ends, *starts) = (true, true);
        }
    }
    let mut seg_of: Vec<u32> = Vec::with_capacity(group.len());
    let mut segs: Vec<Seg> = Vec::new();
    // The previous kernel, and whether a dependency ends at it.
    let mut prev: Option<(&Kernelled, bool)> = None;
    for ((g, &starts), &ends) in group.iter().zip(&starts_seg).zip(&ends_seg) {
        let k = g.kernel;
        let joins_previous = prev.is_some_and(|(p, p_ends)| {
            g.comm.is_none() && p.comm.is_none() && p.kernel.stream == k.stream && !starts && !p_ends
        });
        match segs.last_mut() {
            // A stream idle for longer than a launch waited for something: the gap stays a gap.
            Some(last) if joins_previous && k.ts <= last.end.saturating_add(HELD_AFTER_NS) => {
                last.end = last.end.max(k.end())
            }
            _ => segs.push(Seg { stream: k.stream, start: k.ts, end: k.end(), comm: g.comm }),
        }
        seg_of.push(saturating_u32(segs.len() - 1));
        prev = Some((g, ends));
    }
    let mut deps: Vec<(u32, u32)> =
        edges.iter().filter_map(|&(a, b)| Some((*seg_of.get(a)?, *seg_of.get(b)?))).filter(|(a, b)| a != b).collect();
    deps.sort_unstable();
    deps.dedup();
    StepTimeline { step: met.first().map_or(0, |m| m.step), segs, deps }
}

/// What one step's replay needs of a kernel besides its times.
struct Kernelled<'a> {
    kernel: &'a Kernel,
    launch: Option<Ns>,
    comm: Option<u32>,
}

/// Whether `a` could have released `b`: a stream waits on an event recorded earlier, so only
/// work enqueued before `b` counts (either launch unknown: it may).
fn launched_before(a: &Kernelled, b: &Kernelled) -> bool {
    match (a.launch, b.launch) {
        (Some(a), Some(b)) => a < b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{KernelCat, Launch, Launches};

    #[test]
    fn kept_steps_are_all_of_a_short_window_and_evenly_spread_over_a_long_one() {
        let k = MAX_REPLAYED_STEPS;
        assert_eq!((0..5).filter(|&s| kept(s, 5, k)).count(), 5);
        assert!(!kept(5, 5, k));
        let long: Vec<u32> = (0..1000).filter(|&s| kept(s, 1000, k)).collect();
        assert_eq!(long.len(), usize::try_from(MAX_REPLAYED_STEPS).unwrap());
        assert_eq!((long[0], long[1], long[31]), (0, 31, 968));
        assert_eq!((0..33).filter(|&s| kept(s, 33, k)).count(), 32);
        assert!(kept(0, 0, k), "a window of one step keeps it");
        assert_eq!((0..10).filter(|&s| kept(s, 10, 2)).collect::<Vec<_>>(), [0, 5]);
    }

    /// A late collective (a host delay, a straggler's) is not held by compute launched after it,
    /// though that compute ended just before it started.
    #[test]
    fn work_launched_after_a_kernel_never_holds_it() {
        let kernels = vec![
            Kernel::new(0, 100_000, 0, KernelCat::Kernel, 7, Some(1)),
            Kernel::new(500_000, 100_000, 1, KernelCat::Kernel, 13, Some(2)),
            Kernel::new(100_000, 390_000, 0, KernelCat::Kernel, 7, Some(3)),
        ];
        let at = |ts| Launch { ts, pid: 1, tid: 1 };
        let launches: Launches = [(1, at(-50_000)), (2, at(-30_000)), (3, at(-20_000))].into_iter().collect();
        let t = RankTrace { kernels, launches, ..RankTrace::default() };
        let met: Vec<Met> =
            (0..3u32).map(|i| Met { step: 0, kernel: i, comm: if i == 1 { 0 } else { NOT_COMM } }).collect();
        let tl = build(&t, met);
        // Segments: stream 7's two kernels merged, then the collective; the collective waits for
        // the first kernel (launched before it, by launch order), which ends the merged segment's
        // first part: it is cut there.
        let segs: Vec<(i64, Ns, Ns)> = tl[0].segs.iter().map(|s| (s.stream, s.start, s.end)).collect();
        assert_eq!(segs, [(7, 0, 100_000), (7, 100_000, 490_000), (13, 500_000, 600_000)]);
        assert_eq!(tl[0].deps, [(0, 2)], "only the kernel launched before the collective");
    }

    #[test]
    fn a_kernel_dense_trace_replays_fewer_steps() {
        assert_eq!(replayed_steps(14, 14 * 2_000), MAX_REPLAYED_STEPS.min(14));
        assert_eq!(replayed_steps(100, 100 * 2_000), MAX_REPLAYED_STEPS);
        assert_eq!(replayed_steps(10, 1_000_000), 2, "100,000 kernels a step: two steps");
        assert_eq!(replayed_steps(10, 100_000_000), 1, "at least one");
        assert_eq!(replayed_steps(0, 0), 1);
    }

    /// Compute stream 7: three kernels, the third launched after the collective and held by it;
    /// NCCL stream 13: an all-reduce launched after the second kernel (µs).
    #[test]
    fn a_collective_waits_for_the_work_launched_before_it_and_holds_the_work_that_waited() {
        let kernels = vec![
            Kernel::new(0, 100_000, 0, KernelCat::Kernel, 7, Some(1)),
            Kernel::new(100_000, 200_000, 0, KernelCat::Kernel, 7, Some(2)),
            Kernel::new(300_000, 500_000, 1, KernelCat::Kernel, 13, Some(3)),
            Kernel::new(800_000, 100_000, 0, KernelCat::Kernel, 7, Some(4)),
        ];
        let at = |ts| Launch { ts, pid: 1, tid: 1 };
        let launches: Launches = [(1, at(-50)), (2, at(-40)), (3, at(-30)), (4, at(-20))].into_iter().collect();
        let t = RankTrace { kernels, launches, ..RankTrace::default() };
        let met: Vec<Met> =
            (0..4u32).map(|i| Met { step: 0, kernel: i, comm: if i == 2 { 0 } else { NOT_COMM } }).collect();
        let tl = build(&t, met);
        assert_eq!(tl.len(), 1);
        let segs: Vec<(i64, Ns, Ns, Option<u32>)> =
            tl[0].segs.iter().map(|s| (s.stream, s.start, s.end, s.comm)).collect();
        // The first two kernels merge: nothing waits between them.
        assert_eq!(segs, [(7, 0, 300_000, None), (7, 800_000, 900_000, None), (13, 300_000, 800_000, Some(0))]);
        assert_eq!(tl[0].deps, [(0, 2), (2, 1)]);
    }
}
