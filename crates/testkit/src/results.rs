//! Result files for tests, built in code.

use commgate_core::result::*;
use commgate_core::vocab::Decision;

/// A finished mock run whose rows hold `samples` (overlap), scaled for the other schedules.
pub fn run(samples: &[f64]) -> RunResult {
    let row = |schedule: Schedule, scale: f64| Row {
        schedule,
        collective: "all_reduce".to_string(),
        payload_bytes_per_rank: 8_388_608,
        samples_ms: samples.iter().map(|s| s * scale).collect(),
        median_max_rank_ms: 0.0,
        p95_max_rank_ms: 0.0,
        rank_mean_ms: vec![0.0, 0.0],
    };
    RunResult {
        schema_version: SCHEMA_VERSION,
        tool: Tool { name: "commgate".into(), version: "0.1.0".into() },
        run_label: "test".into(),
        environment_profile: "PAR-MOCK".into(),
        created_at: "2026-11-30T00:00:00Z".into(),
        workload: Workload {
            id: "par-overlap-allreduce-matmul".into(),
            collective: "all_reduce".into(),
            world_size: 2,
            dtype: "bfloat16".into(),
            payload_elements: 4_194_304,
            payload_bytes_per_rank: 8_388_608,
            compute_dim: 2048,
            warmup: 10,
            repeats: samples.len() as u32,
            backend: "mock".into(),
            timing: None,
        },
        hardware: Hardware {
            gpu_name: None,
            gpu_count: 0,
            gpu_memory_mib: None,
            topology: None,
            nodes: 1,
            host_cpu: Some("mock".into()),
            fingerprint: String::new(),
        }
        .with_fingerprint(),
        software: Software { commgate: "0.1.0".into(), ..Software::default() },
        provenance: Provenance::default(),
        evidence_level: EvidenceLevel::Mock,
        failure: None,
        rows: vec![
            row(Schedule::CommOnly, 0.5),
            row(Schedule::ComputeOnly, 0.7),
            row(Schedule::Serial, 1.2),
            row(Schedule::Overlap, 1.0),
        ],
        metrics: Metrics {
            exposed_comm_ms: Some(0.0),
            overlap_ratio: Some(0.0),
            busbw_gbps: Some(0.0),
            matmul_tflops: Some(0.0),
        },
        comparison: RunComparison {
            saved_ms: Some(0.0),
            overlap_gain_ratio: Some(0.0),
            overlap_efficiency: Some(0.0),
            overlap_penalty_ms: Some(0.0),
        },
        decision: RunDecision { verdict: Decision::Accept, reason: "test".into() },
        sweep: None,
    }
}
