//! What an attribution's figures do not cover, kept as typed data next to them so that every
//! rendering (and the gate's verdict) can say so: ranks of the job that have no trace, and a
//! `steps` setting that the traces' own ProfilerStep markers overrode.

use serde::{Deserialize, Serialize};

/// Ranks `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRange {
    pub first: u32,
    pub last: u32,
}

impl RankRange {
    /// How many ranks the range holds.
    pub fn count(&self) -> u64 {
        u64::from(self.last) - u64::from(self.first) + 1
    }
}

impl std::fmt::Display for RankRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// Which of the job's ranks the traces cover. Missing ranks are kept as ranges, so a trace that
/// claims a world of four billion ranks costs a few bytes, not gigabytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankCoverage {
    /// How many ranks have a trace.
    pub ranks_present: u32,
    /// The job's size: the largest `distributedInfo.world_size` of the traces, at least one more
    /// than the highest rank seen.
    pub world_size: u32,
    /// The ranks in `0..world_size` without a trace, as ascending ranges.
    pub missing_ranks: Vec<RankRange>,
}

/// At most this many ranges are written out in a summary; the rest are counted.
const SHOWN_RANGES: usize = 8;

impl RankCoverage {
    /// From the ranks present (any order, no duplicates) and the world sizes the traces state.
    pub fn new(ranks: &[u32], stated_world: Option<u32>) -> Self {
        let mut sorted = ranks.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let ranks_present = u32::try_from(sorted.len()).unwrap_or(u32::MAX);
        let past_highest = sorted.last().map_or(0, |r| r.saturating_add(1));
        let world_size = stated_world.unwrap_or(0).max(past_highest).max(ranks_present);
        let mut missing_ranks = Vec::new();
        let mut next = 0u32;
        for &r in &sorted {
            if r > next {
                missing_ranks.push(RankRange { first: next, last: r - 1 });
            }
            next = r.saturating_add(1);
        }
        if next < world_size {
            missing_ranks.push(RankRange { first: next, last: world_size - 1 });
        }
        RankCoverage { ranks_present, world_size, missing_ranks }
    }

    /// How many ranks have no trace.
    pub fn missing(&self) -> u64 {
        self.missing_ranks.iter().map(RankRange::count).sum()
    }

    /// Whether some rank of the job has no trace.
    pub fn is_partial(&self) -> bool {
        !self.missing_ranks.is_empty()
    }

    /// The ranks present, as ranges (the complement of the missing ones).
    fn present(&self) -> Vec<RankRange> {
        let mut out = Vec::new();
        let mut next = 0u32;
        for m in &self.missing_ranks {
            if m.first > next {
                out.push(RankRange { first: next, last: m.first - 1 });
            }
            next = m.last.saturating_add(1);
        }
        if self.world_size > next {
            out.push(RankRange { first: next, last: self.world_size - 1 });
        }
        out
    }

    /// `ranks 0-3 of 8`: which ranks are present, compact whatever the world size.
    pub fn held(&self) -> String {
        format!("ranks {} of {}", ranges(&self.present()), self.world_size)
    }

    /// `ranks 0-3 of 8: 4 missing (4-7)`: compact whatever the world size.
    pub fn summary(&self) -> String {
        format!(
            "ranks {} of {}: {} missing ({})",
            ranges(&self.present()),
            self.world_size,
            self.missing(),
            ranges(&self.missing_ranks)
        )
    }
}

/// `0-3, 6, 8-9`, the first [`SHOWN_RANGES`] ranges and then how many more.
fn ranges(list: &[RankRange]) -> String {
    if list.is_empty() {
        return "none".to_string();
    }
    let mut parts: Vec<String> = list.iter().take(SHOWN_RANGES).map(RankRange::to_string).collect();
    if list.len() > SHOWN_RANGES {
        parts.push(format!("and {} more ranges", list.len() - SHOWN_RANGES));
    }
    parts.join(", ")
}

/// A `steps` setting that the step markers overrode: the markers' count is used instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepsIgnored {
    /// The count the setting gave.
    pub requested: u64,
    /// How it was set: `--steps 4`, `COMMGATE_STEPS=4` or `steps = 4 (commgate.toml)`.
    pub set_by: String,
    /// The steps the ProfilerStep markers delimit (the smallest over ranks), which are used.
    pub marker_steps: u64,
}

impl StepsIgnored {
    /// `steps = 4 (commgate.toml) ignored: the traces' ProfilerStep markers delimit 14 steps, …`,
    /// in plain words (renderers escape it).
    pub fn summary(&self) -> String {
        format!(
            "{} ignored: the traces' ProfilerStep markers delimit {} steps, and markers win \
             (a steps setting applies only to traces without markers)",
            self.set_by, self.marker_steps
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_rank_set_is_not_partial() {
        let c = RankCoverage::new(&[1, 0, 3, 2], Some(4));
        assert_eq!((c.ranks_present, c.world_size, c.is_partial()), (4, 4, false));
        let c = RankCoverage::new(&[0, 1], None);
        assert!(!c.is_partial(), "without distributedInfo, contiguous ranks are the job");
    }

    #[test]
    fn missing_ranks_are_named_compactly() {
        let c = RankCoverage::new(&[0, 1, 2, 3], Some(8));
        assert_eq!(c.missing_ranks, [RankRange { first: 4, last: 7 }]);
        assert_eq!(c.summary(), "ranks 0-3 of 8: 4 missing (4-7)");
        let c = RankCoverage::new(&[3], Some(8));
        assert_eq!(c.summary(), "ranks 3 of 8: 7 missing (0-2, 4-7)");
        let c = RankCoverage::new(&[0, 2], None);
        assert_eq!(c.summary(), "ranks 0, 2 of 3: 1 missing (1)", "a gap is missing even without a world size");
    }

    #[test]
    fn a_huge_stated_world_stays_small() {
        let c = RankCoverage::new(&[0], Some(u32::MAX));
        assert_eq!(c.missing(), u64::from(u32::MAX) - 1);
        assert_eq!(c.missing_ranks.len(), 1);
        let c = RankCoverage::new(&[u32::MAX], None);
        assert_eq!(c.world_size, u32::MAX);
        assert_eq!(c.missing_ranks, [RankRange { first: 0, last: u32::MAX - 1 }]);
        let scattered: Vec<u32> = (0..20).map(|i| i * 2).collect();
        let c = RankCoverage::new(&scattered, Some(64));
        assert!(c.summary().contains("and 12 more ranges"), "{}", c.summary());
    }

    #[test]
    fn steps_note_names_the_setting_and_the_markers() {
        let s = StepsIgnored { requested: 4, set_by: "steps = 4 (commgate.toml)".into(), marker_steps: 14 };
        assert!(
            s.summary()
                .starts_with("steps = 4 (commgate.toml) ignored: the traces' ProfilerStep markers delimit 14 steps"),
            "{}",
            s.summary()
        );
    }
}
