//! The NCCL Inspector reader: the JSON-lines logs of NVIDIA's Inspector profiler plugin
//! (`plugins/profiler/inspector/` in the NCCL repository) in, one [`RankTrace`] per file out.
//!
//! The plugin writes one JSON object per line, per completed operation and communicator:
//! `{"header": {...}, "metadata": {...}, "coll_perf": {...}}` (or `p2p_perf` for sends and
//! receives), into `<hostname>-pid<pid>.log` under `NCCL_INSPECTOR_DUMP_DIR`. What is read
//! (docs/attribution.md, "Sources"):
//! - `header.id` (the communicator's hash, the same on every rank of it), `header.rank` and
//!   `header.n_ranks` (required);
//! - `coll_perf.coll`, `coll_sn`, `coll_msg_size_bytes` and `coll_exec_time_us` (required);
//! - `metadata.inspector_output_format_version` (optional, for the source line).
//!
//! Everything else (`coll_busbw_gbs`, `coll_timing_source`, the verbose `event_trace_*`) is
//! skipped: the bus bandwidth is recomputed from the size and the time with nccl-tests' factor,
//! which is the plugin's own formula. `p2p_perf` records are counted as events but not
//! attributed: a send and its receive do not pair by sequence number across ranks.
//!
//! The logs hold no compute and no start times, only how long each call ran. Each record
//! becomes a communication kernel whose duration is exactly `coll_exec_time_us`, starting
//! where the rank's previous record ended; the rank is marked [`RankTrace::no_compute`], so
//! that overlap and exposed time are reported as not measured rather than as numbers derived
//! from made-up start times. Cross-rank matching uses (communicator, `coll_sn`), which reads
//! durations only.
//!
//! The file is read line by line: a line longer than [`MAX_LINE_BYTES`] or more records than
//! the events limit stop the read with an error naming the line, so memory stays bounded by
//! the kept records.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::Path;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::limits::{cap_name, ReadLimits, MAX_LINE_BYTES, RAISE_HINT};
use super::model::{CommMeta, Kernel, KernelCat, RankTrace};
use super::narrow::saturating_u32;

/// The `source.format` of an attribution read from NCCL Inspector logs.
pub const FORMAT: &str = "nccl_inspector";

/// The longest communicator id taken: NCCL writes a 64-bit hash (`0x7f8c496ae9f661`). Every
/// record keeps its communicator's id, so a long one would multiply memory by the records.
const MAX_COMM_ID_BYTES: usize = 128;
/// Distinct communicators one log may hold: a job makes a few dozen.
const MAX_COMMUNICATORS: usize = 10_000;
/// The longest collective name taken (`ReduceScatter` and the like).
const MAX_COLL_BYTES: usize = 64;

/// What every record must hold, for the messages that name a missing field.
pub(crate) const REQUIRED: &str =
    "every record needs header.id, header.rank, header.n_ranks and coll_perf.coll, coll_sn, \
     coll_msg_size_bytes, coll_exec_time_us; pass the logs the NCCL Inspector plugin wrote";

/// One log, read.
#[derive(Debug)]
pub struct InspectorFile {
    pub trace: RankTrace,
    /// `metadata.inspector_output_format_version` of the first record that has it.
    pub version: Option<String>,
}

/// Why a log could not be read: one sentence that follows the file name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct InspectorError(pub String);

pub(crate) fn err(message: impl Into<String>) -> InspectorError {
    InspectorError(message.into())
}

/// A file's reader after [`sniff`]: the bytes looked at are put back in front.
pub struct Sniffed {
    pub reader: Box<dyn Read + Send>,
    pub inspector: bool,
    /// A commgate partial file ([`super::partial::is_partial`]), told by its first key.
    pub partial: bool,
}

