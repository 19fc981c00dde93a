//! Waiting for the GPU against a deadline, never inside a blocking CUDA call: a wait that the GPU
//! never satisfies (a barrier word it cannot see, a peer that died inside a collective) must end the
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

/// One poll of a step: done when every GPU's stop event has passed; a communicator's
/// asynchronous error (asked first: a failed collective never lets its event pass) or an event's
/// error ends the wait at once.
pub(super) fn step_done<E>(
    communicators: impl IntoIterator<Item = Result<(), E>>,
    events: impl IntoIterator<Item = Result<bool, E>>,
) -> Result<bool, E> {
    for communicator in communicators {
        communicator?;
    }
    let mut all = true;
    for event in events {
        all &= event?;
    }
    Ok(all)
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

    /// A step over two GPUs, polled as the backend polls it: fakes stand for the stop events and
    /// the communicators. Rank 1's event passes on the third poll: done.
    #[test]
    fn a_step_is_done_when_every_event_has_passed() {
        let mut poll = 0;
        let waited = poll_until(Duration::from_secs(5), Duration::from_micros(10), || {
            poll += 1;
            step_done([Ok::<(), &str>(()), Ok(())], [Ok(true), Ok(poll >= 3)])
        });
        assert_eq!((waited, poll), (Waited::Done, 3));
    }

    /// A peer dies on the second poll: its communicator's asynchronous error ends the wait at
    /// once, long before the deadline, though no event will ever pass.
    #[test]
    fn a_dead_peer_ends_the_wait_through_its_communicators_error() {
        let start = Instant::now();
        let mut poll = 0;
        let waited = poll_until(Duration::from_secs(60), Duration::from_millis(1), || {
            poll += 1;
            let comm = if poll >= 2 { Err("ncclRemoteError") } else { Ok(()) };
            step_done([Ok(()), comm], [Ok(false), Ok(false)])
        });
        assert_eq!(waited, Waited::Failed("ncclRemoteError"));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    /// A collective that hangs without an error (a peer stopped, not dead): the deadline ends it.
    #[test]
    fn a_hung_collective_ends_at_the_deadline() {
        let waited = poll_until(Duration::from_millis(30), Duration::from_millis(1), || {
            step_done([Ok::<(), &str>(())], [Ok(true), Ok(false)])
        });
        assert_eq!(waited, Waited::TimedOut);
        assert_eq!(step_done([Ok::<(), &str>(())], [Err("illegal address"), Ok(true)]), Err("illegal address"));
    }
}
