//! Scale-out attribution: reducing each node's ranks to a partial file, then combining the
//! partial files, against attributing every rank on one machine (`harness = false`).
//!
//! `cargo bench --bench partial_combine` writes a job of
//! `COMMGATE_PARTIAL_RANKS` ranks (default 1,024) with `commgate_testkit::synth` (3 steps of
//! 8 layers, every collective kind, a straggler; about 0.3 MB per rank), in nodes of
//! `COMMGATE_PARTIAL_PER_NODE` ranks (default 8). Each phase runs in a child process so that
//! its `VmHWM` counts that phase alone:
//! - **reduce**: one node's ranks to its partial file (gzip), as `commgate attribute --partial`
//!   does on each node; every node is reduced, the median and slowest are reported;
//! - **combine**: every node's partial file into the attribution;
//! - **direct**: every trace on one machine, the figures the combine must equal (it says so).
//!
//! Targets (printed, not asserted: a benchmark on a shared machine is evidence, not a gate): the
//! combine at most a quarter of the direct attribution's time and its peak RSS at most the
//! direct one's; a node's partial file at most 5 % of its traces' size.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use commgate_testkit::synth::{write_all_ranks, SynthSpec};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::{attribute_paths, partial_paths};
use commgate_trace::partial::encode;

#[path = "support/child.rs"]
mod child;

/// Set in a child's environment to the directory it works on; the phase is in [`PHASE_ENV`].
const CHILD_ENV: &str = "COMMGATE_PARTIAL_CHILD";
const PHASE_ENV: &str = "COMMGATE_PARTIAL_PHASE";

fn main() -> ExitCode {
    child::main("partial_combine", CHILD_ENV, measure, parent)
}

