//! How long one `compare` takes (`cargo bench --bench compare_speed`; harness = false).
//!
//! Normal sizes (target: under 100 ms): a 10-run × 1,000-sample baseline store against a
//! 1,000-sample run (history regime, the current run block-bootstrapped for every metric), and a
//! 2-run baseline (pooled regime: both sides bootstrapped), 1,000 resamples each.
//!
//! Huge rows (target: under 2 s; result files come from pull requests, so their size is chosen
//! by whoever wrote them): 1 run × 1,000,000 samples against 1,000,000 (pooled) and 10 runs ×
//! 1,000,000 against 1,000,000 (history), where every row is over `compare`'s sample limit and is
//! judged on a subsample. It prints, it does not assert.

use std::path::PathBuf;
use std::time::Instant;

use commgate_gate::baseline::Baseline;
use commgate_gate::compare::{CompareOptions, SAMPLE_LIMIT};
use commgate_gate::decide::comparison::judge;
use commgate_testkit::simulate::{synthetic_run, Effect, NoiseModel};

/// Times `compare` for `runs` baseline runs of `n` samples against one current run of `n`.
fn case(runs: usize, n: usize, repeats: usize, target_ms: f64) {
    let model = NoiseModel::SlowEpisodes;
    let current = synthetic_run(model, n, &Effect::shift(0.04), 99);
    let history = (0..runs).map(|i| synthetic_run(model, n, &Effect::NONE, i as u64)).collect();
    let baseline = Baseline { path: PathBuf::from("bench"), runs: history };
    let opts = CompareOptions::default();
    let mut times: Vec<f64> = (0..repeats)
        .map(|_| {
            let start = Instant::now();
            let c = judge(&baseline, &current, &opts);
            std::hint::black_box(&c);
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let regime = if runs >= 3 { "history" } else { "pooled" };
    let median = commgate_stats::median(&times);
    println!(
        "compare: {runs} baseline runs × {n} samples vs {n} ({regime}), {} resamples: median {median:.1} ms, \
         max {:.1} ms  {} (target < {target_ms} ms)",
        opts.resamples,
        times[times.len() - 1],
        if median < target_ms { "PASS" } else { "FAIL" },
    );
}

fn main() {
    case(10, 1000, 15, 100.0);
    case(2, 1000, 15, 100.0);
    println!("rows over {SAMPLE_LIMIT} samples are judged on a subsample of {SAMPLE_LIMIT}:");
    case(1, 1_000_000, 3, 2000.0);
    case(10, 1_000_000, 3, 2000.0);
}
