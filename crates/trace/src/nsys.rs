//! The Nsight Systems reader: an SQLite export (`nsys export --type sqlite`) in, one
//! [`RankTrace`] per GPU out, filled exactly as the Kineto reader fills it so that attribution
//! cannot tell the sources apart. A `.nsys-rep` report is exported first ([`export`]).
//!
//! The database is opened read-only and `immutable` (no journal, no `-wal`/`-shm` file next to
//! the user's file, nothing written), only real tables are read (a view or trigger planted in a
//! hostile export is never run), and the rows are counted against the events limit before any
//! is kept.
//!
//! What is read (docs/attribution.md, "Sources"):
//! - `CUPTI_ACTIVITY_KIND_KERNEL` (required): `start`, `end`, `deviceId`, `streamId`,
//!   `correlationId`, and the name `demangledName` (else `shortName`) through `StringIds`;
//! - `CUPTI_ACTIVITY_KIND_MEMCPY` / `_MEMSET` (optional): copies and fills;
//! - `CUPTI_ACTIVITY_KIND_RUNTIME` (optional): the launches, by `correlationId`, on `globalTid`;
//! - `NVTX_EVENTS` (optional): push/pop and start/end ranges: `record_param_comms` and NCCL
//!   ranges (payload and collective from `jsonText`), `ProfilerStep#N` or `step` ranges;
//! - `TARGET_INFO_SESSION_START_TIME` (optional): `utcEpochNs`, which puts the ranks of separate
//!   exports on one clock (start skew);
//! - `META_DATA_EXPORT` (optional): the export schema version, for the source line.

pub mod export;
mod nvtx;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::classify::is_moe_marker;
use super::limits::{cap_name, ReadLimits, MAX_ABS_NS, MAX_NAME_BYTES, RAISE_HINT};
use super::model::{Kernel, KernelCat, Launch, Launches, RankTrace};
use super::narrow::saturating_u32;

/// The table without which a file is no GPU trace.
pub const KERNEL_TABLE: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const RUNTIME_TABLE: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
const MEMCPY_TABLE: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET_TABLE: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
const NVTX_TABLE: &str = "NVTX_EVENTS";
const STRINGS_TABLE: &str = "StringIds";
const META_TABLE: &str = "META_DATA_EXPORT";
const SESSION_TABLE: &str = "TARGET_INFO_SESSION_START_TIME";

/// The `source.format` of an attribution read from Nsight Systems exports.
pub const FORMAT: &str = "nsys-sqlite";

/// One export, read.
#[derive(Debug)]
pub struct NsysFile {
    /// One trace per GPU (`deviceId`), in device order. With one GPU, `rank` is left to the
    /// loader (the file name); with several, each GPU's `deviceId` is its rank.
    pub traces: Vec<RankTrace>,
    /// `EXPORT_SCHEMA_VERSION` from `META_DATA_EXPORT`, when the export has it.
    pub version: Option<String>,
}

/// Why an export could not be read: one sentence that follows the file name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct NsysError(pub String);

fn err(message: impl Into<String>) -> NsysError {
    NsysError(message.into())
}

