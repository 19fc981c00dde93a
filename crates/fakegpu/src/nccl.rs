//! NCCL: communicators made together in one process (`ncclCommInitAll`) or across processes
//! through the unique id (`ncclCommInitRank`: rank 0's process listens on loopback, the id carries
//! the port and a token), and the all-reduce (sum), computed for real and checked across ranks:
//! every rank must pass the same count, type and operation. A collective lasts at least what
//! the configured bus bandwidth gives its payload; the faults of `COMMGATE_FAKEGPU_FAULT` break a
//! transport, hang or slow a rank.

use std::cell::RefCell;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cudarc::nccl::sys::{ncclDataType_t, ncclRedOp_t, ncclResult_t};

use crate::blas::Element;
use crate::config::get as config;
use crate::config::Fault;
use crate::memory::InUse;
use crate::stream::{Job, Stream};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How deep this thread's groups are nested, and the collectives they hold back until the
/// outermost ends.
pub type Group = (u32, Vec<(Arc<Stream>, Job)>);

thread_local! {
    pub static GROUP: RefCell<Group> = const { RefCell::new((0, Vec::new())) };
}

/// How deep this thread's NCCL groups are nested.
pub fn group_depth() -> u32 {
    GROUP.with(|g| g.borrow().0)
}

/// How long joining a communicator across processes may take before it fails.
const JOIN_LIMIT: Duration = Duration::from_secs(60);
/// How often a blocked collective looks whether its communicator was aborted.
const ABORT_POLL: Duration = Duration::from_millis(20);
const ID_MAGIC: &[u8; 8] = b"CGFAKEID";

/// One rank's communicator.
pub struct Comm {
    pub id: u64,
    pub rank: u32,
    pub nranks: u32,
    pub device: u32,
    pub clique: Arc<Clique>,
    /// The asynchronous error (`ncclSuccess` while healthy).
    error: Mutex<ncclResult_t>,
    pub aborted: AtomicBool,
    /// Collectives queued and not finished.
    pub in_flight: AtomicU64,
    /// Collectives finished (for `async-error-after`).
    finished: AtomicU64,
    /// Collectives queued (for `hang-rank=R@N`).
    pub launched: AtomicU64,
    /// Where rank 0 writes NCCL's tuning lines, as `NCCL_DEBUG_SUBSYS=TUNING` asks.
    tuning: Option<TuningLog>,
}

/// The ranks that reduce together.
pub struct Clique {
    pub nranks: u32,
    /// Communicators of this clique in this process.
    pub local: u32,
    link: Link,
}

enum Link {
    /// Every rank in this process: they meet in `rounds`.
    Local { rounds: Mutex<std::collections::HashMap<u64, Round>>, moved: Condvar },
    /// Rank 0 holds a socket to every other rank; every other rank one to rank 0.
    Star { peers: Vec<Mutex<TcpStream>> },
}

/// One collective of a local clique: each rank's part, then the sum.
struct Round {
    parts: Vec<Option<Part>>,
    arrived: u32,
    left: u32,
    done_at: Option<Instant>,
}

/// One rank's arguments to one all-reduce, checked across ranks.
pub struct Part {
    pub send: (InUse, u64),
    pub recv: (InUse, u64),
    pub count: usize,
    pub element: Element,
    pub dtype: ncclDataType_t,
    pub op: ncclRedOp_t,
}

impl Part {
    fn bytes(&self) -> usize {
        self.count * self.element.size()
    }
}

impl Comm {
    fn new(id: u64, rank: u32, device: u32, clique: Arc<Clique>) -> Comm {
        Comm {
            id,
            rank,
            nranks: clique.nranks,
            device,
            clique,
            error: Mutex::new(ncclResult_t::ncclSuccess),
            aborted: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            launched: AtomicU64::new(0),
            tuning: (rank == 0).then(TuningLog::from_env).flatten(),
        }
    }

    pub fn async_error(&self) -> ncclResult_t {
        *lock(&self.error)
    }

    fn fail(&self, error: ncclResult_t) {
        let mut state = lock(&self.error);
        if *state == ncclResult_t::ncclSuccess {
            *state = error;
        }
    }

