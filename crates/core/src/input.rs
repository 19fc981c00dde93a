//! Reading files the user hands over, before anything parses them: plain or gzip (told apart by
//! the first two bytes, never the name), read whole only up to a bound, and the parsers' error
//! messages put into the user's words, so that no Rust type name (`u32`, `struct RawEvent`) or
//! serde term (`variant`, `sequence`, `map`) reaches a terminal.
//!
//! A bottom layer like `output`: it imports nothing from the crate.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Cursor, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use flate2::read::MultiGzDecoder;

/// The gzip magic number.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The 16-byte header every SQLite database starts with (Nsight Systems' `--type sqlite`
/// export is one).
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// What a gzip input may expand to: at most this many times its size on disk, once past
/// [`INFLATION_FLOOR`]. Real profiler traces and logs expand 12–19× (the traces under
/// `tests/fixtures/hta/`, PyTorch 2.x and MI300X captures); a decompression bomb expands a
/// thousandfold, and 20 million kernels fit in 10 MB of gzip. Refusing past 64× bounds what a
/// small file can make commgate read (10 MB: 640 MB of JSON) with three times the margin of the
/// most compressible real trace.
pub const MAX_INFLATION: u64 = 64;

/// Decompressed bytes any gzip input may reach whatever its ratio (small files compress less
/// predictably).
pub const INFLATION_FLOOR: u64 = 64 << 20;

/// A gzip input that expanded past [`MAX_INFLATION`]: the error a read returns (inside an
/// `io::Error`), so that every reader's message names it instead of calling the data corrupt.
#[derive(Debug, thiserror::Error)]
#[error(
    "expands more than {MAX_INFLATION}x when decompressed ({compressed} bytes of gzip gave over {limit} bytes): \
     traces, logs and result files expand 10-20x, so this is a decompression bomb; \
     if the file is genuine, decompress it (gunzip) and pass the uncompressed file"
)]
pub struct InflationBomb {
    pub compressed: u64,
    pub limit: u64,
}

/// The bomb behind a failed read, if that is what stopped it.
pub fn inflation_bomb(e: &io::Error) -> Option<&InflationBomb> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<InflationBomb>())
}

/// Counts decompressed bytes and fails the read past the limit.
struct Inflation<R> {
    inner: R,
    read: u64,
    compressed: u64,
    limit: u64,
}

impl<R: Read> Read for Inflation<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                InflationBomb { compressed: self.compressed, limit: self.limit },
            ));
        }
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// An opened input: the (decompressed) bytes, whether they were gzip on disk, and whether the
/// file is an SQLite database (its header; the reader then holds the raw bytes, unread).
pub struct Opened {
    pub reader: Box<dyn Read + Send>,
    pub gzip: bool,
    pub sqlite: bool,
}

/// Why an input could not be opened. Each reads after the file name: `PATH: is a named pipe …`.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("does not exist")]
    NotFound,
    /// A symbolic link whose target does not exist.
    #[error("is a broken symbolic link (its target does not exist); fix or remove the link")]
    BrokenLink,
    /// A chain of symbolic links that leads back to itself.
    #[error("is a symbolic link loop (its links lead back to themselves); fix or remove the link")]
    LinkLoop,
    /// `-`: commgate reads files, not standard input.
    #[error("commgate does not read standard input; save the data to a file and pass its path")]
    Stdin,
    /// A FIFO, socket, device or directory: not something commgate can read once, whole and
    /// without waiting on another process.
    #[error(
        "is {kind}, not a regular file; commgate reads inputs from regular files only (save the data to a file first)"
    )]
    NotRegular { kind: &'static str },
    #[error("cannot be opened: {0}")]
    Io(io::Error),
}

