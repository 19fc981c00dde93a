//! The check report rendered three ways: terminal text (the comparison and attribution tables
//! under the verdict), JSON (formats.md, "Check report"), and the Markdown of the PR comment and
//! job summary: verdict first, a metric table next to a mermaid chart of each metric's change against ±δ,
//! the hotspots with their mitigation, details folded, a hidden marker, under GitHub's comment
//! size limit. A report that could not be evaluated leads with what failed and the exit code it
//! gives, in every format, before anything else.

mod paired;
mod workloads;

use super::attribution::{self, imbalance, payload};
use super::bench::run_figures;
use super::cells::{hardware_line, ms, optional_ms, two};
use super::comparison::{self, power_line};
use super::escape::{code_cell, code_span, md_cell, md_text, plain, NAME, PATH, TEXT};
use super::table::{self, Column, Context, Field};
use super::{chart, sweep, whatif};
use commgate_core::output::MARKER;
use commgate_core::units::{change, interval, pct};
use commgate_gate::check::CheckReport;
use commgate_gate::compare::traces::{CollectiveComparison, TraceComparison, TraceMetric};
use commgate_gate::compare::Comparison;
use commgate_gate::decide::mitigation::Diagnosis;
use commgate_gate::decide::{Decision, EvaluationError, Outcome};
use commgate_trace::attribute::{Attribution, Hotspot, RankSummary};

/// GitHub rejects issue comments longer than this many characters.
pub const GITHUB_COMMENT_LIMIT: usize = 65_536;

/// Terminal text: the verdict and reasons, then the comparison and attribution tables.
pub fn text(r: &CheckReport, width: crate::Width) -> String {
    let mut out = match &r.error {
        Some(e) => {
            format!("Could not evaluate: {} ({})\n{}\n", e.kind.summary(), plain(&e.message, TEXT), not_judged(r))
        }
        None => String::new(),
    };
    let said = headline(r);
    match &said {
        Some(h) => out.push_str(&format!("Verdict: {}: {}\n", r.verdict.as_str(), plain(h, TEXT))),
        None => {
            out.push_str(&format!("Verdict: {}{}\n", r.verdict.as_str(), if r.blocking { " (blocking)" } else { "" }))
        }
    }
    for reason in other_reasons(r) {
        out.push_str(&format!("  - {}\n", plain(reason, TEXT)));
    }
    // A failed run measured nothing: its error above is the whole story.
    if let Some(b) = r.bench.as_ref().filter(|b| b.failure.is_none()) {
        match sweep::run_line(b) {
            Some(line) => out.push_str(&format!("Run: {}\n", plain(&line, TEXT))),
            None => {
                let figures: Vec<String> = run_figures(b, r.bench_ceiling.as_ref())
                    .iter()
                    .map(|(label, value)| format!("{label} {value}"))
                    .collect();
                out.push_str(&format!("Run: {}\n", figures.join(" · ")));
            }
        }
    }
    if let Some(p) = &r.paired {
        out.push('\n');
        out.push_str(&paired::text(p));
    }
    if !r.workloads.is_empty() {
        out.push_str(&workloads::text(&r.workloads, width));
    } else if let Some(c) = &r.comparison {
        // The verdict and its reasons are the check's, above: the comparison adds its table.
        out.push('\n');
        out.push_str(&comparison::text_table(c, width));
    }
    if let Some(t) = &r.trace_comparison {
        out.push_str(&trace_text(t));
    }
    if let Some(a) = &r.attribution {
        out.push('\n');
        out.push_str(&attribution::text(a, width));
    }
    out
}

/// Renders a check report as pretty JSON (formats.md, "Check report").
pub fn json(r: &CheckReport) -> String {
    super::json::pretty(r)
}

/// At most this many reasons are listed in the comment (then how many more), and at most this
/// many collectives in its hotspot table: with every value bounded ([`NAME`], [`TEXT`]), the
/// verdict, the reasons and the hotspot table always fit [`GITHUB_COMMENT_LIMIT`].
const REASONS_SHOWN: usize = 12;
const HOTSPOTS_SHOWN: usize = 30;