    /// Stops everything in flight: blocked collectives return (their data is not reduced).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        if let Link::Local { moved, .. } = &self.clique.link {
            moved.notify_all();
        }
        if let Link::Star { peers } = &self.clique.link {
            for peer in peers {
                let _ = lock(peer).shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Blocks until aborted: a collective whose transport broke or whose rank hangs.
    fn until_aborted(&self) {
        while !self.aborted.load(Ordering::SeqCst) {
            std::thread::sleep(ABORT_POLL);
        }
    }

    /// The job that runs this rank's part of collective number `seq` on its stream.
    pub fn all_reduce(self: &Arc<Self>, part: Part) -> crate::stream::Job {
        let comm = self.clone();
        let seq = self.launched.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Some(log) = &self.tuning {
            log.line(self.device, part.bytes());
        }
        Box::new(move || {
            comm.run(seq, part);
            comm.in_flight.fetch_sub(1, Ordering::SeqCst);
            comm.finished.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    fn run(&self, seq: u64, part: Part) {
        let faults = &config().faults;
        let broken =
            faults.iter().any(|f| matches!(f, Fault::AsyncErrorAfter(n) if self.finished.load(Ordering::SeqCst) >= *n));
        if broken {
            self.fail(ncclResult_t::ncclRemoteError);
            return self.until_aborted();
        }
        if faults.iter().any(|f| matches!(f, Fault::HangRank { rank, after } if *rank == self.rank && seq >= *after)) {
            return self.until_aborted();
        }
        let transfer = transfer_time(part.bytes(), self.nranks);
        if let Some(factor) = config().fault(|f| match f {
            Fault::SlowRank { rank, factor } if *rank == self.rank => Some(*factor),
            _ => None,
        }) {
            std::thread::sleep(transfer.mul_f64(factor - 1.0).min(Duration::from_secs(60)));
        }
        let done_at = match &self.clique.link {
            Link::Local { rounds, moved } => self.meet_locally(seq, part, rounds, moved),
            Link::Star { peers } => self.meet_over_sockets(seq, &part, peers),
        };
        if let Some(done_at) = done_at {
            crate::stream::last_at_least(done_at, transfer);
        }
    }

    /// Deposits this rank's part; the last to arrive checks every part against the others and
    /// writes the sum to every receive buffer. `None` when aborted first.
    fn meet_locally(
        &self,
        seq: u64,
        part: Part,
        rounds: &Mutex<std::collections::HashMap<u64, Round>>,
        moved: &Condvar,
    ) -> Option<Instant> {
        let n = self.nranks as usize;
        let mut all = lock(rounds);
        let round = all.entry(seq).or_insert_with(|| Round {
            parts: (0..n).map(|_| None).collect(),
            arrived: 0,
            left: 0,
            done_at: None,
        });
        // The part (and the buffers it holds in use) stays in the round until this rank leaves it.
        round.parts[self.rank as usize] = Some(part);
        round.arrived += 1;
        if round.arrived as usize == n {
            let parts: Vec<&Part> = round.parts.iter().flatten().collect();
            check_parts(&parts, "ncclAllReduce");
            reduce(&parts);
            round.done_at = Some(Instant::now());
            moved.notify_all();
        }
        let done_at = loop {
            let round = all.get(&seq)?;
            if let Some(at) = round.done_at {
                break Some(at);
            }
            if self.aborted.load(Ordering::SeqCst) {
                break None;
            }
            all = moved.wait_timeout(all, ABORT_POLL).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        };
        if let Some(round) = all.get_mut(&seq) {
            round.left += 1;
            round.parts[self.rank as usize] = None;
            if round.left as usize == n {
                all.remove(&seq);
            }
        }
        done_at
    }

    /// Rank 0 reads every other rank's part, checks it, sums and sends the sum back; the others
    /// send their part and read the sum. A broken socket is the asynchronous `ncclRemoteError`.
    fn meet_over_sockets(&self, seq: u64, part: &Part, peers: &[Mutex<TcpStream>]) -> Option<Instant> {
        let outcome =
            if self.rank == 0 { self.gather_and_reply(seq, part, peers) } else { self.send_and_wait(seq, part, peers) };
        match outcome {
            Ok(()) => Some(Instant::now()),
            Err(_) if self.aborted.load(Ordering::SeqCst) => None,
            Err(_) => {
                self.fail(ncclResult_t::ncclRemoteError);
                self.until_aborted();
                None
            }
        }
    }

    fn gather_and_reply(&self, seq: u64, part: &Part, peers: &[Mutex<TcpStream>]) -> std::io::Result<()> {
        let bytes = part.bytes();
        let mut sum = vec![0f32; part.count];
        // SAFETY: the send block holds `bytes` bytes at its address (checked when queued).
        unsafe { accumulate(&mut sum, part.send.0.block().ptr(part.send.1), part.element) };
        let mut incoming = vec![0u8; bytes];
        for (i, peer) in peers.iter().enumerate() {
            let mut peer = lock(peer);
            let header = read_header(&mut peer, &self.aborted)?;
            let theirs = Header::of(seq, part);
            if header != theirs {
                crate::contract::report(
                    "ncclAllReduce",
                    &format!(
                        "rank {} passed {} (collective {}), rank 0 {}: every rank must pass the same count, type and \
                         operation",
                        i + 1,
                        header.describe(),
                        header.seq,
                        theirs.describe()
                    ),
                );
            }
            read_abortable(&mut peer, &mut incoming, &self.aborted)?;
            // SAFETY: `incoming` holds `count` elements.
            unsafe { accumulate(&mut sum, incoming.as_ptr(), part.element) };
        }
        let mut out = vec![0u8; bytes];
        // SAFETY: `out` holds `count` elements.
        unsafe { store(&sum, out.as_mut_ptr(), part.element) };
        for peer in peers {
            lock(peer).write_all(&out)?;
        }
        // SAFETY: the receive block holds `bytes` bytes at its address (checked when queued).
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), part.recv.0.block().ptr(part.recv.1), bytes) };
        Ok(())
    }

    fn send_and_wait(&self, seq: u64, part: &Part, peers: &[Mutex<TcpStream>]) -> std::io::Result<()> {
        let bytes = part.bytes();
        let Some(root) = peers.first() else { return Err(ErrorKind::NotConnected.into()) };
        let mut root = lock(root);
        root.write_all(&Header::of(seq, part).encode())?;
        // SAFETY: the send block holds `bytes` bytes at its address (checked when queued).
        let send = unsafe { std::slice::from_raw_parts(part.send.0.block().ptr(part.send.1), bytes) };
        root.write_all(send)?;
        let mut sum = vec![0u8; bytes];
        read_abortable(&mut root, &mut sum, &self.aborted)?;
        // SAFETY: as above, for the receive block.
        unsafe { std::ptr::copy_nonoverlapping(sum.as_ptr(), part.recv.0.block().ptr(part.recv.1), bytes) };
        Ok(())
    }
}

/// What a rank sends ahead of its part: checked against rank 0's own.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Header {
    seq: u64,
    count: u64,
    dtype: u32,
    op: u32,
}

