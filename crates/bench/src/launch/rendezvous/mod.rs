//! The job's TCP rendezvous ([`Rendezvous`]): it bootstraps a job of one process per rank,
//! shares NCCL's unique id (broadcast), collects per-rank timings on rank 0 (gather), lines the
//! ranks up before a timed step (barrier), and carries the CPU backend's all-reduce between
//! processes. This module holds the calls made once the job has formed; `handshake` forms it
//! (binding, connecting, and a peer's side of the authenticated handshake), `accept` is rank 0's
//! side (which peers it lets in and which it drops), and `wire` is the byte format they speak.
//!
//! The topology is a star through rank 0: rank 0 holds one socket per peer, every other rank one
//! socket to rank 0. Each socket has TCP_NODELAY and read and write timeouts equal to the
//! rendezvous timeout, so a silent peer ends in an error, never a hang.
//!
//! Errors are [`BenchError::Failed`] with these kinds: `rendezvous` (the job could not form, or a
//! peer sent something that is not this protocol), `rank_died` (a connected peer closed its
//! socket: it exited or crashed; `rank` names it), `timeout` (a connected peer stayed silent past
//! the timeout; `rank` names it). When rank 0 gives up it tells every peer why before closing, so
//! each rank's error names the first cause rather than a disconnected rank 0.

mod accept;
mod handshake;
mod wire;

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::wire::{
    decode_abort, encode_abort, f32_frame, f32s, frame, read_frame, Len, ReadError, Tag, BROADCAST_MAX, GATHER_MAX,
};
use crate::BenchError;

/// The job's TCP bootstrap: a star through rank 0. Cloning shares the same sockets; calls from
/// clones are serialised by a mutex, and every rank must make the same calls in the same order.
#[derive(Clone)]
pub struct Rendezvous {
    rank: u32,
    world_size: u32,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendezvous").field("rank", &self.rank).field("world_size", &self.world_size).finish()
    }
}

struct Inner {
    rank: u32,
    world_size: u32,
    /// `host:port` of rank 0, for messages.
    master: String,
    timeout: Duration,
    /// Rank 0: one per peer, index = rank (index 0 unused). Other ranks: index 0, rank 0.
    links: Vec<Option<TcpStream>>,
    /// Reused frame buffers, so the all-reduce allocates only on its first call.
    send: Vec<u8>,
    recv: Vec<u8>,
    /// The first error; every later call returns it (the streams' state is unknown after one).
    broken: Option<BenchError>,
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

fn rendezvous_error(message: String, rank: u32) -> BenchError {
    BenchError::failed("rendezvous", message, Some(rank))
}

impl Rendezvous {
    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// Rank 0 passes `Some(bytes)`, every other rank `None`; every rank returns rank 0's bytes.
    pub fn broadcast(&self, bytes: Option<&[u8]>) -> Result<Vec<u8>, BenchError> {
        self.with(|inner| inner.broadcast(bytes))
    }

