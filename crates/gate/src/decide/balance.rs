//! The balance rule of `check --fail-on-savings-ms`: a pull request that makes the late rank
//! cost more is a regression of balance even when the step time is within noise. What the late
//! rank costs is what the what-if says putting it on time would save per step; the rule holds
//! the current traces' figure against the stored trace runs' (their median), or against zero
//! when no stored run carries one, and blocks when it grew by more than the limit.

use serde::{Deserialize, Serialize};

use commgate_trace::attribute::whatif::{ScenarioKind, WhatIf};
use commgate_trace::attribute::Attribution;

/// What the rule measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Balance {
    /// The late rank of the current traces; `None` when no rank stood out (it then costs 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// What putting it on time would save per step now, ms.
    pub saving_ms: f64,
    /// The same in the stored trace runs (their median), `None` when none carries a what-if.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_saving_ms: Option<f64>,
    /// Stored trace runs that carry a what-if.
    pub baseline_runs: usize,
    /// `saving − baseline` (the saving itself without a baseline), and the limit it is held to.
    pub growth_ms: f64,
    pub limit_ms: f64,
    pub blocking: bool,
}

impl Balance {
    /// The reason a report gives, blocking or not.
    pub fn sentence(&self) -> String {
        let who = self.rank.map_or_else(|| "no rank stands out as late".to_string(), |r| format!("rank {r} on time"));
        let against = match self.baseline_saving_ms {
            Some(b) => format!("{:+.2} ms on the stored trace runs' {b:.2} ms", self.growth_ms),
            None => "no stored trace run has a what-if, so it is held against 0 ms".to_string(),
        };
        if self.blocking {
            format!(
                "balance regressed: {who} would save {:.2} ms per step ({against}), more than the \
                 --fail-on-savings-ms limit of {:.2} ms; rebalance the late rank's work before its collectives",
                self.saving_ms, self.limit_ms
            )
        } else {
            format!(
                "balance within the limit: {who} would save {:.2} ms per step ({against}; limit {:.2} ms)",
                self.saving_ms, self.limit_ms
            )
        }
    }
}

/// The late rank's saving in a what-if: 0 when no rank stood out.
fn late_saving(w: &WhatIf) -> (Option<u32>, f64) {
    let s = w.scenarios.iter().find(|s| s.kind == ScenarioKind::LateRankOnTime);
    (s.and_then(|s| s.rank), s.map_or(0.0, |s| s.saving_ms.max(0.0)))
}

/// THE balance rule. `Err` says why it cannot judge (no traces, no what-if): the gate then asks
/// for that evidence.
pub fn judge(limit_ms: f64, current: Option<&Attribution>, stored: &[Attribution]) -> Result<Balance, String> {
    let current =
        current.ok_or_else(|| "--fail-on-savings-ms gates on the traces' what-if: attach --traces".to_string())?;
    let w = current.what_if.as_ref().ok_or_else(|| {
        "the traces give no what-if (no compute kernels, or partial files written without timelines), so \
         --fail-on-savings-ms cannot judge the late rank's cost"
            .to_string()
    })?;
    let (rank, saving_ms) = late_saving(w);
    let mut before: Vec<f64> = stored.iter().filter_map(|a| a.what_if.as_ref()).map(|w| late_saving(w).1).collect();
    before.sort_by(f64::total_cmp);
    let baseline_saving_ms = (!before.is_empty()).then(|| commgate_stats::quantile::median(&before));
    let growth_ms = saving_ms - baseline_saving_ms.unwrap_or(0.0);
    Ok(Balance {
        rank,
        saving_ms,
        baseline_saving_ms,
        baseline_runs: before.len(),
        growth_ms,
        limit_ms,
        blocking: growth_ms > limit_ms,
    })
}
