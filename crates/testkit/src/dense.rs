//! Kernel-dense Kineto traces, for the attribution benches: many short kernels per step, as
//! modern training with small fused kernels writes them, each launched by its own
//! `cudaLaunchKernel` and linked by an `ac2g` flow pair, laid out as PyTorch 2.x writes events
//! (one event per four-line block, `args` on its own lines, three-decimal `ts`/`dur`).
//!
//! Every `COMM_EVERY`-th kernel is an NCCL all-reduce on its own stream, with the metadata
//! PyTorch copies onto NCCL kernels, and a `record_param_comms` CPU op around its launch. The
//! distinct compute names are `distinct_names` variants of real template names, so the name
//! table can be grown independently of the kernel count.

use std::io::{self, BufWriter, Write};

/// What to write for one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseSpec {
    /// GPU kernels in the whole trace (compute and NCCL).
    pub kernels: u64,
    /// `ProfilerStep#N`s the kernels are spread over.
    pub steps: u64,
    /// Distinct compute kernel names.
    pub distinct_names: u64,
    pub rank: u32,
    pub world_size: u32,
}

/// One kernel in this many is an NCCL all-reduce.
pub const COMM_EVERY: u64 = 50;

const COMPUTE_STREAM: u32 = 7;
const NCCL_STREAM: u32 = 20;
const T0_US: u64 = 1_717_200_000_000;

const TEMPLATES: [&str; 4] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)",
    "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
];

