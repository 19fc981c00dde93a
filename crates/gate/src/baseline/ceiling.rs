//! This runner's ceiling (`ceilings` in a store file): per hardware fingerprint and nccl-tests
//! point, the best bus bandwidth any run added to the store reached there (at its median time),
//! kept when the run itself is evicted, so that "78 % of this runner's measured peak" does not
//! forget the peak once `--keep` runs have passed.

use serde::{Deserialize, Serialize};

use commgate_core::result::sweep::PointKey;
use commgate_core::result::RunResult;

/// The most ceilings a store keeps: every point of a sweep on a few kinds of machine.
pub const MAX_CEILINGS: usize = 4 * commgate_core::result::sweep::MAX_POINTS;

/// The best bus bandwidth seen at one point on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// The hardware fingerprint of the run that reached it.
    pub fingerprint: String,
    /// Its kind of machine ([`commgate_core::result::Hardware::class`]): what a benchmark run on the same
    /// GPUs is matched by.
    #[serde(default)]
    pub machine: String,
    #[serde(flatten)]
    pub key: PointKey,
    pub busbw_gbps: f64,
    /// When that run started.
    pub created_at: String,
}

/// Raises `ceilings` to what `run` reached (an nccl-tests sweep; other runs change nothing).
/// Past [`MAX_CEILINGS`], the oldest are dropped.
pub fn record(ceilings: &mut Vec<Ceiling>, run: &RunResult) {
    let Some(sweep) = &run.sweep else { return };
    let fingerprint = &run.hardware.fingerprint;
    for p in &sweep.points {
        let Some(busbw) = p.median_busbw() else { continue };
        match ceilings.iter_mut().find(|c| c.fingerprint == *fingerprint && c.key == p.key) {
            Some(c) if c.busbw_gbps >= busbw => {}
            Some(c) => {
                c.busbw_gbps = busbw;
                c.created_at = run.created_at.clone();
            }
            None => ceilings.push(Ceiling {
                fingerprint: fingerprint.clone(),
                machine: run.hardware.class(),
                key: p.key.clone(),
                busbw_gbps: busbw,
                created_at: run.created_at.clone(),
            }),
        }
    }
    if ceilings.len() > MAX_CEILINGS {
        ceilings.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        let over = ceilings.len() - MAX_CEILINGS;
        ceilings.drain(..over);
    }
}

/// Checks the ceilings a store file holds (hand-edited or hostile): bounded, finite, positive.
pub fn validate(ceilings: &[Ceiling]) -> Result<(), String> {
    if ceilings.len() > MAX_CEILINGS {
        return Err(format!("`ceilings` holds {} entries, more than {MAX_CEILINGS}", ceilings.len()));
    }
    for (i, c) in ceilings.iter().enumerate() {
        if !(c.busbw_gbps.is_finite() && c.busbw_gbps > 0.0) {
            return Err(format!("`ceilings[{i}].busbw_gbps` is {}, not a bandwidth", c.busbw_gbps));
        }
    }
    Ok(())
}

/// A benchmark run's bus bandwidth held against the ceiling of an nccl-tests sweep of the same
/// collective and size on the same kind of machine (a store of the same profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchCeiling {
    /// The store the ceiling comes from (as the user knows it).
    pub store: String,
    pub size: u64,
    /// The best bus bandwidth a sweep reached at this size, and the best at any size.
    pub ceiling_gbps: f64,
    pub plateau_gbps: f64,
}

/// At most this many nccl-tests stores of a profile are read for a benchmark's ceiling.
const MAX_STORES: usize = 16;

/// The ceiling an nccl-tests store under `dir/<run's profile>/` keeps for `run`'s collective and
/// payload on its kind of machine, out of place; `None` without one. Stores that cannot be read
/// are passed over: this is a figure for the reader, the gate judges nothing by it.
pub fn for_bench(dir: &std::path::Path, run: &RunResult) -> Option<BenchCeiling> {
    if run.sweep.is_some() || run.environment_profile.is_empty() {
        return None;
    }
    let machine = run.hardware.class();
    let mut names: Vec<std::path::PathBuf> = std::fs::read_dir(dir.join(&run.environment_profile))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("nccl-tests-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    let mut best: Option<BenchCeiling> = None;
    for path in names.into_iter().take(MAX_STORES) {
        let Ok(file) = super::load_store(&path) else { continue };
        let curve: Vec<&Ceiling> = file
            .ceilings
            .iter()
            .filter(|c| {
                c.machine == machine && c.key.collective == run.workload.collective && c.key.placement == "out_of_place"
            })
            .collect();
        let at = curve
            .iter()
            .filter(|c| c.key.size == run.workload.payload_bytes_per_rank)
            .map(|c| c.busbw_gbps)
            .fold(0.0, f64::max);
        let plateau = curve.iter().map(|c| c.busbw_gbps).fold(0.0, f64::max);
        if at > 0.0 && best.as_ref().is_none_or(|b| at > b.ceiling_gbps) {
            best = Some(BenchCeiling {
                store: path.display().to_string(),
                size: run.workload.payload_bytes_per_rank,
                ceiling_gbps: at,
                plateau_gbps: plateau,
            });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::sweep::{SweepData, SweepPoint};

    fn sweep_run(ms: f64, fingerprint: &str, created_at: &str) -> RunResult {
        let mut r = commgate_testkit::results::run(&[1.0]);
        r.rows.clear();
        r.hardware.fingerprint = fingerprint.into();
        r.created_at = created_at.into();
        r.sweep = Some(SweepData {
            program: "all_reduce_perf".into(),
            per_iteration: true,
            processes: Vec::new(),
            points: vec![SweepPoint {
                key: PointKey {
                    collective: "all_reduce".into(),
                    dtype: "float".into(),
                    redop: "sum".into(),
                    size: 1024,
                    placement: "out_of_place".into(),
                },
                count: 256,
                time_us: 10.0,
                alg_bw: 1.0,
                bus_bw: 2.0,
                samples_ms: vec![ms],
                last: Vec::new(),
            }],
        });
        r
    }

    #[test]
    fn the_best_per_machine_is_kept_and_a_slower_run_changes_nothing() {
        let mut c = Vec::new();
        record(&mut c, &sweep_run(0.01, "a", "2026-12-01T00:00:00Z"));
        record(&mut c, &sweep_run(0.005, "a", "2026-12-02T00:00:00Z"));
        record(&mut c, &sweep_run(0.02, "a", "2026-12-03T00:00:00Z"));
        record(&mut c, &sweep_run(0.02, "b", "2026-12-03T00:00:00Z"));
        assert_eq!(c.len(), 2);
        // work = 2 GB/s × 10 µs: 4 GB/s at 0.005 ms, the best on machine a.
        assert_eq!((c[0].busbw_gbps, c[0].created_at.as_str()), (4.0, "2026-12-02T00:00:00Z"));
        assert_eq!(c[1].busbw_gbps, 1.0);
        assert_eq!(validate(&c), Ok(()));
        c[1].busbw_gbps = f64::NAN;
        assert!(validate(&c).unwrap_err().contains("`ceilings[1].busbw_gbps`"));
    }
}