/// Tells an Inspector log from a profiler trace. A file is read as one when its name (less a
/// `.gz`) ends in `.log` or `.jsonl`, the names the plugin and its users give it, or when its
/// first non-blank line is a JSON object with `header` and `coll_perf` (or `p2p_perf`): a
/// Kineto trace is one JSON document and never has those keys together at its top level.
/// The same first line tells a commgate partial file. At most [`MAX_LINE_BYTES`] are looked at,
/// and none is lost.
pub fn sniff(path: &Path, reader: Box<dyn Read + Send>) -> io::Result<Sniffed> {
    let mut buffered = BufReader::with_capacity(1 << 16, reader);
    let mut head = Vec::new();
    let by_name = is_log_name(path);
    let mut by_content = false;
    let mut partial = false;
    while !by_name && head.len() <= MAX_LINE_BYTES {
        let start = head.len();
        let n = (&mut buffered).take((MAX_LINE_BYTES + 1 - start) as u64).read_until(b'\n', &mut head)?;
        let line = head.get(start..).unwrap_or_default();
        if line.iter().all(u8::is_ascii_whitespace) {
            if n == 0 {
                break;
            }
            continue;
        }
        partial = super::partial::is_partial(line);
        by_content = !partial && is_record_line(line);
        break;
    }
    let reader: Box<dyn Read + Send> = Box::new(Cursor::new(head).chain(buffered));
    Ok(Sniffed { reader, inspector: by_name || by_content, partial })
}

/// `*.log`, `*.jsonl`, plain or `.gz`.
pub fn is_log_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    name.ends_with(".log") || name.ends_with(".jsonl")
}

/// The name the plugin gives its logs, `<hostname>-pid<N>.log` (plain or `.gz`), or any
/// `*.jsonl`: what a directory is searched for (a stray `train.log` is not).
pub fn is_dir_log_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    if name.ends_with(".jsonl") {
        return true;
    }
    let Some(stem) = name.strip_suffix(".log") else { return false };
    stem.rsplit_once("-pid").is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn is_record_line(line: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Keys {
        header: Option<IgnoredAny>,
        coll_perf: Option<IgnoredAny>,
        p2p_perf: Option<IgnoredAny>,
    }
    serde_json::from_slice::<Keys>(line)
        .is_ok_and(|k| k.header.is_some() && (k.coll_perf.is_some() || k.p2p_perf.is_some()))
}

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    header: Option<Header<'a>>,
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    coll_perf: Option<CollPerf<'a>>,
    p2p_perf: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    rank: Option<u32>,
    n_ranks: Option<u32>,
}

#[derive(Deserialize)]
struct CollPerf<'a> {
    #[serde(borrow)]
    coll: Option<Cow<'a, str>>,
    coll_sn: Option<u64>,
    coll_msg_size_bytes: Option<u64>,
    coll_exec_time_us: Option<u64>,
}

/// A communicator seen in the file: its interned id, and this process's rank in it.
struct Comm {
    id: String,
    rank: u32,
    n_ranks: u32,
}

/// Reads one log under `limits`; `gzip` only words the message of a failed read.
pub fn read_log<R: Read>(input: R, limits: ReadLimits, gzip: bool) -> Result<InspectorFile, InspectorError> {
    let mut reader = BufReader::with_capacity(1 << 18, input);
    let mut r = Reader::default();
    let mut line = Vec::with_capacity(4096);
    let mut line_no: u64 = 0;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| read_error(line_no + 1, &e, gzip))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line.len() > MAX_LINE_BYTES && line.last() != Some(&b'\n') {
            return Err(err(format!(
                "line {line_no} is longer than {MAX_LINE_BYTES} bytes; NCCL Inspector records are a few hundred \
                 bytes: pass the logs the plugin wrote"
            )));
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        r.events += 1;
        if r.events > limits.max_events {
            return Err(err(format!(
                "holds more than {} records, the limit per file; attribute a shorter capture, or {RAISE_HINT}",
                limits.max_events
            )));
        }
        r.record(line_no, text)?;
    }
    r.finish()
}

fn read_error(line: u64, e: &io::Error, gzip: bool) -> InspectorError {
    if commgate_core::input::inflation_bomb(e).is_some() {
        err(e.to_string())
    } else if gzip {
        err(format!("line {line}: the gzip data is corrupt or truncated ({e}); re-copy the log"))
    } else {
        err(format!("line {line} cannot be read: {e}"))
    }
}

