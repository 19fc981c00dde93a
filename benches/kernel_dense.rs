//! Kernel-dense attribution: wall time and peak RSS per GPU kernel (`harness = false`).
//!
//! `cargo bench --bench kernel_dense` writes traces with
//! `commgate_testkit::dense` (each kernel with its `cudaLaunchKernel`, `ac2g` flows and, one in
//! fifty, an NCCL all-reduce with its `record_param_comms`) and attributes each set in a child
//! process, so that the child's `VmHWM` counts attribution alone. Rows scale one dimension at a
//! time by 1×, 4× and 16× from a base of `COMMGATE_DENSE_KERNELS` kernels (default 250,000) in
//! one rank, 10 steps, 100 distinct names: kernels, ranks (each with the base kernels), steps
//! and distinct names; the `wide` rows are many small ranks, 64, 256 and 1,024 of 425 kernels
//! each (0.45 MB, a large job's per-rank capture). `COMMGATE_DENSE_ROWS=kernels` (comma-separated
//! dimensions) runs a subset.
//!
//! Targets (printed, not asserted: a benchmark on a shared machine is evidence, not a gate):
//! at most 1.0 µs per kernel, and peak RSS at most 100 MB, or 80 bytes per kernel past 1.25
//! million (1M kernels ≤ 1 s and 100 MB; 5M ≤ 5 s and 400 MB); the `wide` rows, what 1,024
//! ranks took before (0.88 s and 19 MB), scaled linearly in time.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use commgate_testkit::dense::{write_dense, DenseSpec};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::attribute_paths;

#[path = "support/child.rs"]
mod child;

const CHILD_ENV: &str = "COMMGATE_DENSE_CHILD";
const TARGET_US_PER_KERNEL: f64 = 1.0;
/// Kernels per rank in the `wide` rows: about 0.45 MB of JSON.
const WIDE_KERNELS: u64 = 425;

fn main() -> ExitCode {
    child::main("kernel_dense", CHILD_ENV, measure, parent)
}

fn parent() -> Result<(), Box<dyn Error>> {
    let base: u64 = child::env_number("COMMGATE_DENSE_KERNELS", 250_000)?;
    let rows = std::env::var("COMMGATE_DENSE_ROWS").unwrap_or_else(|_| "kernels,ranks,steps,names,wide".to_string());
    if base == 0 {
        return Err("COMMGATE_DENSE_KERNELS must be positive".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("kernel-dense attribution, {cores} cores, base {base} kernels in 1 rank, 10 steps, 100 names");
    println!(
        "{:<8} {:>6} {:>10} {:>6} {:>7} {:>9} {:>8} {:>9} {:>8} {:>8}  verdict",
        "row", "scale", "kernels", "ranks", "steps", "MB in", "wall s", "peak MB", "µs/kern", "B/kern"
    );
    child::in_scratch_dir("commgate-dense", |dir| {
        for dim in rows.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            for scale in [1u64, 4, 16] {
                let (kernels, ranks, steps, names) = match dim {
                    "kernels" => (base * scale, 1, 10, 100),
                    "ranks" => (base, scale, 10, 100),
                    "steps" => (base, 1, 10 * scale, 100),
                    "names" => (base, 1, 10, 100 * scale),
                    "wide" => (WIDE_KERNELS, 64 * scale, 10, 100),
                    other => {
                        return Err(format!("unknown row {other:?}: use kernels, ranks, steps, names or wide").into())
                    }
                };
                row(dir, dim, scale, kernels, ranks as u32, steps, names)?;
            }
        }
        Ok(())
    })
}

fn row(
    dir: &Path,
    dim: &str,
    scale: u64,
    kernels: u64,
    ranks: u32,
    steps: u64,
    names: u64,
) -> Result<(), Box<dyn Error>> {
    let set = dir.join(format!("{dim}-{scale}"));
    std::fs::create_dir_all(&set)?;
    let mut bytes = 0;
    for rank in 0..ranks {
        let path = set.join(format!("rank-{rank}.json"));
        let spec = DenseSpec { kernels, steps, distinct_names: names, rank, world_size: ranks };
        write_dense(&spec, std::fs::File::create(&path)?)?;
        bytes += std::fs::metadata(&path)?.len();
    }
    let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, &set).output()?;
    if !out.status.success() {
        return Err(format!("{dim} ×{scale}: child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let line = String::from_utf8(out.stdout)?;
    let mut fields = line.split_whitespace().map(str::parse::<f64>);
    let (Some(Ok(secs)), Some(Ok(peak))) = (fields.next(), fields.next()) else {
        return Err(format!("{dim} ×{scale}: unexpected child output {line:?}").into());
    };
    let total = (kernels * u64::from(ranks)) as f64;
    let us = secs * 1e6 / total;
    let per_kernel = peak / total;
    let (secs_target, rss_target) = targets(dim, total, ranks);
    let ok = secs <= secs_target && peak <= rss_target;
    println!(
        "{dim:<8} {:>5}× {:>10} {ranks:>6} {steps:>7} {:>9.1} {secs:>8.2} {:>9.1} {us:>8.2} {per_kernel:>8.0}  {} (≤ {secs_target:.2} s, ≤ {:.0} MB)",
        scale,
        kernels * u64::from(ranks),
        bytes as f64 / 1e6,
        peak / 1e6,
        if ok { "PASS" } else { "FAIL" },
        rss_target / 1e6
    );
    std::fs::remove_dir_all(&set)?;
    Ok(())
}

/// A row's targets, wall seconds and peak RSS bytes: for the `wide` rows, what 1,024 ranks of
/// 0.45 MB took before (0.88 s, 19 MB), the time scaled with the ranks; for the others,
/// [`TARGET_US_PER_KERNEL`] and 100 MB, or 80 bytes a kernel past 1.25 million.
fn targets(dim: &str, kernels: f64, ranks: u32) -> (f64, f64) {
    match dim {
        "wide" => (0.88 * f64::from(ranks) / 1024.0, 19e6),
        _ => (TARGET_US_PER_KERNEL * kernels / 1e6, (80.0 * kernels).max(100e6)),
    }
}

/// Attributes the directory once; prints wall seconds and peak RSS bytes.
fn measure(dir: &Path) -> Result<(), Box<dyn Error>> {
    let start = Instant::now();
    let a = attribute_paths(&[PathBuf::from(dir)], &AttributeOptions::default())?;
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(&a);
    let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
    println!("{secs} {peak}");
    Ok(())
}
