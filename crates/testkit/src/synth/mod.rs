//! Deterministic synthetic multi-rank PyTorch profiler (Kineto) traces, for benchmarks and tests.
//!
//! This module owns the generator only: a [`SynthSpec`] in, one Chrome-trace JSON document per
//! rank out, streamed to any [`Write`] one training step at a time (memory stays at a few
//! kilobytes per layer whatever the trace size). The documents copy the shapes of real PyTorch
//! 2.x traces (`tests/fixtures/hta/`): top-level key order, `distributedInfo`, `ProfilerStep#N`
//! annotations with a trailing step that is cut short, cpu ops holding `cudaLaunchKernel`
//! runtime events linked to their kernels by `correlation` and `ac2g` flows, `record_param_comms`
//! with NCCL metadata (also copied onto the NCCL kernel, as 2024 traces do), `nccl:*`
//! annotations on the CPU and `gpu_user_annotation`s on the GPU track, memcpy and memset.
//!
//! # Timing model
//! Every rank runs the same program, so the *shape* of each step (which kernels, which sizes)
//! comes from one "global" random stream per step. The straggler rank uses those durations as
//! drawn; every other rank scales each duration by a factor in `[0.94, 1]`. The straggler also
//! arrives `imbalance × transfer` late at every collective. Because the simulated timeline only
//! uses `+` and `max`, no rank's GPU is ever ahead of the straggler's, so a collective instance
//! can end at one global time `E = straggler start + transfer` on every rank: the straggler's
//! kernel is the shortest, the others' are longer by their wait. Each rank re-simulates the
//! straggler alongside itself to learn `E`; that costs a little CPU, no cross-rank state.
//!
//! # Event order
//! Writers of real traces do not sort events, and parsers must not rely on order, so the
//! document holds first every CPU event (per step: the autograd thread, then the main thread,
//! each parent after its children), then every GPU event (per step: the NCCL stream, then the
//! compute stream), then the `M` metadata. Two passes over the deterministic simulation produce
//! this without buffering more than one step.
//!
//! # Layout
//! This file holds the spec, the entry points and the per-rank constants; `timeline` simulates a
//! rank, `events` formats its events, `document` writes the JSON around them, and `vocab` holds
//! the names, ids and kernel launch shapes copied from real traces.

mod document;
mod events;
mod json;
mod timeline;
pub(crate) use timeline::Rng;
mod vocab;

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use document::Doc;
use timeline::run_pass;
use vocab::Pass;
use vocab::{CollKind, GPUS_PER_HOST};

/// What to generate. All ranks of one spec describe the same run.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub world_size: u32,
    /// Complete `ProfilerStep`s; one more, cut short, follows them as in real traces.
    pub steps: u32,
    /// Transformer-like layers: one gradient all-reduce each in the backward pass.
    pub layers: u32,
    pub seed: u64,
    /// Extra fraction of each collective's transfer time that the early ranks spend waiting for
    /// the straggler (0.25: their kernels run ~25 % longer than the straggler's).
    pub imbalance: f64,
    /// The rank that arrives last at every collective (taken modulo `world_size`).
    pub straggler_rank: u32,
    /// Adds an MoE-style `all_to_all` per layer in the forward pass (exposed: compute waits).
    pub all_to_all: bool,
    /// `ts`/`dur` with three decimals (ns resolution) like 2024 traces; else whole µs.
    pub fractional_ts: bool,
    /// Changes the gate-quality benchmark and the trace-gate tests inject (none by default).
    pub perturb: Perturb,
}