/// Opens `path` for reading, decompressing gzip (multi-member streams too) on the fly.
///
/// The file is opened once, and the opened handle (not the path) is checked to be a regular
/// file, so a name swapped between a check and the open cannot smuggle in something else.
/// Named pipes, sockets, devices and directories are refused: a FIFO would block until some
/// other process writes to it, and `/dev/stdin` or a pipe can be read only once. The open is
/// non-blocking so that opening a FIFO with no writer returns at once instead of hanging (the
/// flag changes nothing for a regular file, which is all that gets read).
pub fn open(path: &Path) -> Result<Opened, OpenError> {
    if path.as_os_str() == "-" {
        return Err(OpenError::Stdin);
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    let meta = file.metadata().map_err(OpenError::Io)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(OpenError::NotRegular { kind: describe_kind(&kind) });
    }
    from_file(file, meta.len()).map_err(OpenError::Io)
}

/// A failed open in the user's words: a missing file, a dangling link, or the system's reason.
fn open_error(path: &Path, e: io::Error) -> OpenError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return OpenError::LinkLoop;
    }
    if e.kind() != io::ErrorKind::NotFound {
        // What cannot be opened as a file says what it is (a socket answers ENXIO).
        return match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => OpenError::NotRegular { kind: describe_kind(&m.file_type()) },
            _ => OpenError::Io(e),
        };
    }
    match path.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => OpenError::BrokenLink,
        _ => OpenError::NotFound,
    }
}

/// What a directory's entry is once its links are followed: `Ok(true)` a regular file,
/// `Ok(false)` a directory, and anything else (a named pipe, a socket, a device, a broken link,
/// a link loop) the reason it cannot be read, for an error that names it: a directory of
/// inputs is read as if each file in it were named, so none is skipped silently.
pub fn file_or_dir(path: &Path) -> Result<bool, OpenError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) if m.is_dir() => Ok(false),
        Ok(m) => Err(OpenError::NotRegular { kind: describe_kind(&m.file_type()) }),
        Err(e) => Err(open_error(path, e)),
    }
}

/// What a file that is not a regular file is, as a message names it.
pub fn describe_kind(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Wraps an opened regular file: the first bytes tell gzip and SQLite from plain, and are put
/// back in front of the rest, so the file is read once, front to back.
fn from_file(mut file: File, size: u64) -> io::Result<Opened> {
    let mut magic = [0u8; 16];
    let n = read_prefix(&mut file, &mut magic)?;
    let gzip = n >= 2 && magic[..2] == GZIP_MAGIC;
    let sqlite = n == SQLITE_MAGIC.len() && &magic == SQLITE_MAGIC;
    let whole = Cursor::new(magic).take(n as u64).chain(file);
    let reader: Box<dyn Read + Send> = if gzip {
        let limit = size.saturating_mul(MAX_INFLATION).max(INFLATION_FLOOR);
        let inflate = MultiGzDecoder::new(BufReader::with_capacity(1 << 16, whole));
        Box::new(Inflation { inner: inflate, read: 0, compressed: size, limit })
    } else {
        Box::new(whole)
    };
    Ok(Opened { reader, gzip, sqlite })
}

fn read_prefix(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while let Some(rest) = buf.get_mut(n..).filter(|r| !r.is_empty()) {
        match file.read(rest) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Why a whole-file read gave no text.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("does not exist")]
    NotFound,
    /// The file could not be opened as an input (not `NotFound`: that is the variant above).
    #[error("{0}")]
    Open(OpenError),
    #[error("cannot be read: {0}")]
    Io(io::Error),
    #[error("the gzip data is corrupt or truncated ({0}); re-copy the file")]
    Gzip(io::Error),
    /// A gzip input past [`MAX_INFLATION`].
    #[error("{0}")]
    Bomb(io::Error),
    #[error("holds more than {} MiB{}; it is not a file commgate wrote", .limit >> 20, if *.gzip { " once decompressed" } else { "" })]
    TooLarge { limit: u64, gzip: bool },
    #[error("is not UTF-8 text (byte {offset}); is it binary, or compressed with something other than gzip?")]
    NotText { offset: usize },
}

/// Reads a whole text file, plain or gzip, refusing more than `limit` bytes (decompressed), so
/// a multi-gigabyte trace passed where a small JSON file belongs fails fast instead of filling
/// memory.
pub fn read_text(path: &Path, limit: u64) -> Result<String, TextError> {
    let opened = open(path).map_err(|e| match e {
        OpenError::NotFound => TextError::NotFound,
        other => TextError::Open(other),
    })?;
    let gzip = opened.gzip;
    let mut bytes = Vec::new();
    opened.reader.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| {
        if inflation_bomb(&e).is_some() {
            TextError::Bomb(e)
        } else if gzip {
            TextError::Gzip(e)
        } else {
            TextError::Io(e)
        }
    })?;
    if bytes.len() as u64 > limit {
        return Err(TextError::TooLarge { limit, gzip });
    }
    String::from_utf8(bytes).map_err(|e| TextError::NotText { offset: e.utf8_error().valid_up_to() })
}

