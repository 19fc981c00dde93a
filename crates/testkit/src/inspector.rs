//! The synthetic timeline as NCCL Inspector logs: one `<host>-pid<N>.log` per rank, one JSON
//! line per communication kernel, with the fields and the layout the plugin writes
//! (`header`, `metadata`, `coll_perf`; integers as integers, bandwidths with six decimals).
//!
//! The records come from the Kineto document as parsed and analysed (the kernels attribution
//! counts, in the trace's step window, with the collective, payload, process group and `Seq`
//! attribution gives them), so that a test can demand the same transfer, wait and bus bandwidth
//! from both sources. What the plugin has no place for is dropped: compute, start times, steps.
//! Durations are written in whole microseconds, as the plugin writes them.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::nsys::timeline;
use super::synth::SynthSpec;
use commgate_trace::attribute::{analyze_rank, bus_factor, AttributeOptions, CommKernel, MatchKey};

/// The format version written into `metadata`.
pub const FORMAT_VERSION: &str = "v4.0";

/// The file name the plugin would give rank `rank`'s log.
pub fn log_name(rank: u32) -> String {
    format!("node{rank}-pid{}.log", 1000 + rank)
}

/// Writes every rank of `spec` into `dir`; returns the paths in rank order.
pub fn write_all_ranks_logs(spec: &SynthSpec, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    (0..spec.world_size)
        .map(|r| {
            let path = dir.join(log_name(r));
            write_rank_log(spec, r, &path)?;
            Ok(path)
        })
        .collect()
}

/// Writes rank `rank` of `spec` to `path` as an Inspector log.
pub fn write_rank_log(spec: &SynthSpec, rank: u32, path: &Path) -> io::Result<()> {
    let t = timeline(spec, rank)?;
    let mut steps: Vec<&str> = t.steps.iter().map(|s| s.name.as_str()).collect();
    steps.sort_unstable();
    steps.dedup();
    let analysis = analyze_rank(&t, &AttributeOptions::default(), steps.len() >= 2);
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for c in &analysis.comm_kernels {
        let record = Record::of(c, spec.world_size);
        write_record(&mut out, &record, rank, spec.world_size)?;
    }
    out.flush()
}

/// One `coll_perf` record's figures.
pub struct Record {
    /// The communicator's hash.
    pub comm: u64,
    /// The plugin's collective name (`AllReduce`, `All2All`, …).
    pub coll: String,
    pub sn: u64,
    /// One rank's share for AllGather and ReduceScatter, the buffer for the others.
    pub msg_bytes: u64,
    pub exec_us: u64,
}

impl Record {
    /// The record of an identified kernel of a `world`-rank job.
    fn of(c: &CommKernel, world: u32) -> Record {
        let (pg, sn) = match &c.key {
            MatchKey::Seq { pg, seq } => (pg.to_string(), *seq),
            MatchKey::Ordinal { pg, collective, ordinal } => (format!("{pg}/{collective}"), *ordinal),
        };
        let coll = plugin_name(&c.collective);
        let payload = c.payload.unwrap_or(0);
        let msg_bytes =
            if matches!(coll.as_str(), "AllGather" | "ReduceScatter") { payload / u64::from(world) } else { payload };
        Record { comm: fnv1a(&pg), coll, sn, msg_bytes, exec_us: ((c.end - c.ts).max(0) / 1000) as u64 }
    }
}

/// commgate's collective name as the plugin's `ncclFuncToString` writes it.
fn plugin_name(collective: &str) -> String {
    match collective {
        "all_reduce" => "AllReduce",
        "all_gather" => "AllGather",
        "reduce_scatter" => "ReduceScatter",
        "all_to_all" => "All2All",
        "broadcast" => "Broadcast",
        "reduce" => "Reduce",
        "send_recv" => "SendRecv",
        other => other,
    }
    .to_string()
}

/// A stable 64-bit hash standing in for NCCL's communicator hash.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Writes one record as the plugin does: one line, its fields in its order, the bandwidths
/// computed with its formula.
pub fn write_record(out: &mut impl Write, r: &Record, rank: u32, n_ranks: u32) -> io::Result<()> {
    let n = f64::from(n_ranks);
    let secs = r.exec_us as f64 / 1e6;
    let traffic = if matches!(r.coll.as_str(), "AllGather" | "ReduceScatter") {
        r.msg_bytes as f64 * n
    } else {
        r.msg_bytes as f64
    };
    let algbw = if secs > 0.0 { traffic / 1e9 / secs } else { 0.0 };
    let factor = match r.coll.as_str() {
        "AllReduce" => bus_factor("all_reduce", n_ranks as usize),
        "AllGather" | "ReduceScatter" => bus_factor("all_gather", n_ranks as usize),
        "Broadcast" | "Reduce" | "SendRecv" => Some(1.0),
        _ => Some(0.0),
    }
    .unwrap_or(0.0);
    writeln!(
        out,
        "{{\"header\":{{\"id\":\"0x{:x}\",\"comm_name\":\"unknown\",\"rank\":{rank},\"n_ranks\":{n_ranks},\"nnodes\":1}},\
         \"metadata\":{{\"inspector_output_format_version\":\"{FORMAT_VERSION}\",\"git_rev\":\"\",\
         \"rec_mechanism\":\"nccl_profiler_interface\",\"dump_timestamp_us\":1752867229276385,\
         \"hostname\":\"node{rank}\",\"pid\":{}}},\
         \"coll_perf\":{{\"coll\":\"{}\",\"coll_sn\":{},\"coll_msg_size_bytes\":{},\"coll_exec_time_us\":{},\
         \"coll_timing_source\":\"kernel_gpu\",\"coll_algobw_gbs\":{algbw:.6},\"coll_busbw_gbs\":{:.6}}}}}",
        r.comm,
        1000 + rank,
        r.coll,
        r.sn,
        r.msg_bytes,
        r.exec_us,
        algbw * factor,
    )
}

/// Writes `records` synthetic records of rank `rank` of `n_ranks` (the benchmark's input):
/// all-reduces, all-gathers and reduce-scatters of sizes from 8 KiB to 256 MiB on two
/// communicators, sequence numbers counting up, times that depend on the size.
pub fn write_synthetic_log(out: &mut impl Write, rank: u32, n_ranks: u32, records: u64) -> io::Result<()> {
    const COLLS: [&str; 3] = ["AllReduce", "AllGather", "ReduceScatter"];
    for i in 0..records {
        let coll = COLLS[(i % 3) as usize];
        let msg_bytes = 8192u64 << (i % 16);
        let exec_us = 10 + msg_bytes / 100_000 + (i * 7 + u64::from(rank)) % 13;
        let r = Record { comm: 0x7f8c_496a_e9f6 + i % 2, coll: coll.to_string(), sn: i / 2, msg_bytes, exec_us };
        write_record(out, &r, rank, n_ranks)?;
    }
    Ok(())
}
