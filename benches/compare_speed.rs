//! How long one `compare` takes (`cargo bench --bench compare_speed`; harness = false): a
//! 10-run × 1,000-sample baseline store against a 1,000-sample run (history regime, the current
//! run block-bootstrapped for every metric), and a 2-run baseline (pooled regime: both sides
//! bootstrapped), 1,000 resamples each. Target: under 100 ms. It prints, it does not assert.

use std::path::PathBuf;
use std::time::Instant;

use commgate::baseline::Baseline;
use commgate::compare::{compare, CompareOptions};
use commgate::testkit::simulate::{synthetic_run, Effect, NoiseModel};

fn main() {
    let model = NoiseModel::SlowEpisodes;
    let current = synthetic_run(model, 1000, &Effect::shift(0.04), 99);
    for runs in [10usize, 2] {
        let history = (0..runs).map(|i| synthetic_run(model, 1000, &Effect::NONE, i as u64)).collect();
        let baseline = Baseline { path: PathBuf::from("bench"), runs: history };
        let opts = CompareOptions::default();
        let mut times: Vec<f64> = (0..15)
            .map(|_| {
                let start = Instant::now();
                let c = compare(&baseline, &current, &opts);
                std::hint::black_box(&c);
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let regime = if runs >= 3 { "history" } else { "pooled" };
        println!(
            "compare: {runs} baseline runs × 1000 samples vs 1000 ({regime}), {} resamples: median {:.1} ms, max {:.1} ms  {}",
            opts.resamples,
            times[times.len() / 2],
            times[times.len() - 1],
            if times[times.len() / 2] < 100.0 { "PASS (target < 100 ms)" } else { "FAIL (target < 100 ms)" }
        );
    }
}