/// What kind of JSON value a document starts with, from its first non-blank byte: `a JSON
/// array`, `a JSON string`, … (for "is not a …" messages).
pub fn json_kind(text: &[u8]) -> &'static str {
    let first = text.iter().copied().find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'));
    match first {
        Some(b'{') => "a JSON object",
        Some(b'[') => "a JSON array",
        Some(b'"') => "a JSON string",
        Some(b'-' | b'0'..=b'9') => "a number",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(_) => "not JSON",
        None => "empty",
    }
}

/// commgate's own JSON files, and the inputs they are most often mistaken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    /// What `commgate bench` writes.
    ResultFile,
    /// A store under `baselines/` (`commgate baseline update`).
    BaselineFile,
    /// What `commgate check --output` writes.
    CheckReport,
    /// `commgate attribute --format json`.
    AttributionReport,
    ProfilerTrace,
    SeedEvents,
}

impl DocKind {
    /// Whether a caller that asked for "a `what`" (`commgate result file`, `baseline file`,
    /// `commgate check report`) has this kind.
    pub fn is(self, what: &str) -> bool {
        match self {
            DocKind::ResultFile => what.contains("result"),
            DocKind::BaselineFile => what.contains("baseline"),
            DocKind::CheckReport => what.contains("report") && !what.contains("attribution"),
            DocKind::AttributionReport => what.contains("attribution"),
            DocKind::ProfilerTrace => what.contains("trace"),
            DocKind::SeedEvents => what.contains("events"),
        }
    }

    /// The name a message gives it ("is a commgate check report, not …").
    pub fn noun(self) -> &'static str {
        match self {
            DocKind::ResultFile => "commgate result file",
            DocKind::BaselineFile => "commgate baseline file",
            DocKind::CheckReport => "commgate check report",
            DocKind::AttributionReport => "commgate attribution report",
            DocKind::ProfilerTrace => "PyTorch profiler trace",
            DocKind::SeedEvents => "aggregated events file",
        }
    }
}

/// The top-level keys seen so far that tell the [`DocKind`]s apart (only those are kept, so a
/// document with a million keys costs nothing).
#[derive(Debug, Default, Clone, Copy)]
pub struct DocKeys {
    schema_version: bool,
    tool: bool,
    workload: bool,
    runs: bool,
    verdict: bool,
    by_collective: bool,
    trace_events: bool,
    events: bool,
}

impl DocKeys {
    pub fn saw(&mut self, key: &str) {
        match key {
            "schema_version" => self.schema_version = true,
            "tool" => self.tool = true,
            "workload" => self.workload = true,
            "runs" => self.runs = true,
            "verdict" => self.verdict = true,
            "by_collective" => self.by_collective = true,
            "traceEvents" => self.trace_events = true,
            "events" => self.events = true,
            _ => {}
        }
    }

