//! Names to meanings: which kernels are communication, compute or memory traffic; which
//! collective a name denotes; how many bytes an element of a PyTorch dtype takes. The rules are
//! attribution.md's, with HTA's own name rules kept apart for `--compat hta`.

use super::model::KernelCat;

/// What a GPU activity counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelKind {
    Comm,
    Compute,
    /// Copies and fills: neither communication nor compute (or, under HTA, "non-compute").
    Other,
}

/// A `--comm-pattern`: a kernel-name substring that marks communication, and the row its
/// kernels are reported under when the pattern names one (`dispatch=deep_ep::intranode::dispatch`,
/// split at the first `=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommPattern {
    pub row: Option<String>,
    pub substring: String,
}

impl CommPattern {
    /// `SUBSTRING` or `NAME=SUBSTRING`; `Err` says what is missing.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (row, substring) = match raw.split_once('=') {
            Some((row, substring)) => (Some(row.trim()), substring),
            None => (None, raw),
        };
        if substring.is_empty() {
            return Err("has no substring: write SUBSTRING or NAME=SUBSTRING".to_string());
        }
        if row.is_some_and(str::is_empty) {
            return Err("has an empty NAME: write NAME=SUBSTRING, or the substring alone".to_string());
        }
        Ok(CommPattern { row: row.map(str::to_string), substring: substring.to_string() })
    }

    pub fn matches(&self, name: &str) -> bool {
        name.contains(self.substring.as_str())
    }
}

/// The user's communication patterns, matched all at once: one Aho–Corasick automaton over
/// their substrings, so that thousands of patterns cost one pass over a kernel name, not one
/// scan each.
#[derive(Debug, Clone, Default)]
pub struct PatternSet {
    patterns: Vec<CommPattern>,
    automaton: Option<aho_corasick::AhoCorasick>,
}

impl PatternSet {
    pub fn new(patterns: &[CommPattern]) -> Self {
        // Building fails only past the automaton's size limits; then nothing matches rather than
        // everything, and the patterns' kernels count as compute.
        let automaton = (!patterns.is_empty())
            .then(|| aho_corasick::AhoCorasick::new(patterns.iter().map(|p| p.substring.as_bytes())).ok())
            .flatten();
        PatternSet { patterns: patterns.to_vec(), automaton }
    }

    /// Whether some pattern's substring occurs in `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.automaton.as_ref().is_some_and(|a| a.is_match(name))
    }

    /// The row named by the first `NAME=SUBSTRING` pattern (in the order given) that occurs in
    /// `name`.
    pub fn row(&self, name: &str) -> Option<&str> {
        let automaton = self.automaton.as_ref()?;
        automaton
            .find_overlapping_iter(name)
            .map(|m| m.pattern().as_usize())
            .filter_map(|i| Some((i, self.patterns.get(i)?.row.as_deref()?)))
            .min_by_key(|&(i, _)| i)
            .map(|(_, row)| row)
    }
}

/// The family of a kernel: its name without a leading `void `, template arguments and
/// parameters (`void deep_ep::intranode::dispatch<8, 768>(int*, …)` →
/// `deep_ep::intranode::dispatch`), so that each kind of custom kernel gets its own row.
pub fn kernel_family(name: &str) -> String {
    let name = name.trim().trim_start_matches("void ");
    let family = name.split(['<', '(']).next().unwrap_or_default().trim();
    if family.is_empty() {
        name.to_string()
    } else {
        family.to_string()
    }
}

