//! The synthetic timeline as an Nsight Systems SQLite export: the same kernels, launches,
//! communication ops and steps the Kineto writer ([`super::synth`]) produces, in the tables and
//! columns `nsys export --type sqlite` names (`StringIds`, `CUPTI_ACTIVITY_KIND_KERNEL`,
//! `_MEMCPY`, `_MEMSET`, `_RUNTIME`, `NVTX_EVENTS`, `META_DATA_EXPORT`).
//!
//! The timeline is taken from the Kineto document as parsed (every field attribution reads),
//! so that a test can demand identical attribution from both sources. What nsys has no place
//! for is dropped on purpose: metadata copied onto kernels (nsys kernels carry none; the
//! enclosing `record_param_comms` range holds it) and GPU-side `nccl:*` annotations.

use std::io;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};
use serde_json::{Map, Value};

use super::synth::{write_rank, SynthSpec};
use commgate_trace::kineto::{parse_document, Document};
use commgate_trace::model::{CommOp, KernelCat, RankTrace};

/// The schema version written into `META_DATA_EXPORT`.
pub const SCHEMA_VERSION: &str = "3.11.1";

const SCHEMA: &str = "
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER, bytes INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
";

/// Parses one Kineto document the synthetic generator wrote.
pub(super) fn timeline(spec: &SynthSpec, rank: u32) -> io::Result<RankTrace> {
    let mut json = Vec::new();
    write_rank(spec, rank, &mut json)?;
    match parse_document(json.as_slice()) {
        Ok(Document::Timeline(t)) => Ok(*t),
        Ok(Document::Events(_)) => Err(io::Error::other("the generator wrote aggregated events")),
        Err(e) => Err(io::Error::other(e.to_string())),
    }
}

/// Writes rank `rank` of `spec` to `path` as an Nsight Systems export (one GPU).
pub fn write_rank_sqlite(spec: &SynthSpec, rank: u32, path: &Path) -> io::Result<()> {
    write_traces(&[(0, &timeline(spec, rank)?)], path)
}

/// Writes every rank of `spec` into `dir` as `rank-{r}.sqlite`; returns the paths in rank order.
pub fn write_all_ranks_sqlite(spec: &SynthSpec, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    (0..spec.world_size)
        .map(|r| {
            let path = dir.join(format!("rank-{r}.sqlite"));
            write_rank_sqlite(spec, r, &path)?;
            Ok(path)
        })
        .collect()
}

/// Writes every rank of `spec` into one export at `path`, as one process driving all the GPUs
/// (rank r on `deviceId` r).
pub fn write_one_process_sqlite(spec: &SynthSpec, path: &Path) -> io::Result<()> {
    let traces = (0..spec.world_size).map(|r| timeline(spec, r)).collect::<io::Result<Vec<_>>>()?;
    let devices: Vec<(i64, &RankTrace)> = traces.iter().enumerate().map(|(d, t)| (d as i64, t)).collect();
    write_traces(&devices, path)
}

