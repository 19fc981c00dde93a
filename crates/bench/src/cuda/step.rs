//! What one timed step queues on each GPU, as data: the barrier, the line-up, the start and stop
//! events and the work of each schedule, in order. `gpus.rs` only executes this list, so the
//! timing window's boundaries are decided here, once, and checked by the tests below without a GPU.
//!
//! Per GPU there are two streams: `Comm` (the NCCL communicator's) and `Compute`. A step is
//! 1. the barrier (when held): both streams wait on the host's release word;
//! 2. the line-up: a one-element all-reduce on `Comm`, so every rank starts its window together
//!    (it waits for the slowest rank's barrier too), then the `Aligned` event;
//! 3. the schedule between `Start` and `Stop` (see [`step`]).
//!
//! Every `Start` is recorded after the barrier and the line-up on its stream, so a window holds only
//! device work: with the barrier no schedule's window holds any host-side enqueueing.

use commgate_core::result::Schedule;

/// One GPU's two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// The NCCL communicator's stream: the all-reduces, and the whole serial schedule.
    Comm,
    /// The matmul's stream in `compute_only` and `overlap`.
    Compute,
}

/// One GPU's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mark {
    /// The line-up all-reduce is done (ordering only).
    Aligned,
    /// Opens the timing window (timing on).
    Start,
    /// The overlap's all-reduce is done (ordering only).
    Joined,
    /// Closes the timing window (timing on).
    Stop,
}

/// Which buffer an all-reduce sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Payload {
    /// The plan's payload, send → receive buffer.
    Full,
    /// One element, in place: the line-up.
    Align,
}

/// One operation of a step. All but [`Op::AllReduce`] are queued on every local GPU in turn; an
/// all-reduce is one call on every communicator at once (grouped when this process drives several
/// GPUs), always on `Comm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// The lane waits until the host releases the barrier.
    Barrier(Lane),
    AllReduce(Payload),
    Record(Mark, Lane),
    /// The lane waits until the mark's last record has completed.
    Wait(Lane, Mark),
    Gemm(Lane),
}

/// The operations of one step of `schedule`, in the order they are queued. `gated`: the barrier is
/// held for this step (otherwise the step is what it was without a barrier: the windows start when
/// the host reaches them).
pub(super) fn step(schedule: Schedule, gated: bool) -> Vec<Op> {
    use Lane::{Comm, Compute};
    use Op::{AllReduce, Barrier, Gemm, Record, Wait};
    let mut ops = Vec::with_capacity(14);
    if gated {
        ops.extend([Barrier(Comm), Barrier(Compute)]);
    }
    ops.extend([AllReduce(Payload::Align), Record(Mark::Aligned, Comm)]);
    ops.extend_from_slice(match schedule {
        Schedule::CommOnly => &[Record(Mark::Start, Comm), AllReduce(Payload::Full), Record(Mark::Stop, Comm)][..],
        Schedule::ComputeOnly => {
            &[Wait(Compute, Mark::Aligned), Record(Mark::Start, Compute), Gemm(Compute), Record(Mark::Stop, Compute)]
        }
        Schedule::Serial => {
            &[Record(Mark::Start, Comm), AllReduce(Payload::Full), Gemm(Comm), Record(Mark::Stop, Comm)]
        }
        // Both lanes start at the compute lane's start event; the compute lane closes the window
        // once the all-reduce (Joined) and the matmul are both done.
        Schedule::Overlap => &[
            Wait(Compute, Mark::Aligned),
            Record(Mark::Start, Compute),
            Wait(Comm, Mark::Start),
            AllReduce(Payload::Full),
            Gemm(Compute),
            Record(Mark::Joined, Comm),
            Wait(Compute, Mark::Joined),
            Record(Mark::Stop, Compute),
        ],
    });
    ops
}

