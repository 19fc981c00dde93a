//! Why a collective regressed, from its transfer and wait: a rank arriving late makes every other
//! rank wait (the fix is in the work before the collective), a slower transfer means the bytes
//! move more slowly once everyone is there (the fix is in NCCL's settings and the bucket sizes),
//! and exposed time growing with neither means compute hides less of it. One function classifies
//! ([`explain`]); [`sentence`] words it for the verdict's reasons.

use serde::{Deserialize, Serialize};

use super::{CollectiveComparison, Quantity, TraceMetric};
use commgate_core::units::{change, interval, signed_pct};
use commgate_trace::attribute::Hotspot;

/// What a regressed collective's time went to (`trace_comparison.collectives[].cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveCause {
    /// Wait grew beyond δ, transfer did not: a rank arrives later.
    Wait,
    /// Transfer grew beyond δ, wait did not: the data moves more slowly.
    Transfer,
    /// Both grew beyond δ.
    Mixed,
    /// Only the exposed time grew: the collective is as long as before, compute hides less of it.
    Overlap,
}

impl CollectiveCause {
    pub fn as_str(self) -> &'static str {
        match self {
            CollectiveCause::Wait => "wait",
            CollectiveCause::Transfer => "transfer",
            CollectiveCause::Mixed => "mixed",
            CollectiveCause::Overlap => "overlap",
        }
    }
}

fn quantity(c: &CollectiveComparison, q: Quantity) -> Option<&TraceMetric> {
    c.metrics.iter().find(|m| m.quantity == q)
}

/// Whether a quantity grew beyond its δ (its point estimate).
fn grew(m: Option<&TraceMetric>) -> bool {
    m.is_some_and(|m| m.judged.ratio.is_finite() && m.judged.ratio > 1.0 + m.judged.against.delta)
}

/// The cause of a regressed collective, from which of transfer and wait grew beyond δ.
pub fn cause_of(c: &CollectiveComparison) -> CollectiveCause {
    match (grew(quantity(c, Quantity::Transfer)), grew(quantity(c, Quantity::Wait))) {
        (true, true) => CollectiveCause::Mixed,
        (false, true) => CollectiveCause::Wait,
        (true, false) => CollectiveCause::Transfer,
        (false, false) => CollectiveCause::Overlap,
    }
}

/// Sets a regressed collective's cause, and keeps the current traces' last-arriving rank and its
/// share of the instances (clock-free: the shortest kernel of each instance) for the decision
/// whether to name it (`decide::late_rank`); its mitigation is `decide::mitigation::for_cause`'s.
pub(crate) fn explain(c: &mut CollectiveComparison, current: Option<&Hotspot>) {
    c.cause = Some(cause_of(c));
    c.last_arrival = current.and_then(|h| h.last_arrival_rank.zip(h.last_arrival_share));
}

/// "wait +5.400 ms per step (+45.0 % of the step, 95 % CI +40.1…+50.2 %)"; without step times,
/// "… of its baseline time …".
fn share_clause(c: &CollectiveComparison, m: &TraceMetric) -> String {
    let delta_ms = m.judged.current - m.judged.baseline;
    format!(
        "{} {}{:.3} ms per step ({} of {}, 95 % CI {})",
        m.quantity.as_str(),
        if delta_ms < 0.0 { "−" } else { "+" },
        delta_ms.abs(),
        change(m.judged.ratio),
        if c.shares_of_own_time { "its baseline time" } else { "the step" },
        interval(m.judged.ci)
    )
}

/// "transfer +10.2 % (95 % CI +8.0…+12.5 %)".
fn ratio_clause(m: &TraceMetric) -> String {
    format!("{} {} (95 % CI {})", m.quantity.as_str(), change(m.judged.ratio), interval(m.judged.ci))
}

/// The reason a regressed collective gives, naming its cause; `bench_busbw` is the benchmark's
/// bus bandwidth (GB/s) for the same collective, when the gate measured one.
pub fn sentence(c: &CollectiveComparison, bench_busbw: Option<f64>) -> String {
    let name = &c.collective;
    let transfer = quantity(c, Quantity::Transfer);
    let wait = quantity(c, Quantity::Wait);
    let late = match (c.late_rank, c.late_share) {
        (Some(r), Some(s)) => format!(
            "; rank {r} arrives last in {:.0} % of {name} calls: its work before the collective grew",
            100.0 * s
        ),
        _ => String::new(),
    };
    let busbw = match (c.busbw_baseline_gbps, c.busbw_current_gbps) {
        (Some(b), Some(n)) => {
            let below = bench_busbw
                .filter(|&x| n < x)
                .map(|x| format!(", below the benchmark's {x:.1} GB/s"))
                .unwrap_or_default();
            format!(", bus bandwidth {b:.1} → {n:.1} GB/s ({}){below}", signed_pct(n / b - 1.0))
        }
        _ => String::new(),
    };
    match c.cause {
        Some(CollectiveCause::Wait) => {
            format!(
                "{name} waits longer for the last rank: {}{late}",
                wait.map(|m| share_clause(c, m)).unwrap_or_default()
            )
        }
        Some(CollectiveCause::Transfer) => {
            format!("{name} moves its data more slowly: {}{busbw}", transfer.map(ratio_clause).unwrap_or_default())
        }
        Some(CollectiveCause::Mixed) => format!(
            "{name} moves its data more slowly and waits longer: {}{busbw}, {}{late}",
            transfer.map(ratio_clause).unwrap_or_default(),
            wait.map(|m| share_clause(c, m)).unwrap_or_default()
        ),
        Some(CollectiveCause::Overlap) | None => format!(
            "{name} is hidden less by compute: {} with its transfer and wait unchanged",
            quantity(c, Quantity::Exposed).map(|m| share_clause(c, m)).unwrap_or_default()
        ),
    }
}

/// "try rebalance_ranks_or_experts on all_to_all; measure next: rank 5's time before …".
pub fn mitigation_sentence(c: &CollectiveComparison) -> Option<String> {
    let m = c.mitigation.as_ref()?;
    Some(format!("try {} on {}; measure next: {}", m.strategy.as_str(), c.collective, m.next_measurements.join(", ")))
}

/// For an inconclusive collective with a quantity that grew beyond its δ: the reason the gate
/// asks for more evidence rather than accept ("all_reduce: transfer +80.0 % looks regressed, but
/// 2 current and 2 stored steps are not enough to confirm it: …"). A wide interval around no
/// change asks for nothing.
pub fn looks_regressed(c: &CollectiveComparison) -> Option<String> {
    if c.state != crate::compare::State::Inconclusive {
        return None;
    }
    let m = c.metrics.iter().filter(|m| grew(Some(m))).max_by(|a, b| {
        (a.judged.ratio - a.judged.against.delta).total_cmp(&(b.judged.ratio - b.judged.against.delta))
    })?;
    Some(format!(
        "{}: {} {} looks regressed, but {} current and {} stored steps are not enough to confirm it: capture more \
         steps, or record more trace runs with `commgate baseline update --traces`",
        c.collective,
        m.quantity.as_str(),
        change(m.judged.ratio),
        m.judged.n_current,
        m.judged.n_baseline
    ))
}
