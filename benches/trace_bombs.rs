//! Trace bombs: wall time and peak RSS of attribution on hostile traces (`harness = false`).
//!
//! `cargo bench --bench trace_bombs` writes small gzip files (a few MB on disk) that expand to
//! traces with `COMMGATE_BOMB_N` (default 1 million) distinct `ProfilerStep#` names, the same
//! number of distinct collective names, and one kernel name of `COMMGATE_BOMB_MB` MB (default
//! 512) next to a string of the same size under an ignored key; then the dense bombs, 20 times
//! `COMMGATE_BOMB_N` kernels, CPU ops or launches and twice as many NCCL kernels with their
//! metadata, each in well under 10 MB of gzip; and two ranks of `COMMGATE_BOMB_N / 60` NCCL
//! kernels that all share one sequence number and overlap (one collective instance that large). Each is attributed by this binary run again as a
//! child, so the child's `VmHWM` is attribution alone; a refused bomb prints its one-line error.
//! It prints, it does not assert: the targets (under 10 s of CPU and 1 GB on an input under
//! 10 MB, or a clear refusal; linear time, memory proportional to what is kept) are for a
//! person to compare.

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use commgate_core::result::nccl_tests::{self, MAX_PER_ITERATION_TIMES};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::{attribute_paths, partial_paths};
use commgate_trace::partial::encode;

#[path = "support/child.rs"]
mod child;

const CHILD_ENV: &str = "COMMGATE_BOMB_CHILD";

fn main() -> ExitCode {
    child::main("trace_bombs", CHILD_ENV, measure, parent)
}

fn parent() -> Result<(), Box<dyn Error>> {
    let n: u64 = child::env_number("COMMGATE_BOMB_N", 1_000_000)?;
    let mb: u64 = child::env_number("COMMGATE_BOMB_MB", 512)?;
    child::in_scratch_dir("commgate-bombs", |dir| run_all(dir, n, mb))
}

/// Writes one bomb's JSON.
type WriteTrace = Box<dyn Fn(&mut dyn Write) -> std::io::Result<()>>;

