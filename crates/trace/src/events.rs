//! The aggregated-events format: a JSON array (or `{"events": [...]}`) of objects with
//! `collective`, `exposed_comm_ms`, `payload_bytes`, `overlap_ratio`, optional
//! `rank_imbalance_ratio`, `rank_imbalance_observed`, `sync_count` (default 1) and
//! `total_comm_ms` (default `exposed_comm_ms`). Validation names the field that is wrong.

use serde::Deserialize;
use serde_json::Value;

use super::limits::cap_name;
use crate::attribute::CommEvent;

/// One element as written, each field kept loose so that a wrong type gets a precise message.
#[derive(Debug, Deserialize)]
pub struct RawSeedEvent {
    #[serde(default)]
    collective: Option<Value>,
    #[serde(default)]
    exposed_comm_ms: Option<Value>,
    #[serde(default)]
    total_comm_ms: Option<Value>,
    #[serde(default)]
    payload_bytes: Option<Value>,
    #[serde(default)]
    overlap_ratio: Option<Value>,
    #[serde(default)]
    rank_imbalance_ratio: Option<Value>,
    #[serde(default)]
    rank_imbalance_observed: Option<Value>,
    #[serde(default)]
    sync_count: Option<Value>,
}

/// Checks one aggregated event and fills the defaults.
pub fn validate(raw: RawSeedEvent) -> Result<CommEvent, String> {
    let collective = match raw.collective {
        Some(Value::String(s)) if !s.trim().is_empty() => cap_name(&s).0.into_owned(),
        Some(Value::String(_)) => return Err("`collective` is empty".to_string()),
        Some(other) => return Err(format!("`collective` must be a string, found {}", shown(&other))),
        None => return Err("`collective` is missing".to_string()),
    };
    let exposed = required(raw.exposed_comm_ms, "exposed_comm_ms")?;
    let payload = required(raw.payload_bytes, "payload_bytes")?;
    let overlap = required(raw.overlap_ratio, "overlap_ratio")?;
    if overlap > 1.0 {
        return Err(format!("`overlap_ratio` is {overlap}; it must lie in 0..=1"));
    }
    let total = optional(raw.total_comm_ms, "total_comm_ms")?.unwrap_or(exposed);
    let sync_count = optional(raw.sync_count, "sync_count")?.unwrap_or(1.0);
    let imbalance = optional(raw.rank_imbalance_ratio, "rank_imbalance_ratio")?;
    let observed = match raw.rank_imbalance_observed {
        None | Some(Value::Null) => imbalance.is_some(),
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(format!("`rank_imbalance_observed` must be true or false, found {}", shown(&other))),
    };
    Ok(CommEvent {
        collective,
        exposed_comm_ms: exposed,
        total_comm_ms: total,
        payload_bytes: payload,
        overlap_ratio: overlap,
        rank_imbalance_ratio: imbalance.unwrap_or(0.0),
        rank_imbalance_observed: observed,
        sync_count,
    })
}

fn required(v: Option<Value>, field: &str) -> Result<f64, String> {
    optional(v, field)?.ok_or_else(|| format!("`{field}` is missing"))
}

/// A non-negative finite number, or absent.
fn optional(v: Option<Value>, field: &str) -> Result<Option<f64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
            _ => Err(format!("`{field}` is {n}; it must be a finite number ≥ 0")),
        },
        Some(other) => Err(format!("`{field}` must be a number, found {}", shown(&other))),
    }
}

/// A value as compact JSON (always one line), cut after 40 characters so a big object cannot
/// flood the error line.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<CommEvent, String> {
        validate(serde_json::from_str(json).expect("test JSON"))
    }

    #[test]
    fn defaults_and_errors() {
        let e = check(r#"{"collective":"all_reduce","exposed_comm_ms":8,"payload_bytes":1024,"overlap_ratio":0.6}"#)
            .expect("valid");
        assert_eq!((e.total_comm_ms, e.sync_count, e.rank_imbalance_observed), (8.0, 1.0, false));
        let e = check(
            r#"{"collective":"a","exposed_comm_ms":1,"payload_bytes":1,"overlap_ratio":0.6,"rank_imbalance_ratio":0.3}"#,
        )
        .expect("valid");
        assert!(e.rank_imbalance_observed);
        assert!(check(r#"{"exposed_comm_ms":8}"#).unwrap_err().contains("`collective` is missing"));
        let e = check(r#"{"collective":"a","exposed_comm_ms":"8","payload_bytes":1,"overlap_ratio":0.6}"#);
        assert!(e.unwrap_err().contains("`exposed_comm_ms` must be a number"));
        let e = check(r#"{"collective":"a","exposed_comm_ms":-1,"payload_bytes":1,"overlap_ratio":0.6}"#);
        assert!(e.unwrap_err().contains("≥ 0"));
        let e = check(r#"{"collective":"a","exposed_comm_ms":1,"payload_bytes":1,"overlap_ratio":1.5}"#);
        assert!(e.unwrap_err().contains("0..=1"));
    }

    #[test]
    fn a_long_collective_name_is_cut_to_the_name_limit() {
        use crate::limits::{MAX_NAME_BYTES, TRUNCATION_MARK};
        let long = "c".repeat(MAX_NAME_BYTES * 3);
        let e =
            check(&format!(r#"{{"collective":"{long}","exposed_comm_ms":1,"payload_bytes":1,"overlap_ratio":0.5}}"#))
                .expect("valid");
        assert_eq!(e.collective, format!("{}{TRUNCATION_MARK}", "c".repeat(MAX_NAME_BYTES)));
    }
}
