#!/usr/bin/env python3
"""Write tests/fixtures/hta/modern_synthetic/rank{0,1}.json.gz: small synthetic Kineto traces in
the shapes current PyTorch writes, for HTA parity (scripts/hta-reference.sh records HTA's
numbers for them). Deterministic: running it again gives the same bytes.

What each trace holds, and which HTA behaviour it exercises (see /tmp/hta-spec.md or the
fixtures README):
  * ProfilerStep#1..#4 twice: on the CPU thread (cat user_annotation) and on the GPU (cat
    gpu_user_annotation, pid = device, tid = stream 7), the GPU copies starting later (the GPU
    lags the CPU by 400-850 µs). HTA's window ends at the latest *start* of either copy, so step
    4's launches up to the GPU copy's start are in it; the CPU-only window would stop at the CPU
    step 4 start.
  * Launches after that point (CPU step 4, +900 µs and +950 µs): out of HTA's window.
  * Epoch-µs timestamps with ns decimals (1733140000123456.789): HTA reads them as float64
    (0.25 µs spacing) and rounds start up, end (= ts + dur in float64) down.
  * Sub-µs kernels (dur 0.384, 0.512), some alone on the timeline (HTA: -1 µs) and some inside
    another kernel of their class.
  * A Triton cpu_op whose args carry "stream": 0 (HTA counts it as GPU compute, at its CPU time),
    with its own kernel launched by cuLaunchKernel (cat cuda_driver).
  * A memcpy (neither compute nor communication), distributedInfo {rank, world_size}, and
    record_param_comms ops with Collective name, In/Out msg nelems, dtype, Process Group Name,
    Seq and Group size around each NCCL launch.
"""

import gzip
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "hta", "modern_synthetic")

COMPUTE_STREAM, COMM_STREAM = 7, 20