#[derive(Default)]
struct Reader {
    names: Vec<Arc<str>>,
    name_index: HashMap<String, u32>,
    comms: HashMap<String, Comm>,
    /// The widest communicator's (n_ranks, rank), first seen on ties: the rank of the file.
    widest: Option<(u32, u32)>,
    kernels: Vec<Kernel>,
    /// Where the next record starts: the previous one's end.
    cursor: i64,
    events: u64,
    version: Option<String>,
    truncated: bool,
}

impl Reader {
    fn record(&mut self, line_no: u64, text: &[u8]) -> Result<(), InspectorError> {
        let rec: Record<'_> = serde_json::from_slice(text).map_err(|e| diagnose::parse_error(line_no, text, &e))?;
        let missing = |field: &str| err(format!("line {line_no}: `{field}` is missing; {REQUIRED}"));
        let Some(header) = rec.header else {
            return Err(err(format!("line {line_no} has no `header` object; {REQUIRED}")));
        };
        if self.version.is_none() {
            self.version = rec.metadata.and_then(version);
        }
        let Some(perf) = rec.coll_perf else {
            if rec.p2p_perf.is_some() {
                return Ok(());
            }
            return Err(err(format!("line {line_no} has neither `coll_perf` nor `p2p_perf`; {REQUIRED}")));
        };
        let id = header.id.ok_or_else(|| missing("header.id"))?;
        let rank = header.rank.ok_or_else(|| missing("header.rank"))?;
        let n_ranks = header.n_ranks.ok_or_else(|| missing("header.n_ranks"))?;
        let coll = perf.coll.ok_or_else(|| missing("coll_perf.coll"))?;
        let sn = perf.coll_sn.ok_or_else(|| missing("coll_perf.coll_sn"))?;
        let size = perf.coll_msg_size_bytes.ok_or_else(|| missing("coll_perf.coll_msg_size_bytes"))?;
        let exec_us = perf.coll_exec_time_us.ok_or_else(|| missing("coll_perf.coll_exec_time_us"))?;
        let dur = i64::try_from(exec_us).ok().and_then(|us| us.checked_mul(1000));
        let end = dur.and_then(|d| self.cursor.checked_add(d));
        let (Some(dur), Some(end)) = (dur, end) else {
            return Err(err(format!(
                "line {line_no}: `coll_perf.coll_exec_time_us` ({exec_us}) adds up past what a trace can span; \
                 pass the logs the plugin wrote"
            )));
        };
        if coll.len() > MAX_COLL_BYTES {
            return Err(err(format!(
                "line {line_no}: `coll_perf.coll` is {} bytes; NCCL's collectives have short names (AllReduce, …): \
                 pass the logs the plugin wrote",
                coll.len()
            )));
        }
        let pg = self.comm(line_no, &id, rank, n_ranks)?;
        let payload = size.saturating_mul(if gathers_per_rank(&coll) { u64::from(n_ranks) } else { 1 });
        let name = self.intern(&coll);
        let (collective, cut) = cap_name(collective_name(&coll));
        self.truncated |= cut;
        let meta = CommMeta {
            collective: Some(Arc::from(collective.as_ref())),
            in_nelems: Some(payload),
            dtype: Some(Arc::from("uint8")),
            pg_name: Some(Arc::from(pg)),
            seq: Some(sn),
            group_size: Some(n_ranks),
            ..CommMeta::default()
        };
        let mut kernel = Kernel::new(self.cursor, dur, name, KernelCat::Kernel, 0, None);
        kernel.meta = Some(Box::new(meta));
        self.kernels.push(kernel);
        self.cursor = end;
        Ok(())
    }

