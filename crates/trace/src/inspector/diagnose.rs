//! Why a log line did not parse, in the user's words: cut off, not JSON, not an object, or
//! which field has the wrong type. Only failed lines come here, so it may parse them again.

use serde_json::Value;

use super::{err, InspectorError, REQUIRED};

/// What a field must be.
#[derive(Clone, Copy)]
enum Expected {
    Text,
    /// Fits 32 bits (ranks).
    Small,
    Whole,
    Micros,
}

impl Expected {
    fn accepts(self, v: &Value) -> bool {
        match self {
            Expected::Text => v.is_string(),
            Expected::Small => v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)),
            Expected::Whole | Expected::Micros => v.is_u64(),
        }
    }

    fn words(self) -> &'static str {
        match self {
            Expected::Text => "a string",
            Expected::Small | Expected::Whole => "a whole number",
            Expected::Micros => "a whole number of microseconds",
        }
    }
}

/// The fields the reader types, in the order a message names the first wrong one.
const FIELDS: [(&str, &str, Expected); 7] = [
    ("header", "id", Expected::Text),
    ("header", "rank", Expected::Small),
    ("header", "n_ranks", Expected::Small),
    ("coll_perf", "coll", Expected::Text),
    ("coll_perf", "coll_sn", Expected::Whole),
    ("coll_perf", "coll_msg_size_bytes", Expected::Whole),
    ("coll_perf", "coll_exec_time_us", Expected::Micros),
];

/// The error for line `line_no` (`text`), which serde refused with `e`.
pub(super) fn parse_error(line_no: u64, text: &[u8], e: &serde_json::Error) -> InspectorError {
    if e.is_eof() {
        return err(format!(
            "line {line_no} ends inside its record: the line was cut (a log copied while the job was writing it, \
             or a truncated file); copy the log again after the job has ended"
        ));
    }
    if e.is_syntax() {
        return err(format!(
            "line {line_no} is not valid JSON ({}); each line of an NCCL Inspector log is one JSON record",
            commgate_core::input::plain_message(&e.to_string())
        ));
    }
    let value: Value = serde_json::from_slice(text).unwrap_or(Value::Null);
    if !value.is_object() {
        return err(format!("line {line_no} is {}, not a JSON object; {REQUIRED}", kind(&value)));
    }
    for part in ["header", "coll_perf"] {
        if let Some(v) = value.get(part).filter(|v| !v.is_object() && !v.is_null()) {
            return err(format!("line {line_no}: `{part}` is {}, not an object; {REQUIRED}", kind(v)));
        }
    }
    for (part, field, expected) in FIELDS {
        let Some(v) = value.get(part).and_then(|p| p.get(field)).filter(|v| !v.is_null()) else { continue };
        if !expected.accepts(v) {
            return err(format!(
                "line {line_no}: `{part}.{field}` is {}, not {}; pass the logs the NCCL Inspector plugin wrote",
                kind(v),
                expected.words()
            ));
        }
    }
    err(format!("line {line_no}: {}; {REQUIRED}", commgate_core::input::plain_message(&e.to_string())))
}

/// What a JSON value is, as a message names it (a string quoted and cut short).
fn kind(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let shown: String = s.chars().filter(|c| !c.is_control()).take(40).collect();
            format!("the string {shown:?}")
        }
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("{b}"),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
        Value::Null => "null".to_string(),
    }
}
