//! The per-step event writer: formats one pass's events of the current training step as Kineto
//! writes them (field order, spacing, three-decimal `ts`/`dur`) into per-track buffers, without
//! allocating per event, and hands them to the [`Doc`] at the step's end.

use std::io::{self, Write};

use super::document::Doc;
use super::json::{push, push_ts, push_u64};
use super::vocab::{Coll, CollKind, KernelShape, MemOp, Pass, Track, COMPUTE_STREAM, NCCL_STREAM};
use super::Ctx;

/// An event name; the formatted ones are written without allocating.
#[derive(Debug, Clone, Copy)]
pub(super) enum Name {
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
pub(super) enum Args<'a> {
    Plain,
    /// An autograd node: `Sequence number`, `Fwd thread id`.
    Autograd(u64),
    /// `record_param_comms` metadata.
    Comms(&'a Coll),
    /// `nccl:*` annotation: `Input Dims`, `Input type`.
    Shapes(&'a Coll),
}

/// A kernel event's name, launch and, for an NCCL kernel, the collective it runs.
pub(super) struct Kernel<'a> {
    pub(super) name: &'static str,
    pub(super) shape: &'static KernelShape,
    pub(super) coll: Option<&'a Coll>,
}

/// Formats one pass's events of the current step into two per-track buffers, flushed in a
/// fixed order at the step's end.
pub(super) struct Emitter<'c> {
    ctx: &'c Ctx<'c>,
    pass: Pass,
    bufs: [Vec<u8>; 2],
}

/// Where one event goes: its track's buffer in this pass, with the ids and time format the
/// event carries.
struct Sink<'b> {
    buf: &'b mut Vec<u8>,
    pid: u64,
    tid: u64,
    frac: bool,
}

impl<'c> Emitter<'c> {
    pub(super) fn new(ctx: &'c Ctx<'c>, pass: Pass) -> Self {
        Emitter { ctx, pass, bufs: [Vec::new(), Vec::new()] }
    }