    /// What the keys say the document is, when they say it clearly.
    pub fn kind(&self) -> Option<DocKind> {
        let versioned = self.schema_version;
        if self.trace_events {
            Some(DocKind::ProfilerTrace)
        } else if versioned && self.runs {
            Some(DocKind::BaselineFile)
        } else if versioned && self.verdict {
            Some(DocKind::CheckReport)
        } else if versioned && self.tool && self.workload {
            Some(DocKind::ResultFile)
        } else if versioned && self.by_collective {
            Some(DocKind::AttributionReport)
        } else if self.events {
            Some(DocKind::SeedEvents)
        } else {
            None
        }
    }
}

/// A serde (serde_json or toml) error message in the user's words: the position suffix
/// dropped (callers say where), type names replaced by what a JSON or TOML writer knows
/// (`u32` → a whole number, `struct Foo` → an object, `sequence` → an array), `variant` and
/// `field` said as `value` and `key`.
pub fn plain_message(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => &message[..i],
        _ => message,
    };
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        return match rest.split_once(", expected ") {
            Some((found, expected)) => format!("found {}, expected {}", found_value(found), expected_value(expected)),
            None => format!("found {}", found_value(rest)),
        };
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        return match rest.split_once(", expected ") {
            Some((found, expected)) => format!("{} is not {}", found_value(found), expected_value(expected)),
            None => format!("invalid value {}", found_value(rest)),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        return choices("unknown value", rest);
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        return choices("unknown key", rest);
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!("{rest} is missing");
    }
    if let Some(rest) = message.strip_prefix("duplicate field ") {
        return format!("{rest} appears twice");
    }
    if message.starts_with("EOF while parsing") {
        return "the JSON ends early (is the file truncated?)".to_string();
    }
    if message.starts_with("data did not match any variant") {
        return "has a shape commgate does not read".to_string();
    }
    if let Some(rest) = message.strip_prefix("invalid length ") {
        return match rest.split_once(", expected ") {
            Some((n, expected)) => format!("holds {n} elements, expected {}", expected_value(expected)),
            None => format!("holds {rest} elements"),
        };
    }
    message.to_string()
}

/// `` `x`, expected one of `a`, `b` `` → `` `x`; expected one of a, b `` (and the `` `a` or `b` ``,
/// `` `a` `` and "there are no variants/fields" forms).
fn choices(lead: &str, rest: &str) -> String {
    let Some((name, expected)) = rest.split_once(", ") else { return format!("{lead} {rest}") };
    let listed = expected
        .strip_prefix("expected one of ")
        .or_else(|| expected.strip_prefix("expected "))
        .map(|list| list.replace('`', "").replace(" or ", ", "));
    match listed {
        Some(list) => format!("{lead} {name}; expected one of {list}"),
        None => format!("{lead} {name}"),
    }
}

/// serde's "unexpected" half: `integer `5`` → `the number 5`, `sequence` → `an array`, …
fn found_value(found: &str) -> String {
    let inner = |prefix: &str| found.strip_prefix(prefix).map(|v| v.trim_matches('`').to_string());
    if let Some(v) = inner("integer ").or_else(|| inner("floating point ")) {
        return format!("the number {v}");
    }
    if let Some(v) = inner("boolean ") {
        return v;
    }
    if let Some(v) = found.strip_prefix("string ") {
        return format!("the string {v}");
    }
    match found {
        "sequence" => "an array".to_string(),
        "map" => "an object".to_string(),
        "unit value" | "null" | "unit" => "null".to_string(),
        "character" => "a character".to_string(),
        other => other.to_string(),
    }
}

