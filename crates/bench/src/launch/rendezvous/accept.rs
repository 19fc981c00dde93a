//! Rank 0's side of forming the job: it accepts connections, challenges each with a fresh nonce,
//! and lets in the peers whose hello proves the job's secret, one per rank. Every other
//! connection (closed at once, junk, a frame over its limit, a wrong proof, a rank already
//! joined, too slow) is dropped with one note on stderr, and rank 0 keeps accepting until every
//! rank has joined or the timeout passes. Handshakes run side by side on non-blocking sockets,
//! so a silent connection cannot hold up the real ranks.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::handshake::configure;
use super::wire::{
    challenge_payload, encode_abort, frame, parse_hello, validate_header, welcome_payload, Hello, Len, ReadError, Tag,
    HEADER_LEN, HELLO_LEN,
};
use super::{rendezvous_error, Inner};
use crate::launch::secret::{nonce, Secret, NONCE_LEN, SECRET_VAR};
use crate::BenchError;

/// How long one connection may take to send its hello (capped by the rendezvous timeout): a real
/// rank answers within milliseconds of connecting.
const HELLO_WINDOW: Duration = Duration::from_secs(3);
/// Handshakes in progress at once. A new connection past this, or past [`MAX_PENDING_PER_HOST`]
/// from its host, evicts the oldest pending one (of that host): silent connections cannot keep a
/// real rank, which sends its hello within milliseconds, out.
const MAX_PENDING: usize = 64;
/// Handshakes in progress at once from one address.
const MAX_PENDING_PER_HOST: usize = 8;
/// Dropped connections before rank 0 gives up on the job: something floods the port.
const MAX_DROPPED: u32 = 256;
/// Dropped connections noted on stderr one by one; later ones are only counted.
const MAX_NOTED: u32 = 16;

/// A connection that has been challenged and has not yet sent its whole hello.
struct Pending {
    stream: TcpStream,
    addr: SocketAddr,
    challenge: [u8; NONCE_LEN],
    /// The frame so far: its header, then its payload once the header passed its checks.
    buf: Vec<u8>,
    /// Bytes of `buf` wanted: the header's, then the header's and its payload's.
    need: usize,
    /// Whether the header passed its checks (and `need` covers the payload).
    header_checked: bool,
    deadline: Instant,
}

/// Where a pending handshake stands after a poll.
enum Poll {
    Waiting,
    Hello(Hello),
    Drop(String),
}

impl Pending {
    /// Challenges a new connection.
    fn start(stream: TcpStream, addr: SocketAddr, deadline: Instant) -> Result<Pending, String> {
        let challenge = nonce()?;
        let setup = |e: io::Error| format!("its socket could not be set up ({e})");
        stream.set_nonblocking(true).map_err(setup)?;
        stream.set_nodelay(true).map_err(setup)?;
        // A few dozen bytes into a fresh socket's empty send buffer: never blocks in practice;
        // if it would, the connection is dropped like any other that does not keep up.
        (&stream)
            .write_all(&frame(Tag::Challenge, &challenge_payload(&challenge)))
            .map_err(|e| format!("it could not be sent the challenge ({e})"))?;
        Ok(Pending {
            stream,
            addr,
            challenge,
            buf: Vec::with_capacity(HEADER_LEN),
            need: HEADER_LEN,
            header_checked: false,
            deadline,
        })
    }

