//! Multi-process launch: the launcher's environment ([`from_env`]) and a small TCP rendezvous
//! ([`Rendezvous`]) that bootstraps a job of one process per rank. It shares NCCL's unique id
//! (broadcast), collects per-rank timings on rank 0 (gather), lines the ranks up before a timed
//! step (barrier), and carries the CPU backend's all-reduce between processes.
//!
//! Wire format: every message is a frame, a `u64` little-endian body length and then the body,
//! whose first byte says which call sent it (so ranks that disagree on the sequence of calls get
//! an error, not a silent mix-up). The topology is a star through rank 0: rank 0 holds one socket
//! per peer, every other rank one socket to rank 0. Each socket has TCP_NODELAY and read and write
//! timeouts equal to the rendezvous timeout, so a silent peer ends in an error, never a hang.
//!
//! Errors are [`BenchError::Failed`] with these kinds: `rendezvous` (the job could not form, or a
//! peer sent something that is not this protocol), `rank_died` (a connected peer closed its
//! socket: it exited or crashed; `rank` names it), `timeout` (a connected peer stayed silent past
//! the timeout; `rank` names it). When rank 0 gives up it tells every peer why before closing, so
//! each rank's error names the first cause rather than a disconnected rank 0.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BenchError;

/// The port torchrun uses when `--master-port` is not given; also ours when a launcher sets
/// `MASTER_ADDR` but no `MASTER_PORT` (Slurm and Open MPI have no port variable of their own).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// This process's place in a multi-process job, as the launcher described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Global rank, `0..world_size`.
    pub rank: u32,
    /// Ranks in the job, all nodes together; at least 2 (a world of 1 is no launch).
    pub world_size: u32,
    /// Rank on this node: which GPU this process drives.
    pub local_rank: u32,
    /// Where rank 0 listens (host name or IP address).
    pub master_addr: String,
    pub master_port: u16,
}

impl Launch {
    /// `host:port` (IPv6 literals bracketed), for messages.
    pub fn master(&self) -> String {
        if self.master_addr.contains(':') && !self.master_addr.starts_with('[') {
            format!("[{}]:{}", self.master_addr, self.master_port)
        } else {
            format!("{}:{}", self.master_addr, self.master_port)
        }
    }
}

/// One launcher's names for rank, world size and local rank.
struct Family {
    launcher: &'static str,
    rank: &'static str,
    world_size: &'static str,
    local_rank: &'static str,
}

/// In order of precedence. torchrun first: srun wrappers and torchrun-under-Slurm set both its
/// variables and Slurm's, and torchrun's are the per-process truth. Open MPI before Slurm: under
/// a Slurm allocation `mpirun` starts its daemons with srun, so its ranks inherit the daemon's
/// `SLURM_PROCID` (a node index), while the `OMPI_COMM_WORLD_*` variables are the rank's own.
const FAMILIES: [Family; 3] = [
    Family { launcher: "torchrun", rank: "RANK", world_size: "WORLD_SIZE", local_rank: "LOCAL_RANK" },
    Family {
        launcher: "mpirun",
        rank: "OMPI_COMM_WORLD_RANK",
        world_size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    },
    Family { launcher: "srun", rank: "SLURM_PROCID", world_size: "SLURM_NTASKS", local_rank: "SLURM_LOCALID" },
];

