//! Deterministic synthetic multi-rank PyTorch profiler (Kineto) traces, for benchmarks and tests.
//!
//! This file owns the generator only: a [`SynthSpec`] in, one Chrome-trace JSON document per
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

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

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

// ---------------------------------------------------------------------------------------------
// Randomness

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast and good enough for synthetic timings.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64, index: u64) -> Self {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        let salt = r.next_u64() ^ index.wrapping_mul(0xE703_7ED1_A0B4_28DB);
        Rng(salt)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next_u64() % items.len() as u64) as usize]
    }
}

const STREAM_GLOBAL: u64 = 1;
const STREAM_RANK: u64 = 2;

// ---------------------------------------------------------------------------------------------
// Fixed vocabulary: names, ids and kernel launch shapes copied from real traces.

/// `ProfilerStep#` of the first complete step (profiler schedules skip wait/warm-up steps).
const FIRST_STEP: u64 = 5;
/// A steady-clock origin in ns, as Kineto's `ts` values are.
const T0_NS: u64 = 4_458_676_416_788_000;
const BASE_TIME_NS: u64 = 1_711_964_646_000_000_000;
const COMPUTE_STREAM: u64 = 7;
const NCCL_STREAM: u64 = 20;
const GPUS_PER_HOST: u32 = 8;

const CBID_LAUNCH: u32 = 211;
const CBID_LAUNCH_EXC: u32 = 430;
const CBID_MEMCPY: u32 = 41;
const CBID_MEMSET: u32 = 51;
const CBID_WAIT_EVENT: u32 = 147;
const CBID_STREAM_SYNC: u32 = 131;

struct KernelShape {
    name: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    registers: u32,
    shared_memory: u32,
    blocks_per_sm: &'static str,
    warps_per_sm: &'static str,
    occupancy: u32,
}

const GEMM_FWD: KernelShape = KernelShape {
    name: "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn",
    grid: [32, 16, 1],
    block: [256, 1, 1],
    registers: 232,
    shared_memory: 147456,
    blocks_per_sm: "4.740741",
    warps_per_sm: "37.925926",
    occupancy: 12,
};
const GEMM_DGRAD: KernelShape = KernelShape {
    name: "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn",
    grid: [16, 32, 1],
    block: [256, 1, 1],
    registers: 232,
    shared_memory: 147456,
    blocks_per_sm: "4.740741",
    warps_per_sm: "37.925926",
    occupancy: 12,
};
const GEMM_WGRAD: KernelShape = KernelShape {
    name: "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x4_nt",
    grid: [32, 32, 1],
    block: [128, 1, 1],
    registers: 184,
    shared_memory: 98304,
    blocks_per_sm: "9.481482",
    warps_per_sm: "37.925926",
    occupancy: 12,
};
const GELU: KernelShape = KernelShape {
    name: "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)",
    grid: [65536, 1, 1],
    block: [128, 1, 1],
    registers: 26,
    shared_memory: 0,
    blocks_per_sm: "606.814819",
    warps_per_sm: "2427.259277",
    occupancy: 100,
};
const GELU_BWD: KernelShape = KernelShape {
    name: "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)",
    grid: [65536, 1, 1],
    block: [128, 1, 1],
    registers: 30,
    shared_memory: 0,
    blocks_per_sm: "606.814819",
    warps_per_sm: "2427.259277",
    occupancy: 100,
};
const ADAM: KernelShape = KernelShape {
    name: "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float*, float*)",
    grid: [320, 1, 1],
    block: [512, 1, 1],
    registers: 64,
    shared_memory: 0,
    blocks_per_sm: "2.962963",
    warps_per_sm: "47.407406",
    occupancy: 74,
};
const NCCL_SHAPE: KernelShape = KernelShape {
    name: "",
    grid: [24, 1, 1],
    block: [640, 1, 1],
    registers: 96,
    shared_memory: 87568,
    blocks_per_sm: "0.222222",
    warps_per_sm: "4.444445",
    occupancy: 0,
};

/// The collectives the generator issues.
#[expect(clippy::enum_variant_names, reason = "the collectives' own names")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CollKind {
    AllReduce,
    AllToAll,
    AllGatherBase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    BFloat16,
    Float,
}

impl Dtype {
    fn name(self) -> &'static str {
        match self {
            Dtype::BFloat16 => "BFloat16",
            Dtype::Float => "Float",
        }
    }
    fn input_type(self) -> &'static str {
        match self {
            Dtype::BFloat16 => "c10::BFloat16",
            Dtype::Float => "float",
        }
    }
    fn bytes(self) -> u64 {
        match self {
            Dtype::BFloat16 => 2,
            Dtype::Float => 4,
        }
    }
}

/// One collective call, as `record_param_comms` describes it.
struct Coll {
    kind: CollKind,
    dtype: Dtype,
    in_nelems: u64,
    out_nelems: u64,
    seq: u64,
}

