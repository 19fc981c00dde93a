//! Bus bandwidth and matmul rate as *displayed transforms* of the `comm_only` and
//! `compute_only` median tests, not as tests of their own.
//!
//! Both are a constant divided by a median step time: nccl-tests' bus bandwidth is
//! `bytes per rank / t × 2(n − 1)/n` (the all-reduce factor the result file uses), and the
//! matmul rate is `2·dim³ / t`. So "busbw dropped 7 %" and "comm_only got 7.5 % slower" are one
//! fact: the same samples, the same interval inverted, the same p-value and state. Testing them
//! again would count one piece of evidence twice in Holm's family and cost power for nothing.
//! Higher is better for both, so a regression shows as a drop.

use serde::{Deserialize, Serialize};

use commgate_core::result::{Schedule, Workload};

/// Which throughput a phase median is also shown as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputKind {
    /// nccl-tests' bus bandwidth, GB/s, from the `comm_only` median.
    BusbwGbps,
    /// Matmul TFLOPS from the `compute_only` median.
    MatmulTflops,
}

impl ThroughputKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ThroughputKind::BusbwGbps => "busbw_gbps",
            ThroughputKind::MatmulTflops => "matmul_tflops",
        }
    }

    /// `busbw`, `TFLOPS`: the word the reasons use.
    pub fn label(self) -> &'static str {
        match self {
            ThroughputKind::BusbwGbps => "busbw",
            ThroughputKind::MatmulTflops => "matmul TFLOPS",
        }
    }

    /// The unit the tables print after the value.
    pub fn unit(self) -> &'static str {
        match self {
            ThroughputKind::BusbwGbps => "GB/s",
            ThroughputKind::MatmulTflops => "TFLOPS",
        }
    }
}

/// A phase median shown as a throughput: higher is better, so `ratio < 1` is a drop. Its
/// p-value and state are the median's own (one test, shown both ways).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub kind: ThroughputKind,
    pub baseline: f64,
    pub current: f64,
    /// current / baseline = 1 / the median's ratio.
    pub ratio: f64,
    /// The median's interval inverted: `[1/hi, 1/lo]`.
    pub ci: [f64; 2],
}

impl Throughput {
    /// A median's test shown as a rate: `work` over each side's median (ms), the ratio and its
    /// interval inverted (a slower median is a lower rate). The caller says which values it needs
    /// to be finite.
    pub(super) fn of_work(
        kind: ThroughputKind,
        work: f64,
        baseline_ms: f64,
        current_ms: f64,
        ratio: f64,
        ci: [f64; 2],
    ) -> Self {
        Throughput {
            kind,
            baseline: work / baseline_ms,
            current: work / current_ms,
            ratio: 1.0 / ratio,
            ci: [1.0 / ci[1], 1.0 / ci[0]],
        }
    }
}

/// The work one step of `row` does, such that throughput = work / median ms; `None` where no
/// throughput applies (the step rows; one rank's all-reduce, which moves nothing).
fn work(row: Schedule, w: &Workload) -> Option<(ThroughputKind, f64)> {
    if w.backend == commgate_core::result::sweep::BACKEND {
        // An nccl-tests point's bandwidth is nccl-tests' own (`compare::sweep`).
        return None;
    }
    match row {
        Schedule::CommOnly if w.world_size > 1 => {
            let n = f64::from(w.world_size);
            // bytes / (ms · 1e-3) / 1e9 · 2(n − 1)/n = bytes · 2(n − 1)/n · 1e-6 / ms
            Some((ThroughputKind::BusbwGbps, w.payload_bytes_per_rank as f64 * 2.0 * (n - 1.0) / n * 1e-6))
        }
        Schedule::ComputeOnly if w.compute_dim > 0 => {
            // 2·dim³ / (ms · 1e-3) / 1e12 = 2·dim³ · 1e-9 / ms
            Some((ThroughputKind::MatmulTflops, 2.0 * (w.compute_dim as f64).powi(3) * 1e-9))
        }
        _ => None,
    }
}

/// The throughput view of a median of `row`, when one applies and the figures are finite.
pub(super) fn of_median(
    row: Schedule,
    w: &Workload,
    baseline_ms: f64,
    current_ms: f64,
    ratio: f64,
    ci: [f64; 2],
) -> Option<Throughput> {
    let (kind, work) = work(row, w)?;
    let t = Throughput::of_work(kind, work, baseline_ms, current_ms, ratio, ci);
    let finite = [t.baseline, t.current, t.ratio, t.ci[0], t.ci[1]].iter().all(|v| v.is_finite() && *v > 0.0);
    finite.then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_testkit::results as fixtures;

    #[test]
    fn busbw_follows_nccl_tests_and_the_interval_inverts() {
        let w = fixtures::run(&[1.0]).workload;
        // 8 MiB per rank over 2 ranks in 1 ms: 8.388608 GB/s × 2·1/2.
        let t = of_median(Schedule::CommOnly, &w, 1.0, 1.25, 1.25, [1.2, 1.3]).expect("busbw");
        assert_eq!(t.kind, ThroughputKind::BusbwGbps);
        assert!((t.baseline - 8.388_608).abs() < 1e-9, "{t:?}");
        assert!((t.current - 8.388_608 / 1.25).abs() < 1e-9, "{t:?}");
        assert!((t.ratio - 0.8).abs() < 1e-12);
        assert!((t.ci[0] - 1.0 / 1.3).abs() < 1e-12 && (t.ci[1] - 1.0 / 1.2).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn matmul_rate_is_two_dim_cubed_per_step() {
        let w = fixtures::run(&[1.0]).workload;
        let t = of_median(Schedule::ComputeOnly, &w, 0.5, 0.5, 1.0, [0.99, 1.01]).expect("tflops");
        assert_eq!(t.kind, ThroughputKind::MatmulTflops);
        assert!((t.baseline - 2.0 * 2048f64.powi(3) / 0.5e-3 / 1e12).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn no_throughput_for_step_rows_one_rank_or_undefined_figures() {
        let mut w = fixtures::run(&[1.0]).workload;
        assert_eq!(of_median(Schedule::Overlap, &w, 1.0, 1.0, 1.0, [1.0, 1.0]), None);
        assert_eq!(of_median(Schedule::CommOnly, &w, 1.0, 1.0, f64::NAN, [f64::NAN, f64::NAN]), None);
        w.world_size = 1;
        assert_eq!(of_median(Schedule::CommOnly, &w, 1.0, 1.0, 1.0, [1.0, 1.0]), None);
    }
}