/// Markdown for the PR comment and the job summary, at most [`GITHUB_COMMENT_LIMIT`]
/// characters: folded details are dropped first (least important first), then the metric table;
/// the verdict, the reasons and the hotspot table stay.
pub fn markdown(r: &CheckReport) -> String {
    let head = head(r);
    let mut body = [metrics_section(r), hotspots_section(r), reasons_section(r)];
    let mut details = details_sections(r);
    let mut cut = false;
    loop {
        let text = assemble(&head, &body, &details, cut);
        if text.chars().count() <= GITHUB_COMMENT_LIMIT {
            return text;
        }
        cut = true;
        if details.pop().is_none() {
            break;
        }
    }
    if !r.workloads.is_empty() {
        // Several workloads: the folded groups lose their tables; every verdict stays.
        let [metrics, _, _] = &mut body;
        *metrics = workloads::markdown(&r.workloads, true);
        let text = assemble(&head, &body, &[], true);
        if text.chars().count() <= GITHUB_COMMENT_LIMIT {
            return text;
        }
    }
    // Only a forged report gets here (its metric rows are the one list left unbounded).
    let [metrics, _, _] = &mut body;
    *metrics = String::new();
    let text = assemble(&head, &body, &[], true);
    text.chars().take(GITHUB_COMMENT_LIMIT).collect()
}

fn assemble(head: &str, body: &[String], details: &[String], cut: bool) -> String {
    let mut out = String::from(head);
    for section in body.iter().chain(details) {
        if !section.is_empty() {
            out.push('\n');
            out.push_str(section);
        }
    }
    if cut {
        out.push_str("\n_Some sections were left out to fit GitHub's comment size limit; the full report is in the job summary and the report file._\n");
    }
    out
}

/// What a could-not-evaluate report means for the merge, with the exit code it gives.
fn not_judged(r: &CheckReport) -> &'static str {
    match r.outcome() {
        Outcome::CouldNotEvaluate => {
            "Nothing was judged, so the gate exits 2 (could not evaluate): fix the cause and run it again."
        }
        _ => "Nothing was judged; the gate exits 0 only because of --fail-on never.",
    }
}

/// The reasons other than the error's own line, which the report shows first on its own.
fn other_reasons(r: &CheckReport) -> impl Iterator<Item = &String> {
    let lead = r.error.as_ref().map(EvaluationError::to_string);
    // A paired verdict's first reason is its headline.
    let skip = usize::from(r.paired.is_some() && r.error.is_none());
    r.reasons.iter().skip(skip).filter(move |x| Some(x.as_str()) != lead.as_deref())
}

/// The comparison headline the report leads with (the gate decided it; this only picks whose):
/// a blocking report shows the first regressed workload's, prefixed by its id when there are
/// several; otherwise a single comparison's whose verdict is the report's. `None` when no comparison speaks for the verdict (a
/// trace regression, no baseline yet, several workloads none of which blocks).
fn headline(r: &CheckReport) -> Option<String> {
    if r.error.is_some() {
        return None;
    }
    if r.paired.is_some() {
        return r.reasons.first().cloned();
    }
    if let Some(w) = r.workloads.iter().find(|w| r.blocking && w.comparison.as_ref().is_some_and(|c| c.regression)) {
        return w.comparison.as_ref().map(|c| format!("{}: {}", w.id, c.headline));
    }
    let c = r.comparison.as_ref().filter(|c| !c.headline.is_empty() && r.workloads.is_empty())?;
    (c.regression == r.blocking && c.verdict == r.verdict).then(|| c.headline.clone())
}

fn head(r: &CheckReport) -> String {
    if let Some(e) = &r.error {
        return error_head(r, e);
    }
    let icon = match (r.verdict, r.blocking) {
        (_, true) => "🔴",
        (Decision::Accept, _) => "🟢",
        _ => "🟡",
    };
    let lead = match &r.paired {
        Some(p) => format!("\n\n{}", md_text(&paired::compared(p), TEXT)),
        None => r.reasons.first().map(|x| format!("\n\n{}", md_text(x, TEXT))).unwrap_or_default(),
    };
    let context = context_lines(r);
    match headline(r) {
        Some(h) => {
            format!("{MARKER}\n### {icon} commgate `{}`: {}{context}{lead}\n", r.verdict.as_str(), md_text(&h, TEXT))
        }
        None => format!(
            "{MARKER}\n### {icon} commgate: `{}`{}{context}{lead}\n",
            r.verdict.as_str(),
            if r.blocking { " — blocking merge" } else { "" }
        ),
    }
}

/// The lines under the headline: which commit and job judged (when the report says), and a
/// pull request that edits what judges it, which a reviewer must see before anything folded.
fn context_lines(r: &CheckReport) -> String {
    let mut out = String::new();
    if let Some(job) = &r.job {
        let mut parts = Vec::new();
        if let Some(c) = &job.commit {
            // Hex when the report was made or read; a string slice must not panic on one that is not.
            let short = c.get(..c.len().min(12)).map_or_else(|| c.chars().take(12).collect(), str::to_string);
            parts.push(format!("head `{short}`"));
        }
        if let Some(url) = &job.run_url {
            // Checked to be https and plain URL characters when the report was made or read.
            parts.push(format!("[job run]({url})"));
        }
        out.push_str(&format!("\n\n{}", parts.join(" · ")));
    }
    if let Some(edits) = r.base.as_ref().and_then(|b| b.edits_reason()) {
        out.push_str(&format!("\n\n> ⚠️ {}", md_text(&edits, TEXT)));
    }
    out
}

