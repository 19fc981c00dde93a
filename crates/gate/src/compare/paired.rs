//! One round of a paired measurement: the base arm's run and the head arm's, measured one after
//! the other on the same runner, reduced to each metric's log ratio `ln(head / base)` of the two
//! runs' medians. The round is the unit of evidence (`commgate_stats::paired`): whatever the
//! machine did in that minute touched both arms, and the ratio cancels it.
//!
//! The two runs must be two measurements of the same kind of thing: both finished, on the same
//! backend, evidence level, timing mode and number of ranks, each with every schedule's row. The
//! sizes may differ (a pull request that changes `[bench]` changes what it measures, and that is
//! its change); a round whose runs cannot be compared is refused naming the field, never judged.

use commgate_core::result::{RunResult, Schedule};
use commgate_stats::quantile::median;

/// The metrics a round compares, in report order: the step times' medians of each schedule,
/// the exposed communication (overlap − compute only) when it is positive in both runs, and
/// the fastest step of the overlap, serial and comm-only schedules.
///
/// **Why the fastest step.** A busy neighbour only ever adds time to a step (Chen & Revels,
/// "Robust benchmarking in noisy environments", 2016, arXiv:1608.04295: timing noise is
/// non-negative, so the minimum estimates the undisturbed time best). On a runner with one busy
/// loop per core, the per-round log ratio of the medians spread with a standard deviation of
/// 0.13–1.5 over ten rounds and that of the fastest serial step with 0.01–0.05
/// (`docs/performance.md`). The minima block like every metric; the fastest serial step also
/// accepts in the overlap median's place when the medians cannot settle (`decide::paired`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PairedMetric {
    Median(Schedule),
    Exposed,
    Min(Schedule),
    /// The `i`-th judged collective of the arms' own training steps (`[check] capture`): its
    /// exposed time over the capture. Which collectives, and in which order, is fixed by the
    /// first round ([`judged_collectives`]); the name is the round's ([`Round::label`]).
    Captured(u8),
}

impl PairedMetric {
    /// Every metric, the primary first (the overlap median, as in the stored comparison), then
    /// the fastest serial step ([`PairedMetric::FASTEST`]), which can accept when the medians
    /// cannot settle.
    pub const ALL: [PairedMetric; 8] = [
        PairedMetric::Median(Schedule::Overlap),
        PairedMetric::Min(Schedule::Serial),
        PairedMetric::Median(Schedule::Serial),
        PairedMetric::Exposed,
        PairedMetric::Median(Schedule::CommOnly),
        PairedMetric::Median(Schedule::ComputeOnly),
        PairedMetric::Min(Schedule::Overlap),
        PairedMetric::Min(Schedule::CommOnly),
    ];

    /// The metric that accepts in the primary's place when the primary cannot settle on this
    /// runner (`decide::paired`): the fastest serial step, the all-reduce and the matmul back to
    /// back as little disturbed as the run got.
    pub const FASTEST: PairedMetric = PairedMetric::Min(Schedule::Serial);

    /// "overlap median", "exposed comm", "comm_only min".
    pub fn label(self) -> String {
        match self {
            PairedMetric::Median(s) => format!("{} median", s.as_str()),
            PairedMetric::Exposed => "exposed comm".to_string(),
            PairedMetric::Min(s) => format!("{} min", s.as_str()),
            PairedMetric::Captured(i) => format!("captured collective {}", u16::from(i) + 1),
        }
    }
}

/// At most this many collectives of a capture are judged: the ones with the most exposed time
/// in the first round (each judged metric takes a share of the family's α).
pub const MAX_JUDGED_COLLECTIVES: usize = 4;