/// What a trace run can be made to change, on top of the timing model: the same buffer sizes in
/// every step (as a real model has), a straggler that arrives later at every `all_to_all`, and
/// a slower wire for every `all_reduce`. The last three fields make the *true* trace of the same
/// job under a fix (a straggler on time, a collective fully hidden, an `all_reduce` at a given
/// bus bandwidth), against which a what-if replay's prediction is checked: every random draw is
/// still made in the same order, so everything the fix does not touch stays as it was. The
/// default changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Perturb {
    /// Every collective moves the first of its sizes in every step (the random draws are still
    /// made, so the rest of the timeline is the same).
    pub steady_sizes: bool,
    /// Extra nanoseconds the straggler rank arrives late at each `all_to_all`: every other rank
    /// waits that much longer.
    pub all_to_all_late_ns: u64,
    /// Multiplies the wire time of every `all_reduce` (1.1: a 10 % slower transfer); 0 means 1.
    pub all_reduce_transfer_factor: f64,
    /// The truth of "the straggler on time": the straggler rank arrives at every collective when
    /// it is ready, without its `imbalance × transfer` lateness (nor `all_to_all_late_ns`). Its
    /// compute durations are unchanged and it still ends each collective for every rank, so the
    /// other ranks still wait for its slower compute, no longer for its lateness.
    pub straggler_on_time: bool,
    /// The truth of "this collective fully hidden": it costs nothing and nothing waits for it.
    /// On every rank each of its kernels starts when the rank is ready, lasts the shortest
    /// duration a trace can hold (1 ns, or 1 µs without `fractional_ts`) and does not wait for
    /// the straggler; neither the next collective nor the compute launched after it waits for
    /// it. (Two hidden kernels ready at once run back to back, so that the NCCL stream never
    /// overlaps itself: the second starts one quantum late.) The end-of-step `loss.item()` sync
    /// still waits for the last collective that is not hidden. Takes precedence over the other
    /// changes for that collective.
    pub hidden: Option<SynthCollective>,
    /// The truth of "`all_reduce` at bus bandwidth B GB/s" (0: off): every `all_reduce` kernel's
    /// transfer takes exactly `payload bytes × 2(n−1)/n / (B × 10⁹)` seconds for `n` ranks (the
    /// ring all-reduce's bus bandwidth), rounded to the nearest ns (up to a whole µs without
    /// `fractional_ts`), with no speed factor, no fixed latency and no
    /// `all_reduce_transfer_factor`. The straggler's lateness is host-side, so it stays
    /// `imbalance ×` the transfer it would have without this change.
    pub all_reduce_busbw_gbps: f64,
    /// The truth of "collective X's buckets start N ns earlier": X's kernels wait for the
    /// compute stream only until N ns before it is free (the data they need ready that much
    /// sooner); the host's launch and the NCCL stream's order still hold. `None`: no change.
    pub released_earlier: Option<(SynthCollective, u64)>,
}

/// A collective kind of the synthetic traces, as [`Perturb::hidden`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthCollective {
    /// The per-layer gradient `all_reduce` in the backward pass and the loss `all_reduce`.
    AllReduce,
    /// The per-layer MoE-style `all_to_all` in the forward pass (with `SynthSpec::all_to_all`).
    AllToAll,
    /// The `_allgather_base` of the parameters at the start of each step.
    AllGather,
}

impl SynthCollective {
    fn kind(self) -> CollKind {
        match self {
            SynthCollective::AllReduce => CollKind::AllReduce,
            SynthCollective::AllToAll => CollKind::AllToAll,
            SynthCollective::AllGather => CollKind::AllGatherBase,
        }
    }
}

impl SynthSpec {
    /// A few hundred kilobytes per rank: 4 ranks, 3 steps, 8 layers, all collective kinds.
    pub fn small() -> Self {
        SynthSpec {
            world_size: 4,
            steps: 3,
            layers: 8,
            seed: 7,
            imbalance: 0.25,
            straggler_rank: 1,
            all_to_all: true,
            fractional_ts: true,
            perturb: Perturb::default(),
        }
    }

    /// One capture of the job the trace gate is measured on (`benches/trace_gate_quality.rs`,
    /// `tests/trace_gate.rs`): 4 ranks, 30 steps of 4 layers, the same buffer sizes every step,
    /// rank 1 the usual straggler (10 % of each transfer late); captures differ by `seed` and
    /// the injected change.
    pub fn gate_job(seed: u64, perturb: Perturb) -> Self {
        SynthSpec {
            world_size: 4,
            steps: 30,
            layers: 4,
            seed,
            imbalance: 0.1,
            straggler_rank: 1,
            perturb: Perturb { steady_sizes: true, ..perturb },
            ..SynthSpec::small()
        }
    }

