//! Forming the job: rank 0 binds its port and accepts one connection per peer, every other rank
//! connects to `MASTER_ADDR:MASTER_PORT`, and each peer's hello is checked and answered with a
//! welcome (or with an abort that says why it was refused). Who may join, and on which address
//! rank 0 listens, is decided here.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wire::{decode_abort, encode_abort, frame, hello_payload, parse_hello, read_frame, ReadError, Tag};
use super::{is_timeout, rendezvous_error, Inner, Rendezvous};
use crate::bench::launch::Launch;
use crate::bench::BenchError;

fn configure(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

/// The address rank 0 listens on: every interface, in MASTER_ADDR's address family. Not
/// MASTER_ADDR itself: on many distributions the host's own name resolves to a loopback alias
/// (127.0.1.1), and listening there would shut out every other node. torch's TCPStore does the
/// same. The other family's address second, for hosts where the first cannot be bound (IPv6
/// turned off while the name resolves to `::1` first).
fn listen_addrs(launch: &Launch) -> [SocketAddr; 2] {
    let v6 = match launch.master_addr.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        Ok(ip) => ip.is_ipv6(),
        Err(_) => (launch.master_addr.as_str(), launch.master_port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .is_some_and(|a| a.is_ipv6()),
    };
    let (v4, v6_addr) = (IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    let (first, second) = if v6 { (v6_addr, v4) } else { (v4, v6_addr) };
    [SocketAddr::new(first, launch.master_port), SocketAddr::new(second, launch.master_port)]
}

impl Rendezvous {
    /// Forms the job. Rank 0 listens on `master_port` and accepts `world_size − 1` peers, each
    /// of which says its rank in a hello frame (a duplicate or out-of-range rank, or a different
    /// world size, is an error); the other ranks connect to `master_addr:master_port`, retrying
    /// until `timeout` has passed. `timeout` also bounds every later read and write.
    pub fn connect(launch: &Launch, timeout: Duration) -> Result<Rendezvous, BenchError> {
        if launch.rank == 0 {
            let [addr, fallback] = listen_addrs(launch);
            let bound = TcpListener::bind(addr).or_else(|e| match e.kind() {
                io::ErrorKind::AddrInUse => Err(e),
                _ => TcpListener::bind(fallback).map_err(|_| e),
            });
            let listener = bound.map_err(|e| {
                rendezvous_error(
                    format!(
                        "rank 0 could not listen on {addr} ({e}): another job may hold port {}; choose a free MASTER_PORT",
                        launch.master_port
                    ),
                    0,
                )
            })?;
            Self::connect_with_listener(launch, Some(listener), timeout)
        } else {
            Self::connect_with_listener(launch, None, timeout)
        }
    }

    /// [`Rendezvous::connect`] with rank 0's listener already bound, for callers that choose the
    /// port themselves (tests bind port 0 and hand the OS's choice to the other ranks). Rank 0
    /// must pass `Some`; other ranks pass `None`.
    pub fn connect_with_listener(
        launch: &Launch,
        listener: Option<TcpListener>,
        timeout: Duration,
    ) -> Result<Rendezvous, BenchError> {
        // A zero timeout is refused by the socket options; one millisecond is as good as none.
        let timeout = timeout.max(Duration::from_millis(1));
        let mut inner = Inner {
            rank: launch.rank,
            world_size: launch.world_size,
            master: launch.master(),
            timeout,
            links: (0..launch.world_size).map(|_| None).collect(),
            send: Vec::new(),
            recv: Vec::new(),
            broken: None,
        };
        if launch.rank >= launch.world_size {
            return Err(rendezvous_error(
                format!("rank {} is not below the world size {}", launch.rank, launch.world_size),
                launch.rank,
            ));
        }
        match (launch.rank, listener) {
            (0, Some(listener)) => inner.accept_peers(&listener)?,
            (0, None) => {
                return Err(rendezvous_error("rank 0 needs a listener to accept its peers".to_string(), 0));
            }
            (_, _) => inner.reach_rank0(launch)?,
        }
        Ok(Rendezvous { rank: launch.rank, world_size: launch.world_size, inner: Arc::new(Mutex::new(inner)) })
    }
}

impl Inner {
    /// Rank 0: accepts `world_size − 1` peers before the deadline.
    fn accept_peers(&mut self, listener: &TcpListener) -> Result<(), BenchError> {
        let deadline = Instant::now() + self.timeout;
        let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| self.master.clone());
        let result = (|| {
            listener
                .set_nonblocking(true)
                .map_err(|e| rendezvous_error(format!("rank 0 could not poll its listener on {local}: {e}"), 0))?;
            let mut missing = self.world_size - 1;
            while missing > 0 {
                match listener.accept() {
                    Ok((stream, peer_addr)) => {
                        self.welcome(stream, peer_addr, deadline)?;
                        missing -= 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                        let now = Instant::now();
                        if now >= deadline {
                            let absent: Vec<String> = (1..self.world_size)
                                .filter(|r| self.links[*r as usize].is_none())
                                .map(|r| r.to_string())
                                .collect();
                            return Err(rendezvous_error(
                                format!(
                                    "rank 0 waited {:?} on {local} (MASTER_ADDR {}) and rank(s) {} never connected: \
                                     check that every rank was started, that they share MASTER_ADDR and MASTER_PORT, \
                                     and that no firewall blocks the port",
                                    self.timeout,
                                    self.master,
                                    absent.join(", ")
                                ),
                                0,
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(2).min(deadline - now));
                    }
                    // A connection reset before it was accepted is the peer's problem, not ours: it
                    // retries.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                    Err(e) => {
                        return Err(rendezvous_error(format!("rank 0 could not accept on {local}: {e}"), 0));
                    }
                }
            }
            Ok(())
        })();
        // Tells the peers already accepted why the job will not form.
        result.inspect_err(|e| self.fail(e.clone()))
    }

    /// Rank 0: reads one peer's hello, checks it, and answers with a welcome.
    fn welcome(&mut self, mut stream: TcpStream, peer_addr: SocketAddr, deadline: Instant) -> Result<(), BenchError> {
        let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let setup =
            |e: io::Error| rendezvous_error(format!("rank 0 could not set up the socket from {peer_addr}: {e}"), 0);
        configure(&stream, self.timeout).map_err(setup)?;
        stream.set_read_timeout(Some(remaining)).map_err(setup)?;
        let mut payload = Vec::new();
        let hello = match read_frame(&mut stream, &mut payload, Some((Tag::Hello, 16))) {
            Ok(Tag::Hello) => parse_hello(&payload),
            Ok(tag) => Err(format!("a {} frame instead of a hello", tag.call())),
            Err(ReadError::Garbage(what)) => Err(what),
            Err(ReadError::Io(e)) if is_timeout(&e) => Err(format!("no hello within {remaining:?}")),
            Err(ReadError::Io(e)) => Err(format!("a connection that failed before its hello ({e})")),
        };
        let (rank, world_size) = hello.map_err(|what| {
            rendezvous_error(
                format!(
                    "rank 0 got {what} from {peer_addr} on MASTER_PORT: is another program or job using this port?"
                ),
                0,
            )
        })?;
        let reject = |stream: &mut TcpStream, error: BenchError| {
            let _ = stream.write_all(&frame(Tag::Abort, &encode_abort(&error)));
            error
        };
        if world_size != self.world_size {
            let error = rendezvous_error(
                format!(
                    "rank {rank} at {peer_addr} says the world has {world_size} ranks, rank 0 says {}: \
                     start every rank with the same WORLD_SIZE",
                    self.world_size
                ),
                rank,
            );
            return Err(reject(&mut stream, error));
        }
        if rank == 0 || rank >= self.world_size {
            let error = rendezvous_error(
                format!(
                    "a peer at {peer_addr} says it is rank {rank}, outside 1..{}: check each process's RANK",
                    self.world_size
                ),
                0,
            );
            return Err(reject(&mut stream, error));
        }
        if self.links[rank as usize].is_some() {
            let error = rendezvous_error(
                format!(
                    "two processes say they are rank {rank} (the second from {peer_addr}): \
                     check each process's RANK, or whether an earlier job still runs"
                ),
                rank,
            );
            return Err(reject(&mut stream, error));
        }
        stream.set_read_timeout(Some(self.timeout)).map_err(setup)?;
        stream
            .write_all(&frame(Tag::Welcome, &hello_payload(0, self.world_size)))
            .map_err(|e| rendezvous_error(format!("rank 0 could not answer rank {rank} at {peer_addr}: {e}"), rank))?;
        self.links[rank as usize] = Some(stream);
        Ok(())
    }

    /// Ranks other than 0: connects to rank 0, retrying until the deadline, then says hello.
    fn reach_rank0(&mut self, launch: &Launch) -> Result<(), BenchError> {
        let rank = self.rank;
        let master = self.master.clone();
        let deadline = Instant::now() + self.timeout;
        let mut last_error = String::from("no attempt finished");
        let mut stream = loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(rendezvous_error(
                    format!(
                        "rank {rank} could not reach rank 0 at {master} within {:?} (last error: {last_error}): \
                         check that rank 0 is running, that MASTER_ADDR and MASTER_PORT point at it, and that no \
                         firewall blocks the port",
                        self.timeout
                    ),
                    rank,
                ));
            }
            let attempt = deadline - now;
            match (launch.master_addr.as_str(), launch.master_port).to_socket_addrs() {
                Ok(addrs) => {
                    let mut connected = None;
                    for addr in addrs {
                        match TcpStream::connect_timeout(&addr, attempt.min(Duration::from_secs(2))) {
                            Ok(stream) => {
                                connected = Some(stream);
                                break;
                            }
                            Err(e) => last_error = format!("{addr}: {e}"),
                        }
                    }
                    if let Some(stream) = connected {
                        break stream;
                    }
                }
                Err(e) => last_error = format!("cannot resolve {:?}: {e}", launch.master_addr),
            }
            std::thread::sleep(Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())));
        };
        let lost = |what: String| {
            rendezvous_error(
                format!("rank {rank} reached {master} but {what}: is rank 0 a commgate of this job?"),
                rank,
            )
        };
        configure(&stream, self.timeout).map_err(|e| lost(format!("could not set up the socket ({e})")))?;
        stream
            .write_all(&frame(Tag::Hello, &hello_payload(rank, self.world_size)))
            .map_err(|e| lost(format!("could not send its hello ({e})")))?;
        let mut payload = Vec::new();
        match read_frame(&mut stream, &mut payload, None) {
            Ok(Tag::Welcome) => match parse_hello(&payload) {
                Ok((0, world_size)) if world_size == self.world_size => {}
                Ok(_) => return Err(lost("the answer named another rank or world size".to_string())),
                Err(what) => return Err(lost(format!("got {what}"))),
            },
            Ok(Tag::Abort) => return Err(decode_abort(&payload)),
            Ok(tag) => return Err(lost(format!("got a {} frame instead of a welcome", tag.call()))),
            Err(ReadError::Garbage(what)) => return Err(lost(format!("got {what}"))),
            Err(ReadError::Io(e)) if is_timeout(&e) => {
                return Err(lost(format!("no answer came within {:?}", self.timeout)));
            }
            Err(ReadError::Io(e)) => return Err(lost(format!("the connection failed ({e})"))),
        }
        self.links[0] = Some(stream);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    use super::super::local_launch as launch;
    use super::*;

    #[test]
    fn connect_listens_on_every_interface_for_rank_0() {
        // A port that was free a moment ago; rank 0 binds it again through `connect`.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let peer = std::thread::spawn(move || {
            let rdzv = Rendezvous::connect(&launch(1, 2, port), Duration::from_secs(10))?;
            rdzv.broadcast(None)
        });
        let rdzv = Rendezvous::connect(&launch(0, 2, port), Duration::from_secs(10)).unwrap();
        assert_eq!(rdzv.broadcast(Some(b"id")).unwrap(), b"id");
        assert_eq!(peer.join().unwrap().unwrap(), b"id");
    }

    /// Runs `form`, which must give up well within 5 s with a `rendezvous` error on `rank` whose
    /// message holds `needle`.
    fn assert_gives_up(form: impl FnOnce() -> Result<Rendezvous, BenchError>, rank: u32, needle: &str) {
        let start = Instant::now();
        let error = form().unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        let BenchError::Failed { kind, message, rank: blamed } = error else { panic!("{error:?}") };
        assert_eq!((kind.as_str(), blamed), ("rendezvous", Some(rank)));
        assert!(message.contains(needle), "{message}");
    }

    #[test]
    fn a_peer_that_never_comes_times_out_on_rank_0() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let timeout = Duration::from_millis(200);
        assert_gives_up(
            || Rendezvous::connect_with_listener(&launch(0, 3, port), Some(listener), timeout),
            0,
            "rank(s) 1, 2 never connected",
        );
    }

    #[test]
    fn a_rank_0_that_never_comes_times_out_on_the_peer() {
        // A port that was free a moment ago and that nobody listens on now.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert_gives_up(
            || Rendezvous::connect(&launch(1, 2, port), Duration::from_millis(200)),
            1,
            "could not reach rank 0 at 127.0.0.1:",
        );
    }

    #[test]
    fn garbage_on_the_port_is_an_error_not_a_panic() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let intruder = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        });
        let error =
            Rendezvous::connect_with_listener(&launch(0, 2, port), Some(listener), Duration::from_secs(5)).unwrap_err();
        intruder.join().unwrap();
        assert!(error.to_string().contains("is another program or job using this port?"), "{error}");
    }

    #[test]
    fn a_duplicate_rank_is_refused_and_told_why() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let peers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || Rendezvous::connect(&launch(1, 3, port), Duration::from_secs(5)).map(|_| ()))
            })
            .collect();
        let error =
            Rendezvous::connect_with_listener(&launch(0, 3, port), Some(listener), Duration::from_secs(5)).unwrap_err();
        assert!(error.to_string().contains("two processes say they are rank 1"), "{error}");
        let peer_errors: Vec<String> =
            peers.into_iter().filter_map(|p| p.join().unwrap().err()).map(|e| e.to_string()).collect();
        assert!(!peer_errors.is_empty());
        assert!(peer_errors.iter().all(|e| e.contains("rank 0 aborted the run")), "{peer_errors:?}");
    }
}
