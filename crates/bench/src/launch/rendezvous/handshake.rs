//! Forming the job, outside rank 0's accept loop (`accept`): where rank 0 listens (the bind
//! rule), and a peer's side of the handshake: it connects to `MASTER_ADDR:MASTER_PORT`, answers
//! rank 0's challenge with a hello that proves it holds the job's secret, and checks that the
//! welcome proves the same of rank 0 before it trusts anything rank 0 sends (NCCL's id).

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wire::{
    decode_abort, frame, hello_payload, parse_challenge, parse_welcome, read_frame, Hello, Len, ReadError, Tag,
    CHALLENGE_LEN, WELCOME_LEN,
};
use super::{is_timeout, rendezvous_error, Inner, Rendezvous};
use crate::launch::secret::{nonce, Secret};
use crate::launch::{Bind, Launch, BIND_VAR};
use crate::BenchError;

pub(super) fn configure(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

/// Where rank 0 tries to listen, in order, and a note to print when it had to widen
/// `MASTER_ADDR`. `resolved` is `MASTER_ADDR:MASTER_PORT` resolved on rank 0 (used only for a
/// host name under [`Bind::MasterAddr`]).
///
/// The rule: `COMMGATE_RENDEZVOUS_BIND` when set; else `MASTER_ADDR` itself, so a job told
/// `127.0.0.1` is not reachable from the network. One exception: a host name (not `localhost`)
/// that resolves here to loopback addresses only. Many distributions map the host's own name to
/// 127.0.1.1, which no other node can reach, while the other nodes resolve the same name to the
/// host's real address; listening on loopback would hang every multi-node job, so rank 0 listens
/// on every interface of that family and says so.
pub(super) fn listen_addrs(
    launch: &Launch,
    resolved: impl FnOnce() -> io::Result<Vec<SocketAddr>>,
) -> Result<(Vec<SocketAddr>, Option<String>), String> {
    let port = launch.master_port;
    let name = launch.master_addr.as_str();
    if let Bind::Address(ip) = launch.bind {
        return Ok((vec![SocketAddr::new(ip, port)], None));
    }
    if let Ok(ip) = name.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        return Ok((vec![SocketAddr::new(ip, port)], None));
    }
    let mut addrs = resolved().map_err(|e| {
        format!("rank 0 could not resolve MASTER_ADDR={name:?} ({e}): set MASTER_ADDR to rank 0's IP address")
    })?;
    addrs.dedup();
    let Some(first) = addrs.first().copied() else {
        return Err(format!("MASTER_ADDR={name:?} resolves to no address: set MASTER_ADDR to rank 0's IP address"));
    };
    let localhost = name.eq_ignore_ascii_case("localhost") || name.to_ascii_lowercase().ends_with(".localhost");
    if !localhost && addrs.iter().all(|a| a.ip().is_loopback()) {
        let any = |v6: bool| {
            SocketAddr::new(
                if v6 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) },
                port,
            )
        };
        let note = format!(
            "rendezvous: MASTER_ADDR={name:?} resolves to {} on rank 0, a loopback address other nodes cannot reach; \
             rank 0 listens on every interface instead (set MASTER_ADDR to this host's IP address, or \
             {BIND_VAR}, to choose one)",
            first.ip()
        );
        return Ok((vec![any(first.is_ipv6()), any(!first.is_ipv6())], Some(note)));
    }
    Ok((addrs, None))
}

