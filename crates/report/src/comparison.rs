//! A comparison against the baseline (`commgate compare`, and the metric table of a check
//! report) rendered three ways: the terminal's baseline line, one row per metric, the verdict
//! and the reasons; the Markdown of a PR comment (the verdict first, the metric table, the
//! reasons); and the JSON of `docs/formats.md`, "Comparison JSON". A sweep's comparison shows its
//! points instead of metrics ([`super::sweep`]). The figures are the comparison's; nothing here
//! judges.

use super::cells::{metric_change, ms, p_value, two};
use super::escape::{code_span, md_text, plain, NAME, PATH, TEXT};
use super::sweep;
use super::table::{self, Column, Context, Field};
use commgate_core::units::{change, interval, pct};
use commgate_gate::compare::{Comparison, Judged, MetricComparison, ThroughputKind};

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
        out.push_str(&sweep::text_table(c, width));
        return out;
    }
    let rows = metric_rows(c, Context::Text);
    if rows.is_empty() {
        out.push_str("No metrics compared.\n");
    } else {
        out.push_str(&table::fitted(&table::columns(&METRIC, Context::Text), &rows, width));
    }
    out
}

/// The comparison's metric table in Markdown (shared by the compare report and the check
/// report).
pub(crate) fn markdown_table(c: &Comparison) -> String {
    if sweep::is_sweep(c) {
        return sweep::markdown_table(c);
    }
    table::markdown(&table::columns(&METRIC, Context::Markdown), &metric_rows(c, Context::Markdown))
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
    // The one minimum detectable effect, with the metric it is of (the headline's may name another
    // metric's, with that metric).
    let of = c.metrics.iter().find(|m| m.primary).map(|m| format!(" on the {}", m.label())).unwrap_or_default();
    let mde = c
        .mde
        .map_or_else(|| "cannot block on its own".to_string(), |m| format!("minimum detectable effect {}{of}", pct(m)));
    format!("{runs}{runners}{current}, δ = {}, {mde}", pct(c.delta))
}

fn baseline_line(c: &Comparison) -> String {
    let b = &c.baseline;
    let hardware = if b.fingerprint_match { "hardware matches" } else { "HARDWARE DIFFERS" };
    let spread = b.spread.map_or_else(|| "spread unknown (< 3 runs)".to_string(), |s| format!("run spread {}", pct(s)));
    format!("Baseline: {} ({hardware}, {spread}): {}", plain(&b.path, PATH), power_line(c))
}

/// One line of the metric table: a metric, or under a phase median its throughput (busbw, matmul
/// TFLOPS). A throughput is the same test shown as a rate, so its p-value, counts, method and
/// state are the median's, and its values carry their unit because the column heads say ms.
struct Line {
    label: String,
    baseline: String,
    current: String,
    change: String,
    ci: [f64; 2],
    judged: Judged,
}

impl Line {
    /// The metric's line.
    fn metric(m: &MetricComparison) -> Line {
        Line {
            label: m.label(),
            baseline: ms(m.judged.baseline),
            current: ms(m.judged.current),
            change: metric_change(m),
            ci: m.judged.ci,
            judged: m.judged.clone(),
        }
    }

    /// The throughput line under the metric, when it has one.
    fn throughput(m: &MetricComparison) -> Option<Line> {
        let t = m.throughput.as_ref()?;
        // A CPU run's matmul does tens of GFLOPS: shown in TFLOPS it would read 0.01 against 0.02.
        let small = t.kind == ThroughputKind::MatmulTflops && t.baseline.max(t.current) < 1.0;
        let (label, unit, scale) =
            if small { ("matmul GFLOPS", "GFLOPS", 1e3) } else { (t.kind.label(), t.kind.unit(), 1.0) };
        Some(Line {
            label: format!("{label} (same test)"),
            baseline: format!("{} {unit}", two(t.baseline * scale)),
            current: format!("{} {unit}", two(t.current * scale)),
            change: change(t.ratio),
            ci: t.ci,
            judged: m.judged.clone(),
        })
    }
}

/// The metric table's columns. A text table that must fit leaves out the counts, the method and
/// the p-value before the values, the change, its interval and its state (`drop_rank` 1 first);
/// the Markdown table has no method. The label is the crate's own: escaping it changes nothing
/// and keeps the rule that every cell goes through its context.
const METRIC: [Field<Line>; 9] = [
    Column::left("metric").cell(|l, ctx| ctx.escape(&l.label, NAME)),
    Column::right("baseline ms").drop_rank(4).cell(|l, _| l.baseline.clone()),
    Column::right("current ms").drop_rank(5).cell(|l, _| l.current.clone()),
    Column::right("change").drop_rank(8).cell(|l, _| l.change.clone()),
    Column::right("95 % CI").drop_rank(7).cell(|l, _| interval(l.ci)),
    Column::right("p (Holm)").drop_rank(3).cell(|l, _| p_value(l.judged.p_adjusted)),
    Column::right("n base/cur").drop_rank(1).cell(|l, _| format!("{}/{}", l.judged.n_baseline, l.judged.n_current)),
    Column::left("method").drop_rank(2).text_only().cell(|l, _| l.judged.method.to_string()),
    Column::left("state").drop_rank(6).cell(|l, ctx| ctx.code(l.judged.state.as_str())),
];

/// Every metric's row, each followed by its throughput's when it has one.
fn metric_rows(c: &Comparison, ctx: Context) -> Vec<Vec<String>> {
    c.metrics
        .iter()
        .flat_map(|m| [Some(Line::metric(m)), Line::throughput(m)])
        .flatten()
        .map(|line| table::row(&METRIC, &line, ctx))
        .collect()
}
