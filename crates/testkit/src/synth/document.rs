//! The document around the events: the Kineto header (`schemaVersion`, `deviceProperties`,
//! `distributedInfo`), the separators between events, the closing `M` metadata and profiler
//! spans, and the footer, in the key order real traces use.

use std::io::{self, Write};

use super::json::{push, push_ts, push_u64};
use super::vocab::{BASE_TIME_NS, COMPUTE_STREAM, GPUS_PER_HOST, NCCL_STREAM, T0_NS};
use super::Ctx;

/// One rank's JSON document, written front to back.
pub(super) struct Doc<W: Write> {
    pub(super) out: W,
    wrote_event: bool,
}

impl<W: Write> Doc<W> {
    pub(super) fn new(out: W) -> Self {
        Doc { out, wrote_event: false }
    }

    /// Writes events formatted with a leading `,\n` each (dropped before the first one).
    pub(super) fn events(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let skip = if self.wrote_event { 0 } else { 2 };
        self.wrote_event = true;
        self.out.write_all(&buf[skip..])
    }

    pub(super) fn header(&mut self, ctx: &Ctx) -> io::Result<()> {
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
    pub(super) fn metadata(&mut self, ctx: &Ctx, trace_end: u64) -> io::Result<()> {
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

    pub(super) fn footer(&mut self, ctx: &Ctx) -> io::Result<()> {
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
