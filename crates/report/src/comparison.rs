//! A comparison against the baseline (`commgate compare`, and the metric table of a check
//! report) rendered three ways: the terminal's baseline line, one row per metric, the verdict
//! and the reasons; the Markdown of a PR comment (the verdict first, the metric table, the
//! reasons); and the JSON of `docs/formats.md`, "Comparison JSON". A sweep's comparison shows its
//! points instead of metrics ([`super::sweep`]). The figures are the comparison's; nothing here
//! judges.

use super::cells::{metric_change, ms, p_value, two};
use super::escape::{code_span, md_text, plain, NAME, PATH, TEXT};
use super::sweep;
use super::table::{self, Align, Context};
use commgate_core::units::{change, interval, pct};
use commgate_gate::compare::{Comparison, MetricComparison, ThroughputKind};

/// Renders a comparison for a terminal: the baseline, one row per metric, the verdict and the
/// reasons a reviewer acts on.
pub fn text(c: &Comparison, width: crate::Width) -> String {
    let mut out = format!("{}\n{}", plain(&c.headline, TEXT), text_table(c, width));
    let blocking = if c.regression { " (blocking: confirmed regression)" } else { "" };
    out.push_str(&format!("\nVerdict: {}{blocking}\n", c.verdict.as_str()));
    for r in &c.reasons {
        out.push_str(&format!("  - {}\n", plain(r, TEXT)));
    }
    out
}

/// Renders a comparison as Markdown: the verdict and its first reason, the metric table, all
/// reasons. Everything from files is escaped.
pub fn markdown(c: &Comparison) -> String {
    let mut out = format!("**commgate compare `{}`: {}**\n\n", c.verdict.as_str(), md_text(&c.headline, TEXT));
    let b = &c.baseline;
    out.push_str(&format!(
        "Baseline {}: hardware {}, {}; {}\n\n",
        code_span(&b.path, PATH),
        if b.fingerprint_match { "matches" } else { "**differs**" },
        b.spread.map_or_else(|| "run spread unknown (< 3 runs)".to_string(), |s| format!("run spread {}", pct(s))),
        power_line(c)
    ));
    if !c.metrics.is_empty() {
        out.push_str(&markdown_table(c));
        out.push('\n');
        if let Some(chart) = sweep::busbw_chart(c) {
            out.push_str(&chart);
            out.push('\n');
        }
    }
    for r in &c.reasons {
        out.push_str(&format!("- {}\n", md_text(r, TEXT)));
    }
    out
}

/// Renders a comparison as pretty JSON (formats.md, "Comparison JSON").
pub fn json(c: &Comparison) -> String {
    super::json::pretty(c)
}

