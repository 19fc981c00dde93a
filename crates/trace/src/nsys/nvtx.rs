//! NVTX ranges of an Nsight Systems export: which are communication ops (with the payload their
//! `jsonText` carries) and which are training steps.
//!
//! A range is a comm op when its text is `record_param_comms` (PyTorch's) or starts with `nccl`
//! (`nccl:all_reduce` from PyTorch, `ncclAllReduce` from NCCL's own NVTX). Its `jsonText`, when
//! present, is read with PyTorch's keys (`Collective name`, `In msg nelems`, `Out msg nelems`,
//! `dtype`, `Process Group Name`, `Seq`) and NCCL's `Message size [bytes]`. A `jsonText` that is
//! not a JSON object stops the read (exit 2 naming the row): a payload silently dropped would
//! change the figures without a word.

use std::sync::Arc;

use rusqlite::Connection;
use serde_json::Value;

use super::{db_error, err, strings_by_id, NsysError, Tables, NVTX_TABLE, STRINGS_TABLE};
use crate::classify::is_profiler_step;
use crate::limits::{cap_name, MAX_NAME_BYTES};
use crate::model::{CommMeta, CommOp, Step};

/// `NVTX_EVENTS.eventType` of a push/pop range (`nvtxRangePush`/`Pop`).
pub const PUSH_POP_RANGE: i64 = 59;
/// `NVTX_EVENTS.eventType` of a start/end range (`nvtxRangeStart`/`End`).
pub const START_END_RANGE: i64 = 60;

/// Largest `jsonText` parsed; a longer one is no NCCL payload.
const MAX_JSON_BYTES: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(super) struct Nvtx {
    pub comm_ops: Vec<CommOp>,
    pub steps: Vec<Step>,
}

/// Reads the ranges; an export without `NVTX_EVENTS` has none.
pub(super) fn read(conn: &Connection, tables: &Tables, truncated: &mut bool) -> Result<Nvtx, NsysError> {
    let mut out = Nvtx::default();
    if !tables.has(NVTX_TABLE) {
        return Ok(out);
    }
    tables.require(NVTX_TABLE, &["start", "end", "eventType"])?;
    let col = |c: &str| if tables.has_column(NVTX_TABLE, c) { format!("e.{c}") } else { "NULL".to_string() };
    // Texts are cut in SQLite, one byte past their limit (so that a cut is still seen): a 200 MB
    // name never leaves it. The subquery gets SQLite's automatic index where `StringIds` has none.
    let cut = |expr: String, limit: usize| format!("substr({expr}, 1, {})", limit + 1);
    let strings = tables.has(STRINGS_TABLE);
    // (expression, join) of a text kept by id in `StringIds`, through a join that SQLite indexes.
    let via_id = |c: &str, alias: &str, limit: usize| {
        if strings && tables.has_column(NVTX_TABLE, c) {
            (format!("{alias}.v"), format!(" LEFT JOIN {} AS {alias} ON {alias}.id = e.{c}", strings_by_id(limit)))
        } else {
            ("NULL".to_string(), String::new())
        }
    };
    let (text_id, text_join) = via_id("textId", "st", MAX_NAME_BYTES);
    let (json_id, json_join) = via_id("jsonTextId", "sj", MAX_JSON_BYTES);
    let text_col = |c: &str, limit: usize| {
        if tables.has_column(NVTX_TABLE, c) {
            cut(format!("e.{c}"), limit)
        } else {
            "NULL".to_string()
        }
    };
    let sql = format!(
        "SELECT e.rowid, e.start, e.end, {gtid}, coalesce({text}, {text_id}), coalesce({json}, {json_id}) \
         FROM {NVTX_TABLE} AS e{text_join}{json_join} \
         WHERE e.eventType IN ({PUSH_POP_RANGE}, {START_END_RANGE}) AND e.end IS NOT NULL",
        gtid = col("globalTid"),
        text = text_col("text", MAX_NAME_BYTES),
        text_id = text_id,
        json = text_col("jsonText", MAX_JSON_BYTES),
        json_id = json_id,
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| db_error(NVTX_TABLE, &e))?;
    let mut rows = stmt.query([]).map_err(|e| db_error(NVTX_TABLE, &e))?;
    let mut plain_steps = 0u64;
    while let Some(row) = rows.next().map_err(|e| db_error(NVTX_TABLE, &e))? {
        let rowid: i64 = row.get(0).unwrap_or(0);
        let (Ok(Some(ts)), Ok(Some(end))) = (row.get::<_, Option<i64>>(1), row.get::<_, Option<i64>>(2)) else {
            continue;
        };
        let gtid = row.get::<_, Option<i64>>(3).ok().flatten().unwrap_or(0);
        let text = row.get::<_, Option<String>>(4).ok().flatten().unwrap_or_default();
        if is_profiler_step(&text) || text == "step" {
            let name = if text == "step" {
                plain_steps += 1;
                format!("step#{plain_steps}")
            } else {
                capped(&text, truncated)
            };
            out.steps.push(Step { name, ts });
            continue;
        }
        let annotation = match text.as_str() {
            "record_param_comms" => None,
            t if t.starts_with("nccl:") => Some(capped(&t["nccl:".len()..], truncated)),
            t if t.starts_with("nccl") => Some(capped(&t["nccl".len()..], truncated)),
            _ => continue,
        };
        let json = row.get::<_, Option<String>>(5).ok().flatten();
        let mut meta = match json.as_deref() {
            Some(j) => parse_payload(j).map_err(|m| err(format!("{NVTX_TABLE} row {rowid}: jsonText {m}")))?,
            None => CommMeta::default(),
        };
        for field in [&mut meta.collective, &mut meta.dtype, &mut meta.pg_name].into_iter().flatten() {
            *field = Arc::from(capped(field, truncated));
        }
        let (pid, tid) = super::thread_ids(gtid);
        out.comm_ops.push(CommOp { ts, end, pid, tid, annotation, meta });
    }
    Ok(out)
}