/// The head of a report that could not be evaluated: what failed (escaped: it quotes files and
/// the failed run), what it means for the merge, then any other reasons.
fn error_head(r: &CheckReport, e: &EvaluationError) -> String {
    let mut out = format!(
        "{MARKER}\n### ⛔ commgate: could not evaluate{}\n\n**Could not evaluate: {}** ({})\n\n{}\n",
        context_lines(r),
        e.kind.summary(),
        md_text(&e.message, TEXT),
        not_judged(r).replace("--fail-on never", "`--fail-on never`")
    );
    let others: Vec<String> = other_reasons(r).take(REASONS_SHOWN).map(|x| format!("- {}", md_text(x, TEXT))).collect();
    if !others.is_empty() {
        out.push('\n');
        out.push_str(&others.join("\n"));
        out.push('\n');
    }
    out
}

/// The metric table and, next to it, the chart of each metric's change against ±δ; with several
/// workloads, one group per workload instead.
fn metrics_section(r: &CheckReport) -> String {
    if !r.workloads.is_empty() {
        return format!("{}{}", workloads_chart(&r.workloads), workloads::markdown(&r.workloads, false));
    }
    if let Some(p) = &r.paired {
        return paired::markdown(p);
    }
    let Some(c) = &r.comparison else {
        return format!(
            "Baseline {}: {}\n",
            code_span(&r.baseline.path, PATH),
            if r.baseline.exists { "present" } else { "not found" }
        );
    };
    format!(
        "Against {} ({}):\n\n{}\n{}",
        code_span(&c.baseline.path, PATH),
        power_line(c),
        comparison::markdown_table(c),
        change_chart(r.bench.as_ref().map_or("current", |b| b.workload.id.as_str()), c)
    )
}

/// The change chart of the judged metrics against ±δ ([`chart::change_chart`]).
fn change_chart(workload: &str, c: &Comparison) -> String {
    if sweep::is_sweep(c) {
        return sweep::busbw_chart(c).unwrap_or_default();
    }
    chart::change_chart(&[chart::series_from(workload, c)], 100.0 * c.delta).unwrap_or_default()
}

/// One change chart over every compared workload (one line each), against the widest δ among
/// them, so a workload's band is never drawn narrower than it is.
fn workloads_chart(workloads: &[commgate_gate::check::WorkloadReport]) -> String {
    let compared: Vec<_> = workloads.iter().filter_map(|w| w.comparison.as_ref().map(|c| (w.id.as_str(), c))).collect();
    let delta = compared.iter().map(|(_, c)| c.delta).fold(0.0, f64::max);
    let series: Vec<_> = compared.iter().map(|(id, c)| chart::series_from(id, c)).collect();
    chart::change_chart(&series, 100.0 * delta).map_or_else(String::new, |chart| format!("{chart}\n"))
}

/// The hotspot table with the mitigation and next measurements, and each collective's state
/// against the trace baseline.
fn hotspots_section(r: &CheckReport) -> String {
    let Some(a) = &r.attribution else { return String::new() };
    let judged = r.trace_comparison.as_ref();
    let mut collectives: Vec<_> = a.by_collective.values().collect();
    collectives.sort_by(|x, y| y.exposed_comm_ms.total_cmp(&x.exposed_comm_ms));
    let more = collectives.len().saturating_sub(HOTSPOTS_SHOWN);
    collectives.truncate(HOTSPOTS_SHOWN);
    let fields = hotspot_fields();
    let rows: Vec<Vec<String>> = collectives
        .iter()
        .map(|h| {
            let state = judged.and_then(|t| t.collectives.iter().find(|c| c.collective == h.collective)).map_or(
                "-".to_string(),
                |c| {
                    let mark = if c.state == commgate_gate::compare::State::Regressed { "🔺 " } else { "" };
                    format!("{mark}{}", md_cell(&trace_state(c), NAME))
                },
            );
            table::row(&fields, &HotspotRow { h, state }, Context::Markdown)
        })
        .collect();
    let more = if more > 0 {
        format!("\n_{more} more collectives with less exposed time (the JSON report lists them all)._\n")
    } else {
        String::new()
    };
    let what_if = a.what_if.as_ref().map(|w| format!("\n{}", whatif::markdown(w))).unwrap_or_default();
    format!(
        "#### Hotspots ({} ranks, {} steps)\n\n{}{}{more}\n{}{what_if}",
        a.ranks.len(),
        a.source.steps,
        attribution::notes(a),
        table::markdown(&table::columns(&fields, Context::Markdown), &rows),
        mitigation(a)
    )
}