/// The collectives a paired sequence judges, from its first round's captures (each arm's
/// collectives with their exposed time, ms): those with exposed time in both arms, the most
/// exposed first, at most [`MAX_JUDGED_COLLECTIVES`]. A collective only one arm has cannot be
/// paired (the report lists it in the round's captures).
pub fn judged_collectives(base: &[(String, f64)], head: &[(String, f64)]) -> Vec<String> {
    let exposed = |list: &[(String, f64)], name: &str| {
        list.iter().filter(|(n, _)| n == name).map(|(_, v)| *v).find(|v| v.is_finite() && *v > 0.0)
    };
    let mut both: Vec<(String, f64)> = base
        .iter()
        .filter_map(|(name, _)| {
            let (b, h) = (exposed(base, name)?, exposed(head, name)?);
            Some((name.clone(), b.max(h)))
        })
        .collect();
    both.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    both.dedup_by(|a, b| a.0 == b.0);
    both.into_iter().take(MAX_JUDGED_COLLECTIVES).map(|(n, _)| n).collect()
}

/// One judged collective in a round: its name and `ln(head / base)` of its exposed time (`None`
/// where an arm's capture lacks it or has none exposed).
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedRatio {
    pub collective: String,
    pub log_ratio: Option<f64>,
}

/// A round: each metric's log ratio head / base, `None` where it is undefined (an exposed time
/// of zero or less in either run), and the medians it was taken from.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub log_ratios: Vec<(PairedMetric, Option<f64>)>,
    /// Each schedule's median step time (ms) in the base run and the head run.
    pub medians: Vec<ArmMedians>,
    /// The judged collectives of the arms' captures, in the sequence's order (empty without
    /// `[check] capture`).
    pub captured: Vec<CapturedRatio>,
}

/// One schedule's median step time (ms) in each arm's run of a round.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArmMedians {
    pub schedule: Schedule,
    pub base_ms: f64,
    pub head_ms: f64,
}

impl Round {
    /// The log ratio of `metric` in this round.
    pub fn of(&self, metric: PairedMetric) -> Option<f64> {
        match metric {
            PairedMetric::Captured(i) => self.captured.get(usize::from(i)).and_then(|c| c.log_ratio),
            _ => self.log_ratios.iter().find(|(m, _)| *m == metric).and_then(|(_, v)| *v),
        }
    }

    /// Every metric of this round, the benchmark's then the judged collectives'.
    pub fn metrics(&self) -> Vec<PairedMetric> {
        let captured = (0..self.captured.len()).filter_map(|i| u8::try_from(i).ok()).map(PairedMetric::Captured);
        PairedMetric::ALL.iter().copied().chain(captured).collect()
    }

    /// The report's name of `metric`: "overlap median", "all_reduce exposed (capture)".
    pub fn label(&self, metric: PairedMetric) -> String {
        match metric {
            PairedMetric::Captured(i) => self
                .captured
                .get(usize::from(i))
                .map_or_else(|| metric.label(), |c| format!("{} exposed (capture)", c.collective)),
            _ => metric.label(),
        }
    }

    /// This round with the judged collectives' ratios of the arms' captures (`names` in the
    /// sequence's order; each capture is a collective's exposed time, ms).
    pub fn with_captures(mut self, names: &[String], base: &[(String, f64)], head: &[(String, f64)]) -> Round {
        let exposed = |list: &[(String, f64)], name: &str| {
            list.iter().filter(|(n, _)| n == name).map(|(_, v)| *v).find(|v| v.is_finite() && *v > 0.0)
        };
        self.captured = names
            .iter()
            .take(MAX_JUDGED_COLLECTIVES)
            .map(|name| CapturedRatio {
                collective: name.clone(),
                log_ratio: exposed(head, name).zip(exposed(base, name)).map(|(h, b)| (h / b).ln()),
            })
            .collect();
        self
    }
}