/// The ops between two all-reduces: `gpus.rs` queues each segment on one GPU after another, then
/// the all-reduce that ends it on all of them at once.
pub(super) fn segments(ops: &[Op]) -> impl Iterator<Item = (&[Op], Option<Payload>)> {
    ops.split_inclusive(|op| matches!(op, Op::AllReduce(_))).map(|chunk| match chunk.split_last() {
        Some((Op::AllReduce(payload), per_gpu)) => (per_gpu, Some(*payload)),
        _ => (chunk, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a lane has passed so far, as far as ordering goes.
    #[derive(Debug, Default, Clone, Copy, PartialEq)]
    struct Passed {
        barrier: bool,
        line_up: bool,
    }

    /// Plays a step on one GPU and returns, for each op that does work or records a timing
    /// event, what its lane had passed by then.
    fn play(ops: &[Op]) -> Vec<(Op, Passed)> {
        let mut comm = Passed::default();
        let mut compute = Passed::default();
        let mut marks: Vec<(Mark, Passed)> = Vec::new();
        let mut seen = Vec::new();
        for &op in ops {
            let lane_of = |lane| if lane == Lane::Comm { 0 } else { 1 };
            let lanes = [&mut comm, &mut compute];
            match op {
                Op::Barrier(lane) => lanes[lane_of(lane)].barrier = true,
                Op::AllReduce(payload) => {
                    seen.push((op, *lanes[0]));
                    if payload == Payload::Align {
                        lanes[0].line_up = true;
                    }
                }
                Op::Record(mark, lane) => {
                    let state = *lanes[lane_of(lane)];
                    marks.retain(|(m, _)| *m != mark);
                    marks.push((mark, state));
                    seen.push((op, state));
                }
                Op::Wait(lane, mark) => {
                    let Some((_, state)) = marks.iter().find(|(m, _)| *m == mark) else {
                        panic!("{op:?} waits for a mark never recorded")
                    };
                    let lane = &mut *lanes[lane_of(lane)];
                    lane.barrier |= state.barrier;
                    lane.line_up |= state.line_up;
                }
                Op::Gemm(lane) => seen.push((op, *lanes[lane_of(lane)])),
            }
        }
        seen
    }

    #[test]
    fn every_window_opens_behind_the_barrier_and_the_line_up() {
        for schedule in Schedule::ALL {
            for gated in [true, false] {
                let seen = play(&step(schedule, gated));
                let starts: Vec<_> = seen.iter().filter(|(op, _)| matches!(op, Op::Record(Mark::Start, _))).collect();
                assert_eq!(starts.len(), 1, "{schedule} has one start");
                let (_, passed) = starts[0];
                assert!(passed.line_up, "{schedule}: start before the line-up");
                assert_eq!(passed.barrier, gated, "{schedule}: start and barrier");
                // All work behind the barrier when there is one, the line-up included (so that it
                // also waits for the other processes' barriers), and the rest after the line-up.
                for (op, passed) in &seen {
                    assert_eq!(passed.barrier, gated, "{schedule}: {op:?} and the barrier");
                    if !matches!(op, Op::AllReduce(Payload::Align)) {
                        assert!(passed.line_up, "{schedule}: {op:?} before the line-up");
                    }
                }
            }
        }
    }

    #[test]
    fn the_barrier_holds_both_lanes_first_in_every_schedule() {
        for schedule in Schedule::ALL {
            let ops = step(schedule, true);
            assert_eq!(ops[..2], [Op::Barrier(Lane::Comm), Op::Barrier(Lane::Compute)], "{schedule}");
            assert_eq!(ops[2..], step(schedule, false)[..], "{schedule}: the barrier adds only the waits");
            assert_eq!(ops.iter().filter(|op| matches!(op, Op::Barrier(_))).count(), 2);
        }
    }

    #[test]
    fn each_schedule_runs_its_work_between_start_and_stop() {
        let work = |schedule| -> Vec<Op> {
            let ops = step(schedule, true);
            let start = ops.iter().position(|op| matches!(op, Op::Record(Mark::Start, _)));
            let stop = ops.iter().position(|op| matches!(op, Op::Record(Mark::Stop, _)));
            let (Some(start), Some(stop)) = (start, stop) else { panic!("{schedule}: no window") };
            assert!(start < stop);
            assert_eq!(stop, ops.len() - 1, "{schedule}: the stop is last");
            ops[start..=stop].iter().copied().filter(|op| matches!(op, Op::AllReduce(_) | Op::Gemm(_))).collect()
        };
        assert_eq!(work(Schedule::CommOnly), [Op::AllReduce(Payload::Full)]);
        assert_eq!(work(Schedule::ComputeOnly), [Op::Gemm(Lane::Compute)]);
        assert_eq!(work(Schedule::Serial), [Op::AllReduce(Payload::Full), Op::Gemm(Lane::Comm)]);
        assert_eq!(work(Schedule::Overlap), [Op::AllReduce(Payload::Full), Op::Gemm(Lane::Compute)]);
    }

    #[test]
    fn the_overlap_closes_only_after_both_lanes() {
        let ops = step(Schedule::Overlap, true);
        let at = |wanted: Op| ops.iter().position(|&op| op == wanted);
        let (Some(joined), Some(wait), Some(stop), Some(reduce)) = (
            at(Op::Record(Mark::Joined, Lane::Comm)),
            at(Op::Wait(Lane::Compute, Mark::Joined)),
            at(Op::Record(Mark::Stop, Lane::Compute)),
            at(Op::AllReduce(Payload::Full)),
        ) else {
            panic!("overlap lacks its join")
        };
        assert!(reduce < joined && joined < wait && wait < stop);
        // The comm lane starts no earlier than the window.
        assert!(at(Op::Wait(Lane::Comm, Mark::Start)).is_some_and(|w| w < reduce));
    }

    #[test]
    fn segments_end_at_each_all_reduce() {
        let ops = step(Schedule::Serial, true);
        let parts: Vec<_> = segments(&ops).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], (&[Op::Barrier(Lane::Comm), Op::Barrier(Lane::Compute)][..], Some(Payload::Align)));
        assert_eq!(
            parts[1],
            (&[Op::Record(Mark::Aligned, Lane::Comm), Op::Record(Mark::Start, Lane::Comm)][..], Some(Payload::Full))
        );
        assert_eq!(parts[2], (&[Op::Gemm(Lane::Comm), Op::Record(Mark::Stop, Lane::Comm)][..], None));
        let rebuilt: Vec<Op> = segments(&ops)
            .flat_map(|(per_gpu, reduce)| per_gpu.iter().copied().chain(reduce.map(Op::AllReduce)))
            .collect();
        assert_eq!(rebuilt, ops);
    }
}