    /// 8 ranks whose JSON is each about `bytes_per_rank` long (within a step's worth; ~2 % for
    /// sizes over 1 MB). Sizes are measured, not guessed: a few tiny traces are generated to
    /// learn the bytes per layer and per step. Changing fields afterwards changes the size a
    /// little (`world_size` lengthens the rank lists) or a lot (`steps`, `layers`).
    pub fn with_target_bytes(bytes_per_rank: u64) -> Self {
        let base = SynthSpec {
            world_size: 8,
            steps: 1,
            layers: 1,
            seed: 1,
            imbalance: 0.25,
            straggler_rank: 3,
            all_to_all: true,
            fractional_ts: true,
            perturb: Perturb::default(),
        };
        let size = |layers: u32, steps: u32| measure_bytes(&SynthSpec { layers, steps, ..base.clone() });
        // Aim for at least 16 steps so one step is a small fraction of the target.
        let per_layer_step = size(2, 1).saturating_sub(size(1, 1)).max(1);
        let layers = (bytes_per_rank / (per_layer_step * 16)).clamp(1, MAX_TARGET_LAYERS) as u32;
        let one = size(layers, 1);
        let per_step = size(layers, 2).saturating_sub(one).max(1);
        let fixed = one.saturating_sub(per_step);
        let steps = (bytes_per_rank.saturating_sub(fixed) + per_step / 2) / per_step;
        SynthSpec { layers, steps: steps.clamp(1, u64::from(u32::MAX)) as u32, ..base }
    }
}

/// Layers used by [`SynthSpec::with_target_bytes`] once the target is large (a 24-layer model).
const MAX_TARGET_LAYERS: u64 = 24;

/// Writes rank `rank`'s trace of `spec` to `out`, streaming.
pub fn write_rank<W: Write>(spec: &SynthSpec, rank: u32, out: W) -> io::Result<()> {
    if spec.world_size == 0 || rank >= spec.world_size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("rank {rank} is outside world_size {}; use a rank below world_size", spec.world_size),
        ));
    }
    let ctx = Ctx::new(spec, rank);
    let mut doc = Doc::new(BufWriter::with_capacity(1 << 16, out));
    doc.header(&ctx)?;
    run_pass(&ctx, Pass::Cpu, &mut doc)?;
    let trace_end = run_pass(&ctx, Pass::Gpu, &mut doc)?;
    doc.metadata(&ctx, trace_end)?;
    doc.footer(&ctx)?;
    doc.out.flush()
}

/// Writes every rank of `spec` into `dir` (created if missing) as `rank-{r}.json`, or
/// `rank-{r}.json.gz` when `gzip`, ranks in parallel. Returns the paths in rank order.
pub fn write_all_ranks(spec: &SynthSpec, dir: &Path, gzip: bool) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let ext = if gzip { "json.gz" } else { "json" };
    let paths: Vec<PathBuf> = (0..spec.world_size).map(|r| dir.join(format!("rank-{r}.{ext}"))).collect();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ranks: Vec<u32> = (0..spec.world_size).collect();
    for chunk in ranks.chunks(workers) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&r| {
                    let path = &paths[r as usize];
                    scope.spawn(move || write_rank_file(spec, r, path, gzip))
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("trace writer thread panicked"))))
        })?;
    }
    Ok(paths)
}

fn write_rank_file(spec: &SynthSpec, rank: u32, path: &Path, gzip: bool) -> io::Result<()> {
    let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(with_path)?;
    if gzip {
        let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        write_rank(spec, rank, &mut enc).map_err(with_path)?;
        enc.finish().map_err(with_path)?.sync_all().map_err(with_path)
    } else {
        let mut file = file;
        write_rank(spec, rank, &mut file).map_err(with_path)?;
        file.flush().map_err(with_path)
    }
}