/// SQLite's own message, which may quote the file's schema (untrusted text, over several lines):
/// one line of at most 160 characters. Found by `tests/fuzz_readers.rs`.
fn one_line(detail: &str) -> String {
    let line = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// A failed query in the user's words: a damaged file reads as one, never as a driver code.
fn db_error(place: &str, e: &rusqlite::Error) -> NsysError {
    let detail = match e {
        rusqlite::Error::SqliteFailure(f, msg) => msg.clone().unwrap_or_else(|| f.to_string()),
        other => other.to_string(),
    };
    let detail = one_line(&detail);
    let lower = detail.to_ascii_lowercase();
    if lower.contains("malformed") || lower.contains("not a database") || lower.contains("corrupt") {
        return err(format!(
            "{place}: the SQLite database is damaged or truncated ({detail}); re-copy the file or export it again"
        ));
    }
    err(format!("{place}: {detail}; export the report again with `nsys export --type sqlite`"))
}

/// Reads the export at `path` under `limits`; the file is never modified.
pub fn read_sqlite(path: &Path, limits: ReadLimits) -> Result<NsysFile, NsysError> {
    let conn = open(path)?;
    let tables = Tables::of(&conn)?;
    if !tables.has(KERNEL_TABLE) {
        return Err(err(format!(
            "has no {KERNEL_TABLE} table: the capture traced no CUDA kernels; profile with `nsys profile -t cuda,nvtx` and export again"
        )));
    }
    let counts = [KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE, NVTX_TABLE]
        .into_iter()
        .filter(|t| tables.has(t))
        .map(|t| count_rows(&conn, t))
        .collect::<Result<Vec<u64>, _>>()?;
    let num_events: u64 = counts.iter().sum();
    if num_events > limits.max_events {
        return Err(err(format!(
            "holds {num_events} rows of GPU, runtime and NVTX events, more than {}, the limit per file; attribute a shorter capture, or {RAISE_HINT}",
            limits.max_events
        )));
    }
    let mut r = Reader { conn: &conn, tables: &tables, names: Names::default(), truncated: false };
    let gpu = r.gpu_activities()?;
    let launches = r.launches()?;
    let nvtx = nvtx::read(&conn, &tables, &mut r.truncated)?;
    let version = r.version()?;
    let session_start = r.session_start()?;
    let names = r.names.list;
    let mut fractional = false;
    let mut by_device: Vec<(i64, Vec<Kernel>)> = Vec::new();
    for (device, k) in gpu {
        fractional |= k.ts % 1000 != 0 || k.dur % 1000 != 0;
        match by_device.binary_search_by_key(&device, |(d, _)| *d) {
            Ok(i) => {
                if let Some((_, kernels)) = by_device.get_mut(i) {
                    kernels.push(k);
                }
            }
            Err(i) => by_device.insert(i, (device, vec![k])),
        }
    }
    if by_device.is_empty() {
        by_device.push((0, Vec::new()));
    }
    if by_device.len() > MAX_DEVICES {
        return Err(err(format!(
            "holds kernels of {} GPUs; one process drives a few, at most {MAX_DEVICES}: export one report per process",
            by_device.len()
        )));
    }
    let several = by_device.len() > 1;
    let moe_markers = names.iter().any(|n| is_moe_marker(n));
    // Each GPU gets the launches of its own kernels, not a copy of every launch of the process.
    let launches_of = |kernels: &[Kernel]| -> Launches {
        kernels.iter().filter_map(Kernel::correlation).filter_map(|c| launches.get(&c).map(|l| (c, l))).collect()
    };
    // Times count from the session's start: its UTC time puts ranks of separate exports on one
    // clock; the GPUs of one export share theirs anyway.
    let base_time_ns = session_start.or(several.then_some(0));
    let traces = by_device
        .into_iter()
        .map(|(device, kernels)| RankTrace {
            file: path.to_path_buf(),
            rank: several.then(|| u32::try_from(device).unwrap_or(u32::MAX)),
            names: names.clone(),
            launches: if several { launches_of(&kernels) } else { launches.clone() },
            kernels,
            comm_ops: nvtx.comm_ops.clone(),
            steps: nvtx.steps.clone(),
            fractional_ts: fractional,
            base_time_ns,
            num_events,
            names_truncated: r.truncated,
            moe_markers,
            ..RankTrace::default()
        })
        .collect();
    Ok(NsysFile { traces, version })
}

/// Opens read-only and immutable (an URI, so that a name holding `?` or `#` stays a name).
fn open(path: &Path) -> Result<Connection, NsysError> {
    let absolute = std::path::absolute(path).map_err(|e| err(format!("cannot be opened: {e}")))?;
    let uri = format!("file:{}?immutable=1", uri_path(&absolute.to_string_lossy()));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(uri, flags).map_err(|e| db_error("cannot be opened", &e))?;
    // Nothing in an untrusted schema (a view's or trigger's SQL functions) may run.
    conn.execute_batch("PRAGMA trusted_schema = OFF; PRAGMA query_only = ON;")
        .map_err(|e| db_error("cannot be opened", &e))?;
    Ok(conn)
}

/// Percent-encodes everything but unreserved characters and `/`.
fn uri_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The real tables of the export and their columns.
pub(crate) struct Tables {
    columns: HashMap<String, Vec<String>>,
}

impl Tables {
    fn of(conn: &Connection) -> Result<Self, NsysError> {
        let place = "the table list";
        let mut stmt =
            conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").map_err(|e| db_error(place, &e))?;
        let names = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| db_error(place, &e))?;
        let mut columns = HashMap::new();
        for name in names {
            let cols = table_columns(conn, &name)?;
            columns.insert(name, cols);
        }
        Ok(Tables { columns })
    }

    pub(crate) fn has(&self, table: &str) -> bool {
        self.columns.contains_key(table)
    }

    pub(crate) fn has_column(&self, table: &str, column: &str) -> bool {
        self.columns.get(table).is_some_and(|c| c.iter().any(|n| n == column))
    }

    /// Fails naming the table and the first missing column.
    pub(crate) fn require(&self, table: &str, columns: &[&str]) -> Result<(), NsysError> {
        match columns.iter().find(|c| !self.has_column(table, c)) {
            Some(c) => Err(err(format!(
                "{table} has no `{c}` column; this is not an Nsight Systems export commgate reads (export with nsys 2021.2 or later)"
            ))),
            None => Ok(()),
        }
    }
}