/// serde's "expected" half, with Rust's types said as JSON/TOML values.
fn expected_value(expected: &str) -> String {
    let e = expected.trim();
    let e = e.strip_prefix("a value of type ").unwrap_or(e);
    if e.starts_with("struct ") || e.starts_with("map") || e == "a map" {
        return "an object".to_string();
    }
    if e.starts_with("enum ") || e == "variant identifier" {
        return "one of the listed values".to_string();
    }
    if e.starts_with("tuple") || e == "a sequence" || e.starts_with("sequence") {
        return "an array".to_string();
    }
    match e {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number ≥ 0".to_string(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "a boolean" | "bool" => "true or false".to_string(),
        "a string" | "string" | "a borrowed string" | "str" => "a string".to_string(),
        "unit" | "null" => "null".to_string(),
        "char" | "a character" => "a single character".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn serde_messages_lose_their_rust_names() {
        let cases = [
            (
                "invalid type: integer `5`, expected struct RawEvent at line 1 column 2",
                "found the number 5, expected an object",
            ),
            ("invalid type: sequence, expected struct Sniff", "found an array, expected an object"),
            ("invalid type: string \"x\", expected u32", "found the string \"x\", expected a whole number ≥ 0"),
            ("invalid type: map, expected f64", "found an object, expected a number"),
            ("invalid value: integer `-1`, expected u32", "the number -1 is not a whole number ≥ 0"),
            (
                "unknown variant `tpu`, expected one of `auto`, `cuda`, `cpu`, `mock`",
                "unknown value `tpu`; expected one of auto, cuda, cpu, mock",
            ),
            ("unknown variant `x`, expected `a` or `b`", "unknown value `x`; expected one of a, b"),
            ("unknown field `bogus`, expected one of `a`, `b`", "unknown key `bogus`; expected one of a, b"),
            ("unknown field `bogus`, there are no fields", "unknown key `bogus`"),
            ("missing field `tool`", "`tool` is missing"),
            ("EOF while parsing an object at line 3 column 0", "the JSON ends early (is the file truncated?)"),
            ("expected `,` or `}` at line 2 column 5", "expected `,` or `}`"),
        ];
        for (raw, plain) in cases {
            assert_eq!(plain_message(raw), plain, "{raw}");
        }
    }

    #[test]
    fn real_serde_errors_carry_no_type_names() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Internal {
            n: u32,
        }
        for doc in ["{\"n\": \"x\"}", "{\"n\": -1}", "5", "{}", "{\"n\": 1.5}"] {
            let e = serde_json::from_str::<Internal>(doc).unwrap_err();
            let m = plain_message(&e.to_string());
            assert!(!m.contains("Internal") && !m.contains("u32") && !m.contains(" line "), "{doc}: {m}");
        }
    }

    #[test]
    fn top_level_keys_tell_commgate_files_apart() {
        let kind = |keys: &[&str]| {
            let mut k = DocKeys::default();
            keys.iter().for_each(|key| k.saw(key));
            k.kind()
        };
        assert_eq!(kind(&["schema_version", "tool", "workload", "rows"]), Some(DocKind::ResultFile));
        assert_eq!(kind(&["schema_version", "verdict", "bench"]), Some(DocKind::CheckReport));
        assert_eq!(kind(&["schema_version", "workload_id", "runs"]), Some(DocKind::BaselineFile));
        assert_eq!(kind(&["schema_version", "source", "by_collective"]), Some(DocKind::AttributionReport));
        assert_eq!(kind(&["traceEvents", "schemaVersion"]), Some(DocKind::ProfilerTrace));
        assert_eq!(kind(&["events"]), Some(DocKind::SeedEvents));
        assert_eq!(kind(&["tool", "workload"]), None, "no schema_version: not commgate's");
    }

    #[test]
    fn json_kind_names_the_first_value() {
        assert_eq!(json_kind(b"  [1]"), "a JSON array");
        assert_eq!(json_kind(b"\n{}"), "a JSON object");
        assert_eq!(json_kind(b"\"x\""), "a JSON string");
        assert_eq!(json_kind(b"-3"), "a number");
        assert_eq!(json_kind(b""), "empty");
        assert_eq!(json_kind(b"\x1f\x8b"), "not JSON");
    }

    #[test]
    fn a_read_past_the_inflation_limit_fails_naming_the_bomb() {
        let mut r = Inflation { inner: &[b' '; 100][..], read: 0, compressed: 1, limit: 10 };
        let mut buf = Vec::new();
        let e = r.read_to_end(&mut buf).expect_err("past the limit");
        let bomb = inflation_bomb(&e).expect("the bomb error");
        assert_eq!((bomb.compressed, bomb.limit), (1, 10));
        assert!(e.to_string().contains("decompression bomb"), "{e}");
        // Within the limit nothing changes.
        let mut r = Inflation { inner: &[b' '; 10][..], read: 0, compressed: 1, limit: 10 };
        assert_eq!(r.read_to_end(&mut Vec::new()).expect("within"), 10);
    }

    #[test]
    fn read_text_decompresses_gzip_and_bounds_the_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("a.json");
        std::fs::write(&plain, "{\"a\": 1}").expect("write");
        assert_eq!(read_text(&plain, 100).expect("reads"), "{\"a\": 1}");
        let gz = dir.path().join("a.json.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&vec![b' '; 5000]).expect("compress");
        std::fs::write(&gz, enc.finish().expect("finish")).expect("write");
        assert_eq!(read_text(&gz, 5000).expect("reads").len(), 5000);
        assert!(matches!(read_text(&gz, 4999), Err(TextError::TooLarge { gzip: true, .. })));
        assert!(matches!(read_text(&dir.path().join("none"), 10), Err(TextError::NotFound)));
        let binary = dir.path().join("b.bin");
        std::fs::write(&binary, [b'{', 0xff, 0xfe]).expect("write");
        assert!(matches!(read_text(&binary, 10), Err(TextError::NotText { offset: 1 })));
        let cut = dir.path().join("cut.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(b"{\"a\": 1}").expect("compress");
        let bytes = enc.finish().expect("finish");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
        assert!(matches!(read_text(&cut, 100), Err(TextError::Gzip(_))));
    }

    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("rank-0.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        // No writer ever opens the FIFO: a blocking open would hang here.
        assert!(matches!(open(&fifo), Err(OpenError::NotRegular { kind: "a named pipe (FIFO)" })));
        assert!(matches!(open(Path::new("/dev/null")), Err(OpenError::NotRegular { kind: "a device" })));
        assert!(matches!(open(dir.path()), Err(OpenError::NotRegular { kind: "a directory" })));
        assert!(matches!(open(Path::new("-")), Err(OpenError::Stdin)));
        let dangling = dir.path().join("gone.json");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("symlink");
        assert!(matches!(open(&dangling), Err(OpenError::BrokenLink)));
        assert!(matches!(open(&dir.path().join("none")), Err(OpenError::NotFound)));
        let message = read_text(&fifo, 10).expect_err("refused").to_string();
        assert!(message.starts_with("is a named pipe (FIFO), not a regular file;"), "{message}");
        // A link to a regular file is read through (the user named it).
        let plain = dir.path().join("a.json");
        std::fs::write(&plain, "{}").expect("write");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&plain, &link).expect("symlink");
        assert_eq!(read_text(&link, 10).expect("reads"), "{}");
    }

    #[test]
    fn files_shorter_than_the_magic_number_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bytes in [&b""[..], b"7", b"\x1f", b"[]"] {
            let path = dir.path().join("short");
            std::fs::write(&path, bytes).expect("write");
            let mut read = Vec::new();
            open(&path).expect("opens").reader.read_to_end(&mut read).expect("reads");
            assert_eq!(read, bytes);
        }
    }

    #[test]
    fn sqlite_is_told_by_its_whole_header_and_the_bytes_stay_readable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("export.json");
        let mut db = SQLITE_MAGIC.to_vec();
        db.extend_from_slice(b"rest of the page");
        for (bytes, sqlite) in [(&db[..], true), (&SQLITE_MAGIC[..15], false), (b"SQLite format 4\0xx", false)] {
            std::fs::write(&path, bytes).expect("write");
            let opened = open(&path).expect("opens");
            assert_eq!((opened.sqlite, opened.gzip), (sqlite, false), "{bytes:?}");
            let mut read = Vec::new();
            opened.reader.take(1 << 10).read_to_end(&mut read).expect("reads");
            assert_eq!(read, bytes);
        }
    }
}