/// Bytes `write_rank(spec, 0, ..)` produces.
fn measure_bytes(spec: &SynthSpec) -> u64 {
    let mut counter = CountingSink(0);
    // The sink never fails; an error could only mean an invalid spec, which has no size.
    write_rank(spec, 0, &mut counter).map_or(0, |()| counter.0)
}

struct CountingSink(u64);

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What does not change during one rank's trace (the child modules read its fields).
struct Ctx<'s> {
    spec: &'s SynthSpec,
    rank: u32,
    straggler: u32,
    pid: u64,
    main_tid: u64,
    bwd_tid: u64,
    device: u32,
    /// `"[0, 1, ..]"`, as `Process Group Ranks` is written.
    pg_ranks: String,
    /// Collectives issued per complete step (for `Seq`).
    colls_per_step: u64,
}

impl<'s> Ctx<'s> {
    fn new(spec: &'s SynthSpec, rank: u32) -> Self {
        let ranks: Vec<String> = (0..spec.world_size).map(|r| r.to_string()).collect();
        let pid = 2_910_249 + u64::from(rank) * 1_031;
        let a2a = if spec.all_to_all { spec.layers } else { 0 };
        Ctx {
            spec,
            rank,
            straggler: spec.straggler_rank % spec.world_size,
            pid,
            main_tid: pid,
            bwd_tid: pid + 9_503,
            device: rank % GPUS_PER_HOST,
            pg_ranks: format!("[{}]", ranks.join(", ")),
            colls_per_step: u64::from(spec.layers + a2a) + 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::*;

    fn render(spec: &SynthSpec, rank: u32) -> Vec<u8> {
        let mut out = Vec::new();
        write_rank(spec, rank, &mut out).expect("writing to a Vec cannot fail");
        out
    }

    fn events(bytes: &[u8]) -> Vec<Value> {
        let doc: Value = serde_json::from_slice(bytes).expect("valid JSON");
        doc["traceEvents"].as_array().expect("traceEvents").clone()
    }

    /// `ts`/`dur` in integer ns, read from the text so no float rounding blurs equality.
    fn ns(v: &Value) -> u64 {
        let text = v.to_string();
        let (int, frac) = text.split_once('.').unwrap_or((&text, "0"));
        let frac = format!("{frac:0<3}");
        int.parse::<u64>().expect("µs") * 1_000 + frac.parse::<u64>().expect("ns")
    }

    fn nccl_kernels(evs: &[Value]) -> Vec<&Value> {
        evs.iter().filter(|e| e["cat"] == "kernel" && e["name"].as_str().unwrap().starts_with("nccl")).collect()
    }

    #[test]
    fn small_spec_is_valid_json_with_kineto_shapes() {
        let spec = SynthSpec::small();
        let bytes = render(&spec, 0);
        let doc: Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(doc["distributedInfo"]["rank"], 0);
        assert_eq!(doc["distributedInfo"]["world_size"], spec.world_size);
        assert!(doc["baseTimeNanoseconds"].is_u64());
        assert!((100_000..1_000_000).contains(&bytes.len()), "{} bytes", bytes.len());
        let evs = events(&bytes);
        let steps = evs
            .iter()
            .filter(|e| e["cat"] == "user_annotation")
            .filter(|e| e["name"].as_str().unwrap().starts_with("ProfilerStep#"))
            .count();
        assert_eq!(steps as u32, spec.steps + 1, "one trailing step cut short");
        let comms = evs.iter().filter(|e| e["name"] == "record_param_comms").count();
        let per_step = spec.layers * 2 + 2;
        assert_eq!(comms as u32, spec.steps * per_step);
        assert_eq!(nccl_kernels(&evs).len(), comms);
        for k in nccl_kernels(&evs) {
            for key in ["Collective name", "In msg nelems", "dtype", "Process Group Name", "Seq"] {
                assert!(!k["args"][key].is_null(), "{key} missing on {k}");
            }
        }
    }

    #[test]
    fn top_level_keys_come_in_kineto_order() {
        let text = String::from_utf8(render(&SynthSpec::small(), 1)).unwrap();
        let keys: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("  \"")?.split_once('"').map(|(k, _)| k)).collect();
        assert_eq!(
            keys,
            [
                "schemaVersion",
                "deviceProperties",
                "distributedInfo",
                "traceEvents",
                "traceName",
                "displayTimeUnit",
                "baseTimeNanoseconds"
            ]
        );
    }

    #[test]
    fn output_is_deterministic_per_seed() {
        let spec = SynthSpec::small();
        assert_eq!(render(&spec, 2), render(&spec, 2));
        let other = SynthSpec { seed: 8, ..spec };
        assert_ne!(render(&SynthSpec::small(), 2), render(&other, 2));
    }

    #[test]
    fn every_kernel_has_its_launch_and_streams_do_not_overlap() {
        let evs = events(&render(&SynthSpec::small(), 3));
        let launches: BTreeMap<u64, &Value> = evs
            .iter()
            .filter(|e| e["cat"] == "cuda_runtime")
            .map(|e| (e["args"]["correlation"].as_u64().unwrap(), e))
            .collect();
        let mut by_stream: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for k in
            evs.iter().filter(|e| ["kernel", "gpu_memcpy", "gpu_memset"].contains(&e["cat"].as_str().unwrap_or("")))
        {
            let launch = launches[&k["args"]["correlation"].as_u64().unwrap()];
            assert!(ns(&launch["ts"]) + ns(&launch["dur"]) <= ns(&k["ts"]));
            let start = ns(&k["ts"]);
            let end = start + ns(&k["dur"]);
            by_stream.entry(k["tid"].as_u64().unwrap()).or_default().push((start, end));
        }
        assert_eq!(by_stream.len(), 2, "compute and NCCL streams");
        for spans in by_stream.values_mut() {
            spans.sort_unstable();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
        }
    }

    #[test]
    fn collectives_end_together_and_the_straggler_is_shortest() {
        let spec = SynthSpec::small();
        // Seq -> [(rank, end, duration)]
        let mut by_seq: BTreeMap<u64, Vec<(u32, u64, u64)>> = BTreeMap::new();
        for rank in 0..spec.world_size {
            for k in nccl_kernels(&events(&render(&spec, rank))) {
                let (ts, dur) = (ns(&k["ts"]), ns(&k["dur"]));
                let seq = k["args"]["Seq"].as_u64().unwrap();
                by_seq.entry(seq).or_default().push((rank, ts + dur, dur));
            }
        }
        assert!(!by_seq.is_empty());
        for (seq, inst) in &by_seq {
            assert_eq!(inst.len() as u32, spec.world_size, "Seq {seq} on every rank");
            assert!(inst.iter().all(|i| i.1 == inst[0].1), "Seq {seq} ends apart");
            let shortest = inst.iter().min_by_key(|i| i.2).unwrap();
            assert_eq!(shortest.0, spec.straggler_rank, "Seq {seq}: {inst:?}");
        }
    }

    #[test]
    fn timestamps_have_exactly_three_decimals_or_none() {
        for fractional_ts in [true, false] {
            let spec = SynthSpec { fractional_ts, ..SynthSpec::small() };
            let text = String::from_utf8(render(&spec, 0)).unwrap();
            let mut seen = 0;
            for field in ["\"ts\": ", "\"dur\": "] {
                for piece in text.split(field).skip(1) {
                    let num: String = piece.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
                    let decimals = num.split_once('.').map(|(_, f)| f.len());
                    assert_eq!(decimals, fractional_ts.then_some(3), "{num}");
                    seen += 1;
                }
            }
            assert!(seen > 1_000);
            assert!(serde_json::from_str::<Value>(&text).is_ok());
        }
    }

    #[test]
    fn target_bytes_lands_near_the_target() {
        let spec = SynthSpec::with_target_bytes(1_000_000);
        let len = render(&spec, spec.world_size - 1).len() as f64;
        assert!((0.7e6..1.3e6).contains(&len), "{len} bytes for {spec:?}");
    }

    #[test]
    fn degenerate_specs_still_make_valid_traces() {
        let specs = [
            SynthSpec { world_size: 1, straggler_rank: 0, ..SynthSpec::small() },
            SynthSpec { steps: 0, layers: 0, ..SynthSpec::small() },
            SynthSpec { imbalance: 0.0, all_to_all: false, fractional_ts: false, ..SynthSpec::small() },
        ];
        for spec in specs {
            let evs = events(&render(&spec, 0));
            assert!(evs.len() > 10, "{spec:?}");
        }
    }

    /// FNV-1a (64-bit) of a document: a fingerprint to pin the generator's exact output.
    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3))
    }

    #[test]
    fn default_perturb_leaves_the_output_byte_identical() {
        // Recorded before the what-if truths were added: `Perturb::default()` must keep meaning
        // "no change", for the benches and tests that compare against earlier output.
        let whole_us = SynthSpec { fractional_ts: false, ..SynthSpec::small() };
        let cases = [
            (SynthSpec::small(), 0, 429_386, 0xF1B5_584B_3F39_51A0),
            (SynthSpec::small(), 1, 429_315, 0xA46C_63CA_B986_C67E),
            (whole_us, 2, 419_155, 0x557C_B0C0_E3C1_2A8D),
            (SynthSpec::gate_job(11, Perturb::default()), 1, 2_353_633, 0x6968_25EA_81E6_8ED4),
        ];
        for (spec, rank, len, hash) in cases {
            let bytes = render(&spec, rank);
            assert_eq!((bytes.len(), fnv1a(&bytes)), (len, hash), "rank {rank} of {spec:?}");
        }
    }

    /// Every GPU activity of a rank in issue order (by correlation id, which the simulation
    /// hands out in order): `(corr, is_nccl, name, start, end)`.
    fn gpu_work(evs: &[Value]) -> Vec<(u64, bool, String, u64, u64)> {
        let mut work: Vec<_> = evs
            .iter()
            .filter(|e| ["kernel", "gpu_memcpy", "gpu_memset"].contains(&e["cat"].as_str().unwrap_or("")))
            .map(|e| {
                let name = e["name"].as_str().unwrap().to_string();
                let start = ns(&e["ts"]);
                (
                    e["args"]["correlation"].as_u64().unwrap(),
                    name.starts_with("nccl"),
                    name,
                    start,
                    start + ns(&e["dur"]),
                )
            })
            .collect();
        work.sort_unstable();
        work
    }

    /// Each GPU activity's earliest and latest possible start had it waited for nothing but its
    /// launch (+3..=6 µs) and the work issued before it on either stream, leaving out kernels
    /// whose name starts with `ignored` (`"-"`: none).
    fn ready_bounds(evs: &[Value], ignored: &str) -> Vec<(u64, u64)> {
        let launch_end: BTreeMap<u64, u64> = evs
            .iter()
            .filter(|e| e["cat"] == "cuda_runtime")
            .map(|e| (e["args"]["correlation"].as_u64().unwrap(), ns(&e["ts"]) + ns(&e["dur"])))
            .collect();
        let (mut compute_free, mut nccl_free) = (0, 0);
        let mut out = Vec::new();
        for (corr, nccl, name, _, end) in gpu_work(evs) {
            let before = if nccl { compute_free.max(nccl_free) } else { compute_free };
            let launched = launch_end[&corr];
            out.push(((launched + 3_000).max(before), (launched + 6_000).max(before)));
            if name.starts_with(ignored) {
                continue;
            }
            if nccl {
                nccl_free = nccl_free.max(end);
            } else {
                compute_free = compute_free.max(end);
            }
        }
        out
    }

    /// The straggler's NCCL kernels: `(start, duration, earliest ready, latest ready)`.
    fn nccl_starts(evs: &[Value]) -> Vec<(u64, u64, u64, u64)> {
        let bounds = ready_bounds(evs, "-");
        gpu_work(evs).iter().zip(bounds).filter(|(w, _)| w.1).map(|(w, (lo, hi))| (w.3, w.4 - w.3, lo, hi)).collect()
    }

    fn compute_durations(evs: &[Value]) -> Vec<u64> {
        gpu_work(evs).iter().filter(|w| !w.1).map(|w| w.4 - w.3).collect()
    }

    fn gpu_end(evs: &[Value]) -> u64 {
        gpu_work(evs).iter().map(|w| w.4).max().unwrap()
    }

    #[test]
    fn straggler_on_time_starts_each_collective_when_ready() {
        let late = SynthSpec::small();
        let on_time = SynthSpec { perturb: Perturb { straggler_on_time: true, ..late.perturb }, ..late.clone() };
        let straggler = late.straggler_rank;
        let (late_evs, on_time_evs) = (events(&render(&late, straggler)), events(&render(&on_time, straggler)));
        let (late_nccl, on_time_nccl) = (nccl_starts(&late_evs), nccl_starts(&on_time_evs));
        assert_eq!(late_nccl.len(), on_time_nccl.len());
        assert!(!late_nccl.is_empty());
        for (start, dur, lo, _) in late_nccl {
            let late_by = (late.imbalance * dur as f64) as u64;
            assert!(start >= lo + late_by, "{start} < {lo} + {late_by}: arrives late without the change");
        }
        for (start, _, _, hi) in on_time_nccl {
            assert!(start <= hi, "{start} > {hi}: waited for more than its own work");
        }
        // The same draws: the straggler's compute is unchanged, and the others wait less.
        assert_eq!(compute_durations(&late_evs), compute_durations(&on_time_evs));
        let waits =
            |spec: &SynthSpec| -> u64 { nccl_kernels(&events(&render(spec, 0))).iter().map(|k| ns(&k["dur"])).sum() };
        assert!(waits(&on_time) < waits(&late));
        // On time means on time at `all_to_all` too, whatever lateness was injected there.
        let injected = Perturb { all_to_all_late_ns: 900_000, ..on_time.perturb };
        assert_eq!(render(&SynthSpec { perturb: injected, ..on_time.clone() }, 0), render(&on_time, 0));
    }

    #[test]
    fn a_hidden_collective_lasts_one_ns_and_nothing_waits_for_it() {
        let base = SynthSpec::small();
        let cases = [
            (SynthCollective::AllToAll, "ncclDevKernel_SendRecv"),
            (SynthCollective::AllReduce, "ncclDevKernel_AllReduce"),
            (SynthCollective::AllGather, "ncclDevKernel_AllGather"),
        ];
        for (which, kernel) in cases {
            let spec = SynthSpec { perturb: Perturb { hidden: Some(which), ..base.perturb }, ..base.clone() };
            // Seq -> ends of the collectives still shown, per rank.
            let mut ends: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            let mut hidden_seen = 0;
            for rank in 0..spec.world_size {
                let (evs, before) = (events(&render(&spec, rank)), events(&render(&base, rank)));
                let work = gpu_work(&evs);
                let bounds = ready_bounds(&evs, kernel);
                let mut last_hidden_end = 0;
                for (i, w) in work.iter().enumerate() {
                    if !w.2.starts_with(kernel) {
                        continue;
                    }
                    hidden_seen += 1;
                    assert_eq!(w.4 - w.3, 1, "{which:?} on rank {rank}: {w:?}");
                    // Two hidden kernels ready at once run back to back.
                    let latest = bounds[i].1.max(last_hidden_end);
                    assert!(w.3 <= latest, "{which:?} on rank {rank} waited: {w:?}");
                    last_hidden_end = w.4;
                    // What is issued next, compute or another collective, does not wait for it
                    // (a collective on the straggler is late by its own imbalance; a hidden one
                    // is checked above).
                    let next = work
                        .get(i + 1)
                        .filter(|n| !n.2.starts_with(kernel))
                        .filter(|n| !n.1 || rank != spec.straggler_rank);
                    if let Some(next) = next {
                        assert!(next.3 <= bounds[i + 1].1, "{which:?} on rank {rank}: {next:?} waited for it");
                    }
                }
                for k in nccl_kernels(&evs).iter().filter(|k| !k["name"].as_str().unwrap().starts_with(kernel)) {
                    ends.entry(k["args"]["Seq"].as_u64().unwrap()).or_default().push(ns(&k["ts"]) + ns(&k["dur"]));
                }
                // The same draws in the same order; the step only gets shorter.
                assert_eq!(compute_durations(&evs), compute_durations(&before), "{which:?} on rank {rank}");
                assert_eq!(nccl_kernels(&evs).len(), nccl_kernels(&before).len());
                assert!(gpu_end(&evs) < gpu_end(&before), "{which:?} on rank {rank}");
                let mut nccl: Vec<_> = work.iter().filter(|w| w.1).map(|w| (w.3, w.4)).collect();
                nccl.sort_unstable();
                assert!(nccl.windows(2).all(|p| p[0].1 <= p[1].0), "{which:?} on rank {rank}: NCCL stream overlaps");
            }
            assert!(hidden_seen > 0, "{which:?}");
            for (seq, inst) in &ends {
                assert_eq!(inst.len() as u32, spec.world_size, "{which:?}: Seq {seq} on every rank");
                assert!(inst.iter().all(|e| *e == inst[0]), "{which:?}: Seq {seq} ends apart: {inst:?}");
            }
        }
    }

    #[test]
    fn all_reduce_at_a_bus_bandwidth_lasts_exactly_its_bus_bytes() {
        let base = SynthSpec::small();
        let gbps = 100;
        let spec =
            SynthSpec { perturb: Perturb { all_reduce_busbw_gbps: gbps as f64, ..base.perturb }, ..base.clone() };
        let straggler = spec.straggler_rank;
        let (evs, before) = (events(&render(&spec, straggler)), events(&render(&base, straggler)));
        let n = u64::from(spec.world_size);
        let mut seen = 0;
        for k in nccl_kernels(&evs).iter().filter(|k| k["args"]["Collective name"] == "allreduce") {
            let bytes =
                k["args"]["In msg nelems"].as_u64().unwrap() * if k["args"]["dtype"] == "Float" { 4 } else { 2 };
            // bytes × 2(n−1)/n / (B GB/s) = bytes × 2(n−1) / (n × B) ns, rounded, at least 1 ns.
            let (num, den) = (bytes * 2 * (n - 1), n * gbps);
            let expected = ((num + den / 2) / den).max(1);
            assert_eq!(ns(&k["dur"]), expected, "{bytes} bytes: {k}");
            seen += 1;
        }
        assert_eq!(seen, spec.steps * (spec.layers + 1));
        // The lateness stays that of the drawn transfer: the first gradient all-reduce starts
        // when it did (nothing before it changed).
        let first_grad = |evs: &[Value]| {
            let k = nccl_kernels(evs)
                .into_iter()
                .find(|k| k["args"]["dtype"] == "BFloat16" && k["args"]["Collective name"] == "allreduce");
            ns(&k.unwrap()["ts"])
        };
        assert_eq!(first_grad(&evs), first_grad(&before));
        assert_eq!(compute_durations(&evs), compute_durations(&before));
    }

    #[test]
    fn rejects_a_rank_outside_the_world() {
        let err = write_rank(&SynthSpec::small(), 4, Vec::new()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn writes_every_rank_plain_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SynthSpec { steps: 1, layers: 2, ..SynthSpec::small() };
        let plain = write_all_ranks(&spec, dir.path(), false).unwrap();
        let gz = write_all_ranks(&spec, dir.path(), true).unwrap();
        assert_eq!(plain.len(), 4);
        assert!(gz[3].ends_with("rank-3.json.gz"));
        let mut text = Vec::new();
        let file = std::fs::File::open(&gz[3]).unwrap();
        io::Read::read_to_end(&mut flate2::read::GzDecoder::new(file), &mut text).unwrap();
        assert_eq!(text, std::fs::read(&plain[3]).unwrap());
    }
}