    /// Reads what has arrived, without blocking, never past the header's checked length.
    fn poll(&mut self) -> Poll {
        let mut chunk = [0u8; HEADER_LEN + HELLO_LEN];
        loop {
            if self.buf.len() == self.need {
                if self.header_checked {
                    return match parse_hello(self.buf.get(HEADER_LEN..).unwrap_or_default()) {
                        Ok(hello) => Poll::Hello(hello),
                        Err(what) => Poll::Drop(format!("it sent {what}")),
                    };
                }
                let mut header = [0u8; HEADER_LEN];
                header.copy_from_slice(&self.buf);
                match validate_header(&header, Tag::Hello, Len::AtMost(HELLO_LEN as u64)) {
                    Ok((Tag::Hello, len)) => {
                        self.need = HEADER_LEN + len;
                        self.header_checked = true;
                    }
                    Ok((tag, _)) | Err(ReadError::Unexpected(tag)) => {
                        return Poll::Drop(format!("it sent a {} frame instead of a hello", tag.call()))
                    }
                    Err(ReadError::Garbage(what)) => return Poll::Drop(format!("it sent {what}")),
                    Err(ReadError::Io(e)) => return Poll::Drop(format!("the connection failed ({e})")),
                }
                continue;
            }
            // Never past the frame: the next frame's bytes are not this handshake's.
            let want = (self.need - self.buf.len()) as u64;
            match (&mut self.stream).take(want).read(&mut chunk) {
                Ok(0) => {
                    return Poll::Drop(format!(
                        "it closed the connection after {} bytes, before its hello",
                        self.buf.len()
                    ))
                }
                Ok(n) => self.buf.extend(chunk.iter().take(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Waiting,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Drop(format!("the connection failed before its hello ({e})")),
            }
        }
    }

    /// Tells a peer that spoke the protocol why it is refused (best effort), then closes.
    fn refuse(self, why: &str) {
        let error = rendezvous_error(why.to_string(), 0);
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_write_timeout(Some(Duration::from_millis(200)));
        let _ = (&self.stream).write_all(&frame(Tag::Abort, &encode_abort(&error)));
    }
}

/// The dropped connections so far, and the notes they left.
#[derive(Default)]
struct Dropped {
    count: u32,
}

impl Dropped {
    fn note(&mut self, addr: SocketAddr, why: &str) {
        self.count += 1;
        if self.count <= MAX_NOTED {
            let more = if self.count == MAX_NOTED { "; further drops are counted, not noted" } else { "" };
            commgate_core::diag::note(format_args!("rendezvous: dropped a peer from {addr}: {why}{more}"));
        }
    }
}

/// Which pending handshake a new connection from `addr` evicts, if any: the oldest from its host
/// when that host has [`MAX_PENDING_PER_HOST`] pending, else the oldest of all when
/// [`MAX_PENDING`] are.
fn evict(pending: &[Pending], addr: SocketAddr) -> Option<usize> {
    let same_host: Vec<usize> =
        pending.iter().enumerate().filter(|(_, p)| p.addr.ip() == addr.ip()).map(|(i, _)| i).collect();
    if same_host.len() >= MAX_PENDING_PER_HOST {
        return same_host.first().copied();
    }
    (pending.len() >= MAX_PENDING).then_some(0)
}

impl Inner {
    /// Rank 0: lets in `world_size − 1` peers before the deadline.
    pub(super) fn accept_peers(&mut self, listener: &TcpListener, secret: &Secret) -> Result<(), BenchError> {
        let result = self.accept_loop(listener, secret);
        // Tells the peers already let in why the job will not form.
        result.inspect_err(|e| self.fail(e.clone()))
    }

    fn accept_loop(&mut self, listener: &TcpListener, secret: &Secret) -> Result<(), BenchError> {
        let deadline = Instant::now() + self.timeout;
        let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| self.master.clone());
        listener
            .set_nonblocking(true)
            .map_err(|e| rendezvous_error(format!("rank 0 could not poll its listener on {local}: {e}"), 0))?;
        let mut pending: Vec<Pending> = Vec::new();
        let mut dropped = Dropped::default();
        while self.links.iter().skip(1).any(Option::is_none) {
            let now = Instant::now();
            if now >= deadline {
                return Err(self.never_joined(&local, &dropped));
            }
            if dropped.count >= MAX_DROPPED {
                return Err(rendezvous_error(
                    format!(
                        "rank 0 dropped {} connections on {local} that were not ranks of this job, and rank(s) {} \
                         had not joined: something floods MASTER_PORT; choose another port or keep the port off \
                         the network",
                        dropped.count,
                        self.absent()
                    ),
                    0,
                ));
            }
            let mut busy = false;
            loop {
                match listener.accept() {
                    Ok((stream, addr)) => {
                        busy = true;
                        if let Some(oldest) = evict(&pending, addr) {
                            let old = pending.remove(oldest);
                            dropped.note(old.addr, "it sent no hello while newer connections waited");
                        }
                        match Pending::start(stream, addr, (now + HELLO_WINDOW.min(self.timeout)).min(deadline)) {
                            Ok(p) => pending.push(p),
                            Err(why) => dropped.note(addr, &why),
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // A connection reset before it was accepted: nothing to drop.
                    Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
                    Err(e) => return Err(rendezvous_error(format!("rank 0 could not accept on {local}: {e}"), 0)),
                }
            }
            let mut still = Vec::with_capacity(pending.len());
            for mut p in pending.drain(..) {
                match p.poll() {
                    Poll::Waiting if now >= p.deadline => {
                        dropped.note(
                            p.addr,
                            &format!("it sent no complete hello within {:?}", HELLO_WINDOW.min(self.timeout)),
                        );
                    }
                    Poll::Waiting => still.push(p),
                    Poll::Drop(why) => {
                        busy = true;
                        dropped.note(p.addr, &why);
                    }
                    Poll::Hello(hello) => {
                        busy = true;
                        if let Err(why) = self.let_in(p, &hello, secret) {
                            dropped.note(why.0, &why.1);
                        }
                    }
                }
            }
            pending = still;
            if !busy {
                std::thread::sleep(Duration::from_millis(2).min(deadline.saturating_duration_since(Instant::now())));
            }
        }
        Ok(())
    }

    /// Checks a complete hello and welcomes its peer, or refuses it: `Err((addr, why))`.
    fn let_in(&mut self, p: Pending, hello: &Hello, secret: &Secret) -> Result<(), (SocketAddr, String)> {
        let (addr, rank, world_size) = (p.addr, hello.rank, hello.world_size);
        let refusal = if !secret.verify_hello(&p.challenge, &hello.nonce, rank, world_size, &hello.proof) {
            Some(format!(
                "its hello (claiming rank {rank}) does not prove this job's rendezvous secret: give every rank \
                 the same {SECRET_VAR}, or the same launcher job (rank 0's secret: {})",
                secret.source()
            ))
        } else if world_size != self.world_size {
            Some(format!(
                "rank {rank} says the world has {world_size} ranks, rank 0 says {}: start every rank with the same \
                 WORLD_SIZE",
                self.world_size
            ))
        } else if rank == 0 || rank >= self.world_size {
            Some(format!("it says it is rank {rank}, outside 1..{}: check each process's RANK", self.world_size))
        } else if self.links.get(rank as usize).is_some_and(Option::is_some) {
            Some(format!(
                "rank {rank} has already joined: check each process's RANK, or whether an earlier job with the same \
                 secret still runs"
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            p.refuse(&why);
            return Err((addr, why));
        }
        let proof = secret.welcome_proof(&p.challenge, &hello.nonce, rank, world_size);
        let welcomed = configure(&p.stream, self.timeout)
            .and_then(|()| (&p.stream).write_all(&frame(Tag::Welcome, &welcome_payload(rank, world_size, &proof))));
        match welcomed {
            Ok(()) => {
                // `rank` is within 1..world_size, one link each (checked above).
                if let Some(link) = self.links.get_mut(rank as usize) {
                    *link = Some(p.stream);
                }
                Ok(())
            }
            Err(e) => Err((addr, format!("rank {rank} could not be sent its welcome ({e})"))),
        }
    }

    /// The ranks that have not joined, as `1, 2`.
    fn absent(&self) -> String {
        let absent: Vec<String> =
            self.links.iter().enumerate().skip(1).filter(|(_, l)| l.is_none()).map(|(r, _)| r.to_string()).collect();
        absent.join(", ")
    }

    fn never_joined(&self, local: &str, dropped: &Dropped) -> BenchError {
        let drops = match dropped.count {
            0 => String::new(),
            n => format!(" ({n} other connection(s) were dropped: see the notes above)"),
        };
        rendezvous_error(
            format!(
                "rank 0 waited {:?} on {local} (MASTER_ADDR {}) and rank(s) {} never joined{drops}: check that every \
                 rank was started, that they share MASTER_ADDR, MASTER_PORT and the rendezvous secret, and that no \
                 firewall blocks the port",
                self.timeout,
                self.master,
                self.absent()
            ),
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc::Receiver;
    use std::thread::JoinHandle;

    use super::super::local_launch as launch;
    use super::super::wire::{decode_abort, hello_payload, read_frame, CHALLENGE_LEN};
    use super::super::Rendezvous;
    use super::*;

    /// Rank 0 of a world of `world_size` on a port the OS chose: its thread and the port. It
    /// broadcasts an id and gathers one byte per rank once every rank has joined.
    /// What rank 0's thread gathered, one entry per rank.
    type Gathered = JoinHandle<Result<Vec<Vec<u8>>, BenchError>>;

    fn rank0(world_size: u32) -> (Gathered, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let rdzv = Rendezvous::connect_with_listener(
                &launch(0, world_size, port),
                Some(listener),
                Duration::from_secs(20),
            )?;
            rdzv.broadcast(Some(b"nccl-id"))?;
            Ok(rdzv.gather(&[0])?.unwrap_or_default())
        });
        (handle, port)
    }

    /// A real rank's thread, and a channel that hears once it has joined.
    fn real_rank(rank: u32, world_size: u32, port: u16) -> (JoinHandle<Result<Vec<u8>, BenchError>>, Receiver<()>) {
        let (joined, heard) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let rdzv = Rendezvous::connect(&launch(rank, world_size, port), Duration::from_secs(20))?;
            let _ = joined.send(());
            let id = rdzv.broadcast(None)?;
            rdzv.gather(&[u8::try_from(rank).expect("a test's rank fits a byte")])?;
            Ok(id)
        });
        (handle, heard)
    }

    fn connect(port: u16) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        stream.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        stream
    }

    /// Reads until rank 0 closes the connection: proof that it was dropped (and not let in).
    fn until_closed(mut stream: TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let _ = stream.read_to_end(&mut got);
        got
    }

    /// An intruder that answers the challenge with a hello claiming `rank`, proved with `secret`.
    fn hello_as(port: u16, rank: u32, world_size: u32, secret: &Secret) -> BenchError {
        let mut stream = connect(port);
        let mut payload = Vec::new();
        assert!(matches!(
            read_frame(&mut stream, &mut payload, Tag::Challenge, Len::AtMost(CHALLENGE_LEN as u64)),
            Ok(Tag::Challenge)
        ));
        let challenge: [u8; NONCE_LEN] = payload[8..].try_into().unwrap();
        let nonce = [9; NONCE_LEN];
        let proof = secret.hello_proof(&challenge, &nonce, rank, world_size);
        stream.write_all(&frame(Tag::Hello, &hello_payload(&Hello { rank, world_size, nonce, proof }))).unwrap();
        match read_frame(&mut stream, &mut payload, Tag::Welcome, Len::AtMost(1024)) {
            Ok(Tag::Abort) => decode_abort(&payload),
            other => panic!("an intruder's hello was not refused: {:?}", other.map_err(|_| "error")),
        }
    }

    #[test]
    fn intruders_are_dropped_and_the_real_ranks_still_form_the_job() {
        let (rank0, port) = rank0(3);
        // Connects and closes at once.
        drop(connect(port));
        // 64 junk bytes.
        let mut junk = connect(port);
        junk.write_all(&[0xAB; 64]).unwrap();
        until_closed(junk);
        // Connects and says nothing, for the whole test: it must hold up nobody.
        let silent = connect(port);
        // A hello claiming rank 1 without the secret: refused, told why.
        let forged = hello_as(port, 1, 3, &Secret::derived("", 3, "elsewhere", 1, |_| None));
        assert!(forged.to_string().contains("does not prove this job's rendezvous secret"), "{forged}");
        // A frame with an unexpected tag and a 2^40 length, then a stream of bytes: rank 0 closes
        // after the header, so the writes fail long before 64 MiB instead of being buffered.
        let mut huge = connect(port);
        let mut header = (1u64 << 40).to_le_bytes().to_vec();
        header.push(Tag::Reduce as u8);
        huge.write_all(&header).unwrap();
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 0usize;
        let failure = loop {
            match huge.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) => break e,
            }
            assert!(sent < 64 << 20, "rank 0 took {sent} bytes of a frame it should have refused on its header");
        };
        assert!(!is_timeout_kind(failure.kind()), "rank 0 kept the connection open: {failure}");
        // The real rank 1, then a second process that proves the secret and says it is rank 1.
        let (rank1, joined) = real_rank(1, 3, port);
        let _ = joined.recv();
        let duplicate = Rendezvous::connect(&launch(1, 3, port), Duration::from_secs(5)).unwrap_err();
        assert!(duplicate.to_string().contains("rank 1 has already joined"), "{duplicate}");
        let (rank2, _) = real_rank(2, 3, port);
        assert_eq!(rank2.join().unwrap().unwrap(), b"nccl-id");
        assert_eq!(rank1.join().unwrap().unwrap(), b"nccl-id");
        assert_eq!(rank0.join().unwrap().unwrap(), [vec![0], vec![1], vec![2]]);
        drop(silent);
    }