impl Coll {
    fn record_name(&self) -> &'static str {
        match self.kind {
            CollKind::AllReduce => "allreduce",
            CollKind::AllToAll => "all_to_all",
            CollKind::AllGatherBase => "_allgather_base",
        }
    }
    fn c10d_op(&self) -> &'static str {
        match self.kind {
            CollKind::AllReduce => "c10d::allreduce_",
            CollKind::AllToAll => "c10d::alltoall_base_",
            CollKind::AllGatherBase => "c10d::_allgather_base_",
        }
    }
    fn annotation(&self) -> &'static str {
        match self.kind {
            CollKind::AllReduce => "nccl:all_reduce",
            CollKind::AllToAll => "nccl:all_to_all",
            CollKind::AllGatherBase => "nccl:_all_gather_base",
        }
    }
    fn kernel(&self) -> &'static str {
        match (self.kind, self.dtype) {
            (CollKind::AllReduce, Dtype::BFloat16) => {
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            }
            (CollKind::AllReduce, Dtype::Float) => {
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            }
            (CollKind::AllToAll, _) => "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            (CollKind::AllGatherBase, _) => "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        }
    }
    /// Bus bytes per second the transfer time is drawn around.
    fn bandwidth(&self) -> u64 {
        match self.kind {
            CollKind::AllReduce => 60_000_000_000,
            CollKind::AllToAll => 40_000_000_000,
            CollKind::AllGatherBase => 80_000_000_000,
        }
    }
    fn payload_bytes(&self) -> u64 {
        self.in_nelems.max(self.out_nelems) * self.dtype.bytes()
    }
}

// ---------------------------------------------------------------------------------------------
// Per-rank constants

/// What does not change during one rank's trace.
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

// ---------------------------------------------------------------------------------------------
// Simulation

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Cpu,
    Gpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Track {
    Main,
    Bwd,
    Compute,
    Nccl,
}

/// Runs the whole simulation once, writing the events `pass` selects. Returns the trace's end.
fn run_pass<W: Write>(ctx: &Ctx, pass: Pass, doc: &mut Doc<W>) -> io::Result<u64> {
    let emitter = Emitter::new(ctx, pass);
    let mut own = Lane::new(ctx, ctx.rank, Some(emitter));
    // The straggler's timeline decides when each collective ends on every rank.
    let mut straggler = (ctx.rank != ctx.straggler).then(|| Lane::new(ctx, ctx.straggler, None));
    for step in 0..=u64::from(ctx.spec.steps) {
        let trailing = step == u64::from(ctx.spec.steps);
        if let Some(lead) = straggler.as_mut() {
            lead.run_step(step, trailing);
            own.ends.clear();
            own.ends.extend_from_slice(&lead.ends);
        }
        own.run_step(step, trailing);
        if let Some(e) = own.out.as_mut() {
            e.flush(doc)?;
        }
    }
    Ok(own.main.max(own.compute_free).max(own.nccl_free))
}

/// One rank's timeline: CPU thread cursors, stream occupancy, id counters.
struct Lane<'c> {
    ctx: &'c Ctx<'c>,
    /// True on the straggler: it draws baseline durations and computes collective ends.
    leader: bool,
    /// Per-duration slack of non-straggler ranks; `None` on the straggler.
    jitter: Option<Rng>,
    /// The global stream of the current step: identical draws on every rank.
    g: Rng,
    out: Option<Emitter<'c>>,
    main: u64,
    bwd: u64,
    compute_free: u64,
    nccl_free: u64,
    /// Compute kernels launched from now on wait for this (a collective they depend on).
    compute_dep: u64,
    ext: u64,
    corr: u64,
    ev_idx: u64,
    autograd_seq: u64,
    seq: u64,
    /// Collective end times of the current step, in issue order (the straggler's).
    ends: Vec<u64>,
    coll_idx: usize,
    open_ext: u64,
}

impl<'c> Lane<'c> {
    fn new(ctx: &'c Ctx<'c>, rank: u32, out: Option<Emitter<'c>>) -> Self {
        let leader = rank == ctx.straggler;
        let seed = ctx.spec.seed;
        let mut start = Rng::new(seed, STREAM_RANK, u64::from(rank) << 32);
        // The straggler starts last; others up to 300 µs earlier.
        let offset = if leader { 300_000 } else { start.range(0, 300_000) };
        let t0 = T0_NS + quantize(offset, ctx.spec.fractional_ts);
        Lane {
            ctx,
            leader,
            jitter: (!leader).then(|| Rng::new(seed, STREAM_RANK, u64::from(rank))),
            g: Rng::new(seed, STREAM_GLOBAL, 0),
            out,
            main: t0,
            bwd: t0,
            compute_free: t0,
            nccl_free: t0,
            compute_dep: t0,
            ext: 1 + start.range(0, 64),
            corr: 19_000 + start.range(0, 1_000),
            ev_idx: 0,
            autograd_seq: 1_000,
            seq: FIRST_STEP * ctx.colls_per_step,
            ends: Vec::new(),
            coll_idx: 0,
            open_ext: 0,
        }
    }

    /// A duration drawn from the global stream in `lo_us..=hi_us`, scaled by this rank's slack.
    fn d(&mut self, lo_us: u64, hi_us: u64) -> u64 {
        let base = self.g.range(lo_us * 1_000, hi_us * 1_000);
        let scaled = match self.jitter.as_mut() {
            Some(j) => (base as f64 * (1.0 - 0.06 * j.unit())) as u64,
            None => base,
        };
        quantize(scaled, self.ctx.spec.fractional_ts)
    }

    fn cursor(&mut self, track: Track) -> &mut u64 {
        match track {
            Track::Main => &mut self.main,
            _ => &mut self.bwd,
        }
    }

    fn next_ext(&mut self) -> u64 {
        self.ext += 1;
        self.ext
    }

    fn next_corr(&mut self) -> u64 {
        self.corr += 1 + self.g.range(0, 3);
        self.corr
    }