fn sql(e: rusqlite::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// The serialized `globalTid` of a Kineto (pid, tid) on `device` (kept apart per device so that
/// the ranks of one process never share a thread).
fn global_tid(device: i64, pid: i64, tid: i64) -> i64 {
    ((((pid & 0xFFFF) | (device << 16)) & 0xFF_FFFF) << 24) | (tid & 0xFF_FFFF)
}

/// Correlation ids of `device`, apart from every other device's.
fn correlation(device: i64, c: u64) -> i64 {
    (((device as u64) << 40) | (c & ((1 << 40) - 1))) as i64
}

/// Writes `traces` (each on its `deviceId`) as one export at `path` (replaced if present).
pub fn write_traces(traces: &[(i64, &RankTrace)], path: &Path) -> io::Result<()> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let mut conn = Connection::open(path).map_err(sql)?;
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;").map_err(sql)?;
    conn.execute_batch(SCHEMA).map_err(sql)?;
    let tx = conn.transaction().map_err(sql)?;
    {
        let mut strings = tx.prepare("INSERT INTO StringIds (id, value) VALUES (?1, ?2)").map_err(sql)?;
        let mut kernel = tx
            .prepare(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, \
                 globalPid, demangledName, shortName) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?7)",
            )
            .map_err(sql)?;
        let mut memcpy = tx
            .prepare(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId, \
                 globalPid) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6)",
            )
            .map_err(sql)?;
        let mut memset = tx
            .prepare(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, correlationId, \
                 globalPid) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6)",
            )
            .map_err(sql)?;
        let mut runtime = tx
            .prepare(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId) \
                 VALUES (?1, ?2, 0, ?3, ?4, ?5)",
            )
            .map_err(sql)?;
        let mut nvtx = tx
            .prepare(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, jsonText) \
                 VALUES (?1, ?2, 59, ?3, ?4, 0, ?5)",
            )
            .map_err(sql)?;
        let mut next_id: i64 = 0;
        let launch_name = next_id;
        strings.execute(params![launch_name, "cudaLaunchKernel_v7000"]).map_err(sql)?;
        next_id += 1;
        for &(device, t) in traces {
            let base = next_id;
            for name in &t.names {
                strings.execute(params![next_id, &**name]).map_err(sql)?;
                next_id += 1;
            }
            let gpid = global_tid(device, 0, 0);
            for k in &t.kernels {
                let c = k.correlation().map(|c| correlation(device, c));
                let row = params![k.ts, k.end(), device, k.stream, c, gpid];
                match k.cat {
                    KernelCat::Kernel => {
                        kernel
                            .execute(params![k.ts, k.end(), device, k.stream, c, gpid, base + i64::from(k.name)])
                            .map_err(sql)?;
                    }
                    KernelCat::Memcpy => {
                        memcpy.execute(row).map_err(sql)?;
                    }
                    KernelCat::Memset => {
                        memset.execute(row).map_err(sql)?;
                    }
                }
            }
            for (c, l) in t.launches.iter() {
                let gtid = global_tid(device, l.pid, l.tid);
                runtime.execute(params![l.ts, l.ts + 1, gtid, correlation(device, c), launch_name]).map_err(sql)?;
            }
            for op in &t.comm_ops {
                let text = match &op.annotation {
                    Some(a) => format!("nccl:{a}"),
                    None => "record_param_comms".to_string(),
                };
                let gtid = global_tid(device, op.pid, op.tid);
                nvtx.execute(params![op.ts, op.end, text, gtid, payload_json(op)]).map_err(sql)?;
            }
            for s in &t.steps {
                nvtx.execute(params![s.ts, s.ts + 1, s.name, global_tid(device, 0, 0), Option::<String>::None])
                    .map_err(sql)?;
            }
        }
        if let Some(base) = traces.first().and_then(|(_, t)| t.base_time_ns) {
            tx.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs) VALUES (?1)", [base]).map_err(sql)?;
        }
        tx.execute("INSERT INTO META_DATA_EXPORT (name, value) VALUES ('EXPORT_SCHEMA_VERSION', ?1)", [SCHEMA_VERSION])
            .map_err(sql)?;
    }
    tx.commit().map_err(sql)
}

/// A comm op's metadata as the `jsonText` of its range, with PyTorch's keys (and NCCL's
/// `Message size [bytes]` for the shapes' size of an annotation).
fn payload_json(op: &CommOp) -> Option<String> {
    let m = &op.meta;
    let mut map = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            map.insert(k.to_string(), v);
        }
    };
    put("Collective name", m.collective.as_deref().map(Value::from));
    put("In msg nelems", m.in_nelems.map(Value::from));
    put("Out msg nelems", m.out_nelems.map(Value::from));
    put("dtype", m.dtype.as_deref().map(Value::from));
    put("Process Group Name", m.pg_name.as_deref().map(Value::from));
    put("Seq", m.seq.map(Value::from));
    put("Message size [bytes]", m.shapes_bytes.map(Value::from));
    (!map.is_empty()).then(|| Value::Object(map).to_string())
}
