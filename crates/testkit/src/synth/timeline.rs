//! The simulated timeline of one rank: CPU thread cursors, stream occupancy and id counters,
//! stepped through a training step (forward, backward with one gradient all-reduce per layer,
//! optimizer, loss sync) and handing each event to the pass's [`Emitter`]. The timing model is
//! the one the parent module's docs describe; randomness is a seeded splitmix64.

use std::io::{self, Write};

use super::document::Doc;
use super::events::{Args, Emitter, Kernel, Name};
use super::vocab::{
    Coll, CollKind, Dtype, KernelShape, MemOp, Pass, Track, ADAM, CBID_LAUNCH, CBID_LAUNCH_EXC, CBID_STREAM_SYNC,
    CBID_WAIT_EVENT, FIRST_STEP, GELU, GELU_BWD, GEMM_DGRAD, GEMM_FWD, GEMM_WGRAD, NCCL_SHAPE, T0_NS,
};
use super::Ctx;

/// Runs the whole simulation once, writing the events `pass` selects. Returns the trace's end.
pub(super) fn run_pass<W: Write>(ctx: &Ctx, pass: Pass, doc: &mut Doc<W>) -> io::Result<u64> {
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
    /// End of the last hidden collective's kernel (see [`Perturb`](super::Perturb)): the next
    /// hidden one queues behind it, so that the NCCL stream never overlaps itself. Nothing else
    /// waits for it.
    hidden_free: u64,
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
            hidden_free: t0,
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

    /// A buffer size drawn from the global stream (the first one with steady sizes; the draw is
    /// made either way so that the rest of the timeline does not move).
    fn size(&mut self, choices: &[u64]) -> u64 {
        let drawn = self.g.pick(choices);
        if self.ctx.spec.perturb.steady_sizes {
            choices[0]
        } else {
            drawn
        }
    }

    /// Whether `kind` is the collective [`Perturb::hidden`](super::Perturb::hidden) hides.
    fn hidden(&self, kind: CollKind) -> bool {
        self.ctx.spec.perturb.hidden.is_some_and(|h| h.kind() == kind)
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
        let gather = self.size(&[4_194_304u64, 6_291_456, 8_388_608]);
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
        if !self.hidden(CollKind::AllReduce) {
            self.compute_dep = self.compute_dep.max(self.nccl_free);
        }
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
            s.kernel_op(Track::Main, "aten::addmm", &GEMM_FWD, 180, 260);
        });
        if all_to_all {
            let tokens = self.size(&[2_097_152u64, 3_145_728, 4_194_304]);
            self.collective(Track::Main, CollKind::AllToAll, Dtype::BFloat16, tokens, tokens);
            if !self.hidden(CollKind::AllToAll) {
                self.compute_dep = self.compute_dep.max(self.nccl_free);
            }
            self.kernel_op(Track::Main, "aten::mm", &GEMM_FWD, 120, 180);
        }
        self.kernel_op(Track::Main, "aten::gelu", &GELU, 12, 30);
    }

    fn backward_layer(&mut self) {
        self.autograd_fn("GeluBackward0", |s| {
            s.kernel_op(Track::Bwd, "aten::gelu_backward", &GELU_BWD, 15, 35);
        });
        self.autograd_fn("AddmmBackward0", |s| {
            s.kernel_op(Track::Bwd, "aten::mm", &GEMM_DGRAD, 200, 320);
            s.kernel_op(Track::Bwd, "aten::mm", &GEMM_WGRAD, 200, 320);
        });
        let nelems = self.size(&[8_388_608u64, 12_582_912, 16_777_216, 25_165_824]);
        self.collective(Track::Bwd, CollKind::AllReduce, Dtype::BFloat16, nelems, nelems);
    }

    /// A `cpu_op` that launches one compute kernel running `lo_us..=hi_us`.
    fn kernel_op(&mut self, track: Track, name: &'static str, shape: &'static KernelShape, lo_us: u64, hi_us: u64) {
        self.op(track, "cpu_op", name, Args::Plain, |s| {
            let dur = s.d(lo_us, hi_us);
            s.launch(track, shape, dur);
        });
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
    /// imbalance) and ends when the straggler's transfer ends, on every rank. A hidden
    /// collective's kernel (see [`Perturb`](super::Perturb)) lasts one quantum from the rank's
    /// own ready (or the previous hidden kernel's end) and moves neither `nccl_free` nor, in the
    /// callers, `compute_dep`; every draw is made either way.
    fn launch_nccl(&mut self, track: Track, coll: &Coll) {
        let frac = self.ctx.spec.fractional_ts;
        let ts = *self.cursor(track);
        let launch = self.d(8, 16);
        let corr = self.next_corr();
        self.runtime_with_flow(track, "cudaLaunchKernelExC", CBID_LAUNCH_EXC, ts, launch, corr);
        *self.cursor(track) = ts + launch;
        let latency = self.d(3, 6);
        // The NCCL stream waits on an event recorded after the gradients' kernels (released
        // earlier by `Perturb::released_earlier`).
        let earlier = match self.ctx.spec.perturb.released_earlier {
            Some((kind, ns)) if kind.kind() == coll.kind => ns,
            _ => 0,
        };
        let ready = (ts + launch + latency).max(self.nccl_free).max(self.compute_free.saturating_sub(earlier));
        let speed = self.g.range(850, 1_150) as f64 / 1_000.0;
        let perturb = self.ctx.spec.perturb;
        let slower = match coll.kind {
            CollKind::AllReduce if perturb.all_reduce_transfer_factor > 0.0 => perturb.all_reduce_transfer_factor,
            _ => 1.0,
        };
        let wire = coll.payload_bytes() as f64 * 1e9 / coll.bandwidth() as f64 * speed * slower;
        // Without the bus-bandwidth truth: what the straggler's lateness is a fraction of.
        let drawn = quantize(wire as u64 + self.g.range(8_000, 15_000), frac);
        let transfer = match coll.kind {
            CollKind::AllReduce if perturb.all_reduce_busbw_gbps > 0.0 => {
                let n = f64::from(self.ctx.spec.world_size);
                let bus_bytes = coll.payload_bytes() as f64 * 2.0 * (n - 1.0) / n;
                quantize((bus_bytes / perturb.all_reduce_busbw_gbps).round() as u64, frac)
            }
            _ => drawn,
        };
        let hidden = self.hidden(coll.kind);
        let (start, end) = if hidden {
            let start = ready.max(self.hidden_free);
            let end = start + quantize(1, frac);
            self.hidden_free = end;
            if self.leader {
                // Keeps `ends` aligned with `coll_idx`; no rank reads it.
                self.ends.push(end);
            }
            (start, end)
        } else if self.leader {
            let late = if perturb.straggler_on_time {
                0.0
            } else {
                let extra = if coll.kind == CollKind::AllToAll { perturb.all_to_all_late_ns } else { 0 };
                self.ctx.spec.imbalance.max(0.0) * drawn as f64 + extra as f64
            };
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
        if !hidden {
            self.nccl_free = end;
        }
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

// ---------------------------------------------------------------------------------------------
// Randomness

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast and good enough for synthetic timings.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64, stream: u64, index: u64) -> Self {
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
    pub(crate) fn unit(&mut self) -> f64 {
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