    /// Rank 0 returns `Some(all)`, where `all[r]` is rank r's bytes; the other ranks `None`.
    pub fn gather(&self, bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, BenchError> {
        self.with(|inner| inner.gather(bytes))
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<(), BenchError> {
        self.with(|inner| inner.barrier())
    }

    /// Element-wise sum over all ranks, the result on every rank. A star through rank 0: the
    /// peers send their data, rank 0 adds them in rank order and sends the sum back, so every
    /// rank holds bitwise the same result. It moves 2·(n−1) buffers through rank 0's link rather
    /// than a ring's 2·(n−1)/n per rank: this path carries the CPU backend's mechanism between
    /// processes, it is not a bandwidth benchmark. Allocates only on its first call.
    pub fn all_reduce_sum_f32(&self, data: &mut [f32]) -> Result<(), BenchError> {
        self.with(|inner| inner.all_reduce_sum_f32(data))
    }

    fn with<T>(&self, call: impl FnOnce(&mut Inner) -> Result<T, BenchError>) -> Result<T, BenchError> {
        let mut inner = self.inner.lock().map_err(|_| {
            rendezvous_error(
                "the rendezvous was left in an unknown state by a thread that panicked".to_string(),
                self.rank,
            )
        })?;
        if let Some(error) = &inner.broken {
            return Err(error.clone());
        }
        let result = call(&mut inner);
        if let Err(error) = &result {
            inner.fail(error.clone());
        }
        result
    }
}

impl Inner {
    /// Records the first error and, on rank 0, tells every peer before closing the sockets, so
    /// they fail now with the cause instead of timing out.
    fn fail(&mut self, error: BenchError) {
        if self.broken.is_some() {
            return;
        }
        if self.rank == 0 {
            let notice = frame(Tag::Abort, &encode_abort(&error));
            for stream in self.links.iter_mut().flatten() {
                // Best effort: a peer that is gone or stuck cannot be told.
                let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
                let _ = stream.write_all(&notice);
            }
        }
        for stream in self.links.iter_mut().flatten() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        self.links.iter_mut().for_each(|link| *link = None);
        self.broken = Some(error);
    }

    /// The error for an I/O failure talking to `peer` during `call`.
    fn io_error(&self, peer: u32, call: &str, sending: bool, e: &io::Error) -> BenchError {
        let me = self.rank;
        if is_timeout(e) {
            BenchError::failed(
                "timeout",
                format!(
                    "rank {me} waited {:?} for rank {peer} during {call}: rank {peer} is stuck or far behind \
                     (does every rank run the same plan?)",
                    self.timeout
                ),
                Some(peer),
            )
        } else {
            let verb = if sending { "sending to" } else { "receiving from" };
            BenchError::failed(
                "rank_died",
                format!("rank {me} lost rank {peer} while {verb} it during {call} ({e}): check rank {peer}'s output"),
                Some(peer),
            )
        }
    }

    fn stream(&mut self, peer: u32) -> Result<&mut TcpStream, BenchError> {
        let me = self.rank;
        self.links
            .get_mut(peer as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| rendezvous_error(format!("rank {me} has no connection to rank {peer}"), me))
    }

    fn send_to(&mut self, peer: u32, call: &str, bytes: &[u8]) -> Result<(), BenchError> {
        let result = self.stream(peer)?.write_all(bytes);
        result.map_err(|e| self.io_error(peer, call, true, &e))
    }

    /// Reads `peer`'s next frame into `self.recv`, which must carry `tag` within `len` (checked
    /// before the payload is read). An abort frame from rank 0 becomes the error it carries.
    fn recv_from(&mut self, peer: u32, tag: Tag, len: Len) -> Result<(), BenchError> {
        let mut payload = std::mem::take(&mut self.recv);
        let result = read_frame(self.stream(peer)?, &mut payload, tag, len);
        let unexpected = |got: Tag| {
            BenchError::failed(
                "rendezvous",
                format!(
                    "rank {peer} sent a {} frame while rank {} was in {}: the ranks disagree on the sequence of \
                     calls (do they run the same commgate version and plan?)",
                    got.call(),
                    self.rank,
                    tag.call()
                ),
                Some(peer),
            )
        };
        let error = match result {
            Ok(got) if got == tag => None,
            Ok(Tag::Abort) if peer == 0 => Some(decode_abort(&payload)),
            Ok(got) | Err(ReadError::Unexpected(got)) => Some(unexpected(got)),
            Err(ReadError::Garbage(what)) => Some(BenchError::failed(
                "rendezvous",
                format!("rank {peer} sent {what} during {}", tag.call()),
                Some(peer),
            )),
            Err(ReadError::Io(e)) => Some(self.io_error(peer, tag.call(), false, &e)),
        };
        self.recv = payload;
        error.map_or(Ok(()), Err)
    }

    fn broadcast(&mut self, bytes: Option<&[u8]>) -> Result<Vec<u8>, BenchError> {
        match (self.rank, bytes) {
            (0, Some(bytes)) if bytes.len() as u64 > BROADCAST_MAX => Err(rendezvous_error(
                format!(
                    "rank 0 cannot broadcast {} bytes: the rendezvous carries at most {BROADCAST_MAX}",
                    bytes.len()
                ),
                0,
            )),
            (0, Some(bytes)) => {
                let message = frame(Tag::Broadcast, bytes);
                for peer in 1..self.world_size {
                    self.send_to(peer, "broadcast", &message)?;
                }
                Ok(bytes.to_vec())
            }
            (0, None) => Err(rendezvous_error("rank 0 called broadcast without bytes to send".to_string(), 0)),
            (_, _) => {
                self.recv_from(0, Tag::Broadcast, Len::AtMost(BROADCAST_MAX))?;
                Ok(self.recv.clone())
            }
        }
    }

    fn gather(&mut self, bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, BenchError> {
        if bytes.len() as u64 > GATHER_MAX {
            let me = self.rank;
            return Err(rendezvous_error(
                format!("rank {me} cannot gather {} bytes: the rendezvous carries at most {GATHER_MAX}", bytes.len()),
                me,
            ));
        }
        if self.rank != 0 {
            self.send_to(0, "gather", &frame(Tag::Gather, bytes))?;
            return Ok(None);
        }
        let mut all = Vec::with_capacity(self.world_size as usize);
        all.push(bytes.to_vec());
        for peer in 1..self.world_size {
            self.recv_from(peer, Tag::Gather, Len::AtMost(GATHER_MAX))?;
            all.push(self.recv.clone());
        }
        Ok(Some(all))
    }

    fn barrier(&mut self) -> Result<(), BenchError> {
        let token = frame(Tag::Barrier, &[]);
        if self.rank != 0 {
            self.send_to(0, "barrier", &token)?;
            return self.recv_from(0, Tag::Barrier, Len::Exactly(0));
        }
        for peer in 1..self.world_size {
            self.recv_from(peer, Tag::Barrier, Len::Exactly(0))?;
        }
        for peer in 1..self.world_size {
            self.send_to(peer, "barrier", &token)?;
        }
        Ok(())
    }

    fn all_reduce_sum_f32(&mut self, data: &mut [f32]) -> Result<(), BenchError> {
        let bytes = data.len() as u64 * 4;
        if self.rank != 0 {
            f32_frame(&mut self.send, Tag::Reduce, data);
            let message = std::mem::take(&mut self.send);
            let sent = self.send_to(0, "all_reduce", &message);
            self.send = message;
            sent?;
            self.recv_from(0, Tag::Reduced, Len::Exactly(bytes))?;
            for (x, sum) in data.iter_mut().zip(f32s(&self.recv)) {
                *x = sum;
            }
            return Ok(());
        }
        for peer in 1..self.world_size {
            self.recv_from(peer, Tag::Reduce, Len::Exactly(bytes))?;
            for (x, theirs) in data.iter_mut().zip(f32s(&self.recv)) {
                *x += theirs;
            }
        }
        f32_frame(&mut self.send, Tag::Reduced, data);
        let message = std::mem::take(&mut self.send);
        let mut sent = Ok(());
        for peer in 1..self.world_size {
            sent = self.send_to(peer, "all_reduce", &message);
            if sent.is_err() {
                break;
            }
        }
        self.send = message;
        sent
    }
}

/// A launch of `world_size` ranks on 127.0.0.1 at `port`, for tests.
#[cfg(test)]
fn local_launch(rank: u32, world_size: u32, port: u16) -> crate::launch::Launch {
    crate::launch::Launch::new(rank, world_size, rank, "127.0.0.1", port)
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Instant;

    use super::*;

    /// Runs `body` on `world_size` ranks, each a thread with its own rendezvous on 127.0.0.1 at
    /// a port the OS chose; returns each rank's result, index = rank.
    fn on_ranks<T: Send + 'static>(
        world_size: u32,
        timeout: Duration,
        body: impl Fn(Rendezvous) -> Result<T, BenchError> + Send + Sync + 'static,
    ) -> Vec<Result<T, BenchError>> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let body = Arc::new(body);
        let mut listener = Some(listener);
        let handles: Vec<_> = (0..world_size)
            .map(|rank| {
                let listener = if rank == 0 { listener.take() } else { None };
                let body = Arc::clone(&body);
                std::thread::spawn(move || {
                    let rdzv =
                        Rendezvous::connect_with_listener(&local_launch(rank, world_size, port), listener, timeout)?;
                    body(rdzv)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank thread panicked")).collect()
    }

    #[test]
    fn three_ranks_broadcast_gather_barrier_and_all_reduce() {
        let results = on_ranks(3, Duration::from_secs(10), |rdzv| {
            let rank = rdzv.rank();
            assert_eq!(rdzv.world_size(), 3);
            let id = rdzv.broadcast((rank == 0).then_some(b"nccl-unique-id".as_slice()))?;
            assert_eq!(id, b"nccl-unique-id");
            let gathered = rdzv.gather(format!("rank {rank}").as_bytes())?;
            rdzv.barrier()?;
            // Twice, so the second call reuses the buffers; uneven length on purpose.
            let mut data = Vec::new();
            for round in 0..2 {
                data = (0..10).map(|i| (rank * 100 + i + round) as f32).collect::<Vec<f32>>();
                rdzv.all_reduce_sum_f32(&mut data)?;
            }
            let empty = rdzv.gather(&[])?;
            Ok((gathered, data, empty))
        });
        for (rank, result) in results.into_iter().enumerate() {
            let (gathered, data, empty) = result.unwrap();
            let expected: Vec<f32> = (0..10).map(|i| (300 + 3 * i + 3) as f32).collect();
            assert_eq!(data, expected, "rank {rank}");
            if rank == 0 {
                let names: Vec<String> = gathered.unwrap().into_iter().map(|b| String::from_utf8(b).unwrap()).collect();
                assert_eq!(names, ["rank 0", "rank 1", "rank 2"]);
                assert_eq!(empty.unwrap(), vec![Vec::<u8>::new(); 3]);
            } else {
                assert_eq!(gathered, None);
                assert_eq!(empty, None);
            }
        }
    }

    #[test]
    fn a_peer_that_dies_mid_run_is_named() {
        let results = on_ranks(3, Duration::from_secs(10), |rdzv| {
            if rdzv.rank() == 2 {
                return Ok(()); // exits: its socket closes before the all-reduce
            }
            rdzv.barrier()
        });
        let BenchError::Failed { kind, message, rank } = results[0].clone().unwrap_err() else { panic!() };
        assert_eq!((kind.as_str(), rank), ("rank_died", Some(2)), "{message}");
        // Rank 1 hears the cause from rank 0 instead of timing out.
        let BenchError::Failed { kind, message, rank } = results[1].clone().unwrap_err() else { panic!() };
        assert_eq!((kind.as_str(), rank), ("rank_died", Some(2)), "{message}");
        assert!(message.contains("rank 0 aborted the run"), "{message}");
    }

    #[test]
    fn a_silent_peer_times_out_and_later_calls_fail_fast() {
        let results = on_ranks(2, Duration::from_millis(200), |rdzv| {
            if rdzv.rank() == 1 {
                std::thread::sleep(Duration::from_millis(600));
                return Ok(());
            }
            let first = rdzv.barrier().unwrap_err();
            let start = Instant::now();
            let second = rdzv.gather(&[1]).unwrap_err();
            assert!(start.elapsed() < Duration::from_millis(100));
            assert_eq!(first, second);
            Err(first)
        });
        let BenchError::Failed { kind, rank, .. } = results[0].clone().unwrap_err() else { panic!() };
        assert_eq!((kind.as_str(), rank), ("timeout", Some(1)));
    }

    #[test]
    fn mismatched_calls_and_sizes_are_errors() {
        let results = on_ranks(2, Duration::from_secs(5), |rdzv| {
            let mut data = vec![1.0f32; if rdzv.rank() == 0 { 4 } else { 5 }];
            rdzv.all_reduce_sum_f32(&mut data)
        });
        let error = results[0].clone().unwrap_err().to_string();
        assert!(error.contains("20 bytes for all_reduce where 16 were expected"), "{error}");
        let results = on_ranks(2, Duration::from_secs(5), |rdzv| {
            if rdzv.rank() == 0 {
                rdzv.barrier()
            } else {
                rdzv.gather(b"x").map(|_| ())
            }
        });
        let error = results[0].clone().unwrap_err().to_string();
        assert!(error.contains("rank 1 sent a gather frame while rank 0 was in barrier"), "{error}");
    }
}
