//! How long judging an nccl-tests sweep takes (`cargo bench --bench
//! sweep_compare`; harness = false). It prints, it does not assert.
//!
//! Each point of a sweep is a comparison of its own (a benchmark metric's estimate, with its
//! bootstrap), so the cost grows with the points. The cases: the 8-size sweep of the tests
//! (16 points, 50 iterations, 5 baseline runs), and a full-range sweep as fleets run it, 8 B to
//! 8 GiB by 2× (31 sizes, 62 points), 100 iterations on 8 processes, against 10 baseline runs.
//! Target: under 2 s for the full-range sweep, read and judged (what `check --result` adds to a
//! CI job). Reading (parse and convert the JSON) and judging are timed apart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a benchmark stops by panicking")]

use std::path::PathBuf;
use std::time::Instant;

use commgate_core::result::nccl_tests::parse;
use commgate_core::result::sweep::to_result;
use commgate_core::result::RunResult;
use commgate_gate::baseline::Baseline;
use commgate_gate::compare::CompareOptions;
use commgate_gate::decide::comparison::judge;
use commgate_testkit::nccl_tests::{json, NcclTestsSpec};

fn spec(seed: u64, sizes: &[u64], iterations: usize, processes: usize) -> NcclTestsSpec {
    NcclTestsSpec { sizes: sizes.to_vec(), iterations, processes, ..NcclTestsSpec::sweep(seed) }
}

fn read(text: &str) -> RunResult {
    let mut r = to_result(&parse(text).expect("nccl-tests JSON"), "2026-12-01T00:00:00Z");
    r.environment_profile = "H200".into();
    r
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn case(label: &str, sizes: &[u64], iterations: usize, processes: usize, runs: u64, target_ms: f64) {
    let texts: Vec<String> = (1..=runs + 1).map(|s| json(&spec(s, sizes, iterations, processes))).collect();
    let bytes: usize = texts[0].len();
    let mut read_ms = Vec::new();
    let mut judge_ms = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let current = read(&texts[runs as usize]);
        read_ms.push(start.elapsed().as_secs_f64() * 1e3);
        let baseline =
            Baseline { path: PathBuf::from("bench"), runs: texts[..runs as usize].iter().map(|t| read(t)).collect() };
        let start = Instant::now();
        let c = judge(&baseline, &current, &CompareOptions::default());
        judge_ms.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(c.metrics.len(), 2 * sizes.len());
        std::hint::black_box(&c);
    }
    let (r, j) = (median(read_ms), median(judge_ms));
    println!(
        "{label}: {} points × {iterations} iterations × {processes} processes, {runs} baseline runs, {:.2} MB per sweep: \
         read {r:.1} ms, judged {j:.0} ms (median of 3)  {} (target < {target_ms} ms)",
        2 * sizes.len(),
        bytes as f64 / 1e6,
        if r + j < target_ms { "PASS" } else { "FAIL" }
    );
}

fn main() {
    let small: Vec<u64> = (0..8).map(|i| 1024u64 << (2 * i)).collect();
    case("the tests' sweep", &small, 50, 2, 5, 500.0);
    let full: Vec<u64> = (3..34).map(|i| 1u64 << i).collect();
    case("full range", &full, 100, 8, 10, 2000.0);
}