    fn run_step(&mut self, step: u64, trailing: bool) {
        self.g = Rng::new(self.ctx.spec.seed, STREAM_GLOBAL, step);
        self.coll_idx = 0;
        if self.leader {
            self.ends.clear();
        }
        let start = self.main;
        let ext = self.next_ext();
        self.main += self.d(3, 8);
        self.zero_grad();
        self.input_copy();
        if trailing {
            // The profiler stopped during the next step's first layer.
            self.forward_layer(0, false);
        } else {
            self.train_step();
        }
        self.main += self.d(2, 6);
        let name = Name::Step(FIRST_STEP + step);
        let dur = self.main - start;
        let idx = self.next_ev_idx();
        if let Some(e) = self.out.as_mut() {
            e.cpu(Track::Main, "user_annotation", name, start, dur, ext, idx, &Args::Plain);
        }
    }

    fn train_step(&mut self) {
        let layers = self.ctx.spec.layers;
        let gather = self.g.pick(&[4_194_304u64, 6_291_456, 8_388_608]);
        let world = u64::from(self.ctx.spec.world_size);
        self.collective(Track::Main, CollKind::AllGatherBase, Dtype::BFloat16, gather / world, gather);
        for layer in 0..layers {
            self.forward_layer(layer, self.ctx.spec.all_to_all);
        }
        self.bwd = self.bwd.max(self.main) + self.d(20, 60);
        for _ in 0..layers {
            self.backward_layer();
        }
        // The main thread blocks in `backward()` until the autograd thread is done.
        self.main = self.main.max(self.bwd) + self.d(10, 30);
        self.collective(Track::Main, CollKind::AllReduce, Dtype::Float, 1, 1);
        self.compute_dep = self.compute_dep.max(self.nccl_free);
        self.optimizer();
        self.sync_loss();
    }

    fn zero_grad(&mut self) {
        self.op(Track::Main, "user_annotation", "Optimizer.zero_grad#AdamW.zero_grad", Args::Plain, |s| {
            s.op(Track::Main, "cpu_op", "aten::zero_", Args::Plain, |s| {
                s.op(Track::Main, "cpu_op", "aten::fill_", Args::Plain, |s| {
                    let bytes = 4_194_304;
                    s.memory(Track::Main, MemOp::Memset, bytes, 3, 8);
                });
            });
        });
    }

    fn input_copy(&mut self) {
        self.op(Track::Main, "cpu_op", "aten::to", Args::Plain, |s| {
            s.op(Track::Main, "cpu_op", "aten::_to_copy", Args::Plain, |s| {
                s.op(Track::Main, "cpu_op", "aten::copy_", Args::Plain, |s| {
                    s.memory(Track::Main, MemOp::HtoD, 16_777_216, 40, 80);
                });
            });
        });
    }

    fn forward_layer(&mut self, _layer: u32, all_to_all: bool) {
        self.op(Track::Main, "cpu_op", "aten::linear", Args::Plain, |s| {
            s.op(Track::Main, "cpu_op", "aten::t", Args::Plain, |_| {});
            s.op(Track::Main, "cpu_op", "aten::addmm", Args::Plain, |s| {
                let dur = s.d(180, 260);
                s.launch(Track::Main, &GEMM_FWD, dur);
            });
        });
        if all_to_all {
            let tokens = self.g.pick(&[2_097_152u64, 3_145_728, 4_194_304]);
            self.collective(Track::Main, CollKind::AllToAll, Dtype::BFloat16, tokens, tokens);
            self.compute_dep = self.compute_dep.max(self.nccl_free);
            self.op(Track::Main, "cpu_op", "aten::mm", Args::Plain, |s| {
                let dur = s.d(120, 180);
                s.launch(Track::Main, &GEMM_FWD, dur);
            });
        }
        self.op(Track::Main, "cpu_op", "aten::gelu", Args::Plain, |s| {
            let dur = s.d(12, 30);
            s.launch(Track::Main, &GELU, dur);
        });
    }

    fn backward_layer(&mut self) {
        self.autograd_fn("GeluBackward0", |s| {
            s.op(Track::Bwd, "cpu_op", "aten::gelu_backward", Args::Plain, |s| {
                let dur = s.d(15, 35);
                s.launch(Track::Bwd, &GELU_BWD, dur);
            });
        });
        self.autograd_fn("AddmmBackward0", |s| {
            s.op(Track::Bwd, "cpu_op", "aten::mm", Args::Plain, |s| {
                let dur = s.d(200, 320);
                s.launch(Track::Bwd, &GEMM_DGRAD, dur);
            });
            s.op(Track::Bwd, "cpu_op", "aten::mm", Args::Plain, |s| {
                let dur = s.d(200, 320);
                s.launch(Track::Bwd, &GEMM_WGRAD, dur);
            });
        });
        let nelems = self.g.pick(&[8_388_608u64, 12_582_912, 16_777_216, 25_165_824]);
        self.collective(Track::Bwd, CollKind::AllReduce, Dtype::BFloat16, nelems, nelems);
    }

    fn autograd_fn(&mut self, node: &'static str, body: impl FnOnce(&mut Self)) {
        self.autograd_seq += 1;
        let args = Args::Autograd(self.autograd_seq);
        let outer = Name::Evaluate(node);
        self.op(Track::Bwd, "cpu_op", outer, args, |s| {
            s.op(Track::Bwd, "cpu_op", node, args, body);
        });
    }

    fn optimizer(&mut self) {
        self.op(Track::Main, "user_annotation", "Optimizer.step#AdamW.step", Args::Plain, |s| {
            s.op(Track::Main, "cpu_op", "aten::_fused_adamw_", Args::Plain, |s| {
                for _ in 0..4 {
                    let dur = s.d(150, 300);
                    s.launch(Track::Main, &ADAM, dur);
                }
            });
        });
    }