/// A table's columns. A generated column is refused: Nsight Systems writes none, and a virtual
/// one is computed on every read, so a small file could make each name hundreds of megabytes.
fn table_columns(conn: &Connection, table: &str) -> Result<Vec<String>, NsysError> {
    let place = format!("{table}'s columns");
    let mut stmt = conn.prepare("SELECT name, hidden FROM pragma_table_xinfo(?1)").map_err(|e| db_error(&place, &e))?;
    let columns = stmt
        .query_map([table], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| db_error(&place, &e))?;
    if let Some((name, _)) = columns.iter().find(|(_, hidden)| *hidden != 0) {
        let (name, _) = cap_name(name);
        let (name, table) = (commgate_core::diag::one_line(&name), commgate_core::diag::one_line(&cap_name(table).0));
        return Err(err(format!(
            "{table} has a generated column `{name}`, which Nsight Systems exports never have; this is not an export commgate reads"
        )));
    }
    Ok(columns.into_iter().map(|(name, _)| name).collect())
}

fn count_rows(conn: &Connection, table: &str) -> Result<u64, NsysError> {
    conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |row| row.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
        .map_err(|e| db_error(table, &e))
}

/// Kernel names, each kept once, by `StringIds` id.
#[derive(Default)]
struct Names {
    list: Vec<Arc<str>>,
    by_id: HashMap<i64, u32>,
    by_text: HashMap<Arc<str>, u32>,
}

struct Reader<'c> {
    conn: &'c Connection,
    tables: &'c Tables,
    names: Names,
    truncated: bool,
}

/// `StringIds` as a derived table `(id, v)`: one row per id (a duplicated id would repeat the
/// rows joined to it), each text cut to `limit` + 1 bytes.
pub(crate) fn strings_by_id(limit: usize) -> String {
    format!("(SELECT id, substr(value, 1, {}) AS v FROM {STRINGS_TABLE} GROUP BY id)", limit + 1)
}

/// The largest `deviceId` taken: a GPU's index in the process (a rank, with several), never a
/// world of four billion ranks.
const MAX_DEVICE_ID: i64 = 65_535;
/// GPUs one export may hold kernels of: each becomes a rank with its own copy of the names.
const MAX_DEVICES: usize = 256;

/// One kernel, copy or fill row, before its device is split off.
type GpuRow = (i64, Kernel);