impl Header {
    fn of(seq: u64, part: &Part) -> Header {
        Header { seq, count: part.count as u64, dtype: part.dtype as u32, op: part.op as u32 }
    }

    fn encode(&self) -> [u8; 24] {
        let mut bytes = [0u8; 24];
        bytes[..8].copy_from_slice(&self.seq.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.count.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.dtype.to_le_bytes());
        bytes[20..].copy_from_slice(&self.op.to_le_bytes());
        bytes
    }

    fn describe(&self) -> String {
        format!("count {}, type {}, operation {}", self.count, self.dtype, self.op)
    }
}

fn read_header(stream: &mut TcpStream, aborted: &AtomicBool) -> std::io::Result<Header> {
    let mut bytes = [0u8; 24];
    read_abortable(stream, &mut bytes, aborted)?;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    let half = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
    Ok(Header { seq: word(0), count: word(8), dtype: half(16), op: half(20) })
}

/// `read_exact` that gives up once `aborted` is set (the socket has a short read timeout).
fn read_abortable(stream: &mut TcpStream, buf: &mut [u8], aborted: &AtomicBool) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        if aborted.load(Ordering::SeqCst) {
            return Err(ErrorKind::Interrupted.into());
        }
        match stream.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Every rank's part must match rank 0's: count, type and operation.
fn check_parts(parts: &[&Part], call: &str) {
    let Some(first) = parts.first() else { return };
    for (rank, part) in parts.iter().enumerate() {
        if part.count != first.count || part.dtype as u32 != first.dtype as u32 || part.op as u32 != first.op as u32 {
            crate::contract::report(
                call,
                &format!(
                    "rank {rank} passed count {} ({:?}, {:?}), rank 0 count {} ({:?}, {:?}): every rank must pass the \
                     same count, type and operation",
                    part.count, part.dtype, part.op, first.count, first.dtype, first.op
                ),
            );
        }
    }
}