    /// `loss.item()`: a small device-to-host copy and a stream synchronize that returns when the
    /// GPU has drained, which is what paces the next step.
    fn sync_loss(&mut self) {
        self.op(Track::Main, "cpu_op", "aten::item", Args::Plain, |s| {
            s.op(Track::Main, "cpu_op", "aten::_local_scalar_dense", Args::Plain, |s| {
                s.memory(Track::Main, MemOp::DtoH, 4, 2, 3);
                let ts = s.main;
                let done = s.compute_free.max(s.nccl_free) + s.d(4, 10);
                let dur = done.saturating_sub(ts).max(s.d(2, 4));
                s.runtime(Track::Main, "cudaStreamSynchronize", CBID_STREAM_SYNC, ts, dur);
                s.main = ts + dur;
            });
        });
    }

    /// A cpu op (or user annotation) on `track` around `body`, written after its children.
    fn op<N: Into<Name>>(
        &mut self,
        track: Track,
        cat: &'static str,
        name: N,
        args: Args,
        body: impl FnOnce(&mut Self),
    ) {
        let pre = self.d(2, 9);
        let start = *self.cursor(track);
        let ext = self.next_ext();
        let idx = self.next_ev_idx();
        *self.cursor(track) += pre;
        let saved = self.ext_stack_push(ext);
        body(self);
        self.ext_stack_pop(saved);
        let post = self.d(2, 7);
        *self.cursor(track) += post;
        let dur = *self.cursor(track) - start;
        if let Some(e) = self.out.as_mut() {
            e.cpu(track, cat, name.into(), start, dur, ext, idx, &args);
        }
    }

    fn next_ev_idx(&mut self) -> u64 {
        self.ev_idx += 1;
        self.ev_idx
    }

    /// Makes `ext` the innermost open op's External id (launches and kernels carry it).
    fn ext_stack_push(&mut self, ext: u64) -> u64 {
        std::mem::replace(&mut self.open_ext, ext)
    }

    fn ext_stack_pop(&mut self, saved: u64) {
        self.open_ext = saved;
    }

    /// Issues one collective from `track`: `c10d::*` › `record_param_comms` › `nccl:*` ›
    /// `cudaLaunchKernelExC`, and its kernel on the NCCL stream.
    fn collective(&mut self, track: Track, kind: CollKind, dtype: Dtype, in_nelems: u64, out_nelems: u64) {
        self.seq += 1;
        let coll = Coll { kind, dtype, in_nelems, out_nelems, seq: self.seq };
        self.op(track, "cpu_op", coll.c10d_op(), Args::Plain, |s| {
            s.op(track, "cpu_op", "record_param_comms", Args::Comms(&coll), |s| {
                let annotation = coll.annotation();
                s.op(track, "user_annotation", annotation, Args::Shapes(&coll), |s| {
                    let ts = *s.cursor(track);
                    let dur = s.d(2, 5);
                    s.runtime(track, "cudaStreamWaitEvent", CBID_WAIT_EVENT, ts, dur);
                    *s.cursor(track) = ts + dur;
                    s.launch_nccl(track, &coll);
                });
            });
        });
    }

    /// The NCCL kernel: it starts when this rank is ready (the straggler: late by its
    /// imbalance) and ends when the straggler's transfer ends, on every rank.
    fn launch_nccl(&mut self, track: Track, coll: &Coll) {
        let frac = self.ctx.spec.fractional_ts;
        let ts = *self.cursor(track);
        let launch = self.d(8, 16);
        let corr = self.next_corr();
        self.runtime_with_flow(track, "cudaLaunchKernelExC", CBID_LAUNCH_EXC, ts, launch, corr);
        *self.cursor(track) = ts + launch;
        let latency = self.d(3, 6);
        // The NCCL stream waits on an event recorded after the gradients' kernels.
        let ready = (ts + launch + latency).max(self.nccl_free).max(self.compute_free);
        let speed = self.g.range(850, 1_150) as f64 / 1_000.0;
        let wire = coll.payload_bytes() as f64 * 1e9 / coll.bandwidth() as f64 * speed;
        let transfer = quantize(wire as u64 + self.g.range(8_000, 15_000), frac);
        let (start, end) = if self.leader {
            let late = self.ctx.spec.imbalance.max(0.0) * transfer as f64;
            let start = ready + quantize_or_zero(late as u64, frac);
            self.ends.push(start + transfer);
            (start, start + transfer)
        } else {
            let end = self.ends.get(self.coll_idx).copied();
            // `end > ready` always holds (see the module docs); the fallback keeps it so.
            let end = end.unwrap_or(ready + transfer).max(ready + quantize(1, frac));
            (ready, end)
        };
        self.coll_idx += 1;
        self.nccl_free = end;
        let ext = self.open_ext;
        if let Some(e) = self.out.as_mut() {
            e.gpu_annotation(Track::Nccl, coll.annotation(), start, end - start, ext);
            let kernel = Kernel { name: coll.kernel(), shape: &NCCL_SHAPE, coll: Some(coll) };
            e.kernel(Track::Nccl, &kernel, start, end - start, ext, corr);
            e.flow(Track::Nccl, false, start, corr);
        }
    }

    /// `cudaLaunchKernel` on `track` and its kernel on the compute stream.
    fn launch(&mut self, track: Track, shape: &'static KernelShape, dur: u64) {
        let ts = *self.cursor(track);
        let launch = self.d(4, 9);
        let corr = self.next_corr();
        self.runtime_with_flow(track, "cudaLaunchKernel", CBID_LAUNCH, ts, launch, corr);
        *self.cursor(track) = ts + launch;
        let latency = self.d(3, 6);
        let start = (ts + launch + latency).max(self.compute_free).max(self.compute_dep);
        self.compute_free = start + dur;
        let ext = self.open_ext;
        if let Some(e) = self.out.as_mut() {
            let kernel = Kernel { name: shape.name, shape, coll: None };
            e.kernel(Track::Compute, &kernel, start, dur, ext, corr);
            e.flow(Track::Compute, false, start, corr);
        }
    }