    /// The sink for `track` in this pass, or `None` when the pass skips it.
    fn sink(&mut self, track: Track) -> Option<Sink<'_>> {
        let slot = match (self.pass, track) {
            (Pass::Cpu, Track::Bwd) | (Pass::Gpu, Track::Nccl) => 0,
            (Pass::Cpu, Track::Main) | (Pass::Gpu, Track::Compute) => 1,
            _ => return None,
        };
        let (pid, tid) = self.ids(track);
        let frac = self.ctx.spec.fractional_ts;
        Some(Sink { buf: &mut self.bufs[slot], pid, tid, frac })
    }

    fn ids(&self, track: Track) -> (u64, u64) {
        match track {
            Track::Main => (self.ctx.pid, self.ctx.main_tid),
            Track::Bwd => (self.ctx.pid, self.ctx.bwd_tid),
            Track::Compute => (u64::from(self.ctx.device), COMPUTE_STREAM),
            Track::Nccl => (u64::from(self.ctx.device), NCCL_STREAM),
        }
    }

    pub(super) fn flush<W: Write>(&mut self, doc: &mut Doc<W>) -> io::Result<()> {
        for buf in &mut self.bufs {
            doc.events(buf)?;
            buf.clear();
        }
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "one event's fields; a struct would only rename them")]
    pub(super) fn cpu(
        &mut self,
        track: Track,
        cat: &str,
        name: Name,
        ts: u64,
        dur: u64,
        ext: u64,
        ev_idx: u64,
        args: &Args,
    ) {
        let ctx = self.ctx;
        let Some(mut s) = self.sink(track) else { return };
        s.open(cat, name, ts, dur);
        let buf = &mut *s.buf;
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
            Args::Comms(coll) => comm_args(buf, ctx, coll, true),
            Args::Shapes(coll) => shape_args(buf, coll),
        }
        push(buf, ", \"Ev Idx\": ");
        push_u64(buf, ev_idx);
        s.close();
    }

    #[expect(clippy::too_many_arguments, reason = "one event's fields; a struct would only rename them")]
    pub(super) fn runtime(
        &mut self,
        track: Track,
        name: &'static str,
        ts: u64,
        dur: u64,
        ext: u64,
        cbid: u32,
        corr: u64,
    ) {
        let Some(mut s) = self.sink(track) else { return };
        s.open("cuda_runtime", Name::Static(name), ts, dur);
        push(s.buf, "\"External id\": ");
        push_u64(s.buf, ext);
        push(s.buf, ", \"cbid\": ");
        push_u64(s.buf, u64::from(cbid));
        push(s.buf, ", \"correlation\": ");
        push_u64(s.buf, corr);
        s.close();
    }

    pub(super) fn kernel(&mut self, track: Track, k: &Kernel, ts: u64, dur: u64, ext: u64, corr: u64) {
        let ctx = self.ctx;
        let Some(mut s) = self.sink(track) else { return };
        s.open("kernel", Name::Static(k.name), ts, dur);
        s.gpu_ids(ext, corr);
        let buf = &mut *s.buf;
        let shape = k.shape;
        push(buf, ", \"registers per thread\": ");
        push_u64(buf, u64::from(shape.registers));
        push(buf, ", \"shared memory\": ");
        push_u64(buf, u64::from(shape.shared_memory));
        push(buf, ", \"blocks per SM\": ");
        push(buf, shape.blocks_per_sm);
        push(buf, ", \"warps per SM\": ");
        push(buf, shape.warps_per_sm);
        push(buf, ", \"grid\": ");
        push_dims(buf, shape.grid);
        push(buf, ", \"block\": ");
        push_dims(buf, shape.block);
        push(buf, ", \"est. achieved occupancy %\": ");
        push_u64(buf, u64::from(shape.occupancy));
        if let Some(coll) = k.coll {
            comm_args(buf, ctx, coll, false);
        }
        s.close();
    }

    /// A copy or memset; always on the compute stream.
    pub(super) fn memory(&mut self, op: MemOp, ts: u64, dur: u64, ext: u64, corr: u64, bytes: u64) {
        let Some(mut s) = self.sink(Track::Compute) else { return };
        s.open(op.cat(), Name::Static(op.name()), ts, dur);
        s.gpu_ids(ext, corr);
        push(s.buf, ", \"bytes\": ");
        push_u64(s.buf, bytes);
        push(s.buf, ", \"memory bandwidth (GB/s)\": ");
        push(s.buf, &(bytes as f64 / dur.max(1) as f64).to_string());
        s.close();
    }

    pub(super) fn gpu_annotation(&mut self, track: Track, name: &'static str, ts: u64, dur: u64, ext: u64) {
        let Some(mut s) = self.sink(track) else { return };
        s.open("gpu_user_annotation", Name::Static(name), ts, dur);
        push(s.buf, "\"External id\": ");
        push_u64(s.buf, ext);
        s.close();
    }

    /// An `ac2g` flow: `start` on the launching CPU thread, else its end on the GPU stream.
    pub(super) fn flow(&mut self, track: Track, start: bool, ts: u64, corr: u64) {
        let Some(s) = self.sink(track) else { return };
        let buf = s.buf;
        push(buf, ",\n  {\n    \"ph\": \"");
        push(buf, if start { "s" } else { "f" });
        push(buf, "\", \"id\": ");
        push_u64(buf, corr);
        push(buf, ", \"pid\": ");
        push_u64(buf, s.pid);
        push(buf, ", \"tid\": ");
        push_u64(buf, s.tid);
        push(buf, ", \"ts\": ");
        push_ts(buf, ts, s.frac);
        push(buf, ",\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"");
        if !start {
            push(buf, ", \"bp\": \"e\"");
        }
        push(buf, "\n  }");
    }
}

impl Sink<'_> {
    /// Opens a complete (`X`) event: its fixed head, up to the first key of its `args`.
    fn open(&mut self, cat: &str, name: Name, ts: u64, dur: u64) {
        let buf = &mut *self.buf;
        push(buf, ",\n  {\n    \"ph\": \"X\", \"cat\": \"");
        push(buf, cat);
        push(buf, "\", \"name\": \"");
        name.write(buf);
        push(buf, "\", \"pid\": ");
        push_u64(buf, self.pid);
        push(buf, ", \"tid\": ");
        push_u64(buf, self.tid);
        push(buf, ",\n    \"ts\": ");
        push_ts(buf, ts, self.frac);
        push(buf, ", \"dur\": ");
        push_ts(buf, dur, self.frac);
        push(buf, ",\n    \"args\": {\n      ");
    }

    /// Closes the `args` and the event [`Sink::open`] started.
    fn close(&mut self) {
        push(self.buf, "\n    }\n  }");
    }

    /// The ids every GPU activity carries: its launch's External id, device, stream, correlation.
    fn gpu_ids(&mut self, ext: u64, corr: u64) {
        let buf = &mut *self.buf;
        push(buf, "\"External id\": ");
        push_u64(buf, ext);
        push(buf, ", \"queued\": 0, \"device\": ");
        push_u64(buf, self.pid);
        push(buf, ", \"context\": 1, \"stream\": ");
        push_u64(buf, self.tid);
        push(buf, ", \"correlation\": ");
        push_u64(buf, corr);
    }
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
