//! NCCL Inspector logs: read and attribution throughput and peak RSS (`harness = false`).
//!
//! `cargo bench --bench inspector_throughput` writes `COMMGATE_INSPECTOR_RECORDS` records in all
//! (default 1,000,000) as 8 ranks' logs in the plugin's layout, then attributes the directory in
//! a child run of this binary, so the child's `VmHWM` is that attribution alone. It prints MB/s
//! of log read and attributed and the peak RSS; the goal is at least 200 MB/s. It does not
//! assert: the machine decides the figure, a person compares it with the goal.

use std::error::Error;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use commgate_testkit::inspector::{log_name, write_synthetic_log};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::{attribute_paths, collect_files};

#[path = "support/child.rs"]
mod child;

const CHILD_ENV: &str = "COMMGATE_INSPECTOR_CHILD";
const RANKS: u32 = 8;

fn main() -> ExitCode {
    child::main("inspector_throughput", CHILD_ENV, measure, parent)
}

fn parent() -> Result<(), Box<dyn Error>> {
    let records: u64 = child::env_number("COMMGATE_INSPECTOR_RECORDS", 1_000_000)?;
    child::in_scratch_dir("commgate-inspector-bench", |dir| run(dir, records))
}

fn run(dir: &Path, records: u64) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    let t = Instant::now();
    let per_rank = records.div_ceil(u64::from(RANKS));
    for rank in 0..RANKS {
        let mut out = BufWriter::new(std::fs::File::create(dir.join(log_name(rank)))?);
        write_synthetic_log(&mut out, rank, RANKS, per_rank)?;
        out.flush()?;
    }
    let disk: u64 = std::fs::read_dir(dir)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
    eprintln!(
        "wrote {RANKS} ranks × {per_rank} records ({:.0} MB) in {:.1} s",
        disk as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, dir).output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    let line = String::from_utf8(out.stdout)?;
    let secs: f64 = line.split_whitespace().next().ok_or("no time")?.parse()?;
    println!("{:>10} {:>9} {:>10} {:>8} {:>9}", "records", "disk MB", "time s", "MB/s", "peak MB");
    println!(
        "{:>10} {:>9.0} {:>10.2} {:>8.0} {:>9}",
        per_rank * u64::from(RANKS),
        disk as f64 / 1e6,
        secs,
        disk as f64 / 1e6 / secs,
        line.split_whitespace().nth(1).unwrap_or("?")
    );
    Ok(())
}

fn measure(dir: &Path) -> Result<(), Box<dyn Error>> {
    let files: Vec<PathBuf> = collect_files(&[dir.to_path_buf()])?;
    let start = Instant::now();
    let a = attribute_paths(&files, &AttributeOptions::default())?;
    if a.by_collective.is_empty() {
        return Err("no collective was attributed".into());
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
    println!("{secs:.3} {:.0}", peak as f64 / 1e6);
    Ok(())
}
