//! Writes sample gantt charts of a replayed step, for the render check (`scripts/render-check.sh`)
//! and for looking at by hand:
//!
//! `cargo run --example gantt_samples -- OUT`
//!
//! OUT/gantt-2.md, gantt-8.md and gantt-64.md draw 2, 8 and 64 ranks of 600 kernels each;
//! OUT/gantt-dense.md 8 ranks of 6,000 (and more pauses: past the bars a rank may draw). Each is a PR comment's verdict heading and the chart.
//! The steps are synthetic and deterministic: per rank a compute stream (a forward pass, an
//! exposed all_gather in it, a backward pass, and now and then a pause where the host falls
//! behind) and a communication stream (reduce_scatters under
//! the backward pass, a closing all_reduce that waits for the late rank, whose kernels run 12 %
//! longer). The late rank's compute and every rank's all_reduce are the critical path.

use std::path::PathBuf;

use commgate_report::gantt::gantt;
use commgate_trace::attribute::picture::{picture, Bar, BarKind, RankBars};
use commgate_trace::model::Ns;

const US: Ns = 1_000;

/// The samples: file name, ranks, kernels per rank, pauses per rank (expected), the late rank.
const SAMPLES: [(&str, u32, u32, f64, u32); 4] = [
    ("gantt-2", 2, 600, 6.0, 1),
    ("gantt-8", 8, 600, 6.0, 5),
    ("gantt-64", 64, 600, 6.0, 37),
    ("gantt-dense", 8, 6_000, 30.0, 3),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::args().nth(1).ok_or("usage: gantt_samples OUT")?);
    std::fs::create_dir_all(&out)?;
    for (name, ranks, kernels, pauses, late) in SAMPLES {
        let step = picture(3, &step(ranks, kernels, pauses, late), Some(late));
        let chart = gantt(&step).ok_or("a sample step draws a chart")?;
        let path = out.join(format!("{name}.md"));
        std::fs::write(&path, format!("<!-- commgate-report -->\n### 🟢 commgate: `accept`\n\n{chart}"))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// A deterministic stream of numbers in [0, 1): a 64-bit LCG (Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A duration between `lo` and `hi` µs, in ns.
    fn between(&mut self, lo: f64, hi: f64) -> Ns {
        ((lo + (hi - lo) * self.next()) * US as f64) as Ns
    }
}

/// One step of `ranks` ranks with `kernels` compute kernels each and about `pauses` pauses where
/// the host falls behind; `late` computes 12 % longer.
fn step(ranks: u32, kernels: u32, pauses: f64, late: u32) -> Vec<RankBars> {
    // A denser step has shorter kernels, so every sample's step lasts about as long.
    let scale = 600.0 / f64::from(kernels);
    let mut all: Vec<(RankBars, Ns)> = (0..ranks)
        .map(|rank| {
            let mut rng = Lcg(u64::from(rank) * 7_919 + 17);
            let slow = if rank == late { 1.12 } else { 1.0 };
            let mut bars = Vec::new();
            let mut t: Ns = rng.between(0.0, 20.0);
            let forward = kernels / 3;
            let gather_at = forward / 2;
            let scatters = [forward + (kernels - forward) / 5, forward + (kernels - forward) * 3 / 5];
            for k in 0..kernels {
                if k == gather_at {
                    // The all_gather the forward pass waits for: exposed.
                    let d = rng.between(900.0, 1_100.0);
                    bars.push(comm(t, t + d, false));
                    t += d + rng.between(2.0, 4.0);
                }
                if scatters.contains(&k) {
                    // A reduce_scatter under the backward pass: hidden.
                    bars.push(comm(t, t + rng.between(2_500.0, 3_500.0), false));
                }
                let (lo, hi) = if k < forward { (20.0, 60.0) } else { (40.0, 120.0) };
                let d = (rng.between(lo, hi) as f64 * scale * slow) as Ns;
                bars.push(Bar { start: t, end: t + d, kind: BarKind::Compute, critical: rank == late });
                // Launch gaps, and now and then the host falls behind.
                t += d + if rng.next() < pauses / f64::from(kernels) {
                    rng.between(150.0, 400.0)
                } else {
                    rng.between(2.0, 6.0)
                };
            }
            (RankBars { rank, bars }, t)
        })
        .collect();
    // The closing all_reduce: each rank arrives when its compute ends, all end together after
    // the last arrival and the transfer.
    let last_arrival = all.iter().map(|(_, t)| *t).max().unwrap_or(0);
    let end = last_arrival + 1_500 * US;
    for (rank, arrival) in &mut all {
        rank.bars.push(comm(*arrival, end, true));
    }
    all.into_iter().map(|(r, _)| r).collect()
}

fn comm(start: Ns, end: Ns, critical: bool) -> Bar {
    Bar { start, end, kind: BarKind::Comm, critical }
}
