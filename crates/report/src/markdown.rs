//! The GitHub-flavoured Markdown rendering, embedded later in the PR comment and the job
//! summary: the follow-up decision first, then the per-collective table, the per-rank table
//! folded in a `<details>` block, the mitigation and the next measurements.
//!
//! Every string that comes from a trace or a file (collective names, file names, reasons) goes
//! through one function of [`super::escape`] where it enters the text: a trace is untrusted
//! input, and a PR comment renders HTML, links and mentions. Strings this crate owns (strategy
//! and decision names, formatted numbers) are written as-is.

use super::escape::{code_span, md_text, NAME, PATH, TEXT};
use super::table::{self, Context::Markdown};
use super::{pct, Align};
use commgate_gate::compare::Comparison;
use commgate_gate::decide::mitigation::Diagnosis;
use commgate_trace::attribute::Attribution;

/// Renders an attribution as Markdown.
pub fn attribution(a: &Diagnosis) -> String {
    let f = &a.followup;
    let mut out = format!("**commgate attribute: `{}`** — {}\n\n", f.decision.as_str(), md_text(&f.reason, TEXT));
    out.push_str(&super::source_line(a, |s| md_text(s, NAME), &format!(" ({})", file_list(&a.source.files))));
    out.push_str("\n\n");
    out.push_str(&notes(a));
    let collectives = super::collective_table(a, Markdown);
    out.push_str(collectives.as_deref().unwrap_or("_No communication kernels found._\n"));
    if let Some(sizes) = super::size_table(a, Markdown) {
        out.push_str(&format!("\n<details><summary>{}</summary>\n\n{sizes}\n</details>\n", super::SIZE_TITLE));
    }
    if let Some(line) = super::step_summary(a) {
        out.push_str(&format!("\n{line}\n"));
    }
    if !a.ranks.is_empty() {
        out.push_str("\n<details><summary>Per rank</summary>\n\n");
        out.push_str(&table::markdown(&super::RANK_COLUMNS, &super::rank_rows(a)));
        out.push_str("\n</details>\n");
    }
    if let Some(w) = &a.what_if {
        out.push_str(&format!("\n{}", super::whatif::markdown(w)));
    }
    out.push('\n');
    out.push_str(&decision_lines(a));
    out
}

/// What the figures do not cover (missing ranks, an ignored steps setting), one bold-led
/// paragraph each, escaped; empty when there is nothing to say.
pub(crate) fn notes(a: &Attribution) -> String {
    a.notes().iter().map(|n| format!("**Note:** {}\n\n", md_text(n, TEXT))).collect()
}

/// The first few file names, escaped, then how many more: one trace per rank would otherwise
/// turn a 512-rank job's comment into a wall of names.
fn file_list(files: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut names: Vec<String> = files.iter().take(SHOWN).map(|f| md_text(f, NAME)).collect();
    if files.len() > SHOWN {
        names.push(format!("and {} more", files.len() - SHOWN));
    }
    names.join(", ")
}

/// Priority, mitigation, the fixes ranked by saving (when the steps were replayed) and next
/// measurements, as a list.
fn decision_lines(a: &Diagnosis) -> String {
    let d = super::decisions(a, |s| md_text(s, NAME), |strategy| format!("`{strategy}`"));
    let fixes = a.what_if.as_ref().and_then(|w| super::whatif::ranked_line(w, Markdown));
    format!(
        "- **Priority:** {}\n- **Mitigation:** {}\n{}- **Next measurements:** {}\n",
        d.priority,
        d.mitigation,
        fixes.map(|l| format!("- **Would save:** {l}\n")).unwrap_or_default(),
        d.next
    )
}