fn run_all(dir: &Path, n: u64, mb: u64) -> Result<(), Box<dyn Error>> {
    let bombs: [(&str, WriteTrace); 3] = [
        (
            "distinct step names",
            Box::new(move |w| {
                events(w, n, |w, i| {
                    write!(
                        w,
                        r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{i}","pid":1,"tid":1,"ts":{},"dur":5}}"#,
                        i * 10
                    )
                })
            }),
        ),
        (
            "distinct collectives",
            Box::new(move |w| {
                events(w, n, |w, i| {
                    write!(
                        w,
                        r#"{{"ph":"X","cat":"kernel","name":"ncclDevKernel_Generic","pid":0,"tid":7,"ts":{},"dur":5,"args":{{"Collective name":"custom{i}","Process Group Name":"0","Seq":{i}}}}}"#,
                        i * 10
                    )
                })
            }),
        ),
        (
            "huge names",
            Box::new(move |w| {
                let chunk = [b'x'; 1 << 16];
                w.write_all(br#"{"traceEvents":[{"ph":"X","cat":"kernel","junk":""#)?;
                for _ in 0..mb * 16 {
                    w.write_all(&chunk)?;
                }
                w.write_all(br#"","name":"nccl"#)?;
                for _ in 0..mb * 16 {
                    w.write_all(&chunk)?;
                }
                w.write_all(br#"","pid":0,"tid":7,"ts":1,"dur":5}],"distributedInfo":{"rank":0}}"#)
            }),
        ),
    ];
    println!("{:<22} {:>12} {:>10} {:>9} {:>13}", "bomb", "gzip bytes", "wall s", "peak MB", "events");
    for (i, (name, body)) in bombs.iter().enumerate() {
        let path = dir.join(format!("rank-{i}.json.gz"));
        let mut gz = flate2::write::GzEncoder::new(
            std::io::BufWriter::new(std::fs::File::create(&path)?),
            flate2::Compression::fast(),
        );
        body(&mut gz)?;
        gz.finish()?.flush()?;
        let size = std::fs::metadata(&path)?.len();
        let exe = std::env::current_exe()?;
        let out = Command::new(exe).env(CHILD_ENV, &path).output()?;
        if !out.status.success() {
            return Err(format!("{name}: child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let line = String::from_utf8(out.stdout)?;
        println!("{name:<22} {size:>12} {}", line.trim_end());
        std::fs::remove_file(&path)?;
    }
    let dense: [(&str, u64, &str); 4] = [
        ("dense kernels", 20 * n, r#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1}"#),
        ("dense CPU ops", 20 * n, r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1,"dur":1}"#),
        (
            "dense launches",
            20 * n,
            r#"{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{i},"dur":1,"args":{"correlation":{i}}}"#,
        ),
        (
            "dense NCCL kernels",
            2 * n,
            r#"{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":7,"ts":{i},"dur":1,"args":{"Collective name":"allreduce","In msg nelems":1024,"Out msg nelems":1024,"dtype":"Float","Process Group Name":"0","Group size":8,"Seq":{i}}}"#,
        ),
    ];
    for (name, count, event) in dense {
        let path = dir.join("dense.json.gz");
        write_repeated(&path, count, event)?;
        let size = std::fs::metadata(&path)?.len();
        let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, &path).output()?;
        if !out.status.success() {
            return Err(format!("{name}: child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        println!("{name:<22} {size:>12} {}", String::from_utf8(out.stdout)?.trim_end());
        std::fs::remove_file(&path)?;
    }
    one_instance(dir, n)?;
    nccl_tests(dir)
}

/// Two ranks whose NCCL kernels, `COMMGATE_BOMB_N / 60` each (16,666 at the default), all share
/// one sequence number and overlap in time: one collective instance of that many members on each
/// rank, which the what-if replay once settled member by member over the whole instance.
fn one_instance(dir: &Path, n: u64) -> Result<(), Box<dyn Error>> {
    let per_rank = (n / 60).max(1);
    let ranks = dir.join("one-instance");
    std::fs::create_dir_all(&ranks)?;
    let mut size = 0;
    for rank in 0..2 {
        let path = ranks.join(format!("rank-{rank}.json"));
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
        events(&mut w, per_rank, |w, i| {
            write!(
                w,
                r#"{{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":7,"ts":{},"dur":100000,"args":{{"Collective name":"allreduce","In msg nelems":1024,"Out msg nelems":1024,"dtype":"Float","Process Group Name":"0","Group size":2,"Seq":7}}}}"#,
                // Rank 1 a microsecond behind: two GPUs' traces are never copies.
                1000 + i + rank
            )
        })?;
        w.flush()?;
        drop(w);
        // `events` writes rank 0 of 1; this bomb is rank `rank` of 2.
        let text = std::fs::read_to_string(&path)?.replace(
            r#""distributedInfo":{"rank":0,"world_size":1}"#,
            &format!(r#""distributedInfo":{{"rank":{rank},"world_size":2}}"#),
        );
        std::fs::write(&path, text)?;
        size += std::fs::metadata(&path)?.len();
    }
    let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, &ranks).output()?;
    if !out.status.success() {
        return Err(format!("one instance: child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let name = format!("one instance ×{per_rank}");
    println!("{name:<22} {size:>12} {} (plain JSON, 2 ranks)", String::from_utf8(out.stdout)?.trim_end());
    // The same job as one partial file: its timeline holds both ranks' members as segments,
    // which the replay reads without the Kineto reader's budget.
    let files: Vec<PathBuf> = (0..2).map(|rank| ranks.join(format!("rank-{rank}.json"))).collect();
    let partial = partial_paths(&files, &AttributeOptions::default()).map_err(|e| e.to_string())?;
    let path = dir.join("one-instance.partial.json");
    std::fs::write(&path, encode(&partial, false))?;
    let size = std::fs::metadata(&path)?.len();
    let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, &path).output()?;
    if !out.status.success() {
        return Err(format!("one instance, partial: child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let name = format!("partial ×{per_rank}");
    println!("{name:<22} {size:>12} {} (plain JSON, 2 ranks)", String::from_utf8(out.stdout)?.trim_end());
    std::fs::remove_dir_all(&ranks)?;
    std::fs::remove_file(&path)?;
    Ok(())
}

/// nccl-tests JSON whose per-iteration lists are as long as a file may hold
/// ([`MAX_PER_ITERATION_TIMES`]) as plain text and as gzip, and twice that in gzip (refused): the
/// lists were once deserialised whole before any limit (a 2.8 MB gzip reached 1.09 GB).
fn nccl_tests(dir: &Path) -> Result<(), Box<dyn Error>> {
    let iterations: u64 = 1 << 16;
    let at_budget = MAX_PER_ITERATION_TIMES / iterations - 1;
    let shapes = [
        ("nccl-tests budget", at_budget, false),
        ("nccl-tests budget", at_budget, true),
        ("nccl-tests ×2", 2 * at_budget, true),
    ];
    for (name, processes, gzip) in shapes {
        let path = dir.join(if gzip { "sweep.nccl-tests.json.gz" } else { "sweep.nccl-tests.json" });
        let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        if gzip {
            let mut w = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            sweep(&mut w, processes, iterations)?;
            w.finish()?.flush()?;
        } else {
            let mut w = file;
            sweep(&mut w, processes, iterations)?;
            w.flush()?;
        }
        let size = std::fs::metadata(&path)?.len();
        let out = Command::new(std::env::current_exe()?).env(CHILD_ENV, &path).output()?;
        if !out.status.success() {
            return Err(format!("{name}: child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let times = (processes + 1) * iterations;
        println!(
            "{name:<22} {size:>12} {} ({times} times{})",
            String::from_utf8(out.stdout)?.trim_end(),
            if gzip { ", gzip" } else { "" }
        );
        std::fs::remove_file(&path)?;
    }
    Ok(())
}

/// One all-reduce size of nccl-tests JSON (version 3, `-I 1`) on `processes` processes with
/// `iterations` per-iteration times each, the times varied so that gzip keeps a real ratio, as
/// nccl-tests writes them: `times_us` is each iteration's largest process time, and the
/// bandwidths are the size's over the time (all-reduce's bus factor over the processes).
fn sweep(w: &mut dyn Write, processes: u64, iterations: u64) -> std::io::Result<()> {
    // Hundredths of a µs above 10 µs, for process `p` (1-based) at iteration `i`.
    let jitter = |i: u64, p: u64| (i.wrapping_mul(7919).wrapping_add(p.wrapping_mul(104_729))) % 997;
    let times = |w: &mut dyn Write, of: &dyn Fn(u64) -> u64| -> std::io::Result<()> {
        w.write_all(b"[")?;
        for i in 0..iterations {
            let j = of(i);
            write!(w, "{}{}.{:02}", if i > 0 { "," } else { "" }, 10 + j / 100, j % 100)?;
        }
        w.write_all(b"]")
    };
    let (size, time_us) = (1_048_576.0, 10.5);
    let alg_bw = size / time_us / 1e3;
    let bus_bw = alg_bw * 2.0 * (processes as f64 - 1.0) / processes as f64;
    w.write_all(br#"{"version":3,"args":["./build/all_reduce_perf","-I","1","-J","r.json"],"nccl_version":22703,"config":{"nthreads":1,"ngpus":1,"iterations":"#)?;
    write!(w, r#"{iterations},"per_iter_timing":true,"devices":["#)?;
    for p in 0..processes {
        write!(
            w,
            r#"{}{{"rank":{p},"group":0,"pid":{p},"hostname":"node-{}","device":{},"device_info":"NVIDIA H200"}}"#,
            if p > 0 { "," } else { "" },
            p / 8,
            p % 8
        )?;
    }
    write!(
        w,
        r#"]}},"results":[{{"size":1048576,"count":262144,"type":"float","redop":"sum","root":"-1","out_of_place":{{"time":{time_us:.6},"alg_bw":{alg_bw:.6},"bus_bw":{bus_bw:.6},"nwrong":0}},"out_of_place_per_iter":{{"skipped_iterations":0,"times_us":"#
    )?;
    times(w, &|i| (1..=processes).map(|p| jitter(i, p)).max().unwrap_or(0))?;
    w.write_all(br#","per_process_max_times_us":["#)?;
    for p in 1..=processes {
        if p > 1 {
            w.write_all(b",")?;
        }
        times(w, &|i| jitter(i, p))?;
    }
    write!(w, r#"]}},"in_place":null,"actual_iterations":{iterations},"experiment_name":""}}]}}"#)
}

/// Events in blocks of this many, each block one gzip member written again and again.
const BLOCK: u64 = 10_000;

/// `{"traceEvents":[…]}` with `count` events (`{i}` in `event` is the index within its block),
/// as gzip members: the head, one compressed block repeated, the tail. So a bomb of 20 million
/// events costs one block's compression, and the file is as small as a bomb's would be.
fn write_repeated(path: &Path, count: u64, event: &str) -> Result<(), Box<dyn Error>> {
    let member = |text: &[u8]| -> std::io::Result<Vec<u8>> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(text)?;
        gz.finish()
    };
    let mut block = Vec::new();
    for i in 0..BLOCK {
        block.extend_from_slice(event.replace("{i}", &(i + 1).to_string()).as_bytes());
        block.push(b',');
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(&member(br#"{"traceEvents":["#)?)?;
    let block = member(&block)?;
    for _ in 0..count / BLOCK {
        out.write_all(&block)?;
    }
    let last = event.replace("{i}", "0");
    out.write_all(&member(format!(r#"{last}],"distributedInfo":{{"rank":0,"world_size":1}}}}"#).as_bytes())?)?;
    out.flush()?;
    Ok(())
}

/// `{"traceEvents":[…]}` with `n` events written by `event`.
fn events(
    w: &mut dyn Write,
    n: u64,
    event: impl Fn(&mut dyn Write, u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    w.write_all(br#"{"traceEvents":["#)?;
    for i in 0..n {
        if i > 0 {
            w.write_all(b",")?;
        }
        event(w, i)?;
    }
    w.write_all(br#"],"distributedInfo":{"rank":0,"world_size":1}}"#)
}

/// Attributes `path`, or every file in it when it is a directory (one rank each).
fn measure(path: &Path) -> Result<(), Box<dyn Error>> {
    let paths: Vec<PathBuf> = if path.is_dir() {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        files.sort();
        files
    } else {
        vec![PathBuf::from(path)]
    };
    if path.to_string_lossy().contains(".nccl-tests.") {
        let start = Instant::now();
        let sweep = nccl_tests::read(path);
        let secs = start.elapsed().as_secs_f64();
        let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
        match sweep {
            Ok(s) => println!("{secs:>10.2} {:>9.0} {:>13}", peak as f64 / 1e6, s.results.len()),
            Err(e) => println!("{secs:>10.2} {:>9.0}  refused: {e}", peak as f64 / 1e6),
        }
        return Ok(());
    }
    let start = Instant::now();
    let a = attribute_paths(&paths, &AttributeOptions::default());
    let secs = start.elapsed().as_secs_f64();
    let peak = child::peak_rss_bytes().ok_or("VmHWM not found in /proc/self/status")?;
    match a {
        Ok(a) => println!("{secs:>10.2} {:>9.0} {:>13}", peak as f64 / 1e6, a.num_events),
        Err(e) => println!("{secs:>10.2} {:>9.0}  refused: {e}", peak as f64 / 1e6),
    }
    Ok(())
}
