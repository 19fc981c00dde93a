//! Deterministic synthetic multi-rank PyTorch profiler (Kineto) traces, for benchmarks and tests.
//!
//! This file owns the generator only: a [`SynthSpec`] in, one Chrome-trace JSON document per
//! rank out, streamed to any [`Write`] one training step at a time (memory stays at a few
//! kilobytes per layer whatever the trace size). The documents copy the shapes of real PyTorch
//! 2.x traces (`shared/traces/hta/`): top-level key order, `distributedInfo`, `ProfilerStep#N`
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
        let size = |layers: u32, steps: u32| {
            measure_bytes(&SynthSpec {
                layers,
                steps,
                ..base.clone()
            })
        };
        // Aim for at least 16 steps so one step is a small fraction of the target.
        let per_layer_step = size(2, 1).saturating_sub(size(1, 1)).max(1);
        let layers = (bytes_per_rank / (per_layer_step * 16)).clamp(1, MAX_TARGET_LAYERS) as u32;
        let one = size(layers, 1);
        let per_step = size(layers, 2).saturating_sub(one).max(1);
        let fixed = one.saturating_sub(per_step);
        let steps = (bytes_per_rank.saturating_sub(fixed) + per_step / 2) / per_step;
        SynthSpec {
            layers,
            steps: steps.clamp(1, u64::from(u32::MAX)) as u32,
            ..base
        }
    }
}

/// Layers used by [`SynthSpec::with_target_bytes`] once the target is large (a 24-layer model).
const MAX_TARGET_LAYERS: u64 = 24;

/// Writes rank `rank`'s trace of `spec` to `out`, streaming.
pub fn write_rank<W: Write>(spec: &SynthSpec, rank: u32, out: W) -> io::Result<()> {
    if spec.world_size == 0 || rank >= spec.world_size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "rank {rank} is outside world_size {}; use a rank below world_size",
                spec.world_size
            ),
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
    let paths: Vec<PathBuf> = (0..spec.world_size)
        .map(|r| dir.join(format!("rank-{r}.{ext}")))
        .collect();
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
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("trace writer thread panicked")))
            })
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
            (CollKind::AllGatherBase, _) => {
                "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            }
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
    out: Option<Emitter>,
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
    fn new(ctx: &'c Ctx<'c>, rank: u32, out: Option<Emitter>) -> Self {
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
        self.collective(
            Track::Main,
            CollKind::AllGatherBase,
            Dtype::BFloat16,
            gather / world,
            gather,
        );
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
        self.op(
            Track::Main,
            "user_annotation",
            "Optimizer.zero_grad#AdamW.zero_grad",
            Args::Plain,
            |s| {
                s.op(Track::Main, "cpu_op", "aten::zero_", Args::Plain, |s| {
                    s.op(Track::Main, "cpu_op", "aten::fill_", Args::Plain, |s| {
                        let bytes = 4_194_304;
                        s.memory(Track::Main, MemOp::Memset, bytes, 3, 8);
                    });
                });
            },
        );
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
            self.collective(
                Track::Main,
                CollKind::AllToAll,
                Dtype::BFloat16,
                tokens,
                tokens,
            );
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
        let nelems = self
            .g
            .pick(&[8_388_608u64, 12_582_912, 16_777_216, 25_165_824]);
        self.collective(
            Track::Bwd,
            CollKind::AllReduce,
            Dtype::BFloat16,
            nelems,
            nelems,
        );
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
        self.op(
            Track::Main,
            "user_annotation",
            "Optimizer.step#AdamW.step",
            Args::Plain,
            |s| {
                s.op(Track::Main, "cpu_op", "aten::_fused_adamw_", Args::Plain, |s| {
                    for _ in 0..4 {
                        let dur = s.d(150, 300);
                        s.launch(Track::Main, &ADAM, dur);
                    }
                });
            },
        );
    }

    /// `loss.item()`: a small device-to-host copy and a stream synchronize that returns when the
    /// GPU has drained, which is what paces the next step.
    fn sync_loss(&mut self) {
        self.op(Track::Main, "cpu_op", "aten::item", Args::Plain, |s| {
            s.op(
                Track::Main,
                "cpu_op",
                "aten::_local_scalar_dense",
                Args::Plain,
                |s| {
                    s.memory(Track::Main, MemOp::DtoH, 4, 2, 3);
                    let ts = s.main;
                    let done = s.compute_free.max(s.nccl_free) + s.d(4, 10);
                    let dur = done.saturating_sub(ts).max(s.d(2, 4));
                    s.runtime(Track::Main, "cudaStreamSynchronize", CBID_STREAM_SYNC, ts, dur);
                    s.main = ts + dur;
                },
            );
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