/// Reads the launcher's environment through `var` (pass `|k| std::env::var(k).ok()`; tests pass a
/// map). Recognises torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Open MPI
/// (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`) and Slurm
/// (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`), in that order of precedence (the comment
/// on `FAMILIES` says why); the master is always `MASTER_ADDR` / `MASTER_PORT`, which torchrun and srun
/// wrappers set and mpirun users export. `MASTER_PORT` defaults to 29500, torchrun's own default;
/// `MASTER_ADDR` has no default when the world has more than one rank, since guessing
/// `localhost` would hang every multi-node job.
///
/// Empty variables count as unset. `Ok(None)`: no launcher variables, or a world of one rank.
/// `Err`: one line naming the variable and what is wrong with it.
///
/// Slurm caveat: a batch script run with `--ntasks=N` but not through `srun` sees
/// `SLURM_PROCID=0` and `SLURM_NTASKS=N` too; it then stops at the missing `MASTER_ADDR`, or waits
/// for peers that never come until the rendezvous timeout. Start one process per rank with `srun`.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, String> {
    let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let Some(family) = FAMILIES.iter().find(|f| get(f.rank).is_some() || get(f.world_size).is_some()) else {
        return Ok(None);
    };
    let number = |name: &str| -> Result<u32, String> {
        let value = get(name).ok_or_else(|| {
            format!(
                "{name} is not set, but {} variables are: the launcher's environment is incomplete",
                family.launcher
            )
        })?;
        value.parse::<u32>().map_err(|_| format!("{name}={value:?} is not a non-negative integer"))
    };
    let world_size = number(family.world_size)?;
    let rank = number(family.rank)?;
    if world_size == 0 {
        return Err(format!("{}=0: a job needs at least one rank", family.world_size));
    }
    if rank >= world_size {
        return Err(format!(
            "{}={rank} is not below {}={world_size}: ranks run from 0 to {}",
            family.rank,
            family.world_size,
            world_size - 1
        ));
    }
    if world_size == 1 {
        return Ok(None);
    }
    // Some srun wrappers set RANK and WORLD_SIZE but leave the local rank to Slurm or Open MPI.
    let local_name = [family.local_rank, "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"]
        .into_iter()
        .find(|name| get(name).is_some())
        .unwrap_or(family.local_rank);
    let local_rank = number(local_name)?;
    if local_rank >= world_size {
        return Err(format!(
            "{local_name}={local_rank} is not below {}={world_size}: a node cannot hold more ranks than the job",
            family.world_size
        ));
    }
    let master_addr = get("MASTER_ADDR").ok_or_else(|| {
        format!(
            "MASTER_ADDR is not set but {}={world_size}: export rank 0's host name or IP address as MASTER_ADDR",
            family.world_size
        )
    })?;
    let master_port = match get("MASTER_PORT") {
        None => DEFAULT_MASTER_PORT,
        Some(value) => match value.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("MASTER_PORT={value:?} is not a TCP port (1-65535)")),
        },
    };
    Ok(Some(Launch { rank, world_size, local_rank, master_addr, master_port }))
}

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

const MAGIC: &[u8; 4] = b"CGRV";
const VERSION: u32 = 1;

/// The first body byte: which call sent the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Tag {
    Hello = 1,
    Welcome = 2,
    Broadcast = 3,
    Gather = 4,
    Barrier = 5,
    Reduce = 6,
    Reduced = 7,
    Abort = 8,
}

impl Tag {
    fn from_byte(byte: u8) -> Option<Tag> {
        [Tag::Hello, Tag::Welcome, Tag::Broadcast, Tag::Gather, Tag::Barrier, Tag::Reduce, Tag::Reduced, Tag::Abort]
            .into_iter()
            .find(|t| *t as u8 == byte)
    }

    fn call(self) -> &'static str {
        match self {
            Tag::Hello | Tag::Welcome => "rendezvous",
            Tag::Broadcast => "broadcast",
            Tag::Gather => "gather",
            Tag::Barrier => "barrier",
            Tag::Reduce | Tag::Reduced => "all_reduce",
            Tag::Abort => "abort",
        }
    }
}

/// Starts `buf` as a frame with this tag; [`finish_frame`] fills in the length.
fn start_frame(buf: &mut Vec<u8>, tag: Tag) {
    buf.clear();
    buf.extend_from_slice(&[0; 8]);
    buf.push(tag as u8);
}

fn finish_frame(buf: &mut [u8]) {
    let body = (buf.len() - 8) as u64;
    buf[..8].copy_from_slice(&body.to_le_bytes());
}