/// The communication library a kernel of another library than NCCL belongs to, by its family
/// ([`kernel_family`]): DeepEP's dispatch, combine and notify kernels (`deep_ep::` and DeepSeek's
/// own `dpsk::ep::`, in the `intranode`, `internode` and `internode_ll` namespaces; not
/// `get_dispatch_layout`, which computes), NVSHMEM (`nvshmem…`), MSCCL and MSCCL++ (`msccl…`),
/// and PyTorch's symmetric memory (`c10d::symmetric_memory::…`). RCCL's kernels are NCCL's names.
pub fn library_comm(name: &str) -> Option<&'static str> {
    let family = kernel_family(name);
    let segments: Vec<&str> = family.split("::").collect();
    let deep_ep = match segments.as_slice() {
        ["deep_ep", space, ..] | ["dpsk", "ep", space, ..] => {
            matches!(*space, "intranode" | "internode" | "internode_ll")
        }
        _ => false,
    };
    if deep_ep {
        return Some("DeepEP");
    }
    let first = segments.first().copied().unwrap_or_default();
    if first.starts_with("nvshmem") {
        Some("NVSHMEM")
    } else if first.starts_with("mscclpp") {
        Some("MSCCL++")
    } else if first.starts_with("msccl") {
        Some("MSCCL")
    } else if segments.windows(2).any(|w| w == ["c10d", "symmetric_memory"]) {
        Some("PyTorch symmetric memory")
    } else {
        None
    }
}

/// Words that mark a kernel name as looking like communication, for the hint when a trace has
/// no communication kernel commgate recognises.
pub const COMM_WORDS: [&str; 14] = [
    "dispatch",
    "combine",
    "alltoall",
    "all_to_all",
    "allreduce",
    "all_reduce",
    "allgather",
    "all_gather",
    "reduce_scatter",
    "reducescatter",
    "sendrecv",
    "send_recv",
    "p2p",
    "rdma",
];

/// Whether a compute kernel's name looks like communication (a word of [`COMM_WORDS`] in its
/// family, any case): named in the hint, never counted as communication.
pub fn looks_like_comm(name: &str) -> bool {
    let family = kernel_family(name).to_ascii_lowercase();
    COMM_WORDS.iter().any(|w| family.contains(w))
}

/// commgate's rule: NCCL kernels by name, the other libraries' of [`library_comm`] and the user's
/// patterns; memory by category or name; every other kernel is compute.
pub fn kind_default(cat: KernelCat, name: &str, comm_patterns: &PatternSet) -> KernelKind {
    if cat != KernelCat::Kernel {
        return KernelKind::Other;
    }
    if name.starts_with("nccl")
        || name.contains("ncclKernel")
        || comm_patterns.matches(name)
        || library_comm(name).is_some()
    {
        return KernelKind::Comm;
    }
    if name.starts_with("Memcpy") || name.starts_with("Memset") || name.starts_with("dma") {
        return KernelKind::Other;
    }
    KernelKind::Compute
}

/// HTA's rule (`hta/analyzers/breakdown_analysis.py`): communication `^nccl|^hip|^hccl` or
/// `ncclKernel` anywhere, over kernels, copies and fills alike; compute is any GPU activity whose
/// name matches none of the non-compute patterns.
pub fn kind_hta(name: &str, comm_patterns: &PatternSet) -> KernelKind {
    if name.starts_with("nccl")
        || name.starts_with("hip")
        || name.starts_with("hccl")
        || name.contains("ncclKernel")
        || comm_patterns.matches(name)
    {
        return KernelKind::Comm;
    }
    let non_compute = name.contains("Memcpy")
        || name.contains("Memset")
        || name.contains("dma")
        || name.contains("Sync")
        || name.starts_with("Stream Wait Event")
        || (name.contains("cuda") && name.contains("LaunchKernel") && cuda_launch_kernel(name));
    if non_compute || name.starts_with("runFunction") {
        KernelKind::Other
    } else {
        KernelKind::Compute
    }
}

