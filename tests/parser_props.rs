//! Property tests of the trace reader on damaged input: whatever is done to a good trace
//! (truncated, bytes flipped, replaced, inserted or deleted, `:` and `,` swapped, a slice
//! duplicated), plain or gzip, the parser never panics and answers either a document or an
//! error whose message is one line. A second property reads the same bytes a few at a time and
//! checks it gets the same answer as reading them whole, which exercises every buffer refill.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::io::{Read, Write};
use std::path::PathBuf;

use commgate_testkit::dense::{write_dense, DenseSpec};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::kineto::{parse_document, parse_document_without_fast_path, Document};
use commgate_trace::limits::ReadLimits;
use commgate_trace::load::{attribute_paths, read_file};
use flate2::write::GzEncoder;
use flate2::Compression;
use proptest::prelude::*;
use proptest::sample::Index;

const RANK_0: &[u8] = include_bytes!("fixtures/hand_checked/rank-0.json");
const RANK_1: &[u8] = include_bytes!("fixtures/hand_checked/rank-1.json");
const SEED: &[u8] = include_bytes!("fixtures/seed_events.json");

/// One way to damage a document.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(Index),
    FlipBit(Index, u8),
    Replace(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    /// Turns the n-th `:` or `,` into the other.
    SwapColonComma(Index),
    /// Copies `len` bytes from one place to another.
    Duplicate(Index, usize, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), 0u8..8).prop_map(|(i, bit)| Mutation::FlipBit(i, bit)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        // JSON punctuation is likelier than a uniform byte to reach deep into the parser.
        (
            any::<Index>(),
            prop::collection::vec(prop_oneof![any::<u8>(), prop::sample::select(b"{}[]\":,-.0e".to_vec())], 1..8)
        )
            .prop_map(|(i, bytes)| Mutation::Insert(i, bytes)),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<Index>().prop_map(Mutation::SwapColonComma),
        (any::<Index>(), 1usize..64, any::<Index>()).prop_map(|(from, n, to)| Mutation::Duplicate(from, n, to)),
    ]
}

fn apply(doc: &mut Vec<u8>, m: &Mutation) {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len) };
    match m {
        Mutation::Truncate(i) => {
            let cut = at(i, doc.len());
            doc.truncate(cut);
        }
        Mutation::FlipBit(i, bit) if !doc.is_empty() => {
            let k = at(i, doc.len());
            doc[k] ^= 1 << bit;
        }
        Mutation::Replace(i, b) if !doc.is_empty() => {
            let k = at(i, doc.len());
            doc[k] = *b;
        }
        Mutation::Insert(i, bytes) => {
            let k = at(i, doc.len() + 1);
            doc.splice(k..k, bytes.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let k = at(i, doc.len());
            let end = (k + n).min(doc.len());
            doc.drain(k..end);
        }
        Mutation::SwapColonComma(i) => {
            let marks: Vec<usize> = (0..doc.len()).filter(|&k| matches!(doc[k], b':' | b',')).collect();
            if !marks.is_empty() {
                let k = marks[at(i, marks.len())];
                doc[k] = if doc[k] == b':' { b',' } else { b':' };
            }
        }
        Mutation::Duplicate(from, n, to) => {
            let k = at(from, doc.len());
            let slice = doc[k..(k + n).min(doc.len())].to_vec();
            let t = at(to, doc.len() + 1);
            doc.splice(t..t, slice);
        }
        Mutation::FlipBit(..) | Mutation::Replace(..) => {}
    }
}

/// A good input with one to four mutations applied.
fn damaged() -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(vec![RANK_0, RANK_1, SEED]), prop::collection::vec(mutation(), 1..5)).prop_map(
        |(base, mutations)| {
            let mut doc = base.to_vec();
            for m in &mutations {
                apply(&mut doc, m);
            }
            doc
        },
    )
}

