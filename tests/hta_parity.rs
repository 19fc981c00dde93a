//! Parity with Holistic Trace Analysis on real traces: `--compat hta` reproduces HTA's per-rank
//! `comp_comm_overlap_pctg` (±0.01) and its merged totals, and the per-collective equal-share
//! sweep adds up to them. The traces and HTA's numbers for them live in `tests/fixtures/hta`
//! (from HTA's own test data; see its NOTICE); a checkout without them fails here rather than
//! passing without having checked anything.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_testkit::load::{load_files, Inputs};
use commgate_trace::attribute::{analyze_rank, AttributeOptions, Compat};
use serde_json::Value;

/// `tests/fixtures/hta`, which must hold `reference.json` and the traces it lists.
fn fixture_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hta");
    assert!(
        dir.join("reference.json").is_file(),
        "{} has no reference.json: the HTA parity fixtures are missing from this checkout",
        dir.display()
    );
    dir
}

fn reference(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).expect("reference")).expect("json")
}

/// A dataset's trace files, as reference.json lists them.
fn dataset_files(dir: &Path, dataset: &Value) -> Vec<PathBuf> {
    dataset["files"].as_array().expect("files").iter().map(|f| dir.join(f.as_str().expect("file"))).collect()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("reference field {key} missing"))
}

#[test]
fn hta_overlap_and_per_collective_shares_match_reference() {
    let dir = fixture_dir();
    let reference = reference(&dir);
    let opts = AttributeOptions { compat: Compat::Hta, ..AttributeOptions::default() };
    let mut checked = 0;
    for (name, dataset) in reference["datasets"].as_object().expect("datasets") {
        let files = dataset_files(&dir, dataset);
        let Inputs::Kineto(traces) = load_files(&files).expect("loads") else { panic!("{name}: not a trace") };
        let mut step_names: Vec<&str> = traces.iter().flat_map(|t| t.steps.iter().map(|s| s.name.as_str())).collect();
        step_names.sort_unstable();
        step_names.dedup();
        for t in &traces {
            let r = analyze_rank(t, &opts, step_names.len() >= 2);
            let expected = &dataset["per_rank"][r.rank.to_string()];
            let hta = &expected["hta"];
            let ctx = format!("{name} rank {}", r.rank);
            assert!((r.overlap_pct() - num(hta, "comp_comm_overlap_pctg")).abs() <= 0.01, "{ctx}: {}", r.overlap_pct());
            assert_eq!(r.comm_ns as f64 / 1e3, num(hta, "comm_merged_us"), "{ctx}: comm");
            assert_eq!(r.overlapped_ns as f64 / 1e3, num(hta, "overlap_us"), "{ctx}: overlap");
            assert_eq!(r.compute_ns as f64 / 1e3, num(hta, "compute_us"), "{ctx}: compute");
            assert_eq!(r.comm_kernels.len() as f64, num(hta, "n_comm_kernels"), "{ctx}: comm kernels");
            let per = expected["per_collective_hta_window"].as_object().expect("per collective");
            let got_names: Vec<&String> = r.by_collective.keys().collect();
            let mut want_names: Vec<&String> = per.keys().collect();
            want_names.sort();
            assert_eq!(got_names, want_names, "{ctx}: collectives");
            let (mut total, mut exposed) = (0.0, 0.0);
            for (coll, want) in per {
                let got = &r.by_collective[coll];
                assert!(
                    (got.total_ns / 1e3 - num(want, "comm_share_us")).abs() < 1e-6,
                    "{ctx} {coll}: share {}",
                    got.total_ns
                );
                assert!((got.exposed_ns / 1e3 - num(want, "exposed_share_us")).abs() < 1e-6, "{ctx} {coll}: exposed");
                assert_eq!(got.kernels as f64, num(want, "sync_count"), "{ctx} {coll}: sync");
                assert_eq!(got.payload_bytes as f64, num(want, "payload_bytes"), "{ctx} {coll}: payload");
                total += got.total_ns;
                exposed += got.exposed_ns;
            }
            // Where the reference lists HTA's communication kernels (start, length in µs, as it
            // rounds them), each of ours lies within 1 µs of it.
            if let Some(want) = expected.get("hta_comm_kernels").and_then(Value::as_array) {
                let got: Vec<(f64, f64)> =
                    r.comm_kernels.iter().map(|c| (c.ts as f64 / 1e3, (c.end - c.ts) as f64 / 1e3)).collect();
                assert_eq!(got.len(), want.len(), "{ctx}: comm kernels listed");
                for (g, w) in got.iter().zip(want) {
                    let (ts, dur) = (w[0].as_f64().expect("ts"), w[1].as_f64().expect("dur"));
                    assert!(
                        (g.0 - ts).abs() <= 1.0 && (g.1 - dur).abs() <= 1.0,
                        "{ctx}: kernel {g:?} vs [{ts}, {dur}]"
                    );
                }
            }
            assert!((total / 1e3 - num(hta, "comm_merged_us")).abs() < 1e-6, "{ctx}: shares add up");
            assert!((exposed / 1e3 - num(hta, "exposed_comm_us")).abs() < 1e-6, "{ctx}: exposed shares add up");
            checked += 1;
        }
    }
    assert_eq!(checked, 8, "every rank of every dataset was checked");
}

#[test]
fn hta_no_filter_matches_whole_trace_numbers() {
    let dir = fixture_dir();
    let reference = reference(&dir);
    let opts = AttributeOptions { compat: Compat::Hta, ..AttributeOptions::default() };
    for (name, dataset) in reference["datasets"].as_object().expect("datasets") {
        let files = dataset_files(&dir, dataset);
        let Inputs::Kineto(traces) = load_files(&files).expect("loads") else { panic!("{name}: not a trace") };
        for t in &traces {
            // Without a step window (as HTA without ProfilerStep names).
            let r = analyze_rank(t, &opts, false);
            let want = &dataset["per_rank"][r.rank.to_string()]["no_filter"];
            assert!(
                (r.overlap_pct() - num(want, "comp_comm_overlap_pctg")).abs() <= 0.01,
                "{name}: {}",
                r.overlap_pct()
            );
            assert_eq!(r.comm_ns as f64 / 1e3, num(want, "comm_merged_us"), "{name}: comm");
            assert_eq!(r.overlapped_ns as f64 / 1e3, num(want, "overlap_us"), "{name}: overlap");
        }
    }
}

#[test]
fn hta_parity_holds_through_the_streaming_entry_point() {
    let dir = fixture_dir();
    let reference = reference(&dir);
    let opts = AttributeOptions { compat: Compat::Hta, ..AttributeOptions::default() };
    for (name, dataset) in reference["datasets"].as_object().expect("datasets") {
        let files = dataset_files(&dir, dataset);
        let a = commgate_trace::load::attribute_paths(&files, &opts).expect("attributes");
        for r in &a.ranks {
            let want = num(&dataset["per_rank"][r.rank.to_string()]["hta"], "comp_comm_overlap_pctg");
            assert!((r.overlap_pct - want).abs() <= 0.01, "{name} rank {}: {} vs {want}", r.rank, r.overlap_pct);
        }
    }
}