def num(ns):
    """A timestamp or duration in ns, written as µs with three decimals (as Kineto does)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"__NUM__{sign}{ns // 1000}.{ns % 1000:03d}__"


def us(x):
    """µs (a float literal like 150.25) → ns, exactly."""
    return round(x * 1000)


COLLECTIVES = {
    # kind: (kernel name, Collective name, in nelems, out nelems, dtype)
    "all_reduce": ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                   "allreduce", 1048576, 1048576, "Float"),
    "all_gather": ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                   "_allgather_base", 262144, 524288, "BFloat16"),
    "broadcast": ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                  "broadcast", 16, 16, "Long"),
    "reduce_scatter": ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                       "_reduce_scatter_base", 524288, 262144, "BFloat16"),
}

GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ELTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
TRITON = "triton_poi_fused_add_mul_0"


def rank_trace(rank):
    cpu_pid = 4100 + rank
    cpu_tid = cpu_pid
    gpu_pid = rank
    base = 1733140000123456789 + rank * 3123  # ns since the epoch: 1733140000123456.789 µs
    ev = []
    corr = [1000]
    ext = [1]
    seq = {"all_reduce": 0, "all_gather": 0, "broadcast": 0, "reduce_scatter": 0}

    def next_corr():
        corr[0] += 1
        return corr[0]

    def next_ext():
        ext[0] += 1
        return ext[0]

    def cpu(cat, name, t, d, args=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": cpu_pid, "tid": cpu_tid, "ts": num(t), "dur": num(d),
             "args": {"External id": next_ext(), **(args or {})}}
        ev.append(e)
        return e

    def gpu(cat, name, stream, t, d, c, args=None):
        a = {"External id": ext[0], "device": rank, "stream": stream, "correlation": c}
        if cat == "kernel":
            a.update({"registers per thread": 32, "shared memory": 0, "blocks per SM": 0.5,
                      "warps per SM": 2.0, "grid": [132, 1, 1], "block": [256, 1, 1],
                      "est. achieved occupancy %": 25})
        a.update(args or {})
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": gpu_pid, "tid": stream, "ts": num(t), "dur": num(d),
                   "args": a})

    def launch(t, kname, stream, kt, kd, runtime="cudaLaunchKernel", rcat="cuda_runtime", kcat="kernel",
               kargs=None):
        c = next_corr()
        cpu(rcat, runtime, t, us(4.211), {"cbid": 211 if rcat == "cuda_runtime" else 0, "correlation": c})
        gpu(kcat, kname, stream, kt, kd, c, kargs)

    def collective(t, kind, kt, kd, on_kernel=False):
        kname, cname, i, o, dtype = COLLECTIVES[kind]
        seq[kind] += 1
        meta = {"Collective name": cname, "In msg nelems": i, "Out msg nelems": o, "dtype": dtype,
                "Process Group Name": "0", "Process Group Description": "default_pg", "Seq": sum(seq.values()),
                "Group size": 2, "Rank": rank, "In split size": "[]", "Out split size": "[]",
                "Global rank start": 0, "Global rank stride": 1}
        op = {"all_reduce": "c10d::allreduce_", "all_gather": "c10d::_allgather_base_",
              "broadcast": "c10d::broadcast_", "reduce_scatter": "c10d::_reduce_scatter_base_"}[kind]
        cpu("cpu_op", op, t, us(38.5))
        cpu("cpu_op", "record_param_comms", t + us(2.125), us(33.25), meta)
        launch(t + us(20.5), kname, COMM_STREAM, kt, kd, kargs=meta if on_kernel else None)

    # Metadata events first (with ts: they take part in HTA's float64/rounding decision).
    for pid, name, label in [(cpu_pid, "python3", "CPU"), (gpu_pid, f"python3", f"GPU {rank}")]:
        ev.append({"name": "process_name", "ph": "M", "ts": num(base - us(50)), "pid": pid, "tid": 0,
                   "args": {"name": name}})
        ev.append({"name": "process_labels", "ph": "M", "ts": num(base - us(50)), "pid": pid, "tid": 0,
                   "args": {"labels": label}})
    ev.append({"name": "thread_name", "ph": "M", "ts": num(base - us(50)), "pid": gpu_pid, "tid": COMM_STREAM,
               "args": {"name": f"stream {COMM_STREAM} "}})

    lag0, lag_step = (400, 150) if rank == 0 else (450, 120)
    for step in range(1, 5):
        c0 = base + us(1000) * (step - 1) + us(0.137) * step
        g0 = c0 + us(lag0 + lag_step * (step - 1)) + us(0.5)
        cpu("user_annotation", f"ProfilerStep#{step}", c0, us(999.75 if step < 4 else 1050.5))
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{step}", "pid": gpu_pid,
                   "tid": COMPUTE_STREAM, "ts": num(g0 - us(0.2)), "dur": num(us(832.4)),
                   "args": {"External id": ext[0]}})
        # compute
        cpu("cpu_op", "aten::mm", c0 + us(8.0), us(12.5))
        launch(c0 + us(10.25), GEMM, COMPUTE_STREAM, g0 + us(0.0), us(120.5))
        launch(c0 + us(20.75), GEMM, COMPUTE_STREAM, g0 + us(121.3), us(179.4))
        # a sub-µs fill alone on the compute stream: HTA rounds it to [302, 301] (relative)
        launch(c0 + us(30.125), FILL, COMPUTE_STREAM, g0 + us(301.2), us(0.384))
        # all-reduce overlapping the second GEMM and the next compute kernel
        collective(c0 + us(100.0), "all_reduce", g0 + us(150.25), us(300.25))
        launch(c0 + us(150.5), ELTWISE, COMPUTE_STREAM, g0 + us(320.1), us(80.8))
        # Triton: a cpu_op with "stream" in its args (HTA: GPU compute at its CPU time) that
        # launches its kernel with cuLaunchKernel (cat cuda_driver)
        t_tri = c0 + us(160.0)
        cpu("cpu_op", TRITON, t_tri, us(9.625),
            {"stream": 0, "kernel_backend": "triton", "num_warps": 4, "num_stages": 1,
             "kernel_name": TRITON, "kernel_kwargs": "XBLOCK=512"})
        launch(t_tri + us(3.0), TRITON, COMPUTE_STREAM, g0 + us(402.3), us(12.6),
               runtime="cuLaunchKernel", rcat="cuda_driver")
        collective(c0 + us(200.0), "all_gather", g0 + us(460.1), us(100.2))
        # a sub-µs broadcast alone on the timeline: HTA gives it -1 µs
        collective(c0 + us(300.0), "broadcast", g0 + us(580.6), us(0.384), on_kernel=True)
        launch(c0 + us(400.0), GEMM, COMPUTE_STREAM, g0 + us(600.0), us(100.0))
        # a sub-µs kernel inside the GEMM above (absorbed by the merge)
        launch(c0 + us(410.0), FILL, COMPUTE_STREAM + 1, g0 + us(650.2), us(0.512))
        collective(c0 + us(700.0), "reduce_scatter", g0 + us(650.7), us(149.5))
        c = next_corr()
        cpu("cuda_runtime", "cudaMemcpyAsync", c0 + us(750.0), us(6.5), {"cbid": 41, "correlation": c})
        gpu("gpu_memcpy", "Memcpy DtoD (Device -> Device)", COMPUTE_STREAM, g0 + us(810.0), us(10.0), c,
            {"bytes": 4194304, "memory bandwidth (GB/s)": 419.43})
        if step == 4:
            # launched after the GPU copy of ProfilerStep#4 started: outside HTA's window
            launch(c0 + us(900.0), GEMM, COMPUTE_STREAM, g0 + us(840.0), us(100.0))
            collective(c0 + us(950.0), "all_reduce", g0 + us(880.0), us(120.0))
    end = base + us(5000)
    ev.insert(0, {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
                  "ts": num(base - us(20)), "dur": num(end - base + us(20)), "args": {"Op count": 0}})
    ev.sort(key=lambda e: (e["ph"] != "M", int(re.sub(r"[^0-9]", "", e["ts"]))))

    trace = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                           "pg_size": 2, "ranks": [0, 1]}],
                            "nccl_version": "2.21.5"},
        "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045608448,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
        "record_shapes": 1, "with_stack": 0,
        "trace_id": f"0F1E2D3C4B5A6978{rank:016X}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1733140000000000000,
        "traceEvents": ev,
        "traceName": f"modern_synthetic/rank{rank}.json",
    }
    # One event per line, as Kineto writes them.
    head = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, indent=1)
    events = ",\n  ".join(json.dumps(e) for e in ev)
    text = head[:-2] + ',\n "traceEvents": [\n  ' + events + "\n ]\n}\n"
    return re.sub(r'"__NUM__(-?[0-9]+\.[0-9]{3})__"', r"\1", text)


def main():
    os.makedirs(OUT, exist_ok=True)
    for rank in (0, 1):
        data = rank_trace(rank).encode()
        path = os.path.join(OUT, f"rank{rank}.json.gz")
        with open(path, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
                f.write(data)
        print(path, len(data), "bytes of JSON")


if __name__ == "__main__":
    main()