    /// The communicator's id, checked to hold one rank of this process; tracks the widest.
    fn comm(&mut self, line_no: u64, id: &str, rank: u32, n_ranks: u32) -> Result<String, InspectorError> {
        let comm = match self.comms.get(id) {
            Some(c) => c,
            None if id.len() > MAX_COMM_ID_BYTES => {
                return Err(err(format!(
                    "line {line_no}: `header.id` is {} bytes; a communicator id is a short hash (0x7f8c…): pass the \
                     logs the plugin wrote",
                    id.len()
                )));
            }
            None if self.comms.len() >= MAX_COMMUNICATORS => {
                return Err(err(format!(
                    "line {line_no}: more than {MAX_COMMUNICATORS} communicators in one log; a job makes a few \
                     dozen: pass the logs the plugin wrote"
                )));
            }
            None => {
                let (kept, cut) = cap_name(id);
                self.truncated |= cut;
                let c = Comm { id: kept.into_owned(), rank, n_ranks };
                if self.widest.is_none_or(|(n, _)| n_ranks > n) {
                    self.widest = Some((n_ranks, rank));
                }
                self.comms.entry(id.to_string()).or_insert(c)
            }
        };
        if comm.rank != rank {
            return Err(err(format!(
                "line {line_no}: communicator {} appears as rank {} and rank {rank}: the log holds several GPUs' \
                 records (one process driving several GPUs); run one process per GPU so that each log is one rank",
                comm.id, comm.rank
            )));
        }
        if comm.n_ranks != n_ranks {
            return Err(err(format!(
                "line {line_no}: communicator {} has {} ranks on an earlier line and {n_ranks} here; pass the logs \
                 the plugin wrote",
                comm.id, comm.n_ranks
            )));
        }
        Ok(comm.id.clone())
    }

    /// The kernel name of a collective (`ncclAllReduce`, NCCL's API name), interned.
    fn intern(&mut self, coll: &str) -> u32 {
        if let Some(&i) = self.name_index.get(coll) {
            return i;
        }
        let (kept, cut) = cap_name(coll);
        self.truncated |= cut;
        let i = saturating_u32(self.names.len());
        self.names.push(Arc::from(format!("nccl{kept}")));
        self.name_index.insert(coll.to_string(), i);
        i
    }

    fn finish(self) -> Result<InspectorFile, InspectorError> {
        if self.events == 0 {
            return Err(err(
                "holds no NCCL Inspector records (the file is empty); pass the logs the plugin wrote under \
                 NCCL_INSPECTOR_DUMP_DIR once the job has run",
            ));
        }
        let trace = RankTrace {
            rank: self.widest.map(|(_, r)| r),
            world_size: self.widest.map(|(n, _)| n),
            names: self.names,
            kernels: self.kernels,
            num_events: self.events,
            names_truncated: self.truncated,
            no_compute: true,
            ..RankTrace::default()
        };
        Ok(InspectorFile { trace, version: self.version })
    }
}

/// AllGather and ReduceScatter records give one rank's share (the plugin multiplies it by the
/// rank count for the traffic); the payload commgate reports is the whole buffer, as from
/// PyTorch's metadata.
fn gathers_per_rank(coll: &str) -> bool {
    matches!(coll, "AllGather" | "AllGatherV" | "ReduceScatter")
}

/// The plugin's collective names in the words [`super::classify::normalize_collective`] knows.
fn collective_name(coll: &str) -> &str {
    match coll {
        "All2All" => "all_to_all",
        other => other,
    }
}

/// The format version, capped and without control characters.
fn version(metadata: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Meta {
        inspector_output_format_version: Option<String>,
    }
    let v = serde_json::from_str::<Meta>(metadata.get()).ok()?.inspector_output_format_version?;
    let v: String = v.chars().filter(|c| !c.is_control()).take(32).collect();
    (!v.is_empty()).then_some(v)
}

/// The `source.format` for logs of `version`.
pub fn format_name(version: Option<&str>) -> String {
    match version {
        Some(v) if !v.is_empty() => format!("{FORMAT} {v}"),
        _ => FORMAT.to_string(),
    }
}

mod diagnose;
#[cfg(test)]
mod tests;