/// Writes the sum of every part's send buffer to every part's receive buffer.
fn reduce(parts: &[&Part]) {
    let Some(first) = parts.first() else { return };
    let mut sum = vec![0f32; first.count];
    for part in parts {
        // SAFETY: each send block holds the part's bytes at its address (checked when queued).
        unsafe { accumulate(&mut sum, part.send.0.block().ptr(part.send.1), part.element) };
    }
    for part in parts {
        // SAFETY: as above, for each receive block.
        unsafe { store(&sum, part.recv.0.block().ptr(part.recv.1), part.element) };
    }
}

/// # Safety
/// `from` points to `sum.len()` elements.
unsafe fn accumulate(sum: &mut [f32], from: *const u8, element: Element) {
    let mut buf = [0u8; 4];
    let size = element.size();
    for (i, s) in sum.iter_mut().enumerate() {
        // SAFETY: the caller's condition.
        unsafe { std::ptr::copy_nonoverlapping(from.add(i * size), buf.as_mut_ptr(), size) };
        *s += match element {
            Element::F32 => f32::from_le_bytes(buf),
            Element::F16 => half::f16::from_le_bytes([buf[0], buf[1]]).to_f32(),
            Element::Bf16 => half::bf16::from_le_bytes([buf[0], buf[1]]).to_f32(),
        };
    }
}

/// # Safety
/// `to` points to `sum.len()` writable elements.
unsafe fn store(sum: &[f32], to: *mut u8, element: Element) {
    let size = element.size();
    for (i, s) in sum.iter().enumerate() {
        let bytes = match element {
            Element::F32 => s.to_le_bytes(),
            Element::F16 => {
                let [a, b] = half::f16::from_f32(*s).to_le_bytes();
                [a, b, 0, 0]
            }
            Element::Bf16 => {
                let [a, b] = half::bf16::from_f32(*s).to_le_bytes();
                [a, b, 0, 0]
            }
        };
        // SAFETY: the caller's condition.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to.add(i * size), size) };
    }
}

/// A ring all-reduce's time at the configured bus bandwidth: 2·(n−1)/n·bytes / busbw.
pub fn transfer_time(bytes: usize, nranks: u32) -> Duration {
    let n = f64::from(nranks.max(1));
    let seconds = 2.0 * (n - 1.0) / n * bytes as f64 / (config().busbw_gbps * 1e9);
    Duration::from_secs_f64(seconds.min(60.0))
}

/// The element type of an NCCL data type the emulator reduces.
pub fn element_of(dtype: ncclDataType_t) -> Option<Element> {
    match dtype {
        ncclDataType_t::ncclFloat32 => Some(Element::F32),
        ncclDataType_t::ncclFloat16 => Some(Element::F16),
        ncclDataType_t::ncclBfloat16 => Some(Element::Bf16),
        _ => None,
    }
}

/// Makes `devices.len()` communicators of one clique in this process.
pub fn init_all(devices: &[u32], ids: impl Fn() -> u64) -> Vec<Arc<Comm>> {
    let n = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let clique = Arc::new(Clique {
        nranks: n,
        local: n,
        link: Link::Local { rounds: Mutex::new(std::collections::HashMap::new()), moved: Condvar::new() },
    });
    devices
        .iter()
        .enumerate()
        .map(|(rank, &device)| Arc::new(Comm::new(ids(), rank as u32, device, clique.clone())))
        .collect()
}

/// The listeners this process made unique ids for, by token.
fn listeners() -> MutexGuard<'static, std::collections::HashMap<u64, TcpListener>> {
    static LISTENERS: std::sync::OnceLock<Mutex<std::collections::HashMap<u64, TcpListener>>> =
        std::sync::OnceLock::new();
    lock(LISTENERS.get_or_init(Mutex::default))
}

/// A unique id: rank 0's process listens on a loopback port for the other ranks.
pub fn unique_id() -> std::io::Result<[u8; 128]> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let token = random_token();
    listeners().insert(token, listener);
    let mut id = [0u8; 128];
    id[..8].copy_from_slice(ID_MAGIC);
    id[8..10].copy_from_slice(&port.to_le_bytes());
    id[10..18].copy_from_slice(&token.to_le_bytes());
    Ok(id)
}

