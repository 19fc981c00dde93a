//! Waiting for the GPU against a deadline, never inside a blocking CUDA call: a wait that the GPU
//! never satisfies (a gate word it cannot see, a peer that died inside a collective) must end the
//! run with a reason, not hold it until `--timeout`. The loop is pure over what it polls, so it is
//! tested here with fakes.

use std::time::{Duration, Instant};

/// How long to sleep between polls: short against a step of milliseconds, long enough not to
/// spin a core.
pub(super) const POLL_PAUSE: Duration = Duration::from_micros(200);

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Waited<E> {
    /// `done` said so.
    Done,
    /// `limit` passed first.
    TimedOut,
    /// `done` failed (an error the GPU or a library reported).
    Failed(E),
}

/// Polls `done` until it says `true`, fails, or `limit` has passed since the call, sleeping
/// `pause` in between; `done` is asked at least once, and once more after the deadline (a wait
/// that finished while this thread slept is not reported late).
pub(super) fn poll_until<E>(limit: Duration, pause: Duration, mut done: impl FnMut() -> Result<bool, E>) -> Waited<E> {
    let deadline = Instant::now() + limit;
    loop {
        let past = Instant::now() >= deadline;
        match done() {
            Ok(true) => return Waited::Done,
            Err(e) => return Waited::Failed(e),
            Ok(false) if past => return Waited::TimedOut,
            Ok(false) => std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_finishes_is_done() {
        let mut polls = 0;
        let waited = poll_until(Duration::from_secs(5), Duration::from_micros(10), || {
            polls += 1;
            Ok::<_, ()>(polls == 3)
        });
        assert_eq!((waited, polls), (Waited::Done, 3));
    }

    #[test]
    fn a_wait_that_never_finishes_times_out_near_its_limit() {
        let start = Instant::now();
        let waited = poll_until(Duration::from_millis(50), Duration::from_millis(1), || Ok::<_, ()>(false));
        assert_eq!(waited, Waited::TimedOut);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn an_error_ends_the_wait_at_once() {
        let waited = poll_until(Duration::from_secs(60), Duration::from_millis(1), || Err::<bool, _>("peer gone"));
        assert_eq!(waited, Waited::Failed("peer gone"));
    }

    #[test]
    fn a_zero_limit_still_asks_once() {
        assert_eq!(poll_until(Duration::ZERO, Duration::from_millis(1), || Ok::<_, ()>(true)), Waited::Done);
        assert_eq!(poll_until(Duration::ZERO, Duration::from_millis(1), || Ok::<_, ()>(false)), Waited::TimedOut);
    }
}
