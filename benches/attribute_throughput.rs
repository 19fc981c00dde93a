//! End-to-end attribution throughput and peak memory on synthetic traces (`harness = false`).
//!
//! `cargo bench --bench attribute_throughput` (or `scripts/bench-attribute.sh`) writes
//! `COMMGATE_BENCH_RANKS` ranks (default 8) of about `COMMGATE_BENCH_MB_PER_RANK` MB each
//! (default 40, uncompressed) with `commgate_testkit::synth`, then runs this same binary again as
//! a child so that the child's peak RSS (`VmHWM`) counts attribution only, not generation. The
//! child calls `commgate_trace::load::attribute_paths` on the directory and reports input
//! bytes, wall time, MB/s, peak RSS and peak RSS as a share of the input, with PASS/FAIL
//! against the targets (≥ 400 MB/s, ≤ 25 % of input), then times the what-if replay alone
//! (≤ 10 % of the attribution's time). It prints, it does not assert: a
//! benchmark on a shared machine is evidence, not a gate. The directory is removed at the end.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use commgate_testkit::synth::{write_all_ranks, SynthSpec};
use commgate_trace::attribute::whatif::{what_if, WhatIfOptions};
use commgate_trace::attribute::{AttributeOptions, Attribution};
use commgate_trace::load::attribute_paths;

#[path = "support/child.rs"]
mod child;

/// Set in the child's environment to the trace directory it should attribute.
const CHILD_DIR_ENV: &str = "COMMGATE_BENCH_CHILD_DIR";
const TARGET_MB_PER_S: f64 = 400.0;
const TARGET_RSS_PCT: f64 = 25.0;
/// The what-if's time as a share of the whole attribution's.
const TARGET_WHAT_IF_PCT: f64 = 10.0;

fn main() -> ExitCode {
    child::main("attribute_throughput", CHILD_DIR_ENV, measure, parent)
}

/// Generates the traces, runs the child on them, removes them.
fn parent() -> Result<(), Box<dyn Error>> {
    let ranks: u32 = child::env_number("COMMGATE_BENCH_RANKS", 8)?;
    let mb_per_rank: f64 = child::env_number("COMMGATE_BENCH_MB_PER_RANK", 40.0)?;
    if ranks == 0 || mb_per_rank <= 0.0 {
        return Err("COMMGATE_BENCH_RANKS and COMMGATE_BENCH_MB_PER_RANK must be positive".into());
    }
    child::in_scratch_dir("commgate-bench", |dir| generate_and_measure(dir, ranks, mb_per_rank))
}

fn generate_and_measure(dir: &Path, ranks: u32, mb_per_rank: f64) -> Result<(), Box<dyn Error>> {
    let spec = SynthSpec { world_size: ranks, ..SynthSpec::with_target_bytes((mb_per_rank * 1e6) as u64) };
    let start = Instant::now();
    let paths =
        write_all_ranks(&spec, dir, false).map_err(|e| format!("generating traces in {}: {e}", dir.display()))?;
    let bytes = total_bytes(&paths)?;
    println!(
        "generated {ranks} ranks x {} steps x {} layers: {:.1} MB in {:.2} s ({})",
        spec.steps,
        spec.layers,
        bytes as f64 / 1e6,
        start.elapsed().as_secs_f64(),
        dir.display()
    );
    let exe = std::env::current_exe()?;
    let status = Command::new(exe).env(CHILD_DIR_ENV, dir).status()?;
    if !status.success() {
        return Err(format!("the measuring child failed: {status}").into());
    }
    Ok(())
}

fn total_bytes(paths: &[PathBuf]) -> Result<u64, Box<dyn Error>> {
    let mut total = 0;
    for path in paths {
        total += std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    }
    Ok(total)
}

/// Attributes `dir` once and reports; its peak RSS is the attribution's alone.
fn measure(dir: &Path) -> Result<(), Box<dyn Error>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        files.push(entry?.path());
    }
    let bytes = total_bytes(&files)?;
    let start = Instant::now();
    let attribution = attribute_paths(&[dir.to_path_buf()], &AttributeOptions::default());
    let secs = start.elapsed().as_secs_f64();
    let attribution = attribution.map_err(|e| format!("attributing {}: {e}", dir.display()))?;
    std::hint::black_box(&attribution);
    let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
    report(bytes, files.len(), secs, peak);
    report_what_if(&attribution, secs)
}

/// The what-if's share of the attribution: its replay of the kept steps (done once inside the
/// attribution above) timed again alone, the median of five.
fn report_what_if(a: &Attribution, attribution_secs: f64) -> Result<(), Box<dyn Error>> {
    let ranks = a.replayable.0.as_ref().ok_or("the attribution kept no analyses to replay")?;
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(what_if(ranks, &a.by_collective, &WhatIfOptions::default()));
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let (median, share) = (times[2], 100.0 * times[2] / attribution_secs.max(1e-9));
    let steps = a.what_if.as_ref().map_or(0, |w| w.steps);
    let verdict = if share <= TARGET_WHAT_IF_PCT { "PASS" } else { "FAIL" };
    println!(
        "what-if          {:.1} ms ({steps} steps x {} ranks replayed), {share:.1} % of the attribution   {verdict} (target <= {TARGET_WHAT_IF_PCT:.0} %)",
        median * 1e3,
        ranks.len()
    );
    Ok(())
}

fn report(bytes: u64, files: usize, secs: f64, peak: u64) {
    let input_mb = bytes as f64 / 1e6;
    let mb_per_s = input_mb / secs.max(1e-9);
    let rss_mb = peak as f64 / 1e6;
    let rss_pct = 100.0 * peak as f64 / bytes.max(1) as f64;
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!("input            {input_mb:.1} MB in {files} files ({bytes} bytes)");
    println!("wall             {secs:.3} s");
    println!(
        "throughput       {mb_per_s:.0} MB/s   {} (target >= {TARGET_MB_PER_S:.0} MB/s)",
        verdict(mb_per_s >= TARGET_MB_PER_S)
    );
    println!("peak RSS         {rss_mb:.1} MB");
    println!(
        "peak RSS/input   {rss_pct:.1} %   {} (target <= {TARGET_RSS_PCT:.0} %)",
        verdict(rss_pct <= TARGET_RSS_PCT)
    );
}