/// A row of the hotspot table: a collective, and its state against the trace baseline
/// (escaped; `-` when the traces were not judged).
struct HotspotRow<'a> {
    h: &'a Hotspot,
    state: String,
}

/// The hotspot table's columns: what the gate judges (exposed time, transfer, wait) and the
/// state against the trace baseline first. A function rather than a constant: its rows borrow
/// the attribution.
fn hotspot_fields<'a>() -> [Field<HotspotRow<'a>>; 9] {
    [
        Column::left("collective").cell(|r, ctx| ctx.escape(&r.h.collective, NAME)),
        Column::right("exposed ms/step").cell(|r, _| ms(r.h.exposed_comm_ms)),
        Column::right("transfer ms/step").cell(|r, _| optional_ms(r.h.transfer_ms)),
        Column::right("wait ms/step").cell(|r, _| optional_ms(r.h.wait_ms)),
        Column::left("vs trace baseline").cell(|r, _| r.state.clone()),
        Column::right("comm ms/step").cell(|r, _| ms(r.h.total_comm_ms)),
        Column::right("overlap").cell(|r, _| two(r.h.overlap_ratio)),
        Column::right("imbalance").cell(|r, _| imbalance(r.h)),
        Column::right("payload/step").cell(|r, _| payload(r.h)),
    ]
}

fn mitigation(a: &Diagnosis) -> String {
    let m = &a.mitigation;
    let next: Vec<String> = m.next_measurements.iter().map(|s| code_span(s, NAME)).collect();
    let fixes = a.what_if.as_ref().and_then(|w| whatif::ranked_line(w, Context::Markdown));
    format!(
        "**Mitigation:** `{}`{} — measure next: {}\n{}",
        m.strategy.as_str(),
        m.target.as_ref().map(|t| format!(" on {}", md_text(t, NAME))).unwrap_or_default(),
        if next.is_empty() { "-".to_string() } else { next.join(", ") },
        fixes.map(|l| format!("\n**Would save:** {l}\n")).unwrap_or_default()
    )
}

/// Every reason (the report's, then the comparison's, once each), folded: the first
/// [`REASONS_SHOWN`], then how many more. Empty when the head's lead reason is the only one.
fn reasons_section(r: &CheckReport) -> String {
    if r.reasons.len() <= 1 && r.comparison.as_ref().is_none_or(|c| c.reasons.is_empty()) {
        return String::new();
    }
    let all = r.reasons.iter().chain(r.comparison.iter().flat_map(|c| &c.reasons));
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&String> = all.filter(|x| seen.insert(x.as_str())).collect();
    let mut items: Vec<String> = unique.iter().take(REASONS_SHOWN).map(|x| format!("- {}", md_text(x, TEXT))).collect();
    if unique.len() > REASONS_SHOWN {
        items.push(format!("- and {} more (the JSON report lists them all)", unique.len() - REASONS_SHOWN));
    }
    fold("All reasons", &items.join("\n"))
}

