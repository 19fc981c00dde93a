//! Traces judged with the benchmark's statistics: each collective's exposed time, transfer and
//! wait per step in the current traces against the trace runs stored under the trace baseline's
//! name (`baseline update --traces … --name NAME`), with the regimes, δ, four states and Holm's
//! family of the benchmark comparison (`docs/gate.md`, "Trace evidence").
//!
//! - **Samples.** A trace capture of N steps is N samples of each quantity
//!   (`by_collective.<c>.steps`): exposed time on the worst rank, transfer, mean wait.
//! - **Regimes.** With ≥ 3 stored runs holding the collective, the unit of evidence is the run:
//!   the current median against a prediction interval of the runs' medians. With 1–2 runs, steps
//!   are compared directly (Mann–Whitney U, moving-block bootstrap interval).
//! - **Scales.** Transfer is the collective's own speed: judged as a ratio (log scale), like the
//!   benchmark's medians. Exposed time and wait may be ~0 and matter by what they add to the
//!   step: their change is a share of the baseline step time, like the benchmark's exposed
//!   communication. So "+10 %" on transfer means 10 % slower, on wait 10 % of a step.
//! - **A collective's state** is `regressed` when any of its quantities is, else `inconclusive`
//!   when any is, else `improved` when any is, else `unchanged`. A regression carries its
//!   [`CollectiveCause`] (which of transfer and wait grew beyond δ) and, when wait is involved and one rank
//!   arrived last in most instances, that rank.
//!
//! Collectives new in the current traces are judged against zero exposed time and wait (the
//! baseline did not have them); their transfer has nothing to be a ratio of. Sources without
//! compute kernels (NCCL Inspector logs) have no exposed time: only transfer and wait are judged.

mod cause;
mod estimate;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::estimate::Estimate;
use super::{CompareOptions, Judged, Method, OwnDelta, State, StateRules};
#[cfg(test)]
pub(crate) use cause::explain;
pub use cause::{cause_of, looks_regressed, mitigation_sentence, sentence, CollectiveCause};
use commgate_core::vocab::Mitigation;
use commgate_stats::rng::Rng;
use commgate_trace::attribute::{Attribution, Hotspot};
use estimate::{estimate, Samples, Setting, WithDelta};

/// The most collectives judged (the largest by time per step); the rest are listed in a note.
/// Real jobs have a few dozen; the bound keeps Holm's family and the report finite.
pub const MAX_JUDGED_COLLECTIVES: usize = 64;

/// The three per-step quantities judged for each collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// Exposed time per step on the worst rank.
    Exposed,
    /// Σ over matched instances of the shortest duration among the ranks, per step.
    Transfer,
    /// The ranks' mean time in the kernel waiting for the last one, per step.
    Wait,
}

impl Quantity {
    pub const ALL: [Quantity; 3] = [Quantity::Exposed, Quantity::Transfer, Quantity::Wait];

    pub fn as_str(self) -> &'static str {
        match self {
            Quantity::Exposed => "exposed",
            Quantity::Transfer => "transfer",
            Quantity::Wait => "wait",
        }
    }

    fn scale(self, step_ms: f64) -> Scale {
        match self {
            Quantity::Transfer => Scale::Log,
            Quantity::Exposed | Quantity::Wait => Scale::ShareOfStep(step_ms),
        }
    }

    fn series(self, h: &Hotspot) -> Option<&[f64]> {
        let s = h.steps.as_ref()?;
        Some(match self {
            Quantity::Exposed => &s.exposed_ms,
            Quantity::Transfer => &s.transfer_ms,
            Quantity::Wait => &s.wait_ms,
        })
    }
}

/// The scale a quantity's change is measured on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    /// `current / baseline`.
    Log,
    /// `1 + (current − baseline) / step` with the baseline step time in ms.
    ShareOfStep(f64),
}

