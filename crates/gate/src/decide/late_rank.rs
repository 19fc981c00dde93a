//! Whether a regressed collective's late rank is named: the rank that arrived last in most of
//! the current traces' instances of it, when its regression involves wait. A rank last in half
//! the instances or more is the one the others wait for; below that the lateness moves between
//! ranks and naming one would send the reader after the wrong rank's work.

use crate::compare::traces::{CollectiveCause, CollectiveComparison};

/// A late rank is named when it arrived last in at least this share of the instances.
pub const LATE_RANK_SHARE: f64 = 0.5;

/// Names `c`'s late rank (`late_rank`, `late_share`) when its cause involves wait and the
/// last-arriving rank the comparison kept arrived last in at least [`LATE_RANK_SHARE`] of the
/// instances; otherwise names none.
pub fn name(c: &mut CollectiveComparison) {
    let named = c
        .last_arrival
        .filter(|&(_, share)| share >= LATE_RANK_SHARE)
        .filter(|_| matches!(c.cause, Some(CollectiveCause::Wait | CollectiveCause::Mixed)));
    (c.late_rank, c.late_share) = (named.map(|(r, _)| r), named.map(|(_, s)| s));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::State;

    fn regressed(cause: CollectiveCause, last_arrival: Option<(u32, f64)>) -> CollectiveComparison {
        CollectiveComparison {
            collective: "all_reduce".into(),
            state: State::Regressed,
            cause: Some(cause),
            late_rank: None,
            late_share: None,
            last_arrival,
            busbw_baseline_gbps: None,
            busbw_current_gbps: None,
            mitigation: None,
            metrics: Vec::new(),
            shares_of_own_time: false,
            note: None,
            unjudged: None,
        }
    }

    #[test]
    fn a_rank_last_in_half_the_instances_of_a_wait_regression_is_named() {
        let mut c = regressed(CollectiveCause::Wait, Some((5, 0.5)));
        name(&mut c);
        assert_eq!((c.late_rank, c.late_share), (Some(5), Some(0.5)));
        let mut mixed = regressed(CollectiveCause::Mixed, Some((2, 0.93)));
        name(&mut mixed);
        assert_eq!(mixed.late_rank, Some(2));
    }

    #[test]
    fn no_rank_is_named_below_the_share_or_without_wait() {
        for (cause, arrival) in [
            (CollectiveCause::Wait, Some((5, 0.49))),
            (CollectiveCause::Transfer, Some((5, 0.9))),
            (CollectiveCause::Wait, None),
        ] {
            let mut c = regressed(cause, arrival);
            name(&mut c);
            assert_eq!((c.late_rank, c.late_share), (None, None), "{cause:?} {arrival:?}");
        }
    }
}