/// Folded sections, least important last (they are dropped first when the comment is too long).
fn details_sections(r: &CheckReport) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((b, s)) = r.bench.as_ref().and_then(|b| Some((b, b.sweep.as_ref()?))) {
        let (h, sw) = (&b.hardware, &b.software);
        let cell = |v: &str| md_cell(v, NAME);
        let hosts: Vec<&str> = s.processes.iter().map(|p| p.host.as_str()).collect();
        let rows = vec![
            ["program".to_string(), format!("nccl-tests {}", code_cell(&s.program, NAME))],
            ["hardware".to_string(), cell(&hardware_line(h))],
            ["hosts".to_string(), cell(&sweep::hosts_line(&hosts))],
            ["NCCL".to_string(), cell(sw.nccl.as_deref().unwrap_or("-"))],
            ["NCCL settings".to_string(), nccl_settings(&sw.nccl_env)],
            ["fingerprint".to_string(), code_cell(&h.fingerprint, NAME)],
            ["points".to_string(), cell(&sweep::points_line(s))],
        ];
        out.push(fold("nccl-tests run", &table::markdown_pairs(&rows)));
    } else if let Some(b) = &r.bench {
        let (h, sw) = (&b.hardware, &b.software);
        let cell = |s: &str| md_cell(s, NAME);
        let w = &b.workload;
        let mut rows = vec![
            ["backend".to_string(), format!("{} ({})", cell(&w.backend), b.evidence_level.words())],
            ["hardware".to_string(), cell(&hardware_line(h))],
            [
                "driver / CUDA / NCCL".to_string(),
                [&sw.driver, &sw.cuda, &sw.nccl].map(|v| cell(v.as_deref().unwrap_or("-"))).join(" / "),
            ],
            ["NCCL settings".to_string(), nccl_settings(&sw.nccl_env)],
            // 16 hex digits when this crate computed it; a report file may say anything.
            ["fingerprint".to_string(), code_cell(&h.fingerprint, NAME)],
            [
                "workload".to_string(),
                format!(
                    "{} · {} × {} elements · matmul {}³ · {} repeats",
                    cell(&w.id),
                    cell(&w.dtype),
                    w.payload_elements,
                    w.compute_dim,
                    w.repeats
                ),
            ],
        ];
        rows.extend(run_figures(b, r.bench_ceiling.as_ref()).map(|(label, value)| [label.to_string(), value]));
        rows.push([
            "run's own decision".to_string(),
            format!("`{}`: {}", b.decision.verdict.as_str(), md_cell(&b.decision.reason, TEXT)),
        ]);
        let text = table::markdown_pairs(&rows);
        out.push(fold("Benchmark run", &text));
    }
    if let Some(t) = &r.trace_comparison {
        out.push(fold("Trace evidence", &trace_markdown(t)));
    }
    if let Some(a) = &r.attribution {
        out.push(fold("Per-rank overlap", &ranks(a)));
    }
    out
}

/// "regressed: wait, rank 5 last in 93 %", "unchanged", "new, inconclusive".
fn trace_state(c: &CollectiveComparison) -> String {
    let mut out = c.state.as_str().to_string();
    if let Some(cause) = c.cause {
        out.push_str(&format!(": {}", cause.as_str()));
    }
    if let (Some(r), Some(s)) = (c.late_rank, c.late_share) {
        out.push_str(&format!(", rank {r} last in {:.0} %", 100.0 * s));
    }
    out
}

/// What the trace comparison was judged against, one sentence.
fn trace_basis(t: &TraceComparison) -> String {
    let step = t.step_ms.map_or_else(String::new, |s| format!(" of the baseline step ({} ms)", ms(s)));
    format!(
        "{} stored trace run{} ({}); transfer is judged as a ratio, exposed time and wait as shares{step}; \
         each figure is a median over steps (the hotspot table's are means per step, so they differ when steps do)",
        t.runs,
        if t.runs == 1 { "" } else { "s" },
        t.method.as_str()
    )
}

fn trace_text(t: &TraceComparison) -> String {
    let mut out = format!("\nTraces against baseline \"{}\": {}\n", plain(&t.name, PATH), trace_basis(t));
    if let Some(why) = &t.unusable {
        out.push_str(&format!("  not judged: {}\n", plain(why, TEXT)));
    }
    for c in &t.collectives {
        let metrics: Vec<String> = c
            .metrics
            .iter()
            .map(|m| format!("{} {} ({})", m.quantity.as_str(), change(m.judged.ratio), interval(m.judged.ci)))
            .collect();
        let note = c.note.as_ref().map(|n| format!(" [{}]", plain(n, TEXT))).unwrap_or_default();
        out.push_str(&format!(
            "  {:<16} {:<34} {}{note}\n",
            plain(&c.collective, NAME),
            plain(&trace_state(c), NAME),
            metrics.join(" · ")
        ));
    }
    for n in &t.notes {
        out.push_str(&format!("  note: {}\n", plain(n, TEXT)));
    }
    out
}

/// A row of the trace evidence table: one quantity of one collective.
struct TraceRow<'a> {
    c: &'a CollectiveComparison,
    m: &'a TraceMetric,
}