/// Rank 0's listener, bound by the rule in [`listen_addrs`].
fn bind_listener(launch: &Launch) -> Result<TcpListener, BenchError> {
    let port = launch.master_port;
    let resolve = || (launch.master_addr.as_str(), port).to_socket_addrs().map(Iterator::collect);
    let (addrs, note) = listen_addrs(launch, resolve).map_err(|why| rendezvous_error(why, 0))?;
    if let Some(note) = note {
        commgate_core::diag::note(note);
    }
    let mut first_error = None;
    for addr in &addrs {
        match TcpListener::bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                return Err(rendezvous_error(
                    format!("rank 0 could not listen on {addr} ({e}): another job may hold port {port}; choose a free MASTER_PORT"),
                    0,
                ));
            }
            Err(e) => {
                first_error.get_or_insert((*addr, e));
            }
        }
    }
    let Some((addr, e)) = first_error else {
        return Err(rendezvous_error("rank 0 found no address to listen on".to_string(), 0));
    };
    let source = match launch.bind {
        Bind::Address(_) => BIND_VAR.to_string(),
        Bind::MasterAddr => format!("MASTER_ADDR={:?}", launch.master_addr),
    };
    Err(rendezvous_error(
        format!(
            "rank 0 could not listen on {addr} from {source} ({e}): it must be an address of rank 0's own host \
             (or set {BIND_VAR}=0.0.0.0 to listen on every interface)"
        ),
        0,
    ))
}

impl Rendezvous {
    /// Forms the job. Rank 0 listens on `MASTER_ADDR:MASTER_PORT` (see `listen_addrs`) and
    /// lets in `world_size − 1` peers that prove they hold `launch.secret`, dropping any other
    /// connection; the other ranks connect to `master_addr:master_port`, retrying until
    /// `timeout` has passed. `timeout` also bounds every later read and write.
    pub fn connect(launch: &Launch, timeout: Duration) -> Result<Rendezvous, BenchError> {
        if launch.rank == 0 {
            let listener = bind_listener(launch)?;
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
            (0, Some(listener)) => inner.accept_peers(&listener, &launch.secret)?,
            (0, None) => {
                return Err(rendezvous_error("rank 0 needs a listener to accept its peers".to_string(), 0));
            }
            (_, _) => inner.reach_rank0(launch)?,
        }
        Ok(Rendezvous { rank: launch.rank, world_size: launch.world_size, inner: Arc::new(Mutex::new(inner)) })
    }
}

/// How a peer's attempt at the handshake ended, when it did not end in a welcome.
enum Attempt {
    /// Rank 0 closed the connection before its challenge (busy with other connections, or a
    /// listener of an earlier run): connect again.
    Retry(String),
    Fatal(BenchError),
}