impl Reader<'_> {
    /// The interned index of `text` (capped).
    fn intern_text(&mut self, text: &str) -> u32 {
        let (kept, cut) = cap_name(text);
        self.truncated |= cut;
        if let Some(&i) = self.names.by_text.get(kept.as_ref()) {
            return i;
        }
        let i = saturating_u32(self.names.list.len());
        let shared: Arc<str> = Arc::from(kept.as_ref());
        self.names.list.push(Arc::clone(&shared));
        self.names.by_text.insert(shared, i);
        i
    }

    /// The interned index of `StringIds` id `id`, looked up once per distinct id.
    fn intern_id(&mut self, id: Option<i64>, text: impl FnOnce() -> Option<String>) -> u32 {
        let Some(id) = id else { return self.intern_text("") };
        if let Some(&i) = self.names.by_id.get(&id) {
            return i;
        }
        let i = self.intern_text(text().as_deref().unwrap_or(""));
        self.names.by_id.insert(id, i);
        i
    }

    fn gpu_activities(&mut self) -> Result<Vec<GpuRow>, NsysError> {
        let name_col =
            if self.tables.has_column(KERNEL_TABLE, "demangledName") { "demangledName" } else { "shortName" };
        self.tables.require(KERNEL_TABLE, &["start", "end", "deviceId", "streamId", "correlationId", name_col])?;
        if !self.tables.has(STRINGS_TABLE) {
            return Err(err(format!(
                "has no {STRINGS_TABLE} table, where {KERNEL_TABLE} keeps its kernel names; export the report again"
            )));
        }
        let mut rows = Vec::new();
        // The name comes through a join, for which SQLite indexes `StringIds` itself when the
        // export did not (a lookup per name from here, or a correlated subquery, would scan the
        // table each time), cut to the name limit plus one byte (so that a cut is still seen)
        // before it leaves SQLite.
        let sql = format!(
            "SELECT k.rowid, k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.{name_col}, s.v \
             FROM {KERNEL_TABLE} AS k LEFT JOIN {} AS s ON s.id = k.{name_col}",
            strings_by_id(MAX_NAME_BYTES)
        );
        self.read_gpu(&sql, KERNEL_TABLE, KernelCat::Kernel, &mut rows)?;
        for (table, cat, label) in
            [(MEMCPY_TABLE, KernelCat::Memcpy, "Memcpy"), (MEMSET_TABLE, KernelCat::Memset, "Memset")]
        {
            if self.tables.has(table) {
                self.tables.require(table, &["start", "end", "deviceId", "streamId", "correlationId"])?;
                let sql =
                    format!("SELECT rowid, start, end, deviceId, streamId, correlationId, NULL, NULL FROM {table}");
                let name = self.intern_text(label);
                self.read_gpu_named(&sql, table, cat, Some(name), &mut rows)?;
            }
        }
        Ok(rows)
    }

    fn read_gpu(&mut self, sql: &str, table: &str, cat: KernelCat, out: &mut Vec<GpuRow>) -> Result<(), NsysError> {
        self.read_gpu_named(sql, table, cat, None, out)
    }

    /// Reads one GPU table; `fixed` names every row (copies, fills), else column 6 is a
    /// `StringIds` id and column 7 its text (read only for an id not seen yet).
    fn read_gpu_named(
        &mut self,
        sql: &str,
        table: &str,
        cat: KernelCat,
        fixed: Option<u32>,
        out: &mut Vec<GpuRow>,
    ) -> Result<(), NsysError> {
        let conn = self.conn;
        let mut stmt = conn.prepare(sql).map_err(|e| db_error(table, &e))?;
        let mut rows = stmt.query([]).map_err(|e| db_error(table, &e))?;
        while let Some(row) = rows.next().map_err(|e| db_error(table, &e))? {
            let rowid: i64 = row.get(0).unwrap_or(0);
            let place = |what: &str| err(format!("{table} row {rowid}: {what}"));
            let int = |i: usize, col: &str| -> Result<Option<i64>, NsysError> {
                row.get::<_, Option<i64>>(i).map_err(|_| place(&format!("`{col}` is not an integer")))
            };
            let start = int(1, "start")?.ok_or_else(|| place("`start` is empty"))?;
            let end = int(2, "end")?.ok_or_else(|| place("`end` is empty"))?;
            for (col, value) in [("start", start), ("end", end)] {
                if !(-MAX_ABS_NS..=MAX_ABS_NS).contains(&value) {
                    return Err(place(&format!(
                        "`{col}` ({value}) is out of range; times must lie within ±2^61 ns: export the report again"
                    )));
                }
            }
            if end < start {
                return Err(place(&format!("`end` ({end}) is before `start` ({start}); export the report again")));
            }
            let device = int(3, "deviceId")?.unwrap_or(0);
            if !(0..=MAX_DEVICE_ID).contains(&device) {
                return Err(place(&format!(
                    "`deviceId` ({device}) is not a GPU's index (0 to {MAX_DEVICE_ID}); export the report again"
                )));
            }
            let stream = int(4, "streamId")?.unwrap_or(0);
            let correlation = int(5, "correlationId")?.and_then(|c| u64::try_from(c).ok());
            let name = match fixed {
                Some(n) => n,
                None => {
                    let id = int(6, "name")?;
                    self.intern_id(id, || row.get::<_, Option<String>>(7).ok().flatten())
                }
            };
            let kernel = Kernel::new(start, end - start, name, cat, stream, correlation);
            out.push((device, kernel));
        }
        Ok(())
    }

    /// Runtime API calls by correlation: where each GPU activity was launched from.
    fn launches(&mut self) -> Result<Launches, NsysError> {
        let mut launches = Launches::default();
        if !self.tables.has(RUNTIME_TABLE) {
            return Ok(launches);
        }
        self.tables.require(RUNTIME_TABLE, &["start", "correlationId", "globalTid"])?;
        let sql =
            format!("SELECT start, correlationId, globalTid FROM {RUNTIME_TABLE} WHERE correlationId IS NOT NULL");
        let mut stmt = self.conn.prepare(&sql).map_err(|e| db_error(RUNTIME_TABLE, &e))?;
        let mut rows = stmt.query([]).map_err(|e| db_error(RUNTIME_TABLE, &e))?;
        while let Some(row) = rows.next().map_err(|e| db_error(RUNTIME_TABLE, &e))? {
            let (Ok(Some(ts)), Ok(Some(c)), Ok(tid)) =
                (row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1), row.get::<_, Option<i64>>(2))
            else {
                continue;
            };
            let Ok(c) = u64::try_from(c) else { continue };
            let (pid, tid) = thread_ids(tid.unwrap_or(0));
            launches.insert(c, Launch { ts, pid, tid });
        }
        launches.seal();
        Ok(launches)
    }

    /// `TARGET_INFO_SESSION_START_TIME.utcEpochNs`, when the export has it.
    fn session_start(&self) -> Result<Option<i64>, NsysError> {
        if !self.tables.has_column(SESSION_TABLE, "utcEpochNs") {
            return Ok(None);
        }
        let v: Option<Option<i64>> = self
            .conn
            .query_row(&format!("SELECT utcEpochNs FROM {SESSION_TABLE} LIMIT 1"), [], |row| row.get(0))
            .optional()
            .map_err(|e| db_error(SESSION_TABLE, &e))?;
        Ok(v.flatten())
    }

    fn version(&self) -> Result<Option<String>, NsysError> {
        if !self.tables.has_column(META_TABLE, "name") || !self.tables.has_column(META_TABLE, "value") {
            return Ok(None);
        }
        let v: Option<Option<String>> = self
            .conn
            .query_row("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'", [], |row| row.get(0))
            .optional()
            .map_err(|e| db_error(META_TABLE, &e))?;
        Ok(v.flatten().map(|s| cap_name(&s).0.chars().filter(|c| !c.is_control()).take(32).collect()))
    }
}

/// (process, thread) of a serialized `globalTid` (the process id sits above bit 24): the
/// thread is kept whole, so that two threads never share a key.
pub(crate) fn thread_ids(global_tid: i64) -> (i64, i64) {
    ((global_tid >> 24) & 0xFF_FFFF, global_tid)
}

/// The `source.format` for exports of `version`.
pub fn format_name(version: Option<&str>) -> String {
    match version {
        Some(v) if !v.is_empty() => format!("{FORMAT} {v}"),
        _ => FORMAT.to_string(),
    }
}

#[cfg(test)]
mod tests;