fn parent() -> Result<(), Box<dyn Error>> {
    let ranks: u32 = child::env_number("COMMGATE_PARTIAL_RANKS", 1024)?;
    let per_node: u32 = child::env_number("COMMGATE_PARTIAL_PER_NODE", 8)?;
    if ranks == 0 || per_node == 0 {
        return Err("COMMGATE_PARTIAL_RANKS and COMMGATE_PARTIAL_PER_NODE must be positive".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    child::in_scratch_dir("commgate-partial", |dir| {
        let traces = dir.join("traces");
        let spec = SynthSpec { world_size: ranks, straggler_rank: 5, ..SynthSpec::small() };
        let files = write_all_ranks(&spec, &traces, false)?;
        let trace_bytes = total_bytes(&files)?;
        println!("{ranks} ranks in nodes of {per_node}, {:.1} MB of traces, {cores} cores", trace_bytes as f64 / 1e6);
        // One directory of traces per node, as each node holds its own.
        let mut nodes = Vec::new();
        for (n, chunk) in files.chunks(per_node as usize).enumerate() {
            let node = dir.join(format!("node-{n}"));
            std::fs::create_dir_all(&node)?;
            for f in chunk {
                std::fs::rename(f, node.join(f.file_name().ok_or("a trace without a name")?))?;
            }
            nodes.push(node);
        }
        let partials = dir.join("partials");
        std::fs::create_dir_all(&partials)?;
        let mut reduce = Vec::new();
        for node in &nodes {
            reduce.push(child(node, "reduce", &partials)?);
        }
        let partial_bytes = total_bytes(&list(&partials)?)?;
        let combine = child(&partials, "combine", dir)?;
        let direct = child(dir, "direct", dir)?;
        reduce.sort_by(|a, b| a.secs.total_cmp(&b.secs));
        let median = &reduce[reduce.len() / 2];
        let slowest = &reduce[reduce.len() - 1];
        let node_bytes = trace_bytes as f64 / nodes.len() as f64;
        let share = 100.0 * partial_bytes as f64 / trace_bytes.max(1) as f64;
        let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
        println!("{:<26} {:>8} {:>9}", "phase", "wall s", "peak MB");
        println!("{:<26} {:>8.3} {:>9.1}", "reduce one node (median)", median.secs, median.peak_mb);
        println!("{:<26} {:>8.3} {:>9.1}", "reduce one node (slowest)", slowest.secs, slowest.peak_mb);
        println!(
            "{:<26} {:>8.3} {:>9.1}   {} (≤ 1/4 of direct's time, ≤ its peak)",
            format!("combine {} partial files", nodes.len()),
            combine.secs,
            combine.peak_mb,
            verdict(combine.secs <= direct.secs / 4.0 && combine.peak_mb <= direct.peak_mb)
        );
        println!("{:<26} {:>8.3} {:>9.1}", "direct, every trace", direct.secs, direct.peak_mb);
        println!(
            "partial files: {:.2} MB in all, {:.1} KB per node of {:.1} MB of traces ({share:.1} %)   {} (≤ 5 %)",
            partial_bytes as f64 / 1e6,
            partial_bytes as f64 / nodes.len() as f64 / 1e3,
            node_bytes / 1e6,
            verdict(share <= 5.0)
        );
        println!("same figures as direct: {}", if combine.digest == direct.digest { "yes" } else { "NO" });
        Ok(())
    })
}

/// What a child reports: wall seconds, peak RSS and a digest of the attribution it computed.
struct Measured {
    secs: f64,
    peak_mb: f64,
    digest: String,
}

/// Runs one phase in a child on `dir`, writing into `out`.
fn child(dir: &Path, phase: &str, out: &Path) -> Result<Measured, Box<dyn Error>> {
    let run = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, dir)
        .env(PHASE_ENV, format!("{phase}:{}", out.display()))
        .output()?;
    if !run.status.success() {
        return Err(format!("{phase} on {}: {}", dir.display(), String::from_utf8_lossy(&run.stderr)).into());
    }
    let line = String::from_utf8(run.stdout)?;
    let mut fields = line.split_whitespace();
    let (Some(secs), Some(peak), digest) = (fields.next(), fields.next(), fields.next().unwrap_or("-")) else {
        return Err(format!("{phase}: unexpected child output {line:?}").into());
    };
    Ok(Measured { secs: secs.parse()?, peak_mb: peak.parse::<f64>()? / 1e6, digest: digest.to_string() })
}

/// One phase; prints wall seconds, peak RSS bytes and, for an attribution, its digest.
fn measure(dir: &Path) -> Result<(), Box<dyn Error>> {
    let phase = std::env::var(PHASE_ENV)?;
    let (phase, out) = phase.split_once(':').ok_or("no phase")?;
    let opts = AttributeOptions::default();
    let start = Instant::now();
    let digest = match phase {
        "reduce" => {
            let partial = partial_paths(&[dir.to_path_buf()], &opts)?;
            let name = dir.file_name().ok_or("a node without a name")?.to_string_lossy();
            std::fs::write(Path::new(out).join(format!("{name}.json.gz")), encode(&partial, true))?;
            "-".to_string()
        }
        "combine" => digest(&attribute_paths(&[dir.to_path_buf()], &opts)?),
        "direct" => {
            let nodes: Vec<PathBuf> = list(dir)?
                .into_iter()
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("node-")))
                .collect();
            digest(&attribute_paths(&nodes, &opts)?)
        }
        other => return Err(format!("unknown phase {other}").into()),
    };
    let secs = start.elapsed().as_secs_f64();
    let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
    println!("{secs} {peak} {digest}");
    Ok(())
}

/// The attribution's debug text, hashed: equal figures give equal digests.
fn digest(a: &commgate_trace::attribute::Attribution) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{a:?}").hash(&mut h);
    format!("{:016x}", h.finish())
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        out.push(entry?.path());
    }
    out.sort();
    Ok(out)
}

fn total_bytes(paths: &[PathBuf]) -> Result<u64, Box<dyn Error>> {
    let mut total = 0;
    for path in paths {
        total += std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    }
    Ok(total)
}
