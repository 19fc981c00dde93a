//! The per-workload groups of a check report that judged several workloads: in the terminal,
//! each workload's heading, trend and metric table; in Markdown, the same as one group per
//! workload, the first few that need attention open and the rest folded into `<details>`.
//! Every string from a file goes through the escape helper of its context.

use super::fold;
use crate::comparison;
use crate::escape::{code_span, md_text, plain, NAME, TEXT};
use commgate_gate::check::{TrendPoint, WorkloadReport};
use commgate_gate::decide::Decision;

/// At most this many workloads are shown open (the ones that block or could not be evaluated).
pub(super) const OPEN_SHOWN: usize = 3;
/// At most this many of a workload's own reasons are listed in its group.
const OWN_REASONS: usize = 6;

/// "0.086 → 0.086 → 0.087 (current), since 2025-01-02": the overlap median (ms) of the stored
/// runs, then the current run's; dates are untrusted and escaped by `esc`.
pub(super) fn trend_row(trend: &[TrendPoint], esc: impl Fn(&str) -> String) -> Option<String> {
    let values: Vec<String> = trend
        .iter()
        .map(|p| format!("{:.3}{}", p.overlap_median_ms, if p.current { " (current)" } else { "" }))
        .collect();
    let since = trend.first().filter(|p| !p.current).map(|p| format!(", since {}", esc(&p.label)));
    (!values.is_empty()).then(|| format!("overlap median ms: {}{}", values.join(" → "), since.unwrap_or_default()))
}

fn verdict_words(w: &WorkloadReport) -> String {
    if let Some(e) = &w.error {
        return format!("could not evaluate: {}", e.kind.summary());
    }
    format!("{}{}", w.verdict.as_str(), if w.blocking { " (blocking)" } else { "" })
}

/// The terminal text of every workload.
pub(super) fn text(workloads: &[WorkloadReport], width: crate::Width) -> String {
    let mut out = String::new();
    for w in workloads {
        out.push_str(&format!("\nWorkload {}: {}\n", plain(&w.id, NAME), verdict_words(w)));
        for reason in w.reasons.iter().take(OWN_REASONS) {
            out.push_str(&format!("  - {}\n", plain(reason, TEXT)));
        }
        if let Some(t) = trend_row(&w.trend, |s| plain(s, NAME)) {
            out.push_str(&format!("  {t}\n"));
        }
        if let Some(c) = &w.comparison {
            out.push_str(&comparison::text_table(c, width));
        }
    }
    out
}

/// The Markdown of every workload. `compact` (to fit GitHub's comment limit) shows a folded
/// group as its heading line alone; the open groups, their reasons and every verdict stay.
pub(super) fn markdown(workloads: &[WorkloadReport], compact: bool) -> String {
    let mut out = format!("**{} workloads**, judged as one family (Holm over all their metrics):\n", workloads.len());
    let mut open = 0;
    for w in workloads {
        let shown_open = w.needs_attention() && open < OPEN_SHOWN;
        open += usize::from(shown_open);
        let icon = match (w.blocking, &w.error, w.verdict) {
            (true, _, _) => "🔴",
            (_, Some(_), _) => "⛔",
            (_, _, Decision::Accept) => "🟢",
            _ => "🟡",
        };
        let heading = format!("{icon} {} — `{}`", code_span(&w.id, NAME), verdict_words(w));
        let mut inner = String::new();
        for reason in w.reasons.iter().take(OWN_REASONS) {
            inner.push_str(&format!("- {}\n", md_text(reason, TEXT)));
        }
        if let Some(t) = trend_row(&w.trend, |s| md_text(s, NAME)) {
            inner.push_str(&format!("\n{t}\n"));
        }
        if compact && !shown_open {
            out.push_str(&format!("\n- {heading}\n"));
            continue;
        }
        if let Some(c) = &w.comparison {
            inner.push_str(&format!(
                "\nAgainst {}:\n\n{}",
                code_span(&c.baseline.path, NAME),
                comparison::markdown_table(c)
            ));
        }
        if shown_open {
            out.push_str(&format!("\n#### {heading}\n\n{inner}"));
        } else {
            out.push('\n');
            out.push_str(&fold(&heading, &inner));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trend_row_reads_oldest_first_and_escapes_the_date() {
        let p =
            |label: &str, ms: f64, current: bool| TrendPoint { label: label.into(), overlap_median_ms: ms, current };
        let t = [p("2025-01-0<b>", 0.0861, false), p("2025-01-03", 0.0859, false), p("current", 0.0874, true)];
        assert_eq!(
            trend_row(&t, |s| md_text(s, NAME)).as_deref(),
            Some("overlap median ms: 0.086 → 0.086 → 0.087 (current), since 2025-01-0&lt;b&gt;")
        );
        assert_eq!(trend_row(&[], |s| s.to_string()), None);
    }

    /// Ten workloads of seven metrics each, their reasons and trends at the escape bound, next
    /// to a 3,000-collective attribution: the comment stays under GitHub's limit and keeps the
    /// verdict and the regressed workload's reasons.
    #[test]
    fn ten_workloads_and_a_huge_attribution_fit_one_comment() {
        use commgate_gate::check::BaselineRef;
        use commgate_gate::compare::{prepare, CompareOptions};
        use commgate_gate::decide::comparison::judge_together;
        use commgate_gate::decide::Decision;
        let base = super::super::tests::report(3000, 200);
        let runs: Vec<_> =
            (0..3).map(|i| super::super::tests::run(2, [1.0, 2.0, 2.5, 2.2 + 0.01 * f64::from(i)], None)).collect();
        let b = commgate_gate::baseline::Baseline { path: "b.json".into(), runs };
        let cur = super::super::tests::run(2, [1.0, 2.0, 2.5, 2.2], None);
        let opts = CompareOptions::default();
        let comparisons = judge_together((0..10).map(|_| prepare(&b, &cur, &opts)).collect(), &opts);
        let long = "<b>|x|</b>".repeat(400);
        let workloads: Vec<WorkloadReport> = comparisons
            .into_iter()
            .enumerate()
            .map(|(i, c)| WorkloadReport {
                id: format!("w{i}-{}", "y".repeat(60)),
                result: cur.clone(),
                comparison: Some(c),
                baseline: BaselineRef { path: long.clone(), exists: true, runs: 3, fingerprint_match: true },
                error: None,
                verdict: if i == 9 { Decision::Tune } else { Decision::Accept },
                blocking: i == 9,
                reasons: (0..10).map(|j| format!("w{i} reason {j} {long}")).collect(),
                trend: (0..12)
                    .map(|j| TrendPoint { label: long.clone(), overlap_median_ms: 2.2, current: j == 11 })
                    .collect(),
            })
            .collect();
        let r = commgate_gate::check::CheckReport { workloads, blocking: true, ..base };
        let md = super::super::markdown(&r);
        assert!(md.chars().count() <= super::super::GITHUB_COMMENT_LIMIT, "{} chars", md.chars().count());
        assert!(md.contains("commgate: `tune` — blocking merge"), "{}", &md[..300]);
        assert!(md.contains("#### 🔴 `w9-") && md.contains("w9 reason 0"), "the regressed workload stays open");
        assert_eq!(md.matches("🟢 `w").count(), 9, "every other workload keeps its line");
    }
}
