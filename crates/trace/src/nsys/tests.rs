use super::nvtx::parse_payload;
use super::*;

#[test]
fn uri_paths_keep_special_characters_as_names() {
    assert_eq!(uri_path("/tmp/a b?c#d%e.sqlite"), "/tmp/a%20b%3Fc%23d%25e.sqlite");
    assert_eq!(uri_path("/plain/rank-0_x.sqlite"), "/plain/rank-0_x.sqlite");
}

#[test]
fn payloads_read_pytorch_and_nccl_keys() {
    let m = parse_payload(r#"{"Collective name": "allreduce", "In msg nelems": 4, "dtype": "Float", "Seq": "7", "Process Group Name": 0}"#)
        .expect("parses");
    assert_eq!(m.collective.as_deref(), Some("allreduce"));
    assert_eq!((m.in_nelems, m.seq, m.pg_name.as_deref()), (Some(4), Some(7), Some("0")));
    let m = parse_payload(r#"{"Message size [bytes]": 1048576}"#).expect("parses");
    assert_eq!((m.shapes_bytes, m.in_nelems, m.dtype.as_deref()), (Some(1 << 20), Some(1 << 20), Some("uint8")));
}

#[test]
fn payloads_that_are_not_objects_say_what_they_are() {
    assert!(parse_payload("[1]").unwrap_err().contains("a JSON array"));
    assert!(parse_payload("{\"a\":").unwrap_err().starts_with("is not JSON"));
    assert!(parse_payload(&format!("\"{}\"", "x".repeat(70_000))).unwrap_err().contains("limit"));
}

#[test]
fn thread_ids_keep_the_whole_thread() {
    let gtid = (1234 << 24) | 99;
    assert_eq!(thread_ids(gtid), (1234, gtid));
}

#[test]
fn the_format_names_the_version_when_known() {
    assert_eq!(format_name(Some("3.11.1")), "nsys-sqlite 3.11.1");
    assert_eq!(format_name(None), "nsys-sqlite");
}

/// SQLite quotes a damaged file's schema in its message, over several lines: the error keeps one
/// line and a bounded length (found by the raw-bytes fuzz test of the readers).
#[test]
fn a_damaged_schema_quoted_by_sqlite_stays_one_short_line() {
    let schema = format!(
        "malformed database schema (T) - unrecognized token: \"`T (a INTEGER,\n  b TEXT{})\"",
        ",\n c".repeat(200)
    );
    let e =
        super::db_error("the table list", &rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(11), Some(schema)));
    assert!(!e.0.contains('\n'), "{}", e.0);
    assert!(
        e.0.starts_with("the table list: the SQLite database is damaged or truncated (malformed database schema"),
        "{}",
        e.0
    );
    assert!(e.0.chars().count() < 320, "{}", e.0.chars().count());
}