/// Renders a comparison as Markdown: the verdict and its first reason, the metric table, all
/// reasons. Everything from files is escaped.
pub fn comparison(c: &Comparison) -> String {
    let mut out = format!("**commgate compare `{}`: {}**\n\n", c.verdict.as_str(), md_text(&c.headline, TEXT));
    let b = &c.baseline;
    out.push_str(&format!(
        "Baseline {}: hardware {}, {}; {}\n\n",
        code_span(&b.path, PATH),
        if b.fingerprint_match { "matches" } else { "**differs**" },
        b.spread.map_or_else(|| "run spread unknown (< 3 runs)".to_string(), |s| format!("run spread {}", pct(s))),
        super::power_line(c)
    ));
    if !c.metrics.is_empty() {
        out.push_str(&metric_table(c));
        out.push('\n');
        if let Some(chart) = super::sweep::busbw_chart(c) {
            out.push_str(&chart);
            out.push('\n');
        }
    }
    for r in &c.reasons {
        out.push_str(&format!("- {}\n", md_text(r, TEXT)));
    }
    out
}

/// The comparison's metric table (shared by the compare report and the check report).
pub(crate) fn metric_table(c: &Comparison) -> String {
    if super::sweep::is_sweep(c) {
        return super::sweep::markdown_table(c);
    }
    let rows: Vec<Vec<String>> = c
        .metrics
        .iter()
        .flat_map(|m| {
            let state = format!("`{}`", m.judged.state.as_str());
            let cells = [Some(super::metric_cells(m, Markdown)), super::throughput_cells(m, Markdown)];
            cells.into_iter().flatten().map(move |mut row| {
                row.push(state.clone());
                row
            })
        })
        .collect();
    table::markdown(&[&super::METRIC_COLUMNS[..], &[("state", Align::Left)]].concat(), &rows)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{empty, hostile, multi_rank, seed};
    use super::*;

    #[test]
    fn hostile_collective_and_file_names_render_inert() {
        let out = attribution(&hostile());
        assert!(!out.contains("<script>"), "{out}");
        assert!(!out.contains("**x**"), "{out}");
        assert!(!out.contains("](javascript"), "{out}");
        assert!(out.contains("| &lt;script&gt;\\|\\*\\*x\\*\\* |"), "{out}");
        assert!(out.contains("\\[x\\]\\(javascript:alert\\(1\\)\\).json"), "{out}");
        // The row keeps its 15 cells: the name's pipe is escaped, so it splits nothing.
        let row = out.lines().find(|l| l.starts_with("| &lt;script&gt;")).expect("the hostile row");
        assert_eq!(row.matches(" | ").count(), 14, "{row}");
    }

    #[test]
    fn decision_comes_first_and_reason_is_escaped() {
        let out = attribution(&seed());
        let first = out.lines().next().expect("a heading line");
        assert!(first.starts_with("**commgate attribute: `tune`** — all\\_to\\_all exposes 20.000 ms"), "{first}");
        assert!(out.contains("- **Mitigation:** `reduce_routing_traffic` on all\\_to\\_all"), "{out}");
        assert!(!out.contains("<details>"), "{out}");
    }

    #[test]
    fn ranks_fold_into_details_with_blank_lines_around_the_table() {
        let out = attribution(&multi_rank());
        assert!(out.contains("<details><summary>Per rank</summary>\n\n| rank |"), "{out}");
        assert!(out.contains("|\n\n</details>\n"), "{out}");
        assert!(out.contains("| all\\_gather | 16 |"), "{out}");
    }

    #[test]
    fn file_list_shows_four_names_then_a_count() {
        let files: Vec<String> = (0..6).map(|r| format!("rank_{r}.json")).collect();
        assert_eq!(file_list(&files[..1]), "rank\\_0.json");
        assert_eq!(file_list(&files), "rank\\_0.json, rank\\_1.json, rank\\_2.json, rank\\_3.json, and 2 more");
    }

    #[test]
    fn empty_asks_for_more_evidence() {
        let out = attribution(&empty());
        assert!(out.starts_with("**commgate attribute: `collect_more_evidence`**"), "{out}");
        assert!(out.contains("_No communication kernels found._"), "{out}");
        assert!(out.contains("- **Priority:** none"), "{out}");
    }
}