    /// `cudaMemcpyAsync` / `cudaMemsetAsync` on `track` and its copy on the compute stream.
    fn memory(&mut self, track: Track, op: MemOp, bytes: u64, lo_us: u64, hi_us: u64) {
        let ts = *self.cursor(track);
        let call = self.d(5, 15);
        let corr = self.next_corr();
        self.runtime_with_flow(track, op.runtime(), op.cbid(), ts, call, corr);
        *self.cursor(track) = ts + call;
        let latency = self.d(3, 6);
        let dur = self.d(lo_us, hi_us);
        let start = (ts + call + latency).max(self.compute_free);
        self.compute_free = start + dur;
        let ext = self.open_ext;
        if let Some(e) = self.out.as_mut() {
            e.memory(op, start, dur, ext, corr, bytes);
            e.flow(Track::Compute, false, start, corr);
        }
    }

    /// A CUDA runtime call without a GPU activity (it still has a correlation id).
    fn runtime(&mut self, track: Track, name: &'static str, cbid: u32, ts: u64, dur: u64) {
        let corr = self.next_corr();
        let ext = self.open_ext;
        if let Some(e) = self.out.as_mut() {
            e.runtime(track, name, ts, dur, ext, cbid, corr);
        }
    }

    fn runtime_with_flow(&mut self, track: Track, name: &'static str, cbid: u32, ts: u64, dur: u64, corr: u64) {
        let ext = self.open_ext;
        if let Some(e) = self.out.as_mut() {
            e.runtime(track, name, ts, dur, ext, cbid, corr);
            e.flow(track, true, ts, corr);
        }
    }
}

/// Whole µs unless `fractional` (then ns, at least 1): every duration goes through here, so in
/// whole-µs mode every time is a whole µs and nesting survives the output's resolution.
fn quantize(ns: u64, fractional: bool) -> u64 {
    if fractional {
        ns.max(1)
    } else {
        ns.div_ceil(1_000).max(1) * 1_000
    }
}

