//! Nsight Systems SQLite vs Kineto JSON: wall time and peak RSS of `attribute` on the same
//! synthetic timeline (`harness = false`).
//!
//! `cargo bench --bench nsys_throughput` writes 8 ranks holding `COMMGATE_NSYS_KERNELS` GPU
//! activities in all (default 1,000,000) once as Kineto JSON and once as nsys exports, then
//! attributes each directory in a child run of this binary, so each child's `VmHWM` is that
//! attribution alone. It prints, it does not assert: the goal (the SQLite path no slower per
//! kernel than the JSON path) is for a person to compare.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use commgate_testkit::load::{load_files, Inputs};
use commgate_testkit::nsys::write_all_ranks_sqlite;
use commgate_testkit::synth::{write_all_ranks, SynthSpec};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::kineto::Document;
use commgate_trace::load::{attribute_paths, collect_files, read_input};

#[path = "support/child.rs"]
mod child;

const CHILD_ENV: &str = "COMMGATE_NSYS_CHILD";

fn main() -> ExitCode {
    child::main("nsys_throughput", CHILD_ENV, measure, parent)
}

fn parent() -> Result<(), Box<dyn Error>> {
    let target: u64 = child::env_number("COMMGATE_NSYS_KERNELS", 1_000_000)?;
    child::in_scratch_dir("commgate-nsys-bench", |dir| run(dir, target))
}

/// GPU activities per rank in one step of `spec` (measured on a one-step trace).
fn kernels_per_step(spec: &SynthSpec, dir: &Path) -> Result<u64, Box<dyn Error>> {
    let one = SynthSpec { steps: 1, ..spec.clone() };
    let two = SynthSpec { steps: 2, ..spec.clone() };
    let count = |s: &SynthSpec, name: &str| -> Result<u64, Box<dyn Error>> {
        let files =
            write_all_ranks(&SynthSpec { world_size: 1, straggler_rank: 0, ..s.clone() }, &dir.join(name), false)?;
        match load_files(&files)? {
            Inputs::Kineto(t) => Ok(t.iter().map(|t| t.kernels.len() as u64).sum()),
            Inputs::Events { .. } => Err("the generator wrote aggregated events".into()),
        }
    };
    Ok(count(&two, "two")?.saturating_sub(count(&one, "one")?).max(1))
}

fn run(dir: &Path, target: u64) -> Result<(), Box<dyn Error>> {
    let base = SynthSpec { world_size: 8, steps: 1, layers: 24, seed: 3, ..SynthSpec::small() };
    let per_step = kernels_per_step(&base, &dir.join("probe"))?;
    let steps = (target / 8 / per_step).max(1) as u32;
    let spec = SynthSpec { steps, ..base };
    let kineto = dir.join("kineto");
    let nsys = dir.join("nsys");
    let t = Instant::now();
    write_all_ranks(&spec, &kineto, false)?;
    write_all_ranks_sqlite(&spec, &nsys)?;
    eprintln!("wrote 8 ranks × {steps} steps in {:.1} s", t.elapsed().as_secs_f64());
    println!(
        "{:<12} {:>10} {:>9} {:>12} {:>11} {:>10}",
        "source", "time s", "peak MB", "kernels", "ns/kernel", "disk MB"
    );
    for (name, path) in [("kineto-json", &kineto), ("nsys-sqlite", &nsys)] {
        let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, path).output()?;
        if !out.status.success() {
            return Err(format!("{name}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let line = String::from_utf8(out.stdout)?;
        let disk: u64 = std::fs::read_dir(path)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
        println!("{name:<12} {} {:>10.0}", line.trim_end(), disk as f64 / 1e6);
    }
    Ok(())
}

fn measure(dir: &Path) -> Result<(), Box<dyn Error>> {
    let files: Vec<PathBuf> = collect_files(&[dir.to_path_buf()])?;
    let opts = AttributeOptions::default();
    let start = Instant::now();
    let a = attribute_paths(&files, &opts)?;
    if a.by_collective.is_empty() {
        return Err("no collective was attributed".into());
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
    // Counted after the peak was read, so that the count's own memory is not in it.
    let mut kernels = 0u64;
    for f in &files {
        for doc in read_input(f, opts.read_limits())?.docs {
            if let Document::Timeline(t) = doc {
                kernels += t.kernels.len() as u64;
            }
        }
    }
    let per = if kernels > 0 { secs * 1e9 / kernels as f64 } else { 0.0 };
    println!("{secs:>10.2} {:>9.0} {kernels:>12} {per:>11.0}", peak as f64 / 1e6);
    Ok(())
}
