//! The fixed vocabulary of the synthetic traces: names, ids, callback ids and kernel launch
//! shapes copied from real PyTorch 2.x traces on A100s, and the collectives and copies the
//! generator issues. Data only; nothing here draws a random number or writes an event.

/// `ProfilerStep#` of the first complete step (profiler schedules skip wait/warm-up steps).
pub(super) const FIRST_STEP: u64 = 5;
/// A steady-clock origin in ns, as Kineto's `ts` values are.
pub(super) const T0_NS: u64 = 4_458_676_416_788_000;
pub(super) const BASE_TIME_NS: u64 = 1_711_964_646_000_000_000;
pub(super) const COMPUTE_STREAM: u64 = 7;
pub(super) const NCCL_STREAM: u64 = 20;
pub(super) const GPUS_PER_HOST: u32 = 8;

pub(super) const CBID_LAUNCH: u32 = 211;
pub(super) const CBID_LAUNCH_EXC: u32 = 430;
const CBID_MEMCPY: u32 = 41;
const CBID_MEMSET: u32 = 51;
pub(super) const CBID_WAIT_EVENT: u32 = 147;
pub(super) const CBID_STREAM_SYNC: u32 = 131;

/// A kernel's launch as Kineto records it in the kernel event's `args`.
pub(super) struct KernelShape {
    pub(super) name: &'static str,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) registers: u32,
    pub(super) shared_memory: u32,
    /// Written as the profiler prints it (its float, six decimals), so kept as text.
    pub(super) blocks_per_sm: &'static str,
    pub(super) warps_per_sm: &'static str,
    pub(super) occupancy: u32,
}

/// One row of the launch table below; `per_sm` is `[blocks per SM, warps per SM]`.
const fn shape(
    name: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    registers: u32,
    shared_memory: u32,
    per_sm: [&'static str; 2],
    occupancy: u32,
) -> KernelShape {
    let [blocks_per_sm, warps_per_sm] = per_sm;
    KernelShape { name, grid, block, registers, shared_memory, blocks_per_sm, warps_per_sm, occupancy }
}

// The launches, one row each:  name, grid, block, registers per thread, shared memory (bytes),
// [blocks per SM, warps per SM], est. achieved occupancy (%).
pub(super) const GEMM_FWD: KernelShape =
    shape(GEMM_TN, [32, 16, 1], [256, 1, 1], 232, 147456, ["4.740741", "37.925926"], 12);
pub(super) const GEMM_DGRAD: KernelShape =
    shape(GEMM_NN, [16, 32, 1], [256, 1, 1], 232, 147456, ["4.740741", "37.925926"], 12);
pub(super) const GEMM_WGRAD: KernelShape =
    shape(GEMM_NT, [32, 32, 1], [128, 1, 1], 184, 98304, ["9.481482", "37.925926"], 12);
pub(super) const GELU: KernelShape =
    shape(GELU_FWD_NAME, [65536, 1, 1], [128, 1, 1], 26, 0, ["606.814819", "2427.259277"], 100);
pub(super) const GELU_BWD: KernelShape =
    shape(GELU_BWD_NAME, [65536, 1, 1], [128, 1, 1], 30, 0, ["606.814819", "2427.259277"], 100);
pub(super) const ADAM: KernelShape =
    shape(FUSED_ADAM_NAME, [320, 1, 1], [512, 1, 1], 64, 0, ["2.962963", "47.407406"], 74);
/// Every NCCL kernel's launch; its name comes from the collective ([`Coll::kernel`]).
pub(super) const NCCL_SHAPE: KernelShape = shape("", [24, 1, 1], [640, 1, 1], 96, 87568, ["0.222222", "4.444445"], 0);

// Demangled compute kernel names, as PyTorch 2.x traces spell them.
const GEMM_TN: &str = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn";
const GEMM_NN: &str = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn";
const GEMM_NT: &str = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x4_nt";
const GELU_FWD_NAME: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)";
const GELU_BWD_NAME: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)";
const FUSED_ADAM_NAME: &str = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float*, float*)";

/// The collectives the generator issues.
#[expect(clippy::enum_variant_names, reason = "the collectives' own names")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CollKind {
    AllReduce,
    AllToAll,
    AllGatherBase,
}

/// Element types of the collectives' buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dtype {
    BFloat16,
    Float,
}

impl Dtype {
    pub(super) fn name(self) -> &'static str {
        match self {
            Dtype::BFloat16 => "BFloat16",
            Dtype::Float => "Float",
        }
    }
    pub(super) fn input_type(self) -> &'static str {
        match self {
            Dtype::BFloat16 => "c10::BFloat16",
            Dtype::Float => "float",
        }
    }
    pub(super) fn bytes(self) -> u64 {
        match self {
            Dtype::BFloat16 => 2,
            Dtype::Float => 4,
        }
    }
}

/// One collective call, as `record_param_comms` describes it.
pub(super) struct Coll {
    pub(super) kind: CollKind,
    pub(super) dtype: Dtype,
    pub(super) in_nelems: u64,
    pub(super) out_nelems: u64,
    pub(super) seq: u64,
}

impl Coll {
    pub(super) fn record_name(&self) -> &'static str {
        match self.kind {
            CollKind::AllReduce => "allreduce",
            CollKind::AllToAll => "all_to_all",
            CollKind::AllGatherBase => "_allgather_base",
        }
    }
    pub(super) fn c10d_op(&self) -> &'static str {
        match self.kind {
            CollKind::AllReduce => "c10d::allreduce_",
            CollKind::AllToAll => "c10d::alltoall_base_",
            CollKind::AllGatherBase => "c10d::_allgather_base_",
        }
    }
    pub(super) fn annotation(&self) -> &'static str {
        match self.kind {
            CollKind::AllReduce => "nccl:all_reduce",
            CollKind::AllToAll => "nccl:all_to_all",
            CollKind::AllGatherBase => "nccl:_all_gather_base",
        }
    }
    pub(super) fn kernel(&self) -> &'static str {
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
    pub(super) fn bandwidth(&self) -> u64 {
        match self.kind {
            CollKind::AllReduce => 60_000_000_000,
            CollKind::AllToAll => 40_000_000_000,
            CollKind::AllGatherBase => 80_000_000_000,
        }
    }
    pub(super) fn payload_bytes(&self) -> u64 {
        self.in_nelems.max(self.out_nelems) * self.dtype.bytes()
    }
}

/// A host/device copy or a memset, issued on the compute stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MemOp {
    HtoD,
    DtoH,
    Memset,
}

impl MemOp {
    pub(super) fn runtime(self) -> &'static str {
        match self {
            MemOp::Memset => "cudaMemsetAsync",
            _ => "cudaMemcpyAsync",
        }
    }
    pub(super) fn cbid(self) -> u32 {
        match self {
            MemOp::Memset => CBID_MEMSET,
            _ => CBID_MEMCPY,
        }
    }
    pub(super) fn cat(self) -> &'static str {
        match self {
            MemOp::Memset => "gpu_memset",
            _ => "gpu_memcpy",
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            MemOp::HtoD => "Memcpy HtoD (Pageable -> Device)",
            MemOp::DtoH => "Memcpy DtoH (Device -> Pageable)",
            MemOp::Memset => "Memset (Device)",
        }
    }
}

/// Which half of the document a run over the simulation writes (see the parent module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    Cpu,
    Gpu,
}

/// A CPU thread or GPU stream of the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Track {
    Main,
    Bwd,
    Compute,
    Nccl,
}