/// HTA's `cuda.*LaunchKernel` (a regex search: `cuda` somewhere before `LaunchKernel`).
fn cuda_launch_kernel(name: &str) -> bool {
    match (name.find("cuda"), name.rfind("LaunchKernel")) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

/// Normalises a collective name from metadata or an annotation (`allreduce`, `_allgather_base`,
/// `all_to_allv`, `nccl:_reduce_scatter_base`, …) to commgate's vocabulary. Returns `None` for
/// names that are not collectives (`wait`, `init`, `barrier`, empty).
pub fn normalize_collective(raw: &str) -> Option<String> {
    let lower = raw.trim().trim_start_matches("nccl:").to_ascii_lowercase();
    let n = lower.trim_start_matches('_');
    let canonical = if n.starts_with("allreduce") || n.starts_with("all_reduce") {
        "all_reduce"
    } else if n.contains("allgather") || n.contains("all_gather") {
        "all_gather"
    } else if n.contains("reduce_scatter") || n.contains("reducescatter") {
        "reduce_scatter"
    } else if n.starts_with("all_to_all") || n.starts_with("alltoall") {
        "all_to_all"
    } else if n.starts_with("broadcast") {
        "broadcast"
    } else if n.starts_with("reduce") {
        "reduce"
    } else if n == "send" || n == "recv" || n == "sendrecv" || n == "send_recv" {
        "send_recv"
    } else if n.is_empty() || n == "wait" || n == "init" || n == "barrier" || n.starts_with("coalesced") {
        return None;
    } else {
        return Some(n.to_string());
    };
    Some(canonical.to_string())
}

/// The collective a kernel name denotes (`ncclDevKernel_AllReduce_Sum_bf16_RING_LL` →
/// `all_reduce`), the last resort when no metadata names it.
pub fn collective_from_kernel_name(name: &str) -> String {
    const BY_NAME: [(&str, &str); 7] = [
        ("AllReduce", "all_reduce"),
        ("AllGather", "all_gather"),
        ("ReduceScatter", "reduce_scatter"),
        ("AllToAll", "all_to_all"),
        ("Broadcast", "broadcast"),
        ("SendRecv", "send_recv"),
        ("Reduce", "reduce"),
    ];
    for (needle, collective) in BY_NAME {
        if name.contains(needle) {
            return collective.to_string();
        }
    }
    if name.contains("Send") || name.contains("Recv") {
        return "send_recv".to_string();
    }
    UNKNOWN_COLLECTIVE.to_string()
}

/// What a communication kernel is called when nothing names its collective.
pub const UNKNOWN_COLLECTIVE: &str = "unknown_collective";

/// Bytes per element of a dtype as PyTorch's profiler writes it (`Float`, `c10::BFloat16`,
/// `float`, `long int`, …). `None` when unknown, so that a payload is never guessed.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    let d = dtype.trim().trim_start_matches("c10::").to_ascii_lowercase();
    let size = match d.as_str() {
        "float" | "float32" | "int" | "int32" | "unsigned int" | "uint32" | "complexhalf" => 4,
        "double" | "float64" | "long" | "long int" | "int64" | "long long" | "unsigned long" | "uint64"
        | "complexfloat" => 8,
        "half" | "float16" | "bfloat16" | "short" | "short int" | "int16" | "uint16" => 2,
        "byte" | "char" | "bool" | "unsigned char" | "signed char" | "uint8" | "int8" | "float8_e4m3fn"
        | "float8_e5m2" | "float8_e4m3fnuz" | "float8_e5m2fnuz" => 1,
        "complexdouble" => 16,
        _ => return None,
    };
    Some(size)
}

/// Whether a kernel or annotation name marks a mixture-of-experts job: `moe`, `expert`,
/// `deep_ep`/`deepep`/`dpsk::ep` (DeepEP's dispatch and combine kernels) or `router`, in any case
/// (`fused_moe_kernel`, `MoELayer`, `deep_ep::intranode::dispatch<…>`, `TopKRouter`).
pub fn is_moe_marker(name: &str) -> bool {
    const MARKERS: [&str; 6] = ["moe", "expert", "deep_ep", "deepep", "dpsk::ep", "router"];
    let lower = name.to_ascii_lowercase();
    MARKERS.iter().any(|m| lower.contains(m))
}

/// `ProfilerStep#12` → true.
pub fn is_profiler_step(name: &str) -> bool {
    name.starts_with("ProfilerStep#")
}

