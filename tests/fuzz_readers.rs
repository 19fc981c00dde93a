//! Every reader of untrusted input, fed raw bytes: random ones, and real inputs damaged (bytes
//! flipped, replaced, inserted, deleted, the file cut short). Whatever it is given, a reader
//! answers a value or an error whose message is one line; it never panics and never hangs. The
//! readers: Kineto traces, Nsight Systems exports (SQLite), NCCL Inspector logs, nccl-tests
//! output (JSON and text), result files, partial files and baseline stores.
//!
//! proptest over raw bytes rather than a coverage-guided fuzzer, so that it runs in the ordinary
//! test suite, in bounded time, on every commit: `COMMGATE_FUZZ_CASES` cases per reader (default
//! 256, about a second in all, which `.ci/run` keeps; 5,000 took 18 s on 2 cores). A failure
//! prints the smallest input proptest could shrink it to.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use commgate_core::result::{self, RunResult};
use commgate_testkit::synth::SynthSpec;
use commgate_trace::limits::ReadLimits;
use proptest::prelude::*;
use proptest::sample::Index;

fn cases() -> u32 {
    std::env::var("COMMGATE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)).expect(rel)
}

/// One way to damage an input.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(Index),
    Flip(Index, u8),
    Replace(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<Index>().prop_map(Damage::Truncate),
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Damage::Flip(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Damage::Replace(i, b)),
        (any::<Index>(), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(i, v)| Damage::Insert(i, v)),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Damage::Delete(i, n)),
    ]
}

fn apply(mut bytes: Vec<u8>, damages: &[Damage]) -> Vec<u8> {
    for d in damages {
        if bytes.is_empty() {
            break;
        }
        match d {
            Damage::Truncate(i) => bytes.truncate(i.index(bytes.len())),
            Damage::Flip(i, b) => {
                let at = i.index(bytes.len());
                bytes[at] ^= 1 << b;
            }
            Damage::Replace(i, b) => {
                let at = i.index(bytes.len());
                bytes[at] = *b;
            }
            Damage::Insert(i, v) => {
                let at = i.index(bytes.len() + 1);
                bytes.splice(at..at, v.iter().copied());
            }
            Damage::Delete(i, n) => {
                let at = i.index(bytes.len());
                let end = (at + n).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
    bytes
}

/// Random bytes, or a real input damaged: the strategy every reader is fed.
fn input(seeds: &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        (any::<Index>(), proptest::collection::vec(damage(), 1..6))
            .prop_map(move |(i, ds)| apply(seeds[i.index(seeds.len())].clone(), &ds)),
    ]
}

/// The reader's answer, checked: an error is one line.
fn one_line<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        let text = e.to_string();
        prop_assert!(!text.contains('\n'), "{what}: a multi-line error: {text:?}");
        prop_assert!(!text.is_empty(), "{what}: an empty error");
    }
    Ok(())
}

/// `bytes` in a fresh file named `name`, for the readers that take a path.
fn file_with(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

fn kineto_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| vec![fixture("hand_checked/rank-0.json"), fixture("seed_events.json")])
}

fn nsys_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rank-0.sqlite");
        commgate_testkit::nsys::write_rank_sqlite(&SynthSpec::small(), 0, &path).expect("sqlite");
        vec![std::fs::read(path).expect("read")]
    })
}

fn inspector_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| {
        let mut out = Vec::new();
        commgate_testkit::inspector::write_synthetic_log(&mut out, 0, 2, 4).expect("log");
        vec![out]
    })
}

fn nccl_tests_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| vec![fixture("nccl-tests/current-same.json"), fixture("nccl-tests/current-same.txt")])
}

fn result_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| vec![fixture("compare/current-same.json")])
}

fn store_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| vec![fixture("compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json")])
}

fn partial_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let traces = commgate_testkit::synth::write_all_ranks(&SynthSpec::small(), dir.path(), false).expect("traces");
        let opts = commgate_trace::attribute::AttributeOptions::default();
        let partial = commgate_trace::load::partial_paths(&traces[..1], &opts).expect("partial");
        vec![commgate_trace::partial::encode(&partial, false)]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn kineto(bytes in input(kineto_seeds())) {
        one_line("kineto", commgate_trace::kineto::parse_document_with(&bytes[..], ReadLimits::default()))?;
    }

    #[test]
    fn nsight_systems(bytes in input(nsys_seeds())) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file_with(&dir, "rank-0.sqlite", &bytes);
        one_line("nsys", commgate_trace::nsys::read_sqlite(&path, ReadLimits::default()))?;
    }

    #[test]
    fn nccl_inspector(bytes in input(inspector_seeds())) {
        one_line("inspector", commgate_trace::inspector::read_log(&bytes[..], ReadLimits::default(), false))?;
    }

    #[test]
    fn nccl_tests_output(bytes in input(nccl_tests_seeds())) {
        let text = String::from_utf8_lossy(&bytes);
        one_line("nccl-tests", result::nccl_tests::parse_any(&text))?;
    }

    #[test]
    fn result_file(bytes in input(result_seeds())) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file_with(&dir, "result.json", &bytes);
        one_line("result", result::load_result(&path))?;
        let text = String::from_utf8_lossy(&bytes);
        one_line("result", result::parse_versioned::<RunResult>(&text, "result"))?;
    }

    #[test]
    fn partial_file(bytes in input(partial_seeds())) {
        one_line("partial", commgate_trace::partial::read(&bytes[..], ReadLimits::default()))?;
    }

    #[test]
    fn baseline_store(bytes in input(store_seeds())) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file_with(&dir, "store.json", &bytes);
        one_line("store", commgate_gate::baseline::load_store(&path))?;
    }
}

/// The seeds themselves are read: the damage starts from inputs the readers accept.
#[test]
fn every_seed_is_read_undamaged() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(commgate_trace::kineto::parse_document_with(&kineto_seeds()[0][..], ReadLimits::default()).is_ok());
    let nsys = file_with(&dir, "rank-0.sqlite", &nsys_seeds()[0]);
    assert!(commgate_trace::nsys::read_sqlite(&nsys, ReadLimits::default()).is_ok());
    assert!(commgate_trace::inspector::read_log(&inspector_seeds()[0][..], ReadLimits::default(), false).is_ok());
    for s in nccl_tests_seeds() {
        assert!(result::nccl_tests::parse_any(&String::from_utf8_lossy(s)).is_ok());
    }
    assert!(result::load_result(&file_with(&dir, "r.json", &result_seeds()[0])).is_ok());
    assert!(commgate_trace::partial::read(&partial_seeds()[0][..], ReadLimits::default()).is_ok());
    assert!(commgate_gate::baseline::load_store(&file_with(&dir, "s.json", &store_seeds()[0])).is_ok());
}