fn random_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    hasher.finish()
}

/// Why joining across processes failed.
#[derive(Debug)]
pub enum JoinError {
    /// Not an id this emulator made.
    NotAnId,
    /// Rank 0 must run in the process that made the id.
    NotTheIdsProcess,
    /// A peer did not join, or the socket failed.
    Io(std::io::Error),
}

/// Joins rank `rank` of `nranks` through `id` (see the module doc).
pub fn init_rank(id: &[u8; 128], nranks: u32, rank: u32, device: u32, handle: u64) -> Result<Arc<Comm>, JoinError> {
    if &id[..8] != ID_MAGIC {
        return Err(JoinError::NotAnId);
    }
    let port = u16::from_le_bytes([id[8], id[9]]);
    let token = u64::from_le_bytes(id[10..18].try_into().map_err(|_| JoinError::NotAnId)?);
    let deadline = Instant::now() + JOIN_LIMIT;
    let peers = if nranks == 1 {
        Vec::new()
    } else if rank == 0 {
        let listener = listeners().remove(&token).ok_or(JoinError::NotTheIdsProcess)?;
        accept_peers(&listener, token, nranks, deadline).map_err(JoinError::Io)?
    } else {
        vec![join_root(port, token, nranks, rank, deadline).map_err(JoinError::Io)?]
    };
    let peers = peers
        .into_iter()
        .map(|s| s.set_read_timeout(Some(ABORT_POLL)).map(|()| Mutex::new(s)))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(JoinError::Io)?;
    let clique = Arc::new(Clique { nranks, local: 1, link: Link::Star { peers } });
    Ok(Arc::new(Comm::new(handle, rank, device, clique)))
}

fn hello(token: u64, nranks: u32, rank: u32) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&token.to_le_bytes());
    bytes[8..12].copy_from_slice(&nranks.to_le_bytes());
    bytes[12..].copy_from_slice(&rank.to_le_bytes());
    bytes
}

fn accept_peers(listener: &TcpListener, token: u64, nranks: u32, deadline: Instant) -> std::io::Result<Vec<TcpStream>> {
    listener.set_nonblocking(true)?;
    let mut slots: Vec<Option<TcpStream>> = (1..nranks).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        if Instant::now() > deadline {
            return Err(std::io::Error::new(ErrorKind::TimedOut, "not every rank joined"));
        }
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                let mut bytes = [0u8; 16];
                if stream.read_exact(&mut bytes).is_err() {
                    continue;
                }
                let rank = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
                let fits = bytes[..8] == token.to_le_bytes() && bytes[8..12] == nranks.to_le_bytes();
                match slots.get_mut((rank as usize).wrapping_sub(1)) {
                    Some(slot @ None) if fits && rank > 0 => *slot = Some(stream),
                    _ => continue,
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e),
        }
    }
    let mut peers: Vec<TcpStream> = slots.into_iter().flatten().collect();
    for peer in &mut peers {
        peer.write_all(b"j")?;
    }
    Ok(peers)
}

fn join_root(port: u16, token: u64, nranks: u32, rank: u32, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    stream.set_nodelay(true)?;
    stream.write_all(&hello(token, nranks, rank))?;
    stream.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))?;
    let mut joined = [0u8; 1];
    stream.read_exact(&mut joined)?;
    Ok(stream)
}

/// NCCL's `INFO(NCCL_TUNING, …)` line for each all-reduce rank 0 enqueues, in the shape of the
/// configured version (2.21–2.22, 2.23, 2.24 and later; none before 2.21), to `NCCL_DEBUG_FILE`
/// (`%h` host, `%p` pid) or standard output, when `NCCL_DEBUG=INFO` and `NCCL_DEBUG_SUBSYS` has
/// `TUNING` (or `ALL`).
struct TuningLog {
    file: Option<Mutex<std::fs::File>>,
    host: String,
    algo: String,
    proto: String,
}