fn frame(tag: Tag, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(9 + payload.len());
    start_frame(&mut buf, tag);
    buf.extend_from_slice(payload);
    finish_frame(&mut buf);
    buf
}

/// Why reading a frame failed, before it is given a rank and a call.
enum ReadError {
    Io(io::Error),
    /// Not this protocol: the text says what arrived.
    Garbage(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads one frame into `payload` (cleared first) and returns its tag. The payload grows as bytes
/// arrive, so a garbage length costs an error, not a giant allocation. `expect`: a frame of this
/// tag must have this payload length, checked before the payload is read.
fn read_frame(stream: &mut TcpStream, payload: &mut Vec<u8>, expect: Option<(Tag, u64)>) -> Result<Tag, ReadError> {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header)?;
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[..8]);
    let body = u64::from_le_bytes(len_bytes);
    let tag = Tag::from_byte(header[8])
        .ok_or_else(|| ReadError::Garbage(format!("a frame with unknown type byte {}", header[8])))?;
    if body == 0 {
        return Err(ReadError::Garbage("a frame of length 0".to_string()));
    }
    let len = body - 1;
    if let Some((expected_tag, expected)) = expect {
        if tag == expected_tag && len != expected {
            return Err(ReadError::Garbage(format!(
                "{len} bytes for {} where {expected} were expected: do all ranks run the same plan?",
                tag.call()
            )));
        }
    }
    payload.clear();
    let got = stream.take(len).read_to_end(payload)?;
    if got as u64 != len {
        return Err(ReadError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "frame cut short")));
    }
    Ok(tag)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// An abort frame's payload: `rank` (u32::MAX for none), then `kind`, a newline, the message.
fn encode_abort(error: &BenchError) -> Vec<u8> {
    let (kind, message, rank) = match error {
        BenchError::Failed { kind, message, rank } => (kind.as_str(), message.as_str(), *rank),
        BenchError::Unavailable(message) => ("rendezvous", message.as_str(), None),
    };
    let mut payload = rank.unwrap_or(u32::MAX).to_le_bytes().to_vec();
    payload.extend_from_slice(kind.as_bytes());
    payload.push(b'\n');
    payload.extend_from_slice(message.as_bytes());
    payload
}

fn decode_abort(payload: &[u8]) -> BenchError {
    if payload.len() < 4 {
        return BenchError::failed("rendezvous", "rank 0 aborted the run without saying why", Some(0));
    }
    let rank = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let text = String::from_utf8_lossy(&payload[4..]);
    let (kind, message) = text.split_once('\n').unwrap_or(("rendezvous", &text));
    BenchError::failed(
        kind,
        format!("rank 0 aborted the run: {message}"),
        if rank == u32::MAX { None } else { Some(rank) },
    )
}

fn configure(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

fn hello_payload(rank: u32, world_size: u32) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    for word in [VERSION, rank, world_size] {
        payload.extend_from_slice(&word.to_le_bytes());
    }
    payload
}

/// `(rank, world_size)` from a hello or welcome payload, or what is wrong with it.
fn parse_hello(payload: &[u8]) -> Result<(u32, u32), String> {
    if payload.len() != 16 || &payload[..4] != MAGIC {
        return Err("something that is not a commgate rendezvous hello".to_string());
    }
    let word = |i: usize| u32::from_le_bytes([payload[i], payload[i + 1], payload[i + 2], payload[i + 3]]);
    if word(4) != VERSION {
        return Err(format!("rendezvous protocol version {} (this commgate speaks {VERSION})", word(4)));
    }
    Ok((word(8), word(12)))
}

