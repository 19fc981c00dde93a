//! Pure attribution: parsed ranks (or seed events) in, per-collective hotspots, per-rank overlap,
//! the priority, the mitigation and the follow-up out. No I/O.
//!
//! Every definition here is `shared/docs/attribution.md`'s: the step window, the equal-share
//! sweep, cross-rank matching and the clock-free imbalance ratio, and HTA's parity rules under
//! [`Compat::Hta`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hotspots::{self, CommEvent, Followup, Hotspot, Mitigation, Thresholds};

pub const SCHEMA_VERSION: u32 = 1;

/// Which rules decide the window, the rounding and the kernel classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compat {
    /// commgate's own definitions: exact nanoseconds, the `ProfilerStep` window.
    #[default]
    Default,
    /// Holistic Trace Analysis's window, rounding and name rules.
    Hta,
}

/// What the caller chose; resolved from flags and `commgate.toml` by `config`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttributeOptions {
    pub compat: Compat,
    /// Overrides the number of steps the window holds (per-step figures divide by it).
    pub steps: Option<u64>,
    /// Extra substrings that mark a kernel as communication (custom collectives).
    pub comm_patterns: Vec<String>,
    pub thresholds: Thresholds,
}

/// Where the numbers came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// `kineto` or `events` (the seed's aggregated shape).
    pub format: String,
    pub files: Vec<String>,
    pub ranks: Vec<u32>,
    pub world_size: u32,
    /// Steps in the window (the smallest over ranks when they differ).
    pub steps: u64,
    /// `steps` (ProfilerStep window), `trace` (whole trace), `hta` (HTA's window) or `events`.
    pub window: String,
    pub compat: Compat,
}

/// One rank's overlap, per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: u32,
    pub file: String,
    pub steps: u64,
    pub comm_ms: f64,
    pub compute_ms: f64,
    pub overlapped_ms: f64,
    pub exposed_ms: f64,
    /// `100 · overlapped / comm`; 0 when there is no communication.
    pub overlap_pct: f64,
    pub comm_kernels: u64,
}

/// The result of `commgate attribute`, the JSON of formats.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub schema_version: u32,
    pub source: Source,
    pub by_collective: BTreeMap<String, Hotspot>,
    pub priority: Option<Hotspot>,
    pub num_events: u64,
    pub ranks: Vec<RankSummary>,
    pub mitigation: Mitigation,
    pub followup: Followup,
}

/// Builds the decision part (priority, mitigation, follow-up) from hotspots: the one place the
/// seed's rules are applied, for both input formats.
pub fn conclude(
    source: Source,
    by_collective: BTreeMap<String, Hotspot>,
    ranks: Vec<RankSummary>,
    num_events: u64,
    t: &Thresholds,
) -> Attribution {
    let priority = hotspots::priority(&by_collective).cloned();
    let mitigation = hotspots::choose_comm_mitigation(priority.as_ref(), t);
    let followup = hotspots::recommend_comm_followup(&by_collective, t);
    Attribution {
        schema_version: SCHEMA_VERSION,
        source,
        by_collective,
        priority,
        num_events,
        ranks,
        mitigation,
        followup,
    }
}

/// Attribution of seed-format events (already aggregated by whoever wrote them).
pub fn attribute_events(files: Vec<String>, events: &[CommEvent], t: &Thresholds) -> Attribution {
    let by_collective = hotspots::summarize_comm_hotspots(events);
    let source = Source {
        format: "events".to_string(),
        files,
        ranks: Vec::new(),
        world_size: 0,
        steps: 1,
        window: "events".to_string(),
        compat: Compat::Default,
    };
    conclude(source, by_collective, Vec::new(), events.len() as u64, t)
}