fn quantize_or_zero(ns: u64, fractional: bool) -> u64 {
    if ns == 0 {
        0
    } else {
        quantize(ns, fractional)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemOp {
    HtoD,
    DtoH,
    Memset,
}

impl MemOp {
    fn runtime(self) -> &'static str {
        match self {
            MemOp::Memset => "cudaMemsetAsync",
            _ => "cudaMemcpyAsync",
        }
    }
    fn cbid(self) -> u32 {
        match self {
            MemOp::Memset => CBID_MEMSET,
            _ => CBID_MEMCPY,
        }
    }
    fn cat(self) -> &'static str {
        match self {
            MemOp::Memset => "gpu_memset",
            _ => "gpu_memcpy",
        }
    }
    fn name(self) -> &'static str {
        match self {
            MemOp::HtoD => "Memcpy HtoD (Pageable -> Device)",
            MemOp::DtoH => "Memcpy DtoH (Device -> Pageable)",
            MemOp::Memset => "Memset (Device)",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Event text

/// An event name; the formatted ones are written without allocating.
#[derive(Debug, Clone, Copy)]
enum Name {
    Static(&'static str),
    Step(u64),
    Evaluate(&'static str),
}

impl From<&'static str> for Name {
    fn from(s: &'static str) -> Self {
        Name::Static(s)
    }
}

impl Name {
    fn write(self, buf: &mut Vec<u8>) {
        match self {
            Name::Static(s) => push(buf, s),
            Name::Step(n) => {
                push(buf, "ProfilerStep#");
                push_u64(buf, n);
            }
            Name::Evaluate(node) => {
                push(buf, "autograd::engine::evaluate_function: ");
                push(buf, node);
            }
        }
    }
}

/// The `args` of a CPU-side event beyond its ids.
#[derive(Clone, Copy)]
enum Args<'a> {
    Plain,
    /// An autograd node: `Sequence number`, `Fwd thread id`.
    Autograd(u64),
    /// `record_param_comms` metadata.
    Comms(&'a Coll),
    /// `nccl:*` annotation: `Input Dims`, `Input type`.
    Shapes(&'a Coll),
}

struct Kernel<'a> {
    name: &'static str,
    shape: &'static KernelShape,
    coll: Option<&'a Coll>,
}

/// Formats one pass's events of the current step into two per-track buffers, flushed in a
/// fixed order at the step's end.
struct Emitter<'c> {
    ctx: &'c Ctx<'c>,
    pass: Pass,
    bufs: [Vec<u8>; 2],
}

impl<'c> Emitter<'c> {
    fn new(ctx: &'c Ctx<'c>, pass: Pass) -> Self {
        Emitter { ctx, pass, bufs: [Vec::new(), Vec::new()] }
    }

    /// The buffer `track` writes to in this pass, or `None` when the pass skips it.
    fn buf(&mut self, track: Track) -> Option<&mut Vec<u8>> {
        let slot = match (self.pass, track) {
            (Pass::Cpu, Track::Bwd) | (Pass::Gpu, Track::Nccl) => 0,
            (Pass::Cpu, Track::Main) | (Pass::Gpu, Track::Compute) => 1,
            _ => return None,
        };
        Some(&mut self.bufs[slot])
    }

    fn ids(&self, track: Track) -> (u64, u64) {
        match track {
            Track::Main => (self.ctx.pid, self.ctx.main_tid),
            Track::Bwd => (self.ctx.pid, self.ctx.bwd_tid),
            Track::Compute => (u64::from(self.ctx.device), COMPUTE_STREAM),
            Track::Nccl => (u64::from(self.ctx.device), NCCL_STREAM),
        }
    }

    fn flush<W: Write>(&mut self, doc: &mut Doc<W>) -> io::Result<()> {
        for buf in &mut self.bufs {
            doc.events(buf)?;
            buf.clear();
        }
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "one event's fields; a struct would only rename them")]
    fn cpu(&mut self, track: Track, cat: &str, name: Name, ts: u64, dur: u64, ext: u64, ev_idx: u64, args: &Args) {
        let (pid, tid) = self.ids(track);
        let frac = self.ctx.spec.fractional_ts;
        let ctx = self.ctx;
        let Some(buf) = self.buf(track) else { return };
        x_head(buf, cat, name, pid, tid, ts, dur, frac);
        push(buf, "\"External id\": ");
        push_u64(buf, ext);
        push(buf, ",\"Record function id\": ");
        push_u64(buf, ext);
        match *args {
            Args::Plain => {}
            Args::Autograd(seq) => {
                push(buf, ", \"Sequence number\": ");
                push_u64(buf, seq);
                push(buf, ", \"Fwd thread id\": 1");
            }
            Args::Comms(coll) => {
                comm_args(buf, ctx, coll, true);
            }
            Args::Shapes(coll) => shape_args(buf, coll),
        }
        push(buf, ", \"Ev Idx\": ");
        push_u64(buf, ev_idx);
        x_tail(buf);
    }

    #[expect(clippy::too_many_arguments, reason = "one event's fields; a struct would only rename them")]
    fn runtime(&mut self, track: Track, name: &'static str, ts: u64, dur: u64, ext: u64, cbid: u32, corr: u64) {
        let (pid, tid) = self.ids(track);
        let frac = self.ctx.spec.fractional_ts;
        let Some(buf) = self.buf(track) else { return };
        x_head(buf, "cuda_runtime", Name::Static(name), pid, tid, ts, dur, frac);
        push(buf, "\"External id\": ");
        push_u64(buf, ext);
        push(buf, ", \"cbid\": ");
        push_u64(buf, u64::from(cbid));
        push(buf, ", \"correlation\": ");
        push_u64(buf, corr);
        x_tail(buf);
    }

    fn kernel(&mut self, track: Track, k: &Kernel, ts: u64, dur: u64, ext: u64, corr: u64) {
        let (pid, tid) = self.ids(track);
        let frac = self.ctx.spec.fractional_ts;
        let ctx = self.ctx;
        let Some(buf) = self.buf(track) else { return };
        x_head(buf, "kernel", Name::Static(k.name), pid, tid, ts, dur, frac);
        gpu_ids(buf, ext, pid, tid, corr);
        let s = k.shape;
        push(buf, ", \"registers per thread\": ");
        push_u64(buf, u64::from(s.registers));
        push(buf, ", \"shared memory\": ");
        push_u64(buf, u64::from(s.shared_memory));
        push(buf, ", \"blocks per SM\": ");
        push(buf, s.blocks_per_sm);
        push(buf, ", \"warps per SM\": ");
        push(buf, s.warps_per_sm);
        push(buf, ", \"grid\": ");
        push_dims(buf, s.grid);
        push(buf, ", \"block\": ");
        push_dims(buf, s.block);
        push(buf, ", \"est. achieved occupancy %\": ");
        push_u64(buf, u64::from(s.occupancy));
        if let Some(coll) = k.coll {
            comm_args(buf, ctx, coll, false);
        }
        x_tail(buf);
    }

    fn memory(&mut self, op: MemOp, ts: u64, dur: u64, ext: u64, corr: u64, bytes: u64) {
        let (pid, tid) = self.ids(Track::Compute);
        let frac = self.ctx.spec.fractional_ts;
        let Some(buf) = self.buf(Track::Compute) else {
            return;
        };
        x_head(buf, op.cat(), Name::Static(op.name()), pid, tid, ts, dur, frac);
        gpu_ids(buf, ext, pid, tid, corr);
        push(buf, ", \"bytes\": ");
        push_u64(buf, bytes);
        push(buf, ", \"memory bandwidth (GB/s)\": ");
        push(buf, &(bytes as f64 / dur.max(1) as f64).to_string());
        x_tail(buf);
    }

    fn gpu_annotation(&mut self, track: Track, name: &'static str, ts: u64, dur: u64, ext: u64) {
        let (pid, tid) = self.ids(track);
        let frac = self.ctx.spec.fractional_ts;
        let Some(buf) = self.buf(track) else { return };
        x_head(buf, "gpu_user_annotation", Name::Static(name), pid, tid, ts, dur, frac);
        push(buf, "\"External id\": ");
        push_u64(buf, ext);
        x_tail(buf);
    }

    /// An `ac2g` flow: `start` on the launching CPU thread, else its end on the GPU stream.
    fn flow(&mut self, track: Track, start: bool, ts: u64, corr: u64) {
        let (pid, tid) = self.ids(track);
        let frac = self.ctx.spec.fractional_ts;
        let Some(buf) = self.buf(track) else { return };
        push(buf, ",\n  {\n    \"ph\": \"");
        push(buf, if start { "s" } else { "f" });
        push(buf, "\", \"id\": ");
        push_u64(buf, corr);
        push(buf, ", \"pid\": ");
        push_u64(buf, pid);
        push(buf, ", \"tid\": ");
        push_u64(buf, tid);
        push(buf, ", \"ts\": ");
        push_ts(buf, ts, frac);
        push(buf, ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"");
        if !start {
            push(buf, ", \"bp\": \"e\"");
        }
        push(buf, "\n  }");
    }
}

#[expect(clippy::too_many_arguments, reason = "the fixed head of every complete event")]
fn x_head(buf: &mut Vec<u8>, cat: &str, name: Name, pid: u64, tid: u64, ts: u64, dur: u64, frac: bool) {
    push(buf, ",\n  {\n    \"ph\": \"X\", \"cat\": \"");
    push(buf, cat);
    push(buf, "\", \"name\": \"");
    name.write(buf);
    push(buf, "\", \"pid\": ");
    push_u64(buf, pid);
    push(buf, ", \"tid\": ");
    push_u64(buf, tid);
    push(buf, ",\n    \"ts\": ");
    push_ts(buf, ts, frac);
    push(buf, ", \"dur\": ");
    push_ts(buf, dur, frac);
    push(buf, ",\n    \"args\": {\n      ");
}

fn x_tail(buf: &mut Vec<u8>) {
    push(buf, "\n    }\n  }");
}

fn gpu_ids(buf: &mut Vec<u8>, ext: u64, device: u64, stream: u64, corr: u64) {
    push(buf, "\"External id\": ");
    push_u64(buf, ext);
    push(buf, ", \"queued\": 0, \"device\": ");
    push_u64(buf, device);
    push(buf, ", \"context\": 1, \"stream\": ");
    push_u64(buf, stream);
    push(buf, ", \"correlation\": ");
    push_u64(buf, corr);
}

/// NCCL metadata, as `record_param_comms` (`on_cpu`) and 2024 kernels carry it.
fn comm_args(buf: &mut Vec<u8>, ctx: &Ctx, coll: &Coll, on_cpu: bool) {
    push(buf, ", \"Collective name\": \"");
    push(buf, coll.record_name());
    push(buf, "\", \"In msg nelems\": ");
    push_u64(buf, coll.in_nelems);
    push(buf, ", \"Out msg nelems\": ");
    push_u64(buf, coll.out_nelems);
    push(buf, ", \"Group size\": ");
    push_u64(buf, u64::from(ctx.spec.world_size));
    push(buf, ", \"dtype\": \"");
    push(buf, coll.dtype.name());
    push(buf, "\", \"In split size\": \"[]\", \"Out split size\": \"[]\"");
    if on_cpu {
        push(buf, ", \"Global rank start\": 0, \"Global rank stride\": 1");
    }
    push(buf, ", \"Process Group Name\": \"0\", \"Process Group Description\": \"default_pg\"");
    push(buf, ", \"Process Group Ranks\": \"");
    push(buf, &ctx.pg_ranks);
    push(buf, "\", \"Seq\": ");
    push_u64(buf, coll.seq);
}

/// `Input Dims` / `Input type` of an `nccl:*` annotation: `[[n]]` for all-reduce, the output
/// then the input buffer for the others (`all_to_all_single(out, in)`).
fn shape_args(buf: &mut Vec<u8>, coll: &Coll) {
    let ty = coll.dtype.input_type();
    push(buf, ", \"Input Dims\": [[");
    if coll.kind == CollKind::AllReduce {
        push_u64(buf, coll.in_nelems);
        push(buf, "]], \"Input type\": [\"");
        push(buf, ty);
        push(buf, "\"]");
    } else {
        push_u64(buf, coll.out_nelems);
        push(buf, "], [");
        push_u64(buf, coll.in_nelems);
        push(buf, "]], \"Input type\": [\"");
        push(buf, ty);
        push(buf, "\", \"");
        push(buf, ty);
        push(buf, "\"]");
    }
}

fn push(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
}

fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// A time in µs from ns: `123.456` (always three decimals) or `123`.
fn push_ts(buf: &mut Vec<u8>, ns: u64, frac: bool) {
    push_u64(buf, ns / 1_000);
    if frac {
        let rem = ns % 1_000;
        buf.push(b'.');
        buf.push(b'0' + (rem / 100) as u8);
        buf.push(b'0' + (rem / 10 % 10) as u8);
        buf.push(b'0' + (rem % 10) as u8);
    }
}

fn push_dims(buf: &mut Vec<u8>, dims: [u32; 3]) {
    push(buf, "[");
    for (i, d) in dims.iter().enumerate() {
        if i > 0 {
            push(buf, ", ");
        }
        push_u64(buf, u64::from(*d));
    }
    push(buf, "]");
}

// ---------------------------------------------------------------------------------------------
// The document around the events

struct Doc<W: Write> {
    out: W,
    wrote_event: bool,
}

impl<W: Write> Doc<W> {
    fn new(out: W) -> Self {
        Doc { out, wrote_event: false }
    }

    /// Writes events formatted with a leading `,\n` each (dropped before the first one).
    fn events(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let skip = if self.wrote_event { 0 } else { 2 };
        self.wrote_event = true;
        self.out.write_all(&buf[skip..])
    }

    fn header(&mut self, ctx: &Ctx) -> io::Result<()> {
        let w = &mut self.out;
        writeln!(w, "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [")?;
        for id in 0..GPUS_PER_HOST {
            let sep = if id + 1 < GPUS_PER_HOST { "," } else { "" };
            write!(
                w,
                "    {{\n      \"id\": {id}, \"name\": \"NVIDIA A100-SXM4-80GB\", \
                 \"totalGlobalMem\": 85031714816,\n      \"computeMajor\": 8, \"computeMinor\": 0,\n      \
                 \"maxThreadsPerBlock\": 1024, \"maxThreadsPerMultiprocessor\": 2048,\n      \
                 \"regsPerBlock\": 65536, \"warpSize\": 32,\n      \
                 \"sharedMemPerBlock\": 49152, \"numSms\": 108\n    , \
                 \"regsPerMultiprocessor\": 65536, \"sharedMemPerBlockOptin\": 166912, \
                 \"sharedMemPerMultiprocessor\": 167936\n    }}{sep}\n"
            )?;
        }
        let world = ctx.spec.world_size;
        let ranks = &ctx.pg_ranks;
        writeln!(
            w,
            "  ],\n  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {}, \"world_size\": {world}, \
             \"pg_count\": 1, \"pg_config\": [{{\"pg_name\": \"0\", \"pg_desc\": \"default_pg\", \
             \"backend_config\": \"cuda:nccl\", \"pg_size\": {world}, \"ranks\": {ranks}}}], \
             \"nccl_version\": \"2.20.5\"}},\n  \"traceEvents\": [",
            ctx.rank
        )
    }

    /// Process and thread names, and the profiler's own span, as Kineto ends its event list.
    fn metadata(&mut self, ctx: &Ctx, trace_end: u64) -> io::Result<()> {
        let frac = ctx.spec.fractional_ts;
        let mut buf = Vec::new();
        let device = u64::from(ctx.device);
        let gpu_label = format!("GPU {}", ctx.device);
        let main_name = format!("thread {} (python3)", ctx.main_tid);
        let bwd_name = format!("thread {} (pt_autograd_0)", ctx.bwd_tid);
        let process: [(u64, &str, u64); 2] = [(ctx.pid, "CPU", ctx.pid), (device, &gpu_label, 16_777_216 + device)];
        for (pid, label, sort) in process {
            meta(&mut buf, "process_name", pid, 0, "name", "python3", frac);
            meta(&mut buf, "process_labels", pid, 0, "labels", label, frac);
            meta_sort(&mut buf, "process_sort_index", pid, 0, sort, frac);
        }
        let threads: [(u64, u64, &str); 4] = [
            (ctx.pid, ctx.main_tid, &main_name),
            (ctx.pid, ctx.bwd_tid, &bwd_name),
            (device, COMPUTE_STREAM, "stream 7 "),
            (device, NCCL_STREAM, "stream 20 "),
        ];
        for (pid, tid, name) in threads {
            meta(&mut buf, "thread_name", pid, tid, "name", name, frac);
            meta_sort(&mut buf, "thread_sort_index", pid, tid, tid, frac);
        }
        let start = T0_NS - 28_000_000;
        push(&mut buf, ",\n  {\n    \"ph\": \"X\", \"cat\": \"Trace\", \"ts\": ");
        push_ts(&mut buf, start, frac);
        push(&mut buf, ", \"dur\": ");
        push_ts(&mut buf, trace_end + 1_000_000 - start, frac);
        push(
            &mut buf,
            ",\n    \"pid\": \"Spans\", \"tid\": \"PyTorch Profiler\",\n    \
             \"name\": \"PyTorch Profiler (0)\",\n    \"args\": {\n      \"Op count\": 0\n    }\n  }",
        );
        push(
            &mut buf,
            ",\n  {\n    \"name\": \"Iteration Start: PyTorch Profiler\", \"ph\": \"i\", \"s\": \"g\",\n    \
             \"pid\": \"Traces\", \"tid\": \"Trace PyTorch Profiler\", \"ts\": ",
        );
        push_ts(&mut buf, start, frac);
        push(
            &mut buf,
            "\n  },\n  {\n    \"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\",\n    \
             \"pid\": \"\", \"tid\": \"\", \"ts\": ",
        );
        push_ts(&mut buf, trace_end + 2_000_000, frac);
        push(&mut buf, "\n  }");
        self.events(&buf)
    }

    fn footer(&mut self, ctx: &Ctx) -> io::Result<()> {
        write!(
            self.out,
            "\n  ],\n  \"traceName\": \"/tmp/commgate-synth/rank-{}.pt.trace.json\",\n  \
             \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": {BASE_TIME_NS}\n}}\n",
            ctx.rank
        )
    }
}

fn meta(buf: &mut Vec<u8>, kind: &str, pid: u64, tid: u64, key: &str, value: &str, frac: bool) {
    meta_head(buf, kind, pid, tid, frac);
    push(buf, "\"");
    push(buf, key);
    push(buf, "\": \"");
    push(buf, value);
    push(buf, "\"\n    }\n  }");
}

fn meta_sort(buf: &mut Vec<u8>, kind: &str, pid: u64, tid: u64, sort: u64, frac: bool) {
    meta_head(buf, kind, pid, tid, frac);
    push(buf, "\"sort_index\": ");
    push_u64(buf, sort);
    push(buf, "\n    }\n  }");
}

fn meta_head(buf: &mut Vec<u8>, kind: &str, pid: u64, tid: u64, frac: bool) {
    push(buf, ",\n  {\n    \"name\": \"");
    push(buf, kind);
    push(buf, "\", \"ph\": \"M\", \"ts\": ");
    push_ts(buf, T0_NS, frac);
    push(buf, ", \"pid\": ");
    push_u64(buf, pid);
    push(buf, ", \"tid\": ");
    push_u64(buf, tid);
    push(buf, ",\n    \"args\": {\n      ");
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