fn rendezvous_error(message: String, rank: u32) -> BenchError {
    BenchError::failed("rendezvous", message, Some(rank))
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

    /// Reads `peer`'s next frame into `self.recv`, which must carry `tag` (and `expect_len` bytes
    /// when given). An abort frame from rank 0 becomes the error it carries.
    fn recv_from(&mut self, peer: u32, tag: Tag, expect_len: Option<u64>) -> Result<(), BenchError> {
        let mut payload = std::mem::take(&mut self.recv);
        let result = read_frame(self.stream(peer)?, &mut payload, expect_len.map(|len| (tag, len)));
        let error = match result {
            Ok(got) if got == tag => None,
            Ok(Tag::Abort) if peer == 0 => Some(decode_abort(&payload)),
            Ok(got) => Some(BenchError::failed(
                "rendezvous",
                format!(
                    "rank {peer} sent a {} frame while rank {} was in {}: the ranks disagree on the sequence of \
                     calls (do they run the same commgate version and plan?)",
                    got.call(),
                    self.rank,
                    tag.call()
                ),
                Some(peer),
            )),
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
            (0, Some(bytes)) => {
                let message = frame(Tag::Broadcast, bytes);
                for peer in 1..self.world_size {
                    self.send_to(peer, "broadcast", &message)?;
                }
                Ok(bytes.to_vec())
            }
            (0, None) => Err(rendezvous_error("rank 0 called broadcast without bytes to send".to_string(), 0)),
            (_, _) => {
                self.recv_from(0, Tag::Broadcast, None)?;
                Ok(self.recv.clone())
            }
        }
    }

    fn gather(&mut self, bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, BenchError> {
        if self.rank != 0 {
            self.send_to(0, "gather", &frame(Tag::Gather, bytes))?;
            return Ok(None);
        }
        let mut all = Vec::with_capacity(self.world_size as usize);
        all.push(bytes.to_vec());
        for peer in 1..self.world_size {
            self.recv_from(peer, Tag::Gather, None)?;
            all.push(self.recv.clone());
        }
        Ok(Some(all))
    }

    fn barrier(&mut self) -> Result<(), BenchError> {
        let token = frame(Tag::Barrier, &[]);
        if self.rank != 0 {
            self.send_to(0, "barrier", &token)?;
            return self.recv_from(0, Tag::Barrier, Some(0));
        }
        for peer in 1..self.world_size {
            self.recv_from(peer, Tag::Barrier, Some(0))?;
        }
        for peer in 1..self.world_size {
            self.send_to(peer, "barrier", &token)?;
        }
        Ok(())
    }

    fn all_reduce_sum_f32(&mut self, data: &mut [f32]) -> Result<(), BenchError> {
        let bytes = data.len() as u64 * 4;
        if self.rank != 0 {
            self.encode(Tag::Reduce, data);
            let message = std::mem::take(&mut self.send);
            let sent = self.send_to(0, "all_reduce", &message);
            self.send = message;
            sent?;
            self.recv_from(0, Tag::Reduced, Some(bytes))?;
            for (x, b) in data.iter_mut().zip(self.recv.chunks_exact(4)) {
                *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            return Ok(());
        }
        for peer in 1..self.world_size {
            self.recv_from(peer, Tag::Reduce, Some(bytes))?;
            for (x, b) in data.iter_mut().zip(self.recv.chunks_exact(4)) {
                *x += f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        self.encode(Tag::Reduced, data);
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

    /// Fills `self.send` with a frame of `data` as little-endian f32, reusing its capacity.
    fn encode(&mut self, tag: Tag, data: &[f32]) {
        start_frame(&mut self.send, tag);
        self.send.reserve(data.len() * 4);
        for x in data {
            self.send.extend_from_slice(&x.to_le_bytes());
        }
        finish_frame(&mut self.send);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |key| map.get(key).cloned()
    }

    fn launch(rank: u32, world_size: u32, port: u16) -> Launch {
        Launch { rank, world_size, local_rank: rank, master_addr: "127.0.0.1".to_string(), master_port: port }
    }

    #[test]
    fn from_env_reads_torchrun() {
        let vars = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "1234"),
            // torchrun under Slurm: its own variables win.
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
        ]);
        let got = from_env(vars).unwrap();
        assert_eq!(
            got,
            Some(Launch { rank: 3, world_size: 4, local_rank: 1, master_addr: "node0".into(), master_port: 1234 })
        );
    }

    #[test]
    fn from_env_reads_slurm_with_the_default_port() {
        let vars =
            env(&[("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8"), ("SLURM_LOCALID", "1"), ("MASTER_ADDR", "10.0.0.1")]);
        let got = from_env(vars).unwrap().unwrap();
        assert_eq!((got.rank, got.world_size, got.local_rank), (5, 8, 1));
        assert_eq!(got.master_port, DEFAULT_MASTER_PORT);
        assert_eq!(got.master(), "10.0.0.1:29500");
    }

    #[test]
    fn from_env_prefers_open_mpi_over_the_slurm_daemon_variables() {
        let vars = env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "40000"),
        ]);
        let got = from_env(vars).unwrap().unwrap();
        assert_eq!((got.rank, got.world_size, got.local_rank), (2, 4, 0));
        assert_eq!(got.master(), "[::1]:40000");
    }

    #[test]
    fn from_env_is_none_without_a_launcher_or_with_one_rank() {
        assert_eq!(from_env(env(&[])), Ok(None));
        assert_eq!(from_env(env(&[("PATH", "/bin"), ("RANK", "")])), Ok(None));
        assert_eq!(from_env(env(&[("RANK", "0"), ("WORLD_SIZE", "1")])), Ok(None));
        assert_eq!(from_env(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")])), Ok(None));
    }

    #[test]
    fn from_env_names_the_variable_that_is_wrong() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("RANK", "4"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "a")], "RANK=4"),
            (&[("RANK", "one"), ("WORLD_SIZE", "4")], "RANK=\"one\""),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE=0"),
            (&[("RANK", "1")], "WORLD_SIZE is not set"),
            (&[("WORLD_SIZE", "2")], "RANK is not set"),
            (&[("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")], "MASTER_ADDR is not set"),
            (&[("RANK", "1"), ("WORLD_SIZE", "2")], "LOCAL_RANK is not set"),
            (&[("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "-1"), ("MASTER_ADDR", "a")], "LOCAL_RANK=\"-1\""),
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_RANK", "0"),
                    ("MASTER_ADDR", "a"),
                    ("MASTER_PORT", "70000"),
                ],
                "MASTER_PORT=\"70000\"",
            ),
            (&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "2")], "SLURM_PROCID=2"),
            (&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "x")], "OMPI_COMM_WORLD_SIZE"),
        ];
        for (pairs, needle) in cases {
            let error = from_env(env(pairs)).expect_err(needle);
            assert!(error.contains(needle), "{error:?} should name {needle:?}");
            assert!(!error.contains('\n'), "one line: {error:?}");
        }
    }

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
                    let rdzv = Rendezvous::connect_with_listener(&launch(rank, world_size, port), listener, timeout)?;
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

    #[test]
    fn a_peer_that_never_comes_times_out_on_rank_0() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let start = Instant::now();
        let error = Rendezvous::connect_with_listener(&launch(0, 3, port), Some(listener), Duration::from_millis(200))
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        let BenchError::Failed { kind, message, rank } = error else { panic!("{error:?}") };
        assert_eq!((kind.as_str(), rank), ("rendezvous", Some(0)));
        assert!(message.contains("rank(s) 1, 2 never connected"), "{message}");
    }

    #[test]
    fn a_rank_0_that_never_comes_times_out_on_the_peer() {
        // A port that was free a moment ago and that nobody listens on now.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let start = Instant::now();
        let error = Rendezvous::connect(&launch(1, 2, port), Duration::from_millis(200)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        let BenchError::Failed { kind, message, rank } = error else { panic!("{error:?}") };
        assert_eq!((kind.as_str(), rank), ("rendezvous", Some(1)));
        assert!(message.contains("could not reach rank 0 at 127.0.0.1:"), "{message}");
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