impl TuningLog {
    fn from_env() -> Option<TuningLog> {
        let var = |name: &str| std::env::var(name).ok();
        let (_, minor, _) = config().nccl_version;
        let subsystems = var("NCCL_DEBUG_SUBSYS").unwrap_or_default().to_ascii_uppercase();
        let wanted = var("NCCL_DEBUG").is_some_and(|v| v.eq_ignore_ascii_case("INFO"))
            && subsystems.split(',').any(|s| s == "TUNING" || s == "ALL");
        if !wanted || minor < 21 {
            return None;
        }
        let host =
            std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
        let file = var("NCCL_DEBUG_FILE").filter(|f| !f.is_empty()).and_then(|pattern| {
            let path = pattern.replace("%h", &host).replace("%p", &std::process::id().to_string());
            std::fs::OpenOptions::new().create(true).append(true).open(path).ok().map(Mutex::new)
        });
        let first = |name: &str, default: &str| {
            var(name)
                .and_then(|v| v.split(',').next().map(str::to_ascii_uppercase))
                .filter(|v| !v.is_empty())
                .unwrap_or(default.to_string())
        };
        Some(TuningLog { file, host, algo: first("NCCL_ALGO", "RING"), proto: first("NCCL_PROTO", "SIMPLE") })
    }

    fn line(&self, device: u32, bytes: usize) {
        let (_, minor, _) = config().nccl_version;
        let prefix = format!("{}:{}:{} [{}] NCCL INFO ", self.host, std::process::id(), std::process::id(), device);
        let (algo, proto) = (numbers::algo(&self.algo), numbers::proto(&self.proto));
        let body = match minor {
            21 | 22 => format!("{bytes} Bytes -> Algo {algo} proto {proto} time 12.500000"),
            23 => format!("AllReduce: {bytes} Bytes -> Algo {algo} proto {proto} time 12.500000"),
            _ => format!(
                "AllReduce: {bytes} Bytes -> Algo {} proto {} channel{{Lo..Hi}}={{0..1}}",
                self.algo, self.proto
            ),
        };
        let line = format!("{prefix}{body}\n");
        match &self.file {
            Some(file) => {
                let _ = lock(file).write_all(line.as_bytes());
            }
            None => print!("{line}"),
        }
    }
}

/// `NCCL_ALGO_*` and `NCCL_PROTO_*` of NCCL's `nccl_common.h`.
mod numbers {
    pub fn algo(name: &str) -> u32 {
        ["TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"]
            .iter()
            .position(|a| *a == name)
            .unwrap_or(1) as u32
    }

    pub fn proto(name: &str) -> u32 {
        ["LL", "LL128", "SIMPLE"].iter().position(|p| *p == name).unwrap_or(2) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_and_protocol_numbers_are_nccl_s() {
        assert_eq!((numbers::algo("TREE"), numbers::algo("RING"), numbers::algo("NVLS_TREE")), (0, 1, 5));
        assert_eq!((numbers::proto("LL"), numbers::proto("LL128"), numbers::proto("SIMPLE")), (0, 1, 2));
    }

    #[test]
    fn a_larger_payload_or_more_ranks_take_longer() {
        assert!(transfer_time(1 << 20, 2) < transfer_time(1 << 24, 2));
        assert!(transfer_time(1 << 20, 2) < transfer_time(1 << 20, 8));
        assert_eq!(transfer_time(1 << 20, 1), Duration::ZERO);
    }

    #[test]
    fn sums_round_trip_through_each_element_type() {
        for element in [Element::F32, Element::F16, Element::Bf16] {
            let values = [1.5f32, -2.0, 3.25];
            let mut bytes = vec![0u8; values.len() * element.size()];
            // SAFETY: `bytes` holds three elements.
            unsafe { store(&values, bytes.as_mut_ptr(), element) };
            let mut sum = [1.0f32; 3];
            // SAFETY: as above.
            unsafe { accumulate(&mut sum, bytes.as_ptr(), element) };
            assert_eq!(sum, [2.5, -1.0, 4.25], "{element:?}");
        }
    }

    #[test]
    fn an_id_made_elsewhere_is_refused() {
        let id = [0u8; 128];
        assert!(matches!(init_rank(&id, 2, 0, 0, 1), Err(JoinError::NotAnId)));
        let Ok(mut id) = unique_id() else { panic!("no loopback") };
        id[10] ^= 0xff;
        assert!(matches!(init_rank(&id, 2, 0, 0, 1), Err(JoinError::NotTheIdsProcess)));
    }
}