impl Inner {
    /// Ranks other than 0: connects to rank 0 and completes the handshake, connecting again
    /// while rank 0 closes before its challenge, until the deadline.
    fn reach_rank0(&mut self, launch: &Launch) -> Result<(), BenchError> {
        let rank = self.rank;
        let master = self.master.clone();
        let deadline = Instant::now() + self.timeout;
        let mut last_error = String::from("no attempt finished");
        loop {
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
                    for addr in addrs {
                        match TcpStream::connect_timeout(&addr, attempt.min(Duration::from_secs(2))) {
                            Ok(stream) => match self.handshake(stream, &launch.secret, deadline) {
                                Ok(stream) => {
                                    if let Some(link) = self.links.first_mut() {
                                        *link = Some(stream);
                                    }
                                    return Ok(());
                                }
                                Err(Attempt::Retry(why)) => last_error = format!("{addr}: {why}"),
                                Err(Attempt::Fatal(error)) => return Err(error),
                            },
                            Err(e) => last_error = format!("{addr}: {e}"),
                        }
                    }
                }
                Err(e) => last_error = format!("cannot resolve {:?}: {e}", launch.master_addr),
            }
            std::thread::sleep(Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// A peer's side of the handshake on a fresh connection: challenge, hello, welcome.
    fn handshake(&self, mut stream: TcpStream, secret: &Secret, deadline: Instant) -> Result<TcpStream, Attempt> {
        let (rank, world_size, master) = (self.rank, self.world_size, self.master.as_str());
        let fatal = |what: String| {
            Attempt::Fatal(rendezvous_error(
                format!(
                    "rank {rank} reached {master} but {what}: is rank 0 a commgate of this job, of the same version?"
                ),
                rank,
            ))
        };
        let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        configure(&stream, remaining).map_err(|e| fatal(format!("could not set up the socket ({e})")))?;
        let mut payload = Vec::new();
        let challenge = match read_frame(&mut stream, &mut payload, Tag::Challenge, Len::AtMost(CHALLENGE_LEN as u64)) {
            Ok(Tag::Challenge) => parse_challenge(&payload).map_err(|what| fatal(format!("got {what}")))?,
            Ok(_) => return Err(Attempt::Fatal(refused(&payload, rank, secret))),
            Err(ReadError::Io(e)) if is_timeout(&e) => {
                return Err(fatal(format!("no challenge came within {remaining:?}")));
            }
            Err(ReadError::Io(e)) => return Err(Attempt::Retry(format!("closed before its challenge ({e})"))),
            Err(ReadError::Unexpected(tag)) => return Err(fatal(format!("got a {} frame first", tag.call()))),
            Err(ReadError::Garbage(what)) => return Err(fatal(format!("got {what}"))),
        };
        let my_nonce = nonce().map_err(|why| Attempt::Fatal(rendezvous_error(format!("rank {rank}: {why}"), rank)))?;
        let hello = Hello {
            rank,
            world_size,
            nonce: my_nonce,
            proof: secret.hello_proof(&challenge, &my_nonce, rank, world_size),
        };
        stream
            .write_all(&frame(Tag::Hello, &hello_payload(&hello)))
            .map_err(|e| fatal(format!("could not send its hello ({e})")))?;
        match read_frame(&mut stream, &mut payload, Tag::Welcome, Len::AtMost(WELCOME_LEN as u64)) {
            Ok(Tag::Welcome) => {
                let (to, world, proof) = parse_welcome(&payload).map_err(|what| fatal(format!("got {what}")))?;
                if (to, world) != (rank, world_size) {
                    return Err(fatal(format!("the welcome was for rank {to} of {world}")));
                }
                if !secret.verify_welcome(&challenge, &my_nonce, rank, world_size, &proof) {
                    return Err(Attempt::Fatal(rendezvous_error(
                        format!(
                            "rank {rank} reached {master} but its welcome does not prove this job's rendezvous \
                             secret ({}): is another job's rank 0 on this port, or do the ranks have different \
                             secrets? Set the same {} on every rank",
                            secret.source(),
                            crate::launch::SECRET_VAR
                        ),
                        rank,
                    )));
                }
            }
            Ok(_) => return Err(Attempt::Fatal(refused(&payload, rank, secret))),
            Err(ReadError::Io(e)) if is_timeout(&e) => {
                return Err(fatal(format!("no welcome came within {remaining:?}")))
            }
            Err(ReadError::Io(e)) => return Err(fatal(format!("the connection failed before the welcome ({e})"))),
            Err(ReadError::Unexpected(tag)) => {
                return Err(fatal(format!("got a {} frame instead of a welcome", tag.call())))
            }
            Err(ReadError::Garbage(what)) => return Err(fatal(format!("got {what}"))),
        }
        configure(&stream, self.timeout).map_err(|e| fatal(format!("could not set up the socket ({e})")))?;
        Ok(stream)
    }
}

/// The error for rank 0's refusal of this peer (an abort during the handshake), with where this
/// rank's secret came from: the most likely fix when the refusal was about the proof.
fn refused(payload: &[u8], rank: u32, secret: &Secret) -> BenchError {
    match decode_abort(payload) {
        BenchError::Failed { kind, message, rank: blamed } => BenchError::failed(
            &kind,
            format!("rank {rank} was refused: {message} (this rank's secret: {})", secret.source()),
            blamed.or(Some(rank)),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Instant;

    use super::super::local_launch as launch;
    use super::*;

    #[test]
    fn connect_listens_on_master_addr_only() {
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

    fn addrs(launch: &Launch, resolved: &[&str]) -> Result<(Vec<String>, Option<String>), String> {
        let resolved: Vec<SocketAddr> = resolved.iter().map(|a| a.parse().unwrap()).collect();
        listen_addrs(launch, || Ok(resolved)).map(|(a, note)| (a.iter().map(|a| a.to_string()).collect(), note))
    }

    #[test]
    fn rank_0_listens_where_master_addr_says_unless_told_otherwise() {
        let mut l = Launch::new(0, 2, 0, "127.0.0.1", 4000);
        assert_eq!(addrs(&l, &[]), Ok((vec!["127.0.0.1:4000".to_string()], None)));
        l.master_addr = "[::1]".to_string();
        assert_eq!(addrs(&l, &[]), Ok((vec!["[::1]:4000".to_string()], None)));
        l.master_addr = "node7".to_string();
        assert_eq!(
            addrs(&l, &["10.1.2.3:4000", "[fd00::3]:4000"]),
            Ok((vec!["10.1.2.3:4000".to_string(), "[fd00::3]:4000".to_string()], None))
        );
        l.master_addr = "localhost".to_string();
        assert_eq!(addrs(&l, &["127.0.0.1:4000"]), Ok((vec!["127.0.0.1:4000".to_string()], None)));
        // The host's own name mapped to a loopback alias: every interface, and a note saying why.
        l.master_addr = "node7".to_string();
        let (widened, note) = addrs(&l, &["127.0.1.1:4000"]).unwrap();
        assert_eq!(widened, ["0.0.0.0:4000", "[::]:4000"]);
        let note = note.unwrap();
        assert!(note.contains("MASTER_ADDR=\"node7\" resolves to 127.0.1.1") && note.contains(BIND_VAR), "{note}");
        // The opt-in wins over all of it.
        l.bind = Bind::Address("0.0.0.0".parse().unwrap());
        assert_eq!(addrs(&l, &["127.0.1.1:4000"]), Ok((vec!["0.0.0.0:4000".to_string()], None)));
        l.bind = Bind::MasterAddr;
        let unresolved = listen_addrs(&l, || Err(io::Error::other("no such host"))).unwrap_err();
        assert!(unresolved.contains("could not resolve MASTER_ADDR=\"node7\""), "{unresolved}");
    }

    #[test]
    fn a_master_addr_of_another_host_is_named() {
        // TEST-NET-1 is never an address of this host.
        let error = Rendezvous::connect(&Launch::new(0, 2, 0, "192.0.2.1", 4000), Duration::from_secs(1)).unwrap_err();
        assert!(error.to_string().contains("must be an address of rank 0's own host"), "{error}");
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
            "rank(s) 1, 2 never joined",
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
    fn a_stranger_on_the_port_is_not_taken_for_rank_0() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stranger = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            std::thread::sleep(Duration::from_millis(500));
        });
        let error = Rendezvous::connect(&launch(1, 2, port), Duration::from_secs(5)).unwrap_err();
        stranger.join().unwrap();
        assert!(error.to_string().contains("is rank 0 a commgate of this job"), "{error}");
    }

    #[test]
    fn ranks_with_different_secrets_are_refused_and_told_where_their_secret_came_from() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer = std::thread::spawn(move || {
            let mut other = launch(1, 2, port);
            other.secret = Secret::from_env("", 2, "127.0.0.1", port, |k| {
                (k == "COMMGATE_RENDEZVOUS_SECRET").then(|| "x".to_string())
            })
            .expect("a set secret");
            Rendezvous::connect(&other, Duration::from_secs(5)).map(|_| ())
        });
        let rank0 = Rendezvous::connect_with_listener(&launch(0, 2, port), Some(listener), Duration::from_millis(1500));
        let error = peer.join().unwrap().unwrap_err().to_string();
        assert!(error.contains("does not prove this job's rendezvous secret"), "{error}");
        assert!(error.contains("(this rank's secret: COMMGATE_RENDEZVOUS_SECRET)"), "{error}");
        let error = rank0.unwrap_err().to_string();
        assert!(error.contains("rank(s) 1 never joined (1 other connection(s) were dropped"), "{error}");
    }
}