/// Writes one rank's trace to `out`.
pub fn write_dense<W: Write>(spec: &DenseSpec, out: W) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 16, out);
    writeln!(
        w,
        "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [],\n  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {}, \"world_size\": {}, \"pg_count\": 1}},\n  \"record_shapes\": 1,\n  \"with_stack\": 0,\n  \"traceEvents\": [",
        spec.rank, spec.world_size
    )?;
    let pid = 3_150_000 + u64::from(spec.rank);
    let per_step = spec.kernels.div_ceil(spec.steps.max(1)).max(1);
    let distinct = spec.distinct_names.max(1);
    // Kernel i launches at 4 µs intervals on the CPU and runs 10 µs later on the GPU; a step
    // spans its kernels plus a little slack.
    let mut first = true;
    let mut comma = |w: &mut BufWriter<W>| -> io::Result<()> {
        if !std::mem::take(&mut first) {
            w.write_all(b",\n")?;
        }
        Ok(())
    };
    let mut i = 0;
    for step in 0..spec.steps.max(1) {
        let step_start = T0_US + i * 4 + step * 50;
        let n = per_step.min(spec.kernels - i.min(spec.kernels));
        comma(&mut w)?;
        write!(
            w,
            "  {{\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#{}\", \"pid\": {pid}, \"tid\": {pid},\n    \"ts\": {step_start}.000, \"dur\": {}.000,\n    \"args\": {{\n      \"External id\": {}, \"Record function id\": 0, \"Ev Idx\": {}\n    }}\n  }}",
            step + 10,
            n * 4 + 40,
            i * 2 + 1,
            i * 4
        )?;
        for _ in 0..n {
            let corr = 100_000 + i;
            let launch = T0_US * 1000 + (i * 4 + step * 50) * 1000 + 500;
            let gpu = launch + 10_000;
            let comm = i % COMM_EVERY == COMM_EVERY - 1;
            if comm {
                comma(&mut w)?;
                write!(
                    w,
                    "  {{\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"record_param_comms\", \"pid\": {pid}, \"tid\": {pid},\n    \"ts\": {}, \"dur\": 12.250,\n    \"args\": {{\n      \"External id\": {}, \"Record function id\": 0, \"Ev Idx\": {}, \"Collective name\": \"allreduce\", \"dtype\": \"BFloat16\", \"In msg nelems\": 1048576, \"Out msg nelems\": 1048576, \"In split size\": \"[]\", \"Out split size\": \"[]\", \"Global rank start\": 0, \"Global rank stride\": 1, \"Group size\": {}, \"Process Group Name\": \"0\", \"Process Group Description\": \"default_pg\", \"Process Group Ranks\": \"[0, 1, 2, 3, 4, 5, 6, 7]\", \"Seq\": {}\n    }}\n  }}",
                    micros(launch - 250),
                    i * 2,
                    i * 4 + 1,
                    spec.world_size,
                    i / COMM_EVERY
                )?;
            }
            comma(&mut w)?;
            write!(
                w,
                "  {{\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": {pid}, \"tid\": {pid},\n    \"ts\": {}, \"dur\": 3.125,\n    \"args\": {{\n      \"External id\": {}, \"cbid\": 211, \"correlation\": {corr}\n    }}\n  }}",
                micros(launch),
                i * 2,
            )?;
            comma(&mut w)?;
            write!(
                w,
                "  {{\n    \"ph\": \"s\", \"id\": {corr}, \"pid\": {pid}, \"tid\": {pid}, \"ts\": {},\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }}",
                micros(launch)
            )?;
            let (stream, dur) = if comm { (NCCL_STREAM, 21_375) } else { (COMPUTE_STREAM, 2_000 + (i % 7) * 250) };
            comma(&mut w)?;
            if comm {
                write!(
                    w,
                    "  {{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)\", \"pid\": {}, \"tid\": {stream},\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {}, \"device\": {}, \"stream\": {stream}, \"correlation\": {corr}, \"registers per thread\": 96, \"shared memory\": 87568, \"blocks per SM\": 0.222222, \"warps per SM\": 4.444445, \"grid\": [24, 1, 1], \"block\": [640, 1, 1], \"est. achieved occupancy %\": 0, \"Collective name\": \"allreduce\", \"In msg nelems\": 1048576, \"Out msg nelems\": 1048576, \"Group size\": {}, \"dtype\": \"BFloat16\", \"In split size\": \"[]\", \"Out split size\": \"[]\", \"Process Group Name\": \"0\", \"Process Group Description\": \"default_pg\", \"Process Group Ranks\": \"[0, 1, 2, 3, 4, 5, 6, 7]\", \"Seq\": {}\n    }}\n  }}",
                    spec.rank % 8,
                    micros(gpu),
                    micros(dur),
                    i * 2,
                    spec.rank % 8,
                    spec.world_size,
                    i / COMM_EVERY
                )?;
            } else {
                let v = i % distinct;
                let template = TEMPLATES[(v % TEMPLATES.len() as u64) as usize];
                let variant = v / TEMPLATES.len() as u64;
                let suffix = if variant == 0 { String::new() } else { format!("_{variant}") };
                write!(
                    w,
                    "  {{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{template}{suffix}\", \"pid\": {}, \"tid\": {stream},\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {}, \"device\": {}, \"stream\": {stream}, \"correlation\": {corr}, \"registers per thread\": 32, \"shared memory\": 0, \"blocks per SM\": 4.740741, \"warps per SM\": 18.962963, \"grid\": [1024, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %\": 100\n    }}\n  }}",
                    spec.rank % 8,
                    micros(gpu),
                    micros(dur),
                    i * 2,
                    spec.rank % 8,
                )?;
            }
            comma(&mut w)?;
            write!(
                w,
                "  {{\n    \"ph\": \"f\", \"id\": {corr}, \"pid\": {}, \"tid\": {stream}, \"ts\": {},\n    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }}",
                spec.rank % 8,
                micros(gpu)
            )?;
            i += 1;
        }
    }
    writeln!(w, "\n  ],\n  \"traceName\": \"rank-{}.json\"\n}}", spec.rank)?;
    w.flush()
}

/// Nanoseconds as Kineto's microseconds with three decimals.
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_trace::kineto::{parse_document, Document};

    #[test]
    fn the_trace_holds_the_kernels_asked_for() {
        let spec = DenseSpec { kernels: 1_000, steps: 4, distinct_names: 10, rank: 1, world_size: 2 };
        let mut out = Vec::new();
        write_dense(&spec, &mut out).expect("writes");
        let Ok(Document::Timeline(t)) = parse_document(&out[..]) else { panic!("not a trace") };
        assert_eq!(t.kernels.len(), 1_000);
        assert_eq!(t.steps.len(), 4);
        assert_eq!(t.names.len(), 11);
        assert_eq!(t.comm_ops.len(), 20);
        assert_eq!(t.rank, Some(1));
    }
}