/// The round of `base` and `head`, or why they cannot be compared (one line naming the field).
pub fn round(base: &RunResult, head: &RunResult) -> Result<Round, String> {
    for (arm, run) in [("base", base), ("head", head)] {
        if let Some(f) = &run.failure {
            return Err(format!("the {arm} arm's run failed ({}: {})", f.kind, f.message));
        }
        if !run.is_usable() {
            return Err(format!("the {arm} arm's run measured nothing (a dry run)"));
        }
    }
    let (b, h) = (&base.workload, &head.workload);
    let differ = |field: &str, there: &dyn std::fmt::Display, here: &dyn std::fmt::Display| {
        Err(format!(
            "the arms measured different things: workload.{field} is {there} on base and {here} on head; \
             run both arms with the same --backend and launcher"
        ))
    };
    if b.backend != h.backend {
        return differ("backend", &b.backend, &h.backend);
    }
    if b.world_size != h.world_size {
        return differ("world_size", &b.world_size, &h.world_size);
    }
    if b.timing != h.timing {
        return differ(
            "timing",
            &b.timing.as_deref().unwrap_or("unrecorded"),
            &h.timing.as_deref().unwrap_or("unrecorded"),
        );
    }
    if base.evidence_level != head.evidence_level {
        return differ("evidence_level", &format!("{:?}", base.evidence_level), &format!("{:?}", head.evidence_level));
    }
    // Each schedule's (median, minimum) step time.
    let medians = |arm: &str, run: &RunResult| -> Result<[(f64, f64); 4], String> {
        let mut out = [(0.0, 0.0); 4];
        for (slot, schedule) in out.iter_mut().zip(Schedule::ALL) {
            let row =
                run.row(schedule).ok_or_else(|| format!("the {arm} arm's run has no {} row", schedule.as_str()))?;
            let mut samples = row.samples_ms.clone();
            if samples.is_empty() || samples.iter().any(|v| !v.is_finite() || *v <= 0.0) {
                return Err(format!(
                    "the {arm} arm's {} row needs positive, finite step times (rows[].samples_ms)",
                    schedule.as_str()
                ));
            }
            samples.sort_by(f64::total_cmp);
            *slot = (median(&samples), samples.first().copied().unwrap_or(f64::NAN));
        }
        Ok(out)
    };
    let (mb, mh) = (medians("base", base)?, medians("head", head)?);
    let at = |m: &[(f64, f64); 4], s: Schedule| {
        Schedule::ALL.iter().position(|&x| x == s).and_then(|i| m.get(i)).map(|&(median, _)| median)
    };
    let min_at = |m: &[(f64, f64); 4], s: Schedule| {
        Schedule::ALL.iter().position(|&x| x == s).and_then(|i| m.get(i)).map(|&(_, min)| min)
    };
    let log_ratios = PairedMetric::ALL
        .iter()
        .map(|&metric| {
            let value = match metric {
                PairedMetric::Median(s) => at(&mh, s).zip(at(&mb, s)).map(|(h, b)| (h / b).ln()),
                PairedMetric::Exposed => {
                    let exposed = |m: &[(f64, f64); 4]| {
                        at(m, Schedule::Overlap).zip(at(m, Schedule::ComputeOnly)).map(|(o, c)| o - c)
                    };
                    exposed(&mh).zip(exposed(&mb)).filter(|(h, b)| *h > 0.0 && *b > 0.0).map(|(h, b)| (h / b).ln())
                }
                PairedMetric::Min(s) => min_at(&mh, s).zip(min_at(&mb, s)).map(|(h, b)| (h / b).ln()),
                // Not the benchmark's: `with_captures` adds them.
                PairedMetric::Captured(_) => None,
            };
            (metric, value.filter(|v| v.is_finite()))
        })
        .collect();
    let medians = Schedule::ALL
        .iter()
        .filter_map(|&s| Some(ArmMedians { schedule: s, base_ms: at(&mb, s)?, head_ms: at(&mh, s)? }))
        .collect();
    Ok(Round { log_ratios, medians, captured: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::Failure;

    fn run(scale: f64) -> RunResult {
        commgate_testkit::results::run(&[10.0 * scale, 11.0 * scale, 12.5 * scale])
    }

    #[test]
    fn a_slower_head_gives_positive_log_ratios() {
        let r = round(&run(1.0), &run(1.1)).expect("comparable");
        for metric in [PairedMetric::Median(Schedule::Overlap), PairedMetric::Median(Schedule::CommOnly)] {
            let v = r.of(metric).expect("defined");
            assert!((v - 1.1f64.ln()).abs() < 1e-12, "{metric:?}: {v}");
        }
        assert_eq!(r.log_ratios.len(), PairedMetric::ALL.len());
        let min = r.of(PairedMetric::Min(Schedule::CommOnly)).expect("defined");
        assert!((min - 1.1f64.ln()).abs() < 1e-12, "{min}");
        assert_eq!(round(&run(1.0), &run(1.0)).expect("same").of(PairedMetric::Median(Schedule::Serial)), Some(0.0));
    }

    /// The minimum follows the fastest step alone: a head whose slow steps got slower (a busy
    /// neighbour) keeps its minimum, one whose every step got slower does not.
    #[test]
    fn the_minimum_is_the_fastest_step() {
        let base = commgate_testkit::results::run(&[10.0, 11.0, 12.5]);
        let noisy = commgate_testkit::results::run(&[10.0, 15.0, 19.0]);
        let r = round(&base, &noisy).expect("comparable");
        assert_eq!(r.of(PairedMetric::Min(Schedule::Overlap)), Some(0.0));
        assert!(r.of(PairedMetric::Median(Schedule::Overlap)).is_some_and(|v| v > 0.3));
        assert_eq!(PairedMetric::Min(Schedule::CommOnly).label(), "comm_only min");
    }

    /// The collectives judged are those both arms have, the most exposed first; each round's
    /// ratio is head / base of their exposed time, `None` where an arm lacks it.
    #[test]
    fn captured_collectives_are_paired_by_name() {
        let base = vec![("all_reduce".to_string(), 2.0), ("all_gather".to_string(), 5.0), ("broadcast".into(), 1.0)];
        let head = vec![("all_reduce".to_string(), 3.0), ("all_gather".to_string(), 5.0), ("send".into(), 9.0)];
        let names = judged_collectives(&base, &head);
        assert_eq!(names, ["all_gather", "all_reduce"]);
        let r = round(&run(1.0), &run(1.0)).expect("comparable").with_captures(&names, &base, &head);
        assert_eq!(r.of(PairedMetric::Captured(0)), Some(0.0));
        assert!(r.of(PairedMetric::Captured(1)).is_some_and(|v| (v - 1.5f64.ln()).abs() < 1e-12));
        assert_eq!(r.label(PairedMetric::Captured(1)), "all_reduce exposed (capture)");
        assert_eq!(r.metrics().len(), PairedMetric::ALL.len() + 2);
        let lacking = round(&run(1.0), &run(1.0)).expect("comparable").with_captures(&names, &base, &[]);
        assert_eq!(lacking.of(PairedMetric::Captured(0)), None);
        let many: Vec<(String, f64)> = (0..9).map(|i| (format!("c{i}"), 1.0 + f64::from(i))).collect();
        assert_eq!(judged_collectives(&many, &many).len(), MAX_JUDGED_COLLECTIVES);
    }

    #[test]
    fn runs_that_cannot_be_compared_are_named() {
        let mut failed = run(1.0);
        failed.failure = Some(Failure { kind: "rank_died".into(), message: "rank 1".into(), rank: Some(1) });
        assert!(round(&failed, &run(1.0)).unwrap_err().starts_with("the base arm's run failed (rank_died"));
        let mut other = run(1.0);
        other.workload.world_size += 1;
        let e = round(&run(1.0), &other).unwrap_err();
        assert!(e.contains("workload.world_size is 2 on base and 3 on head"), "{e}");
        let mut missing = run(1.0);
        missing.rows.retain(|r| r.schedule != Schedule::Serial);
        assert_eq!(round(&run(1.0), &missing).unwrap_err(), "the head arm's run has no serial row");
        let mut zero = run(1.0);
        if let Some(v) = zero.rows.first_mut().and_then(|r| r.samples_ms.first_mut()) {
            *v = 0.0;
        }
        assert!(round(&zero, &run(1.0)).unwrap_err().contains("needs positive, finite step times"));
    }
}