    fn is_timeout_kind(kind: io::ErrorKind) -> bool {
        matches!(kind, io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
    }

    #[test]
    fn a_world_size_or_rank_that_does_not_fit_is_refused_with_the_secret() {
        let (rank0, port) = rank0(2);
        let secret = launch(0, 2, port).secret;
        let wrong_world = hello_as(port, 1, 3, &secret);
        assert!(wrong_world.to_string().contains("rank 1 says the world has 3 ranks, rank 0 says 2"), "{wrong_world}");
        let outside = hello_as(port, 5, 2, &secret);
        assert!(outside.to_string().contains("it says it is rank 5, outside 1..2"), "{outside}");
        assert_eq!(real_rank(1, 2, port).0.join().unwrap().unwrap(), b"nccl-id");
        assert_eq!(rank0.join().unwrap().unwrap(), [vec![0], vec![1]]);
    }

    #[test]
    fn a_flood_of_connections_ends_in_an_error_naming_the_missing_ranks() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let flood = std::thread::spawn(move || {
            for _ in 0..MAX_DROPPED + 50 {
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = s.write_all(&[0xFF; 16]);
                    let _ = s.read_to_end(&mut Vec::new());
                }
            }
        });
        let error = Rendezvous::connect_with_listener(&launch(0, 2, port), Some(listener), Duration::from_secs(60))
            .unwrap_err()
            .to_string();
        flood.join().unwrap();
        assert!(error.contains(&format!("rank 0 dropped {MAX_DROPPED} connections")), "{error}");
        assert!(error.contains("rank(s) 1 had not joined"), "{error}");
    }

    /// 64 silent connections from one host (more than a host may keep pending) do not keep the
    /// real rank out: each new connection evicts that host's oldest, and the real rank, which
    /// answers at once, joins well within the hello window.
    #[test]
    fn silent_connections_cannot_hold_the_real_rank_out() {
        let (zero, port) = rank0(2);
        let silent: Vec<TcpStream> = (0..MAX_PENDING).map(|_| connect(port)).collect();
        let started = std::time::Instant::now();
        let (one, heard) = real_rank(1, 2, port);
        heard.recv_timeout(Duration::from_secs(10)).expect("rank 1 joined");
        assert!(started.elapsed() < HELLO_WINDOW, "joined in {:?}", started.elapsed());
        assert_eq!(one.join().unwrap().unwrap(), b"nccl-id");
        assert_eq!(zero.join().unwrap().unwrap(), vec![vec![0], vec![1]]);
        drop(silent);
    }
}