fn capped(s: &str, truncated: &mut bool) -> String {
    let (kept, cut) = cap_name(s);
    *truncated |= cut;
    kept.into_owned()
}

/// The comm metadata of one range's `jsonText`; `Err` says what is wrong with it.
pub(crate) fn parse_payload(text: &str) -> Result<CommMeta, String> {
    if text.len() > MAX_JSON_BYTES {
        return Err(format!("is {} bytes, over the {MAX_JSON_BYTES}-byte limit for a payload", text.len()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        format!("is not JSON ({}); export the report again", commgate_core::input::plain_message(&e.to_string()))
    })?;
    let Value::Object(map) = value else {
        return Err(format!("is {}, not a JSON object", commgate_core::input::json_kind(text.as_bytes())));
    };
    let string = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_string);
    let number = |k: &str| map.get(k).and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())));
    let pg = map.get("Process Group Name").and_then(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let mut meta = CommMeta {
        collective: string("Collective name").map(Arc::from),
        in_nelems: number("In msg nelems"),
        out_nelems: number("Out msg nelems"),
        dtype: string("dtype").map(Arc::from),
        pg_name: pg.map(Arc::from),
        seq: number("Seq"),
        group_size: number("Group size").and_then(|n| u32::try_from(n).ok()),
        shapes_bytes: None,
    };
    if let Some(bytes) = number("Message size [bytes]") {
        meta.shapes_bytes = Some(bytes);
        // A size in bytes is a count of one-byte elements, so that the payload rule that
        // multiplies elements by the dtype's size reads it unchanged.
        if meta.in_nelems.is_none() && meta.out_nelems.is_none() {
            meta.in_nelems = Some(bytes);
            meta.dtype = Some(Arc::from("uint8"));
        }
    }
    Ok(meta)
}