/// The baseline line and one row per metric, without the verdict: what a `check` report shows
/// under its own verdict.
pub(crate) fn text_table(c: &Comparison, width: crate::Width) -> String {
    let mut out = format!("{}\n\n", baseline_line(c));
    if sweep::is_sweep(c) && !c.metrics.is_empty() {
        let rows = sweep::rows(c, Context::Text);
        let (t, dropped) = table::text_fitted(&sweep::COLUMNS, &rows, &sweep::DROP, width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
        return out;
    }
    let rows: Vec<Vec<String>> = c.metrics.iter().flat_map(metric_rows).collect();
    if rows.is_empty() {
        out.push_str("No metrics compared.\n");
    } else {
        let columns = [&METRIC_COLUMNS[..], &METRIC_TAIL_COLUMNS].concat();
        let (t, dropped) = table::text_fitted(&columns, &rows, &METRIC_DROP, width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
    }
    out
}

/// The comparison's metric table in Markdown (shared by the compare report and the check
/// report).
pub(crate) fn markdown_table(c: &Comparison) -> String {
    if sweep::is_sweep(c) {
        return sweep::markdown_table(c);
    }
    let rows: Vec<Vec<String>> = c
        .metrics
        .iter()
        .flat_map(|m| {
            let state = format!("`{}`", m.judged.state.as_str());
            let cells = [Some(metric_cells(m, Context::Markdown)), throughput_cells(m, Context::Markdown)];
            cells.into_iter().flatten().map(move |mut row| {
                row.push(state.clone());
                row
            })
        })
        .collect();
    table::markdown(&[&METRIC_COLUMNS[..], &[("state", Align::Left)]].concat(), &rows)
}

/// What a comparison can see, for every report's baseline line: "10 runs from 1 runner, δ = 3 %,
/// minimum detectable effect 4.6 %" (or "cannot block on its own"), so a powerless gate is
/// visible next to its margin.
pub(crate) fn power_line(c: &Comparison) -> String {
    let b = &c.baseline;
    let runs = format!("{} run{}", b.runs, if b.runs == 1 { "" } else { "s" });
    let runners = match b.runners {
        0 => String::new(),
        1 => " from 1 runner".to_string(),
        n => format!(" from {n} runners"),
    };
    let current = if c.current_runs > 1 { format!(", {} current runs", c.current_runs) } else { String::new() };
    let mde = c
        .mde
        .map_or_else(|| "cannot block on its own".to_string(), |m| format!("minimum detectable effect {}", pct(m)));
    format!("{runs}{runners}{current}, δ = {}, {mde}", pct(c.delta))
}

fn baseline_line(c: &Comparison) -> String {
    let b = &c.baseline;
    let hardware = if b.fingerprint_match { "hardware matches" } else { "HARDWARE DIFFERS" };
    let spread = b.spread.map_or_else(|| "spread unknown (< 3 runs)".to_string(), |s| format!("run spread {}", pct(s)));
    format!("Baseline: {} ({hardware}, {spread}): {}", plain(&b.path, PATH), power_line(c))
}

/// The metric table's leading columns (text and Markdown); each renderer appends its own
/// trailing ones. [`metric_cells`] fills them in this order.
const METRIC_COLUMNS: [(&str, Align); 7] = [
    ("metric", Align::Left),
    ("baseline ms", Align::Right),
    ("current ms", Align::Right),
    ("change", Align::Right),
    ("95 % CI", Align::Right),
    ("p (Holm)", Align::Right),
    ("n base/cur", Align::Right),
];

/// The order the metric table leaves columns out in to fit (least important first): the
/// counts, the method and the p-value before the change, its interval and its state.
const METRIC_DROP: [usize; 8] = [6, 7, 5, 1, 2, 8, 4, 3];

/// The shared metric columns, then how each was estimated and its state.
const METRIC_TAIL_COLUMNS: [(&str, Align); 2] = [("method", Align::Left), ("state", Align::Left)];

/// The leading cells of one metric's row (the label is the crate's own; escaping it for `ctx`
/// changes nothing and keeps the rule that every cell goes through its context).
fn metric_cells(m: &MetricComparison, ctx: Context) -> Vec<String> {
    vec![
        ctx.escape(&m.label(), NAME),
        ms(m.judged.baseline),
        ms(m.judged.current),
        metric_change(m),
        interval(m.judged.ci),
        p_value(m.judged.p_adjusted),
        format!("{}/{}", m.judged.n_baseline, m.judged.n_current),
    ]
}

/// The row under a phase median that shows it as a throughput (busbw, matmul TFLOPS), when it
/// has one: the same test, so the p-value cell says so instead of repeating it, and the values
/// carry their unit because the column heads say ms.
fn throughput_cells(m: &MetricComparison, ctx: Context) -> Option<Vec<String>> {
    let t = m.throughput.as_ref()?;
    // A CPU run's matmul does tens of GFLOPS: shown in TFLOPS it would read 0.01 against 0.02.
    let small = t.kind == ThroughputKind::MatmulTflops && t.baseline.max(t.current) < 1.0;
    let (label, unit, scale) =
        if small { ("matmul GFLOPS", "GFLOPS", 1e3) } else { (t.kind.label(), t.kind.unit(), 1.0) };
    Some(vec![
        ctx.escape(&format!("{label} (same test)"), NAME),
        format!("{} {unit}", two(t.baseline * scale)),
        format!("{} {unit}", two(t.current * scale)),
        change(t.ratio),
        interval(t.ci),
        p_value(m.judged.p_adjusted),
        format!("{}/{}", m.judged.n_baseline, m.judged.n_current),
    ])
}

/// The metric's row, then its throughput row when it has one.
fn metric_rows(m: &MetricComparison) -> Vec<Vec<String>> {
    let tail = [m.judged.method.to_string(), m.judged.state.as_str().to_string()];
    let mut row = metric_cells(m, Context::Text);
    row.extend(tail.clone());
    let mut rows = vec![row];
    if let Some(mut t) = throughput_cells(m, Context::Text) {
        t.extend(tail);
        rows.push(t);
    }
    rows
}
