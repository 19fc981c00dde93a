//! The mock backend: deterministic timings from a seed, so tests can assert exact output
//! (after hyperfine's `MockExecutor`). A simple machine model — communication
//! at a fixed bus bandwidth, compute at a fixed rate, an overlap that hides 85 % of the shorter
//! phase — with seeded log-normal noise per rank and repeat.
//!
//! Test hook: `COMMGATE_MOCK_FAULT=die:R` makes rank R fail at its first timed repeat, and
//! `COMMGATE_MOCK_FAULT=hang` makes every run block forever (to exercise `--timeout`).

use super::{Backend, BackendInfo, BenchError, HardwareInfo, Plan};
use commgate_core::result::{EvidenceLevel, Schedule};
use commgate_stats::rng::Rng;

/// Bus bandwidth (GB/s) and compute rate (TFLOPS) of the modelled machine.
const BUS_GBPS: f64 = 150.0;
const TFLOPS: f64 = 400.0;
/// Fixed launch latency per collective and per kernel, ms.
const LATENCY_MS: f64 = 0.02;
/// Share of the shorter phase that overlap hides.
const HIDDEN: f64 = 0.85;

#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    Die { rank: u32 },
    Hang,
}

/// The test hook's environment variable, read where the mock backend is opened.
pub const FAULT_VARIABLE: &str = commgate_core::environment::MOCK_FAULT.name;

/// Reads the test hook from the variable's value.
pub fn parse_fault(value: Option<&str>) -> Option<Fault> {
    let v = value?.trim();
    if v == "hang" {
        return Some(Fault::Hang);
    }
    let rank = v.strip_prefix("die:")?.parse().ok()?;
    Some(Fault::Die { rank })
}

pub struct MockBackend {
    plan: Plan,
    info: BackendInfo,
    rngs: Vec<Rng>,
    fault: Option<Fault>,
}

impl MockBackend {
    /// A mock driving `ranks` (all ranks in one process, or this process's rank).
    pub fn new(plan: &Plan, ranks: Vec<u32>, fault: Option<Fault>) -> Self {
        let rngs = ranks.iter().map(|&r| Rng::new(plan.seed ^ (u64::from(r) + 1).wrapping_mul(0x9E37_79B9))).collect();
        let hardware = HardwareInfo {
            gpu_name: Some("Mock GPU".to_string()),
            gpu_count: plan.world_size,
            gpu_memory_mib: Some(81_920),
            topology: Some("mock".to_string()),
            driver: Some("mock".to_string()),
            cuda: None,
            nccl: None,
            host_cpu: Some("mock".to_string()),
            timing: None,
        };
        let info = BackendInfo { name: "mock", evidence_level: EvidenceLevel::Mock, hardware, local_ranks: ranks };
        MockBackend { plan: plan.clone(), info, rngs, fault }
    }

    /// The modelled time of one phase on an idle machine.
    fn base_ms(&self, schedule: Schedule) -> f64 {
        let n = f64::from(self.plan.world_size.max(1));
        let bytes = self.plan.payload_bytes_per_rank() as f64;
        let comm = LATENCY_MS + bytes * 2.0 * (n - 1.0) / n / (BUS_GBPS * 1e9) * 1e3;
        let compute = LATENCY_MS + self.plan.matmul_flops() / (TFLOPS * 1e12) * 1e3;
        match schedule {
            Schedule::CommOnly => comm,
            Schedule::ComputeOnly => compute,
            Schedule::Serial => comm + compute,
            Schedule::Overlap => comm.max(compute) + (1.0 - HIDDEN) * comm.min(compute),
        }
    }
}

impl Backend for MockBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        match self.fault {
            Some(Fault::Hang) => loop {
                std::thread::park();
            },
            Some(Fault::Die { rank }) if self.info.local_ranks.contains(&rank) => {
                return Err(BenchError::failed("rank_died", "the mock rank exited (COMMGATE_MOCK_FAULT)", Some(rank)));
            }
            _ => {}
        }
        let base = self.base_ms(schedule);
        Ok(self
            .info
            .local_ranks
            .iter()
            .zip(self.rngs.iter_mut())
            .map(|(&r, rng)| base * (1.0 + 0.002 * f64::from(r)) * (0.01 * rng.normal()).exp())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;

    fn plan() -> Plan {
        Plan {
            world_size: 2,
            dtype: Dtype::Bfloat16,
            payload_elements: 4 << 20,
            compute_dim: 2048,
            warmup: 1,
            repeats: 5,
            seed: 1,
        }
    }

    #[test]
    fn deterministic_and_ordered_like_the_mechanism() {
        let mut a = MockBackend::new(&plan(), vec![0, 1], None);
        let mut b = MockBackend::new(&plan(), vec![0, 1], None);
        for s in Schedule::ALL {
            assert_eq!(a.run(s), b.run(s));
        }
        let m = MockBackend::new(&plan(), vec![0], None);
        assert!(m.base_ms(Schedule::Overlap) < m.base_ms(Schedule::Serial));
        assert!(m.base_ms(Schedule::Overlap) >= m.base_ms(Schedule::CommOnly).max(m.base_ms(Schedule::ComputeOnly)));
    }

    #[test]
    fn faults() {
        assert_eq!(parse_fault(Some("die:1")), Some(Fault::Die { rank: 1 }));
        assert_eq!(parse_fault(Some("hang")), Some(Fault::Hang));
        assert_eq!(parse_fault(Some("bogus")), None);
        let mut m = MockBackend::new(&plan(), vec![0, 1], Some(Fault::Die { rank: 1 }));
        assert!(matches!(m.run(Schedule::Overlap), Err(BenchError::Failed { rank: Some(1), .. })));
    }
}
