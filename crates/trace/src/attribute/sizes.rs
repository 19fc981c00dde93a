//! Per-call distributions by message size: for each power-of-two payload bucket of a
//! collective, the execution time and bus bandwidth of every call on every rank, summarised as
//! a median and a 95th percentile.
//!
//! Only sources whose every record is one call at its own size fill these (NCCL Inspector
//! logs); a profiler trace's per-collective figures stay as they are. Each rank's record of a
//! call is one sample: it is what NCCL Inspector itself reports (`coll_exec_time_us`,
//! `coll_busbw_gbs`), so the figures read like its own summaries.

use std::collections::BTreeMap;

use super::transfer::{bus_factor, group_size};
use super::CommKernel;
use super::SizeBucket;
use commgate_stats::quantile::type7_quantile;

/// The bucket of a payload: the largest power of two not above it (0 for 0).
pub(super) fn bucket_of(bytes: u64) -> u64 {
    if bytes == 0 {
        0
    } else {
        1u64 << (63 - bytes.leading_zeros())
    }
}

/// The size buckets of `collective` from its kernels (rank index, kernel), ascending by size;
/// kernels without a known payload are left out. At most 65 buckets, whatever the input.
pub(super) fn buckets(collective: &str, kernels: &[(usize, &CommKernel)]) -> Vec<SizeBucket> {
    let mut participants: Vec<usize> = kernels.iter().map(|&(i, _)| i).collect();
    participants.sort_unstable();
    participants.dedup();
    let group = group_size(kernels, participants.len());
    let factor = bus_factor(collective, group).filter(|_| group >= 2);
    // bucket → (execution times ms, bus bandwidths GB/s)
    let mut by_bucket: BTreeMap<u64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for &(_, c) in kernels {
        let Some(bytes) = c.payload else { continue };
        let ns = (c.end - c.ts).max(0) as f64;
        let entry = by_bucket.entry(bucket_of(bytes)).or_default();
        entry.0.push(ns / 1e6);
        if let Some(f) = factor.filter(|_| ns > 0.0) {
            entry.1.push(bytes as f64 * f / ns);
        }
    }
    by_bucket
        .into_iter()
        .map(|(bytes_min, (mut exec, mut bw))| {
            exec.sort_by(f64::total_cmp);
            bw.sort_by(f64::total_cmp);
            let q = |v: &[f64], p: f64| (!v.is_empty()).then(|| type7_quantile(v, p));
            SizeBucket {
                bytes_min,
                count: exec.len() as u64,
                exec_ms_median: type7_quantile(&exec, 0.5),
                exec_ms_p95: type7_quantile(&exec, 0.95),
                busbw_gbps_median: q(&bw, 0.5),
                busbw_gbps_p95: q(&bw, 0.95),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::MatchKey;

    fn call(seq: u64, us: i64, bytes: u64) -> CommKernel {
        CommKernel {
            ts: 0,
            end: us * 1000,
            collective: "all_reduce".into(),
            payload: Some(bytes),
            key: MatchKey::Seq { pg: "0".into(), seq },
            step: 0,
            group_size: None,
        }
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 1);
        assert_eq!(bucket_of(1023), 512);
        assert_eq!(bucket_of(1024), 1024);
        assert_eq!(bucket_of(u64::MAX), 1 << 63);
    }

    #[test]
    fn each_rank_call_is_a_sample_and_busbw_uses_the_bus_factor() {
        // Two ranks, all_reduce (factor 1.0 for n = 2), 1 MB in 1 ms = 1 GB/s; 2 ms → 0.5 GB/s.
        let a = [call(0, 1000, 1_000_000), call(1, 2000, 1_000_000)];
        let b = [call(0, 1000, 1_000_000), call(1, 1000, 1_000_000), call(2, 10, 100)];
        let kernels: Vec<(usize, &CommKernel)> = a.iter().map(|c| (0, c)).chain(b.iter().map(|c| (1, c))).collect();
        let got = buckets("all_reduce", &kernels);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].bytes_min, got[0].count), (64, 1));
        assert_eq!((got[1].bytes_min, got[1].count), (1 << 19, 4));
        assert_eq!(got[1].exec_ms_median, 1.0);
        assert!((got[1].exec_ms_p95 - 1.85).abs() < 1e-12, "{got:?}");
        assert_eq!(got[1].busbw_gbps_median, Some(1.0));
        // One rank: no bus factor, so no bandwidth.
        let one: Vec<(usize, &CommKernel)> = a.iter().map(|c| (0, c)).collect();
        assert_eq!(buckets("all_reduce", &one)[0].busbw_gbps_median, None);
    }
}