/// A kernel-dense trace as PyTorch 2.x lays it out (multi-line events, NCCL metadata), for the
/// fast path's comparison with serde.
static DENSE: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let spec = DenseSpec { kernels: 120, steps: 3, distinct_names: 6, rank: 0, world_size: 2 };
    let mut out = Vec::new();
    write_dense(&spec, &mut out).expect("writes");
    out
});

/// A kernel-dense trace of about 2 MB: large enough that the reader splits its buffer over two
/// threads.
static DENSE_LARGE: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let spec = DenseSpec { kernels: 2_000, steps: 4, distinct_names: 40, rank: 0, world_size: 2 };
    let mut out = Vec::new();
    write_dense(&spec, &mut out).expect("writes");
    out
});

/// [`damaged`], or the dense trace with the same damage.
fn damaged_or_dense() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        damaged(),
        prop::collection::vec(mutation(), 0..4).prop_map(|mutations| {
            let mut doc = DENSE.clone();
            for m in &mutations {
                apply(&mut doc, m);
            }
            doc
        }),
    ]
}

/// A numeric field of a Kineto trace (event, its args, or the top level).
fn field() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "ts",
        "dur",
        "pid",
        "tid",
        "correlation",
        "stream",
        "Seq",
        "In msg nelems",
        "Out msg nelems",
        "rank",
        "world_size",
        "baseTimeNanoseconds",
    ])
}

/// JSON number text, from the ordinary to the absurd.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (-5i64..5).prop_map(|n| n.to_string()),
        any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(|x| format!("{x:e}")),
        prop::sample::select(vec![
            "0".to_string(),
            "-0".to_string(),
            "1e300".to_string(),
            "-1e300".to_string(),
            "4611686018427387.904".to_string(),
            "9223372036854775807".to_string(),
            "-9223372036854775808".to_string(),
            "18446744073709551616".to_string(),
            "0.0000000001".to_string(),
        ]),
    ]
}

/// A reader that hands out at most `chunk` bytes per call.
struct Chunked<'a> {
    rest: &'a [u8],
    chunk: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.rest.len().min(buf.len()).min(self.chunk);
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

/// What a parse came to, comparable across two parses (the trace's maps are not).
fn summary(result: &Result<Document, impl std::fmt::Display>) -> String {
    match result {
        Ok(Document::Timeline(t)) => format!(
            "trace rank={:?} world={:?} events={} kernels={:?} launches={} ops={} steps={:?} base={:?}",
            t.rank,
            t.world_size,
            t.num_events,
            t.kernels,
            t.launches.len(),
            t.comm_ops.len(),
            t.steps,
            t.base_time_ns
        ),
        Ok(Document::Events(events)) => format!("events {events:?}"),
        Err(e) => format!("error {e}"),
    }
}

fn assert_one_line(message: &str) -> Result<(), TestCaseError> {
    prop_assert!(!message.trim().is_empty(), "an empty error message");
    prop_assert!(!message.contains(['\n', '\r']), "a multi-line error message: {message:?}");
    Ok(())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).expect("compress");
    enc.finish().expect("compress")
}

fn temp_file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write a test file");
    path
}

/// `default` cases, or `PROPTEST_CASES` when set (for a longer hunt: `PROPTEST_CASES=20000`).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn the_good_fixtures_parse() {
    for doc in [RANK_0, RANK_1, SEED] {
        let parsed = parse_document(doc);
        assert!(parsed.is_ok(), "{}", summary(&parsed));
    }
}

