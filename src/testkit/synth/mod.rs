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
use vocab::GPUS_PER_HOST;

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
/// a slower wire for every `all_reduce`.
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