/// The trace evidence table's columns. A function rather than a constant: its rows borrow the
/// trace comparison.
fn trace_fields<'a>() -> [Field<TraceRow<'a>>; 8] {
    fn finite_ms(v: f64) -> String {
        if v.is_finite() {
            ms(v)
        } else {
            "-".into()
        }
    }
    [
        Column::left("collective").cell(|r, ctx| ctx.escape(&r.c.collective, NAME)),
        Column::left("quantity").cell(|r, _| r.m.quantity.as_str().to_string()),
        Column::right("baseline median ms/step").cell(|r, _| finite_ms(r.m.judged.baseline)),
        Column::right("current median ms/step").cell(|r, _| finite_ms(r.m.judged.current)),
        Column::right("change (95 % CI)")
            .cell(|r, _| format!("{} ({})", change(r.m.judged.ratio), interval(r.m.judged.ci))),
        Column::right("δ").cell(|r, _| pct(r.m.judged.against.delta)),
        Column::left("state").cell(|r, _| r.m.judged.state.as_str().to_string()),
        Column::left("note")
            .cell(|r, ctx| r.m.note.as_ref().or(r.c.note.as_ref()).map_or_else(String::new, |n| ctx.escape(n, TEXT))),
    ]
}

fn trace_markdown(t: &TraceComparison) -> String {
    let fields = trace_fields();
    let ctx = Context::Markdown;
    let rows: Vec<Vec<String>> = t
        .collectives
        .iter()
        .flat_map(|c| c.metrics.iter().map(move |m| TraceRow { c, m }))
        .map(|row| table::row(&fields, &row, ctx))
        .collect();
    let unusable = t.unusable.as_ref().map(|why| format!("Not judged: {}\n\n", md_text(why, TEXT))).unwrap_or_default();
    let notes: String = t.notes.iter().map(|n| format!("\n_{}_\n", md_text(n, TEXT))).collect();
    format!(
        "Baseline {}: {}.\n\n{unusable}{}{notes}",
        code_span(&t.name, PATH),
        trace_basis(t),
        if rows.is_empty() { String::new() } else { table::markdown(&table::columns(&fields, ctx), &rows) }
    )
}

/// The per-rank overlap table's columns (Markdown, folded).
const RANKS: [Field<RankSummary>; 5] = [
    Column::right("rank").cell(|r, _| r.rank.to_string()),
    Column::right("comm ms").cell(|r, _| ms(r.comm_ms)),
    Column::right("compute ms").cell(|r, _| ms(r.compute_ms)),
    Column::right("exposed ms").cell(|r, _| ms(r.exposed_ms)),
    Column::right("overlap %").cell(|r, _| two(r.overlap_pct)),
];

fn ranks(a: &Attribution) -> String {
    let ctx = Context::Markdown;
    let rows: Vec<Vec<String>> = a.ranks.iter().map(|r| table::row(&RANKS, r, ctx)).collect();
    table::markdown(&table::columns(&RANKS, ctx), &rows)
}

fn fold(summary: &str, inner: &str) -> String {
    format!("<details><summary>{summary}</summary>\n\n{inner}\n</details>\n")
}

