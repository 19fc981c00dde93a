//! The terminal rendering: a source line, aligned plain-ASCII tables (per collective, per rank)
//! and the decision lines. No color, so it reads the same in a pipe, a log and a CI console.
//! The one non-ASCII character is the em dash of `Follow-up: <decision> — <reason>`.
//!
//! Strings that come from traces and files (collective names, paths, reasons) pass through
//! [`plain`], so a control character in a kernel's metadata cannot move the cursor, recolor the
//! terminal or issue a CI workflow command.

use super::escape::{plain, NAME, PATH, TEXT};
use super::table::{self, Context::Text};
use super::{pct, whatif, Align};
use commgate_gate::compare::{Comparison, MetricComparison};
use commgate_gate::decide::mitigation::Diagnosis;

/// Renders an attribution for a terminal.
pub fn attribution(a: &Diagnosis, width: super::Width) -> String {
    let mut out = super::source_line(a, |s| plain(s, NAME), "");
    out.push('\n');
    for note in a.notes() {
        out.push_str(&format!("Note: {}\n", plain(&note, TEXT)));
    }
    out.push('\n');
    if a.by_collective.is_empty() {
        out.push_str("No communication kernels found.\n");
    } else {
        let rows = super::collective_rows(a, Text);
        let (t, dropped) =
            table::text_fitted(&super::COLLECTIVE_COLUMNS, &rows, &super::COLLECTIVE_DROP, width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
    }
    if let Some(sizes) = super::size_table(a, Text) {
        out.push_str(&format!("\n{}:\n{sizes}", super::SIZE_TITLE));
    }
    if let Some(line) = super::step_summary(a) {
        out.push_str(&format!("\n{line}\n"));
    }
    if !a.ranks.is_empty() {
        out.push_str("\nPer rank (ms per step):\n");
        out.push_str(&table::text(&super::rank_columns_without_unit(), &super::rank_rows(a)));
    }
    if let Some(w) = &a.what_if {
        out.push_str(&format!("\n{}\n", whatif::title(w)));
        let (t, dropped) = table::text_fitted(&whatif::COLUMNS, &whatif::rows(w, Text), &[4, 3, 2], width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
        out.push_str(&format!("{}\n", whatif::path_line(w, Text)));
        if let Some(note) = whatif::host_bound_note(w) {
            out.push_str(&format!("Note: {note}\n"));
        }
    }
    out.push('\n');
    for line in decision_lines(a) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Priority, mitigation, the fixes ranked by saving (when the steps were replayed), next
/// measurements and follow-up, one line each.
fn decision_lines(a: &Diagnosis) -> Vec<String> {
    let d = super::decisions(a, |s| plain(s, NAME), str::to_owned);
    let f = &a.followup;
    let fixes = a.what_if.as_ref().and_then(|w| whatif::ranked_line(w, Text));
    [format!("Priority: {}", d.priority), format!("Mitigation: {}", d.mitigation)]
        .into_iter()
        .chain(fixes.map(|l| format!("Would save: {l}")))
        .chain([
            format!("Next measurements: {}", d.next),
            format!("Follow-up: {} — {}", f.decision.as_str(), plain(&f.reason, TEXT)),
        ])
        .collect()
}

/// Renders a comparison for a terminal: the baseline, one row per metric, the verdict and the
/// reasons a reviewer acts on.
pub fn comparison(c: &Comparison, width: super::Width) -> String {
    let mut out = format!("{}\n{}", plain(&c.headline, TEXT), comparison_table(c, width));
    let blocking = if c.regression { " (blocking: confirmed regression)" } else { "" };
    out.push_str(&format!("\nVerdict: {}{blocking}\n", c.verdict.as_str()));
    for r in &c.reasons {
        out.push_str(&format!("  - {}\n", plain(r, TEXT)));
    }
    out
}

/// The baseline line and one row per metric, without the verdict: what a `check` report shows
/// under its own verdict.
pub fn comparison_table(c: &Comparison, width: super::Width) -> String {
    let mut out = format!("{}\n\n", baseline_line(c));
    if super::sweep::is_sweep(c) && !c.metrics.is_empty() {
        let rows = super::sweep::rows(c, Text);
        let (t, dropped) = table::text_fitted(&super::sweep::COLUMNS, &rows, &super::sweep::DROP, width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
        return out;
    }
    let rows: Vec<Vec<String>> = c.metrics.iter().flat_map(metric_rows).collect();
    if rows.is_empty() {
        out.push_str("No metrics compared.\n");
    } else {
        let columns = [&super::METRIC_COLUMNS[..], &METRIC_TAIL_COLUMNS].concat();
        let (t, dropped) = table::text_fitted(&columns, &rows, &METRIC_DROP, width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
    }
    out
}

/// The order the metric table leaves columns out in to fit (least important first): the
/// counts, the method and the p-value before the change, its interval and its state.
const METRIC_DROP: [usize; 8] = [6, 7, 5, 1, 2, 8, 4, 3];

/// The shared metric columns, then how each was estimated and its state.
const METRIC_TAIL_COLUMNS: [(&str, Align); 2] = [("method", Align::Left), ("state", Align::Left)];

fn baseline_line(c: &Comparison) -> String {
    let b = &c.baseline;
    let hardware = if b.fingerprint_match { "hardware matches" } else { "HARDWARE DIFFERS" };
    let spread = b.spread.map_or_else(|| "spread unknown (< 3 runs)".to_string(), |s| format!("run spread {}", pct(s)));
    format!("Baseline: {} ({hardware}, {spread}): {}", plain(&b.path, PATH), super::power_line(c))
}

/// The metric's row, then its throughput row when it has one.
fn metric_rows(m: &MetricComparison) -> Vec<Vec<String>> {
    let tail = [m.judged.method.to_string(), m.judged.state.as_str().to_string()];
    let mut row = super::metric_cells(m, Text);
    row.extend(tail.clone());
    let mut rows = vec![row];
    if let Some(mut t) = super::throughput_cells(m, Text) {
        t.extend(tail);
        rows.push(t);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{empty, hostile, multi_rank, seed};
    use super::*;

    #[test]
    fn seed_lists_priority_mitigation_and_tune() {
        let out = attribution(&seed(), crate::Width::Wide);
        assert!(out.starts_with("Source: events, 1 file, ranks none, world size 0, steps 1"), "{out}");
        assert!(out.contains("Priority: all_to_all (20.000 ms exposed per step)"), "{out}");
        assert!(out.contains("Mitigation: reduce_routing_traffic on all_to_all"), "{out}");
        assert!(out.contains("Next measurements: dispatch_payload_bytes, cross_rank_token_ratio"), "{out}");
        assert!(out.contains("Follow-up: tune — all_to_all exposes 20.000 ms"), "{out}");
        assert!(out.contains("64.0 KiB"), "{out}");
        assert!(!out.contains("Per rank"), "{out}");
        assert!(out.chars().all(|c| c.is_ascii() || c == '—'), "{out}");
    }

    #[test]
    fn multi_rank_shows_unknown_payload_imbalance_and_ranks() {
        let out = attribution(&multi_rank(), crate::Width::Wide);
        let gather = out.lines().find(|l| l.starts_with("all_gather")).expect("an all_gather row");
        assert!(gather.contains("unknown"), "{gather}");
        let send_recv = out.lines().find(|l| l.starts_with("send_recv")).expect("a send_recv row");
        assert!(send_recv.contains("n/a"), "{send_recv}");
        assert!(out.contains("Per rank (ms per step):"), "{out}");
        assert!(out.contains("Mitigation: rebalance_ranks_or_experts on all_reduce"), "{out}");
    }

    #[test]
    fn empty_says_none_and_collect_more_evidence() {
        let out = attribution(&empty(), crate::Width::Fit);
        assert!(out.contains("No communication kernels found."), "{out}");
        assert!(out.contains("Priority: none"), "{out}");
        assert!(out.contains("Mitigation: collect_trace\n"), "{out}");
        assert!(out.contains("Follow-up: collect_more_evidence — "), "{out}");
    }

    #[test]
    fn hostile_names_are_printed_verbatim_but_without_control_characters() {
        let mut a = hostile();
        let mut h = a.attribution.by_collective.pop_first().expect("one collective").1;
        h.collective = "evil\u{1b}]0;title\u{7}".to_string();
        a.attribution.by_collective.insert(h.collective.clone(), h);
        let out = attribution(&a, crate::Width::Fit);
        assert!(!out.contains('\u{1b}'), "{out}");
        assert!(out.contains("evil\\u{1b}]0;title\\u{7}"), "{out}");
    }
}