/// The rank in a file name: `rank[-_]?(\d+)` (`rank-3.json.gz`, `trace_rank7.pt.trace.json`).
pub fn rank_from_file_name(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    let mut search = lower.as_str();
    while let Some(i) = search.find("rank") {
        let rest = &search[i + 4..];
        let rest = rest.strip_prefix(['-', '_']).unwrap_or(rest);
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(r) = digits.parse() {
            return Some(r);
        }
        search = &search[i + 4..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let none = PatternSet::default();
        let k = |n| kind_default(KernelCat::Kernel, n, &none);
        assert_eq!(k("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"), KernelKind::Comm);
        assert_eq!(k("ncclDevKernel_AllGather_RING_LL"), KernelKind::Comm);
        assert_eq!(k("ncclSymkDevKernel_AllReduce"), KernelKind::Comm);
        assert_eq!(k("void foo<ncclKernel_x>"), KernelKind::Comm);
        assert_eq!(k("ampere_bf16_s16816gemm"), KernelKind::Compute);
        assert_eq!(k("Memcpy DtoD (Device -> Device)"), KernelKind::Other);
        assert_eq!(kind_default(KernelCat::Memcpy, "Memcpy HtoD", &none), KernelKind::Other);
        let custom = PatternSet::new(&[CommPattern::parse("cross_device_reduce").unwrap()]);
        assert_eq!(kind_default(KernelCat::Kernel, "void cross_device_reduce_1stage<bf16>", &custom), KernelKind::Comm);
        assert_eq!(kind_hta("Memset (Device)", &none), KernelKind::Other);
        assert_eq!(kind_hta("cudaLaunchKernel", &none), KernelKind::Other);
        assert_eq!(kind_hta("cudaStreamSynchronize", &none), KernelKind::Other);
        assert_eq!(kind_hta("void at::native::elementwise", &none), KernelKind::Compute);
    }

    #[test]
    fn comm_patterns_name_their_rows_or_not() {
        let p = CommPattern::parse("dispatch=deep_ep::intranode::dispatch").unwrap();
        assert_eq!((p.row.as_deref(), p.substring.as_str()), (Some("dispatch"), "deep_ep::intranode::dispatch"));
        assert!(p.matches("void deep_ep::intranode::dispatch<8>(int*)"));
        let p = CommPattern::parse("deep_ep").unwrap();
        assert_eq!((p.row, p.substring.as_str()), (None, "deep_ep"));
        // Split at the first `=`: the substring may hold one.
        assert_eq!(CommPattern::parse("a=b=c").unwrap().substring, "b=c");
        assert_eq!(CommPattern::parse("x=").unwrap_err(), "has no substring: write SUBSTRING or NAME=SUBSTRING");
        assert!(CommPattern::parse(" =x").unwrap_err().contains("empty NAME"), "a blank name");
    }

    /// Many patterns are one automaton; the named row is the first named pattern in the order
    /// given, whichever matches first in the name.
    #[test]
    fn a_pattern_set_matches_all_at_once_and_names_by_order() {
        let mut patterns: Vec<CommPattern> =
            (0..20_000).map(|i| CommPattern::parse(&format!("custom_kernel_{i:05}_")).unwrap()).collect();
        patterns.push(CommPattern::parse("late=dispatch").unwrap());
        patterns.insert(0, CommPattern::parse("early=intranode").unwrap());
        let set = PatternSet::new(&patterns);
        assert!(set.matches("void custom_kernel_19999_x"));
        assert!(!set.matches("ampere_gemm"));
        assert_eq!(set.row("deep_ep::intranode::dispatch<8>"), Some("early"));
        assert_eq!(set.row("other::dispatch"), Some("late"));
        assert_eq!(set.row("void custom_kernel_00001_x"), None);
        assert!(!PatternSet::default().matches("anything"));
    }

    #[test]
    fn kernel_families_drop_templates_and_parameters() {
        assert_eq!(
            kernel_family("void deep_ep::intranode::dispatch<8, 768>(int*, float)"),
            "deep_ep::intranode::dispatch"
        );
        assert_eq!(
            kernel_family("deep_ep::intranode::notify_dispatch(int const*)"),
            "deep_ep::intranode::notify_dispatch"
        );
        assert_eq!(kernel_family("cross_device_reduce_1stage"), "cross_device_reduce_1stage");
        assert_eq!(kernel_family("<lambda>"), "<lambda>");
    }

    #[test]
    fn moe_markers() {
        for name in ["fused_moe_kernel", "MoELayer", "void deep_ep::intranode::combine<4>", "TopKRouter", "expert_fwd"]
        {
            assert!(is_moe_marker(name), "{name}");
        }
        for name in ["ncclDevKernel_AllToAll_RING_LL", "embedding_backward_kernel", "Memmove", "ProfilerStep#3"] {
            assert!(!is_moe_marker(name), "{name}");
        }
    }

    #[test]
    fn collective_names() {
        let n = |s| normalize_collective(s);
        assert_eq!(n("allreduce").as_deref(), Some("all_reduce"));
        assert_eq!(n("allreduce_coalesced").as_deref(), Some("all_reduce"));
        assert_eq!(n("_allgather_base").as_deref(), Some("all_gather"));
        assert_eq!(n("all_gather_into_tensor_coalesced").as_deref(), Some("all_gather"));
        assert_eq!(n("nccl:_reduce_scatter_base").as_deref(), Some("reduce_scatter"));
        assert_eq!(n("all_to_allv").as_deref(), Some("all_to_all"));
        assert_eq!(n("alltoall_base").as_deref(), Some("all_to_all"));
        assert_eq!(n("broadcast").as_deref(), Some("broadcast"));
        assert_eq!(n("send").as_deref(), Some("send_recv"));
        assert_eq!(n("barrier"), None);
        assert_eq!(n("wait"), None);
        assert_eq!(collective_from_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"), "send_recv");
        assert_eq!(collective_from_kernel_name("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"), "reduce_scatter");
        assert_eq!(collective_from_kernel_name("ncclDevKernel_Reduce_Sum"), "reduce");
    }

    #[test]
    fn dtypes_and_ranks() {
        assert_eq!(dtype_size("Float"), Some(4));
        assert_eq!(dtype_size("c10::BFloat16"), Some(2));
        assert_eq!(dtype_size("long int"), Some(8));
        assert_eq!(dtype_size("unsigned char"), Some(1));
        assert_eq!(dtype_size("Scalar"), None);
        assert_eq!(rank_from_file_name("rank-3.json.gz"), Some(3));
        assert_eq!(rank_from_file_name("trace_rank7.pt.trace.json"), Some(7));
        assert_eq!(rank_from_file_name("Rank_12.json"), Some(12));
        assert_eq!(rank_from_file_name("ranking-rank-2.json"), Some(2));
        assert_eq!(rank_from_file_name("trace.json"), None);
    }

    #[test]
    fn other_libraries_communication_kernels_are_recognised_by_their_family() {
        let comm = |name| kind_default(KernelCat::Kernel, name, &PatternSet::default());
        for (name, library) in [
            ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int*)", "DeepEP"),
            ("void dpsk::ep::internode::cached_notify<4>(int)", "DeepEP"),
            ("void deep_ep::intranode::combine<__nv_bfloat16, 8>(int*)", "DeepEP"),
            ("void deep_ep::internode_ll::dispatch<8, 7168>(void*)", "DeepEP"),
            ("nvshmemi_transfer_rma_nbi_kernel", "NVSHMEM"),
            ("void mscclpp::allreduce_kernel<float>(float*)", "MSCCL++"),
            ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**)", "PyTorch symmetric memory"),
        ] {
            assert_eq!(library_comm(name), Some(library), "{name}");
            assert_eq!(comm(name), KernelKind::Comm, "{name}");
        }
        for name in [
            "void dpsk::ep::cuda::get_dispatch_layout<256>(long*)",
            "void deep_ep::layout::get_dispatch_layout(int*)",
            "cutlass::device_kernel<foo>",
            "dispatch_kernel",
        ] {
            assert_eq!((library_comm(name), comm(name)), (None, KernelKind::Compute), "{name}");
        }
        // HTA's own rule is HTA's: it knows NCCL's names only.
        assert_eq!(
            kind_hta("void dpsk::ep::internode::dispatch<8>(int*)", &PatternSet::default()),
            KernelKind::Compute
        );
    }

    #[test]
    fn kernels_that_look_like_communication_are_named_by_their_family() {
        assert!(looks_like_comm("void my_ep::fused_dispatch<8>(int*)"));
        assert!(looks_like_comm("triton_AllReduce_kernel_0"));
        assert!(looks_like_comm("kernel_all_to_all_fwd"));
        assert!(!looks_like_comm("void at::native::vectorized_elementwise_kernel<4>(int)"));
        assert!(!looks_like_comm("sm90_xmma_gemm_bf16bf16_bf16f32"));
    }
}
