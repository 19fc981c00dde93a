//! Per collective over ranks: the means per step, the worst rank, and (through [`super::transfer`])
//! what the instances matched across ranks say; and each rank's summary.

use std::collections::{BTreeMap, HashMap};

use super::series::MAX_STEP_SAMPLES;
use super::{ms, sizes, transfer};
use super::{CommKernel, RankAnalysis, RankSummary};
use super::{Hotspot, StepSeries};
use crate::model::Ns;
use crate::narrow::{float_to_u64, saturating_usize};

pub(super) fn rank_summary(r: &RankAnalysis) -> RankSummary {
    let per_step = |ns: Ns| ms(ns as f64) / r.steps as f64;
    let divisor = r.sample_divisor();
    RankSummary {
        rank: r.rank,
        file: r.file.clone(),
        steps: r.steps,
        comm_ms: per_step(r.comm_ns),
        compute_ms: per_step(r.compute_ns),
        overlapped_ms: per_step(r.overlapped_ns),
        exposed_ms: per_step(r.exposed_ns()),
        overlap_pct: r.overlap_pct(),
        comm_kernels: r.comm_kernels.len() as u64,
        step_ms: r.step_ns.iter().map(|&ns| ms(ns as f64) / divisor).collect(),
    }
}

/// Per collective over ranks: means per step, the worst rank, imbalance and transfer from
/// matched instances, and the per-step samples.
pub(super) fn combine_ranks(ranks: &[RankAnalysis]) -> BTreeMap<String, Hotspot> {
    let mut names: Vec<&String> = ranks.iter().flat_map(|r| r.by_collective.keys()).collect();
    names.sort_unstable();
    names.dedup();
    let n = ranks.len().max(1) as f64;
    // Each collective's kernels, per rank, gathered in one pass: scanning every kernel for each
    // name made many distinct collectives cost quadratic time.
    let mut kernels_of: HashMap<&str, Vec<(usize, &CommKernel)>> = HashMap::with_capacity(names.len());
    for (i, r) in ranks.iter().enumerate() {
        for c in &r.comm_kernels {
            kernels_of.entry(&*c.collective).or_default().push((i, c));
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mut h = Hotspot::empty(name);
            let mut payload_sum = 0.0;
            let mut samples = 0u64;
            for r in ranks {
                let Some(c) = r.by_collective.get(name) else { continue };
                let steps = r.steps as f64;
                h.count += c.kernels;
                h.sync_count += c.kernels as f64 / steps / n;
                h.total_comm_ms += ms(c.total_ns) / steps / n;
                let exposed = ms(c.exposed_ns) / steps;
                h.exposed_comm_ms += exposed / n;
                h.participants += 1;
                if h.worst_exposed_rank.is_none() || exposed > h.exposed_comm_ms_max_rank {
                    h.exposed_comm_ms_max_rank = exposed;
                    h.worst_exposed_rank = Some(r.rank);
                }
                if c.total_ns > 0.0 {
                    h.overlap_ratio = h.overlap_ratio.min(1.0 - c.exposed_ns / c.total_ns);
                }
                if c.payload_known {
                    h.payload_known = true;
                    payload_sum += c.payload_bytes as f64 / steps / n;
                }
                samples = samples.max(r.samples);
            }
            if h.payload_known {
                h.payload_bytes = Some(float_to_u64(payload_sum.round()));
            }
            let len = saturating_usize(samples).min(MAX_STEP_SAMPLES);
            let mut series =
                StepSeries { exposed_ms: worst_exposed_by_step(ranks, name, len), ..StepSeries::default() };
            let kernels = kernels_of.get(name.as_str()).map(Vec::as_slice).unwrap_or_default();
            transfer::cross_rank(ranks, kernels, &mut h, &mut series);
            h.steps = Some(series);
            if ranks.iter().any(|r| r.no_compute) {
                h.sizes = sizes::buckets(name, kernels);
            }
            (name.clone(), h)
        })
        .collect()
}

/// Per step (up to `len`), the largest exposed time of the collective over the ranks, each
/// rank's sample read per step (see [`RankAnalysis::sample_divisor`]).
fn worst_exposed_by_step(ranks: &[RankAnalysis], name: &str, len: usize) -> Vec<f64> {
    let mut worst = vec![0.0f64; len];
    for r in ranks {
        let Some(c) = r.by_collective.get(name) else { continue };
        let divisor = r.sample_divisor();
        for &(step, ns) in &c.exposed_by_step {
            if let Some(w) = worst.get_mut(step as usize) {
                *w = w.max(ms(ns) / divisor);
            }
        }
    }
    worst
}