/// One judged quantity of one collective: baseline and current in milliseconds per step, the
/// ratio `current / baseline` for transfer and `1 + Δ / step` for exposed and wait, and its own δ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceMetric {
    pub quantity: Quantity,
    #[serde(flatten)]
    pub judged: Judged<OwnDelta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One collective against the trace baseline (`trace_comparison.collectives[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveComparison {
    pub collective: String,
    pub state: State,
    /// Set for a regression: which of transfer and wait grew beyond δ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<CollectiveCause>,
    /// Set when the cause involves wait and one rank arrived last in most instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_rank: Option<u32>,
    /// The share of instances in which `late_rank` arrived last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_share: Option<f64>,
    /// The current traces' last-arriving rank and its share of the instances, whether or not it
    /// is named (`late_rank` is `decide::late_rank`'s choice). Not saved: a report names only
    /// what the rule chose.
    #[serde(skip)]
    pub last_arrival: Option<(u32, f64)>,
    /// Bus bandwidth, GB/s, of the newest stored run and of the current traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_baseline_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_current_gbps: Option<f64>,
    /// What to try for a regression, following its cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mitigation: Option<Mitigation>,
    pub metrics: Vec<TraceMetric>,
    /// Exposed time and wait are shares of the collective's own baseline time per step, not of
    /// the step (traces without step times, such as NCCL Inspector logs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shares_of_own_time: bool,
    /// `new` (not in the trace baseline), `gone` (not in the current traces), or why the
    /// collective could not be judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Why this collective's change cannot be judged against what the baseline holds (its calls
    /// no longer match across ranks; it is gone with time that mattered): the gate cannot accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unjudged: Option<String>,
}

/// The current traces against the stored trace runs (`trace_comparison` of the check report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceComparison {
    /// The trace baseline's name (`--trace-name`).
    pub name: String,
    /// Stored trace runs judged against.
    pub runs: usize,
    /// `history` with ≥ 3 stored runs, else `pooled`.
    pub method: Method,
    /// The baseline step time (ms) that exposed time and wait are shares of.
    pub step_ms: Option<f64>,
    pub collectives: Vec<CollectiveComparison>,
    /// What was not judged, in plain sentences (renderers escape them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why nothing could be judged (another job's trace baseline); `collectives` is then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unusable: Option<String>,
    /// The current traces name mixture-of-experts work (the mitigations' measurements follow).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub moe_markers: bool,
}

impl TraceComparison {
    pub fn regressed(&self) -> impl Iterator<Item = &CollectiveComparison> {
        self.collectives.iter().filter(|c| c.state == State::Regressed)
    }
}

/// A trace comparison up to Holm's correction (made by [`prepare`]).
pub struct PendingTraces {
    name: String,
    runs: usize,
    step_ms: Option<f64>,
    collectives: Vec<PendingCollective>,
    notes: Vec<String>,
    unusable: Option<String>,
    moe_markers: bool,
}

struct PendingCollective {
    collective: String,
    shares_of_own_time: bool,
    estimates: Vec<(Quantity, WithDelta)>,
    current: Option<Hotspot>,
    baseline: Option<Hotspot>,
    note: Option<String>,
    unjudged: Option<String>,
}

/// The median step time of a run: every rank's steps pooled.
fn step_time(a: &Attribution) -> Option<f64> {
    let mut steps: Vec<f64> = a.ranks.iter().flat_map(|r| r.step_ms.iter().copied()).collect();
    steps.sort_by(f64::total_cmp);
    (!steps.is_empty()).then(|| commgate_stats::quantile::median(&steps))
}

/// The steps a run has per-step samples of (0 without any).
fn sampled_steps(a: &Attribution) -> usize {
    let ranks = a.ranks.iter().map(|r| r.step_ms.len()).max().unwrap_or(0);
    let series = a.by_collective.values().filter_map(|h| h.steps.as_ref().map(|s| s.exposed_ms.len())).max();
    ranks.max(series.unwrap_or(0))
}

/// A collective's size for choosing which to judge: its time per step, either side.
fn weight(c: &str, stored: &[Attribution], current: &Attribution) -> f64 {
    let time = |a: &Attribution| a.by_collective.get(c).map_or(0.0, |h| h.total_comm_ms.max(h.exposed_comm_ms));
    stored.last().map_or(0.0, time).max(time(current))
}

/// Prepares the comparison of `current` with the stored trace runs (oldest first).
pub fn prepare(name: &str, stored: &[Attribution], current: &Attribution, opts: &CompareOptions) -> PendingTraces {
    let mut pending = PendingTraces {
        name: name.to_string(),
        runs: stored.len(),
        step_ms: None,
        collectives: Vec::new(),
        notes: Vec::new(),
        unusable: None,
        moe_markers: current.source.moe_markers,
    };
    let Some(newest) = stored.last() else {
        pending.unusable = Some(format!("the trace baseline \"{name}\" holds no trace runs"));
        return pending;
    };
    if newest.source.world_size != current.source.world_size {
        pending.unusable = Some(format!(
            "the trace baseline \"{name}\" was recorded with {} ranks and the traces have {}: record a trace \
             baseline of this job (`commgate baseline update --traces … --name NAME`)",
            newest.source.world_size, current.source.world_size
        ));
        return pending;
    }
    let steps: Vec<f64> = stored.iter().filter_map(step_time).collect();
    pending.step_ms = (!steps.is_empty()).then(|| steps.iter().sum::<f64>() / steps.len() as f64);
    let mut names: Vec<&String> = stored
        .iter()
        .flat_map(|a| a.by_collective.keys())
        .chain(current.by_collective.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if names.len() > MAX_JUDGED_COLLECTIVES {
        names.sort_by(|a, b| weight(b, stored, current).total_cmp(&weight(a, stored, current)).then(a.cmp(b)));
        pending.notes.push(format!(
            "{} collectives: the {MAX_JUDGED_COLLECTIVES} with the most time per step are judged, {} smaller ones are not",
            names.len(),
            names.len() - MAX_JUDGED_COLLECTIVES
        ));
        names.truncate(MAX_JUDGED_COLLECTIVES);
        names.sort();
    }
    let mut rng = Rng::new(opts.seed ^ 0x7A_ACE5);
    for c in names {
        pending.collectives.push(prepare_collective(c, stored, current, pending.step_ms, opts, &mut rng));
    }
    pending
}

/// The samples of one quantity, or why there are none. A run without the collective contributes
/// zeros for exposed time and wait (it did not have them) and nothing for transfer.
fn quantity_samples<'a>(
    q: Quantity,
    c: &str,
    stored: &'a [Attribution],
    current: &'a Attribution,
    zeros: &'a [f64],
) -> Result<Samples<'a>, String> {
    let of = |a: &'a Attribution| -> Option<&'a [f64]> {
        match a.by_collective.get(c) {
            Some(h) => q.series(h),
            None if q == Quantity::Transfer => None,
            None => Some(zeros.get(..sampled_steps(a)).unwrap_or(zeros)),
        }
    };
    let current = of(current).filter(|s| !s.is_empty());
    let runs: Vec<&[f64]> = stored.iter().filter_map(of).filter(|s| !s.is_empty()).collect();
    match current {
        Some(current) if !runs.is_empty() => Ok(Samples { runs, current }),
        _ => Err(format!("{} has no per-step samples on one side", q.as_str())),
    }
}

fn prepare_collective(
    c: &str,
    stored: &[Attribution],
    current: &Attribution,
    step_ms: Option<f64>,
    opts: &CompareOptions,
    rng: &mut Rng,
) -> PendingCollective {
    let baseline = stored.iter().rev().find_map(|a| a.by_collective.get(c)).cloned();
    let now = current.by_collective.get(c).cloned();
    let note = match (&baseline, &now) {
        (None, _) => Some("new: not in the trace baseline".to_string()),
        (_, None) => Some("gone: not in the current traces".to_string()),
        _ if stored.iter().chain([current]).all(|a| sampled_steps(a) == 0) => Some(
            "no per-step samples (a trace summary from an older commgate, or aggregated events): record the trace \
             baseline again with `commgate baseline update --traces`"
                .to_string(),
        ),
        _ => None,
    };
    let longest = stored.iter().chain([current]).map(sampled_steps).max().unwrap_or(0);
    let zeros = vec![0.0; longest];
    // Sources without compute kernels (NCCL Inspector logs) measure no exposed time.
    let exposed_measured = stored.iter().chain([current]).all(|a| a.source.compute_observed);
    let mut estimates = Vec::new();
    // Without step times (logs without step markers) a change is a share of the collective's
    // own time per step in the baseline instead.
    let own_time = || {
        let times: Vec<f64> = stored.iter().filter_map(|a| a.by_collective.get(c)).map(|h| h.total_comm_ms).collect();
        (!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64)
    };
    let share_of = step_ms.or_else(own_time).unwrap_or(f64::NAN);
    for q in Quantity::ALL.into_iter().filter(|&q| exposed_measured || q != Quantity::Exposed) {
        let set = Setting {
            scale: q.scale(share_of),
            min_effect: opts.min_effect,
            level: opts.level,
            resamples: opts.resamples,
        };
        match quantity_samples(q, c, stored, current, &zeros) {
            Ok(s) => estimates.push((q, estimate(q, &s, &set, rng))),
            // A new collective's transfer has nothing to be a ratio of: not judged, not shown.
            Err(_) if q == Quantity::Transfer && (baseline.is_none() || now.is_none()) => {}
            Err(why) => estimates.push((q, missing(why, opts))),
        }
    }
    let unjudged = unjudged(c, baseline.as_ref(), now.as_ref(), step_ms, opts.min_effect);
    PendingCollective {
        collective: c.to_string(),
        shares_of_own_time: step_ms.is_none(),
        estimates,
        current: now,
        baseline,
        note,
        unjudged,
    }
}

/// Why `c` cannot be compared with what the baseline holds, if it cannot: the baseline matched
/// its calls across ranks and these traces match none (a rank's process group or sequence
/// numbers differ: its transfer and wait would read as zero), or it is gone from these traces
/// while in the baseline it was exposed or waited for at least δ of the step (a collective
/// renamed or no longer captured). Either way what blocked could vanish unseen, so the gate asks
/// for evidence rather than accept; a collective that really went away needs the trace baseline
/// recorded again.
fn unjudged(
    c: &str,
    baseline: Option<&Hotspot>,
    now: Option<&Hotspot>,
    step_ms: Option<f64>,
    delta: f64,
) -> Option<String> {
    match (baseline, now) {
        (Some(b), Some(n)) if b.transfer_ms.is_some() && n.transfer_ms.is_none() && n.participants >= 2 => {
            Some(format!(
                "{c}: the trace baseline matched its calls across ranks but these traces match none of them \
                 ({} unmatched), so its transfer and wait cannot be judged: attach every rank's trace of one run",
                n.unmatched
            ))
        }
        (Some(b), None) => {
            let held = b.exposed_comm_ms_max_rank.max(0.0) + b.wait_ms.unwrap_or(0.0).max(0.0);
            let step = step_ms.filter(|s| s.is_finite() && *s > 0.0)?;
            (held >= delta * step).then(|| {
                format!(
                    "{c} is in the trace baseline ({held:.3} ms per step exposed or waiting, {:.1} % of the step) but \
                     not in these traces, so its change cannot be judged: if the change removed it, record the trace \
                     baseline again (`commgate baseline update --traces`)",
                    100.0 * held / step
                )
            })
        }
        _ => None,
    }
}

fn missing(why: String, opts: &CompareOptions) -> WithDelta {
    let estimate = Estimate::undefined(f64::NAN, f64::NAN, 0, 0, Method::Pooled, Some(why));
    WithDelta { estimate, delta: opts.min_effect }
}

impl PendingTraces {
    /// The raw one-sided p-values (regressed, improved) of every judged quantity, in order.
    pub fn raw(&self) -> (Vec<f64>, Vec<f64>) {
        self.collectives
            .iter()
            .flat_map(|c| c.estimates.iter().map(|(_, e)| (e.estimate.p_regressed, e.estimate.p_improved)))
            .unzip()
    }

    /// Holm over these quantities alone.
    pub fn finish_alone(self, opts: &CompareOptions, rules: StateRules) -> TraceComparison {
        let (reg, imp) = self.raw();
        self.finish(&commgate_stats::holm::holm_adjust(&reg), &commgate_stats::holm::holm_adjust(&imp), opts, rules)
    }

    /// States and causes from the adjusted p-values (one per judged quantity); the mitigations
    /// are `decide::mitigation::for_trace_causes`'s.
    pub fn finish(self, p_reg: &[f64], p_imp: &[f64], opts: &CompareOptions, rules: StateRules) -> TraceComparison {
        let method = if self.runs >= 3 { Method::History } else { Method::Pooled };
        // The adjusted p-values, one pair per quantity, in the collectives' order.
        let mut adjusted = p_reg.iter().zip(p_imp);
        let collectives = self
            .collectives
            .into_iter()
            .map(|c| {
                let metrics: Vec<TraceMetric> = c
                    .estimates
                    .into_iter()
                    .zip(adjusted.by_ref())
                    .map(|((q, e), (&r, &i))| metric(q, e, r, i, opts.alpha, rules))
                    .collect();
                let state = collective_state(&metrics);
                let mut out = CollectiveComparison {
                    collective: c.collective,
                    state,
                    cause: None,
                    late_rank: None,
                    late_share: None,
                    last_arrival: None,
                    busbw_baseline_gbps: c.baseline.as_ref().and_then(|h| h.busbw_gbps),
                    busbw_current_gbps: c.current.as_ref().and_then(|h| h.busbw_gbps),
                    mitigation: None,
                    metrics,
                    shares_of_own_time: c.shares_of_own_time,
                    note: c.note,
                    unjudged: c.unjudged,
                };
                if state == State::Regressed {
                    cause::explain(&mut out, c.current.as_ref());
                }
                out
            })
            .collect();
        TraceComparison {
            name: self.name,
            runs: self.runs,
            method,
            step_ms: self.step_ms,
            collectives,
            notes: self.notes,
            unusable: self.unusable,
            moe_markers: self.moe_markers,
        }
    }
}

fn metric(q: Quantity, judged: WithDelta, p_reg: f64, p_imp: f64, alpha: f64, rules: StateRules) -> TraceMetric {
    let WithDelta { estimate: e, delta } = judged;
    let state = (rules.four_states)(p_reg, p_imp, e.ci, delta, alpha);
    TraceMetric { quantity: q, judged: Judged::of(&e, p_reg, p_imp, state, OwnDelta { delta }), note: e.note }
}

/// Regressed if any quantity is; else inconclusive if any is; else improved if any is.
fn collective_state(metrics: &[TraceMetric]) -> State {
    let any = |s: State| metrics.iter().any(|m| m.judged.state == s);
    if any(State::Regressed) {
        State::Regressed
    } else if any(State::Inconclusive) || metrics.is_empty() {
        State::Inconclusive
    } else if any(State::Improved) {
        State::Improved
    } else {
        State::Unchanged
    }
}

#[cfg(test)]
mod tests;