/// `NCCL_ALGO=Ring, NCCL_PROTO=LL` (escaped), or `-` when the run set none.
fn nccl_settings(env: &std::collections::BTreeMap<String, String>) -> String {
    if env.is_empty() {
        return "-".to_string();
    }
    env.iter().map(|(k, v)| md_cell(&format!("{k}={v}"), NAME)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use commgate_core::result::RunResult;
    use commgate_gate::check::{BaselineRef, CheckReport};
    use commgate_gate::decide::mitigation::{diagnose, Thresholds};
    use commgate_gate::decide::FailOn;
    use commgate_trace::attribute::attribute_events;
    use commgate_trace::attribute::CommEvent;

    pub(crate) fn report(collectives: usize, name_len: usize) -> CheckReport {
        let events: Vec<CommEvent> = (0..collectives)
            .map(|i| CommEvent::new(&format!("{i}_{}", "x".repeat(name_len)), 1.0 + i as f64, 1024.0, 0.5))
            .collect();
        CheckReport {
            paired: None,
            job: None,
            bench_ceiling: None,
            balance: None,
            schema_version: 1,
            error: None,
            verdict: Decision::Tune,
            blocking: false,
            reasons: vec!["<b>|reason|</b>".into(), "second".into()],
            fail_on: FailOn::Regression,
            bench: None,
            comparison: None,
            attribution: Some(diagnose(attribute_events(vec!["t".into()], &events), &Thresholds::default())),
            trace_comparison: None,
            baseline: BaselineRef { path: "b.json".into(), exists: false, runs: 0, fingerprint_match: false },
            base: None,
            workloads: Vec::new(),
        }
    }

    #[test]
    fn markdown_starts_with_the_marker_and_escapes_what_comes_from_files() {
        let md = markdown(&report(3, 4));
        assert!(md.starts_with(MARKER));
        assert!(md.contains("&lt;b&gt;\\|reason\\|&lt;/b&gt;"), "{md}");
        assert!(!md.contains("<b>"));
    }

    #[test]
    fn the_commit_the_job_and_edited_settings_sit_under_the_headline() {
        let env = |k: &str| {
            let v = match k {
                "GITHUB_SHA" => "0123456789abcdef0123456789abcdef01234567",
                "GITHUB_SERVER_URL" => "https://github.com",
                "GITHUB_REPOSITORY" => "acme/train",
                "GITHUB_RUN_ID" => "987654321",
                _ => return None,
            };
            Some(v.to_string())
        };
        let job = commgate_gate::check::JobRef::from_env(env);
        let base = commgate_gate::check::BaseRef {
            sha: "f".repeat(40),
            dir: "baselines".into(),
            changed: vec!["commgate.toml".into()],
        };
        let r = CheckReport { job, base: Some(base), ..report(1, 4) };
        let md = markdown(&r);
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[1].starts_with("### "), "{md}");
        assert_eq!(lines[3], "head `0123456789ab` · [job run](https://github.com/acme/train/actions/runs/987654321)");
        assert!(
            lines[5].starts_with("> ⚠️ this pull request changes commgate.toml: judged with the base commit's"),
            "{md}"
        );
    }

    #[test]
    fn a_job_link_is_kept_only_when_it_is_this_repositorys_run() {
        let hostile = [
            ("https://evil.example/acme/train/actions/runs/1", "another host"),
            ("https://github.com/acme/train/actions/runs/1)[x](https://evil", "markdown"),
            ("https://github.com/other/train/actions/runs/1", "another repository"),
            ("javascript:alert(1)", "a script"),
        ];
        let prefix = commgate_gate::check::runs_prefix("https://github.com", "acme/train");
        assert_eq!(prefix.as_deref(), Some("https://github.com/acme/train/actions/runs/"));
        for (url, what) in hostile {
            let job = commgate_gate::check::JobRef { commit: Some("zz<b>".into()), run_url: Some(url.into()) };
            assert_eq!(job.vetted(prefix.as_deref()), None, "{what}");
        }
        let good = commgate_gate::check::JobRef {
            commit: None,
            run_url: Some("https://github.com/acme/train/actions/runs/42".into()),
        };
        assert_eq!(good.vetted(prefix.as_deref()), Some(good.clone()));
        assert_eq!(commgate_gate::check::runs_prefix("http://github.com", "acme/train"), None);
        assert_eq!(commgate_gate::check::runs_prefix("https://github.com", "acme/train/x"), None);
    }

    fn could_not_evaluate(fail_on: FailOn) -> CheckReport {
        let error = commgate_gate::decide::EvaluationError::new(
            commgate_gate::decide::ErrorKind::BenchFailed,
            "timeout on rank 1: <img src=x>|`rm -rf`|\n[x](javascript:alert(1))",
        );
        CheckReport {
            job: None,
            bench_ceiling: None,
            verdict: Decision::CollectMoreEvidence,
            reasons: vec![error.to_string(), "no baseline at b.json".into()],
            error: Some(error),
            fail_on,
            attribution: None,
            ..report(0, 0)
        }
    }

    /// A finished run's result: `base` ms for comm_only, compute_only, serial, overlap, 120
    /// repeats with a small ramp, on `world` ranks.
    pub(crate) fn run(world: u32, base: [f64; 4], failure: Option<commgate_core::result::Failure>) -> RunResult {
        use commgate_bench::assemble::{build, RunContext};
        let ctx = RunContext {
            plan: commgate_bench::Plan {
                world_size: world,
                dtype: commgate_bench::Dtype::Bfloat16,
                payload_elements: 1 << 20,
                compute_dim: 1024,
                warmup: 0,
                repeats: 120,
                seed: 0,
            },
            backend: "mock".into(),
            evidence_level: commgate_core::result::EvidenceLevel::Mock,
            hardware: commgate_bench::HardwareInfo::default(),
            nodes: 1,
            nccl_env: Default::default(),
            provenance: Default::default(),
            run_label: "t".into(),
            environment_profile: "P".into(),
            created_at: "2026-11-30T00:00:00Z".into(),
        };
        let timings: commgate_bench::assemble::Timings = commgate_core::result::Schedule::ALL
            .iter()
            .zip(base)
            .map(|(&s, b)| {
                (s, (0..world).map(|r| (r, (0..120).map(|i| b * (1.0 + 0.001 * f64::from(i))).collect())).collect())
            })
            .collect();
        build(&ctx, failure.is_none().then_some(&timings), failure, commgate_gate::decide::bench_run::decide)
    }

    #[test]
    fn every_report_check_writes_reads_back_for_comment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let failure = commgate_core::result::Failure { kind: "timeout".into(), message: "hung".into(), rank: None };
        let runs = [
            run(2, [1.0, 2.0, 3.0, 2.2], None),
            run(1, [0.001, 2.0, 2.001, 2.3], None),
            run(2, [1.0, 2.0, 3.0, 3.5], None),
            run(2, [0.0, 0.0, 0.0, 0.0], None),
            run(2, [1.0, 2.0, 3.0, 2.2], Some(failure)),
        ];
        for (i, bench) in runs.into_iter().enumerate() {
            let report = CheckReport { bench: Some(bench), ..report(2, 4) };
            let path = dir.path().join(format!("report-{i}.json"));
            std::fs::write(&path, json(&report)).expect("write");
            let back = commgate_gate::check::load_report(&path).unwrap_or_else(|e| panic!("report {i}: {e}"));
            // Floats may differ in the last bit (serde_json's parser); what is null stays null.
            let shape = |r: &CheckReport| {
                r.bench.as_ref().map(|b| {
                    let (m, c) = (&b.metrics, &b.comparison);
                    let figures = [m.exposed_comm_ms, m.overlap_ratio, m.busbw_gbps, m.matmul_tflops, c.saved_ms];
                    (figures.map(|x| x.is_some()), c.penalty().is_some(), b.decision.clone())
                })
            };
            assert_eq!(shape(&back), shape(&report), "report {i}");
        }
    }

    #[test]
    fn a_report_that_could_not_be_evaluated_leads_with_the_failure_escaped() {
        let r = could_not_evaluate(FailOn::Regression);
        let md = markdown(&r);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[..2], [MARKER, "### ⛔ commgate: could not evaluate"], "{md}");
        assert!(
            lines[3].starts_with("**Could not evaluate: the benchmark failed** (timeout on rank 1: &lt;img"),
            "{md}"
        );
        assert!(md.contains("exits 2 (could not evaluate)"), "{md}");
        assert!(!md.contains("<img") && !md.contains("](javascript") && !md.contains("|`rm"), "{md}");
        assert_eq!(
            md.matches("could not evaluate: the benchmark failed").count(),
            1,
            "the lead, once; then folded: {md}"
        );

        let t = text(&r, crate::Width::Fit);
        assert!(t.starts_with("Could not evaluate: the benchmark failed (timeout on rank 1: <img"), "{t}");
        assert!(t.contains("\\n[x]"), "control characters are defused: {t}");
        assert!(t.contains("exits 2") && t.contains("  - no baseline at b.json\n"), "{t}");
        assert!(!t.contains("  - could not evaluate"), "the lead is not repeated: {t}");
    }

    #[test]
    fn fail_on_never_still_says_what_failed() {
        let r = could_not_evaluate(FailOn::Never);
        assert!(text(&r, crate::Width::Fit).contains("exits 0 only because of --fail-on never"));
        assert!(markdown(&r).contains("### ⛔ commgate: could not evaluate"));
    }

    #[test]
    fn the_run_reads_one_rank_and_a_slower_overlap_for_what_they_are() {
        let one = CheckReport { bench: Some(run(1, [0.001, 2.0, 2.001, 2.3], None)), ..report(1, 4) };
        let slower = CheckReport { bench: Some(run(2, [1.0, 2.0, 3.0, 3.5], None)), ..report(1, 4) };
        let (one_text, one_md) = (text(&one, crate::Width::Fit), markdown(&one));
        assert!(one_text.contains("busbw not applicable (one rank communicates nothing)"), "{one_text}");
        assert!(one_md.contains("| busbw | not applicable (one rank communicates nothing) |"), "{one_md}");
        let (slower_text, slower_md) = (text(&slower, crate::Width::Fit), markdown(&slower));
        assert!(slower_text.contains("overlap 0.530 ms slower than serial per step"), "{slower_text}");
        assert!(slower_md.contains("| overlap | 0.530 ms slower than serial per step |"), "{slower_md}");
        assert!(slower_md.contains("the streams interfere"), "{slower_md}");
        assert!(!slower_md.contains("saves"), "{slower_md}");
    }

    #[test]
    fn huge_reports_fit_githubs_comment_limit() {
        let md = markdown(&report(3000, 40));
        assert!(md.chars().count() <= GITHUB_COMMENT_LIMIT, "{}", md.chars().count());
        assert!(md.starts_with(MARKER));
        assert!(md.contains("\n_2970 more collectives with less exposed time"), "{md}");
        assert_eq!(md.matches("\n| 29").count(), 30, "the 30 collectives with most exposed time: {md}");
        assert!(md.contains("All reasons"), "{md}");
    }
}