/// On every real trace at hand (PyTorch 2.x, MI300X, HTA's test data: 85 MB of JSON), the fast
/// path and serde read the same document, kernel for kernel.
#[test]
fn the_fast_path_reads_real_traces_exactly_as_serde_does() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hta");
    let mut read = 0;
    let sets = std::fs::read_dir(&dir).expect("fixtures").map(|e| e.expect("entry").path()).filter(|p| p.is_dir());
    for set in sets {
        for file in std::fs::read_dir(set).expect("a fixture set") {
            let path = file.expect("file").path();
            if !path.to_string_lossy().ends_with(".json.gz") {
                continue;
            }
            let mut json = Vec::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("opens"))
                .read_to_end(&mut json)
                .expect("decompresses");
            let fast = format!("{:?}", parse_document(&json[..]).expect("a trace"));
            let serde =
                format!("{:?}", parse_document_without_fast_path(&json[..], ReadLimits::default()).expect("a trace"));
            assert!(fast == serde, "{} reads differently through the fast path", path.display());
            read += 1;
        }
    }
    assert!(read >= 8, "only {read} fixture traces");
}

/// Two all-reduce kernels of 2^62 elements each: the per-collective payload sum overflows `u64`
/// (a panic in debug builds, a wrapped total in release).
#[test]
fn huge_message_sizes_do_not_overflow_the_payload_sum() {
    let kernel = |ts: u32| {
        format!(
            r#"{{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":7,"ts":{ts},"dur":10,
            "args":{{"Collective name":"allreduce","In msg nelems":4611686018427387904,"Out msg nelems":4611686018427387904,
            "dtype":"Float","stream":7,"correlation":{ts}}}}}"#
        )
    };
    let doc = format!(r#"{{"traceEvents":[{},{}]}}"#, kernel(100), kernel(200));
    let dir = tempfile::TempDir::new().expect("tempdir");
    let path = temp_file(&dir, "rank-0.json", doc.as_bytes());
    let result = attribute_paths(&[path], &AttributeOptions::default());
    assert!(result.is_ok(), "{:?}", result.err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn damaged_documents_parse_or_fail_on_one_line(doc in damaged()) {
        if let Err(e) = parse_document(&doc[..]) {
            assert_one_line(&e.to_string())?;
        }
    }

    /// The fast path reads every element exactly as serde would, or leaves it to serde: on any
    /// damage, the document (every kernel, launch, op, name and flag) or the error message,
    /// offset included, is the same with and without it.
    #[test]
    fn the_fast_path_reads_exactly_as_serde_does(doc in damaged_or_dense()) {
        let full = |r: Result<Document, commgate_trace::reader::ReadError>| match r {
            Ok(d) => format!("{d:?}"),
            Err(e) => format!("error {e}"),
        };
        let fast = full(parse_document(&doc[..]));
        let serde = full(parse_document_without_fast_path(&doc[..], ReadLimits::default()));
        prop_assert_eq!(fast, serde);
    }

    #[test]
    fn reading_in_small_chunks_gives_the_same_answer(doc in damaged(), chunk in 1usize..48) {
        let whole = summary(&parse_document(&doc[..]));
        let chunked = summary(&parse_document(Chunked { rest: &doc, chunk }));
        prop_assert_eq!(whole, chunked);
    }

    #[test]
    fn truncation_at_any_byte_is_an_error_or_a_complete_document(cut in any::<Index>()) {
        let doc = &RANK_0[..cut.index(RANK_0.len())];
        match parse_document(doc) {
            Err(e) => assert_one_line(&e.to_string())?,
            // Only trailing whitespace may be cut off a document that still parses.
            Ok(_) => prop_assert!(RANK_0[doc.len()..].iter().all(u8::is_ascii_whitespace)),
        }
    }

    #[test]
    fn gzip_of_damaged_documents_reads_like_the_plain_bytes(doc in damaged()) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let path = temp_file(&dir, "rank-0.json.gz", &gzip(&doc));
        let from_file = read_file(&path);
        if let Err(e) = &from_file {
            assert_one_line(&e.to_string())?;
            prop_assert!(e.to_string().contains("rank-0.json.gz"), "{}", e);
        }
        let plain = parse_document(&doc[..]);
        prop_assert_eq!(from_file.is_ok(), plain.is_ok(), "{} vs {}", summary(&from_file), summary(&plain));
    }

    #[test]
    fn damaged_gzip_streams_read_or_fail_on_one_line(
        base in prop::sample::select(vec![RANK_0, RANK_1, SEED]),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut gz = gzip(base);
        for m in &mutations {
            apply(&mut gz, m);
        }
        let dir = tempfile::TempDir::new().expect("tempdir");
        let path = temp_file(&dir, "trace.json.gz", &gz);
        if let Err(e) = read_file(&path) {
            assert_one_line(&e.to_string())?;
            prop_assert!(e.to_string().contains("trace.json.gz"), "{}", e);
        }
    }
}

proptest! {
    // Two parses of 2 MB each per case (in a debug build): fewer cases.
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// Where the reader splits its buffer over two threads, the document or the error is still
    /// serde's, whatever the damage and wherever it falls (before, at or after the split).
    #[test]
    fn reading_on_two_threads_reads_exactly_as_serde_does(mutations in prop::collection::vec(mutation(), 0..3)) {
        let mut doc = DENSE_LARGE.clone();
        for m in &mutations {
            apply(&mut doc, m);
        }
        let full = |r: Result<Document, commgate_trace::reader::ReadError>| match r {
            Ok(d) => format!("{d:?}"),
            Err(e) => format!("error {e}"),
        };
        let fast = full(parse_document(&doc[..]));
        let serde = full(parse_document_without_fast_path(&doc[..], ReadLimits::default()));
        prop_assert!(fast == serde, "the two readings differ");
    }
}

proptest! {
    // The whole computation, on files: fewer cases, each one runs attribution.
    #![proptest_config(ProptestConfig { cases: cases(64) , ..ProptestConfig::default() })]

    #[test]
    fn attribution_of_damaged_files_never_panics(doc in damaged(), compress in any::<bool>()) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let bytes = if compress { gzip(&doc) } else { doc };
        let path = temp_file(&dir, "rank-0.json", &bytes);
        if let Err(e) = attribute_paths(&[path], &AttributeOptions::default()) {
            assert_one_line(&e.to_string())?;
        }
    }

    #[test]
    fn extreme_numbers_in_any_field_never_panic(
        base in prop::sample::select(vec![RANK_0, RANK_1]),
        edits in prop::collection::vec((any::<Index>(), field(), number()), 1..4),
    ) {
        let mut v: serde_json::Value = serde_json::from_slice(base).expect("fixture is JSON");
        let mut numbers = Vec::new();
        for (k, (which, field, number)) in edits.iter().enumerate() {
            let placeholder = serde_json::Value::from(format!("@@{k}@@"));
            numbers.push((format!("\"@@{k}@@\""), number.clone()));
            match *field {
                "rank" | "world_size" => v["distributedInfo"][*field] = placeholder,
                "baseTimeNanoseconds" => v[*field] = placeholder,
                _ => {
                    let events = v["traceEvents"].as_array_mut().expect("traceEvents");
                    let i = which.index(events.len());
                    let e = &mut events[i];
                    if ["ts", "dur", "pid", "tid"].contains(field) {
                        e[*field] = placeholder;
                    } else if e.get("args").is_some_and(serde_json::Value::is_object) {
                        e["args"][*field] = placeholder;
                    }
                }
            }
        }
        let mut text = serde_json::to_string(&v).expect("serialize");
        for (placeholder, number) in &numbers {
            text = text.replace(placeholder, number);
        }
        let dir = tempfile::TempDir::new().expect("tempdir");
        let path = temp_file(&dir, "rank-0.json", text.as_bytes());
        if let Err(e) = attribute_paths(&[path], &AttributeOptions::default()) {
            assert_one_line(&e.to_string())?;
        }
    }

    #[test]
    fn attribution_of_two_ranks_with_one_damaged_never_panics(doc in damaged()) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let good = temp_file(&dir, "rank-0.json", RANK_0);
        let bad = temp_file(&dir, "rank-1.json", &doc);
        if let Err(e) = attribute_paths(&[good, bad], &AttributeOptions::default()) {
            assert_one_line(&e.to_string())?;
        }
    }
}
