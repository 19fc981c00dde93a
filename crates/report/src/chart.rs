//! The mermaid charts of the Markdown reports: the change chart (each judged metric's change
//! against the ±δ band the gate judges with, one series per workload) and the small trend chart
//! (stored medians, then the current run). Pure functions from typed points to Markdown; every
//! name from a file enters a chart through [`mermaid_label`] and the key under it through
//! [`md_text`].
//!
//! Why lines only: mermaid's `xychart-beta` draws every bar up from the bottom of the plot, so a
//! negative change would show as a tall bar; lines start at their value. Why a Markdown key under
//! the chart: a chart's own legend (`showLegend`) needs a recent mermaid, and GitHub runs a
//! version of its own; the key names the colours the chart is told to use (`plotColorPalette`),
//! which every mermaid 10 and 11 honours.

use super::escape::{md_text, mermaid_label, LABEL};
use commgate_gate::compare::Comparison;

/// Height of the change chart (px): small enough to sit next to the metric table.
pub const CHANGE_HEIGHT: u32 = 250;
/// Height of the trend chart (px).
pub const TREND_HEIGHT: u32 = 200;
/// At most this many workloads get a line; more would repeat colours. The rest are named in the
/// key as not drawn (the table lists them all).
pub const MAX_WORKLOADS: usize = 8;
/// At most this many points in a trend chart (the newest).
pub const MAX_TREND_POINTS: usize = 60;

/// The ±δ band.
const BAND_COLOUR: &str = "#cf222e";
/// One workload: its change, and the two ends of its interval.
const CHANGE_COLOUR: &str = "#0969da";
const INTERVAL_COLOUR: &str = "#8c959f";
/// Several workloads: one colour each, with the word the key uses for it.
const WORKLOAD_COLOURS: [(&str, &str); MAX_WORKLOADS] = [
    ("#0969da", "blue"),
    ("#bc4c00", "orange"),
    ("#1a7f37", "green"),
    ("#8250df", "purple"),
    ("#bf3989", "pink"),
    ("#6e7781", "grey"),
    ("#9a6700", "brown"),
    ("#1b7c83", "teal"),
];

/// One workload's judged metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartSeries {
    pub workload: String,
    pub points: Vec<ChartPoint>,
}

/// One judged metric: its change and the ends of its 95 % interval, in percent (+5.0 is 5 %
/// slower than the baseline).
#[derive(Debug, Clone, PartialEq)]
pub struct ChartPoint {
    pub metric: String,
    pub change_pct: f64,
    pub lo_pct: f64,
    pub hi_pct: f64,
}

impl ChartPoint {
    /// A point can be drawn when all three of its values are numbers.
    fn finite(&self) -> bool {
        self.change_pct.is_finite() && self.lo_pct.is_finite() && self.hi_pct.is_finite()
    }
}

/// The judged metrics of one comparison as a series (ratios as percent changes).
pub fn series_from(workload: &str, c: &Comparison) -> ChartSeries {
    let pct = |ratio: f64| (ratio - 1.0) * 100.0;
    let points = c
        .metrics
        .iter()
        .map(|m| ChartPoint {
            metric: m.label(),
            change_pct: pct(m.judged.ratio),
            lo_pct: pct(m.judged.ci[0]),
            hi_pct: pct(m.judged.ci[1]),
        })
        .collect();
    ChartSeries { workload: workload.to_string(), points }
}

/// A series ready to draw: its values in the order of the chart's categories.
struct Drawn<'a> {
    workload: &'a str,
    points: Vec<&'a ChartPoint>,
}

/// The change chart (a fenced mermaid `xychart-beta` and a one-line key under it), or `None`
/// when no metric has a finite change. `delta_pct` is δ in percent (3.0 for 3 %).
///
/// One workload: its change as a line, the low and high ends of its interval as two lines, and
/// ±δ as two flat lines. Several: one change line per workload (at most [`MAX_WORKLOADS`], the
/// ones that moved most) and ±δ. A metric is a category when every drawn workload has it with
/// finite values; the key names what was left out.
pub fn change_chart(series: &[ChartSeries], delta_pct: f64) -> Option<String> {
    let delta = if delta_pct.is_finite() { delta_pct.abs() } else { 0.0 };
    let (drawn, not_drawn) = pick_series(series);
    let categories = categories(&drawn);
    if categories.is_empty() {
        return None;
    }
    let drawn: Vec<Drawn> = drawn
        .iter()
        .map(|s| Drawn {
            workload: &s.workload,
            points: categories
                .iter()
                .filter_map(|metric| s.points.iter().find(|p| p.finite() && &p.metric == metric))
                .collect(),
        })
        .collect();
    let single = drawn.len() == 1;
    // An interval far wider than every change (±5000 % around changes in the hundreds) would
    // flatten every line: interval ends are cut at CUT_AT times the largest change, the key says so.
    let largest = drawn.iter().flat_map(|s| &s.points).map(|p| p.change_pct.abs()).fold(delta, f64::max).max(1.0);
    let cut = CUT_AT * largest;
    let clipped = |v: f64| v.clamp(-cut, cut);
    let values: Vec<f64> = drawn
        .iter()
        .flat_map(|s| &s.points)
        .flat_map(
            |p| if single { vec![p.change_pct, clipped(p.lo_pct), clipped(p.hi_pct)] } else { vec![p.change_pct] },
        )
        .collect();
    let cut_any = single && drawn.iter().flat_map(|s| &s.points).any(|p| p.lo_pct < -cut || p.hi_pct > cut);
    // Each side scaled to its own values: a chart of slowdowns has little room below zero.
    let top = axis_top(values.iter().copied().fold(0.0, f64::max), delta);
    let bottom = -axis_top(-values.iter().copied().fold(0.0, f64::min), delta);

    let mut lines = vec![
        ("+delta".to_string(), vec![delta; categories.len()]),
        ("-delta".to_string(), vec![-delta; categories.len()]),
    ];
    let mut palette = vec![BAND_COLOUR, BAND_COLOUR];
    let mut key = Vec::new();
    if let [s] = drawn.as_slice() {
        let values = |f: &dyn Fn(&ChartPoint) -> f64| s.points.iter().map(|p| f(p)).collect::<Vec<f64>>();
        lines.push(("CI high".into(), values(&|p| clipped(p.hi_pct))));
        lines.push(("CI low".into(), values(&|p| clipped(p.lo_pct))));
        lines.push((s.workload.to_string(), values(&|p| p.change_pct)));
        palette.extend([INTERVAL_COLOUR, INTERVAL_COLOUR, CHANGE_COLOUR]);
        key.push(format!("blue: the change of {}", md_text(s.workload, LABEL)));
        key.push("grey: its 95 % interval".to_string());
    } else {
        for (s, (colour, word)) in drawn.iter().zip(WORKLOAD_COLOURS) {
            lines.push((s.workload.to_string(), s.points.iter().map(|p| p.change_pct).collect()));
            palette.push(colour);
            key.push(format!("{word}: {}", md_text(s.workload, LABEL)));
        }
    }
    key.push(format!("red: ±δ = {} %", number(delta)));
    let mut notes = Vec::new();
    if cut_any {
        notes.push(format!("intervals cut at ±{} % to keep the changes readable", number(cut)));
    }
    if !not_drawn.is_empty() {
        let names: Vec<String> = not_drawn.iter().map(|s| md_text(&s.workload, LABEL)).collect();
        notes.push(format!("not drawn: {}", names.join(", ")));
    }
    let left_out = left_out_metrics(series, &categories);
    if !left_out.is_empty() {
        let names: Vec<String> = left_out.iter().map(|m| md_text(m, LABEL)).collect();
        notes.push(format!("left out (not a number for every workload drawn): {}", names.join(", ")));
    }

    let mut out = format!(
        "```mermaid\n{}\nxychart-beta\n    title \"Change vs baseline (%), against the ±δ band\"\n    x-axis [{}]\n    y-axis \"change %\" {} --> {}\n",
        init(CHANGE_HEIGHT, &palette),
        categories.iter().map(|m| mermaid_label(short_metric(m), LABEL)).collect::<Vec<_>>().join(", "),
        number(bottom),
        number(top)
    );
    for (name, values) in &lines {
        out.push_str(&format!("    line {} [{}]\n", mermaid_label(name, LABEL), numbers(values)));
    }
    out.push_str("```\n\n");
    out.push_str(&format!(
        "_Change in percent, above 0 is slower; a regression is confirmed only when a whole interval lies above +δ. Key: {}{}._\n",
        key.join(" · "),
        notes.iter().map(|n| format!("; {n}")).collect::<String>()
    ));
    Some(out)
}

/// Interval ends are drawn up to this many times the largest change (or δ).
const CUT_AT: f64 = 3.0;

/// A metric's x-axis label: the long schedule names shortened so that seven labels do not
/// overlap in a 700-pixel chart (the table beside it names them in full).
fn short_metric(metric: &str) -> &str {
    match metric {
        "overlap median" => "overlap med",
        "serial median" => "serial med",
        "comm_only median" => "comm med",
        "compute_only median" => "compute med",
        "exposed comm" => "exposed",
        other => other,
    }
}

/// The series that get a line (those with a finite point; of more than [`MAX_WORKLOADS`], the
/// ones whose largest change is largest, kept in their given order) and the ones that do not.
fn pick_series(series: &[ChartSeries]) -> (Vec<&ChartSeries>, Vec<&ChartSeries>) {
    let moved =
        |s: &ChartSeries| s.points.iter().filter(|p| p.finite()).map(|p| p.change_pct.abs()).fold(f64::NAN, f64::max);
    let mut ranked: Vec<(usize, f64)> =
        series.iter().enumerate().map(|(i, s)| (i, moved(s))).filter(|(_, m)| !m.is_nan()).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(MAX_WORKLOADS);
    let chosen: std::collections::BTreeSet<usize> = ranked.iter().map(|(i, _)| *i).collect();
    let (drawn, not_drawn): (Vec<_>, Vec<_>) = series.iter().enumerate().partition(|(i, _)| chosen.contains(i));
    (drawn.into_iter().map(|(_, s)| s).collect(), not_drawn.into_iter().map(|(_, s)| s).collect())
}

/// The metrics every drawn series has with finite values, in the order they first appear.
fn categories(drawn: &[&ChartSeries]) -> Vec<String> {
    let Some(first) = drawn.first() else { return Vec::new() };
    let mut out: Vec<String> = Vec::new();
    for p in first.points.iter().filter(|p| p.finite()) {
        let everywhere = drawn.iter().all(|s| s.points.iter().any(|q| q.finite() && q.metric == p.metric));
        if everywhere && !out.contains(&p.metric) {
            out.push(p.metric.clone());
        }
    }
    out
}

/// Metrics with a finite value somewhere that are not categories, in order of appearance.
fn left_out_metrics(series: &[ChartSeries], categories: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in series.iter().flat_map(|s| &s.points).filter(|p| p.finite()) {
        if !categories.contains(&p.metric) && !out.contains(&p.metric) {
            out.push(p.metric.clone());
        }
    }
    out
}

/// One end of the y-axis (the top; the bottom is the same rule on the negated values): every
/// value and ±δ inside with a 10 % margin, at least 2δ (so the band never fills the plot), at
/// least 1 %, rounded up to 1, 2, 2.5 or 5 times a power of ten.
fn axis_top(extent: f64, delta: f64) -> f64 {
    nice_ceiling((extent * 1.1).max(2.0 * delta).max(1.0))
}

fn nice_ceiling(x: f64) -> f64 {
    if !x.is_finite() || x <= 0.0 {
        return 1.0;
    }
    let scale = 10f64.powf(x.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().find(|s| s * scale >= x * (1.0 - 1e-9)).unwrap_or(10.0);
    step * scale
}

/// The init directive: the height and one colour per line, in the order the lines are written.
fn init(height: u32, palette: &[&str]) -> String {
    format!(
        "%%{{init: {{\"xyChart\": {{\"width\": 900, \"height\": {height}, \"xAxis\": {{\"labelFontSize\": 12}}}}, \"themeVariables\": {{\"xyChart\": {{\"plotColorPalette\": \"{}\"}}}}}}}}%%",
        palette.join(",")
    )
}

/// A number as mermaid reads it: two decimals, no `-0.00`.
fn number(x: f64) -> String {
    let s = format!("{x:.2}");
    if s == "-0.00" {
        "0.00".to_string()
    } else {
        s
    }
}

fn numbers(values: &[f64]) -> String {
    values.iter().map(|v| number(*v)).collect::<Vec<_>>().join(", ")
}

/// A small line chart of the stored values (labelled, oldest first) then, when given, the
/// current run's (labelled `current`), or `None` when there is no finite value. Only the newest
/// [`MAX_TREND_POINTS`] are drawn; non-finite values are dropped. The y-axis spans the values
/// with a margin, not from zero: a trend is about the change.
pub fn trend_chart(title: &str, points: &[(String, f64)], current: Option<f64>) -> Option<String> {
    let mut all: Vec<(String, f64)> = points.iter().filter(|(_, v)| v.is_finite()).cloned().collect();
    all.extend(current.filter(|v| v.is_finite()).map(|v| ("current".to_string(), v)));
    let newest = all.len().saturating_sub(MAX_TREND_POINTS);
    let all: Vec<(String, f64)> = all.into_iter().skip(newest).collect();
    if all.is_empty() {
        return None;
    }
    let (lo, hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, v)| (lo.min(*v), hi.max(*v)));
    let margin = if hi > lo { (hi - lo) * 0.1 } else { (hi.abs() * 0.05).max(0.001) };
    let (bottom, top) = (lo - margin, hi + margin);
    // Step times are positive: an axis that only dips below zero for the margin reads wrong.
    let bottom = if lo >= 0.0 { bottom.max(0.0) } else { bottom };
    let labels: Vec<String> = all.iter().map(|(l, _)| mermaid_label(l, LABEL)).collect();
    let values: Vec<String> = all.iter().map(|(_, v)| format!("{v:.3}")).collect();
    Some(format!(
        "```mermaid\n{}\nxychart-beta\n    title {}\n    x-axis [{}]\n    y-axis \"ms\" {bottom:.3} --> {top:.3}\n    line [{}]\n```\n",
        init(TREND_HEIGHT, &[CHANGE_COLOUR]),
        mermaid_label(title, 80),
        labels.join(", "),
        values.join(", ")
    ))
}

/// The paired check's chart: one metric's change head / base in each round (in %), with the
/// ±δ band, rounds in order (at most [`MAX_TREND_POINTS`], the newest); `None` when no round
/// has a finite value. Each round cancels the machine's state of its minute, so a change that
/// is real sits on one side of zero round after round.
pub fn rounds_chart(title: &str, changes_pct: &[Option<f64>], delta_pct: f64) -> Option<String> {
    let skip = changes_pct.len().saturating_sub(MAX_TREND_POINTS);
    let shown: Vec<(usize, f64)> = changes_pct
        .iter()
        .enumerate()
        .skip(skip)
        .filter_map(|(i, v)| v.filter(|v| v.is_finite()).map(|v| (i + 1, v)))
        .collect();
    if shown.is_empty() {
        return None;
    }
    let (lo, hi) = shown.iter().fold((-delta_pct, delta_pct), |(lo, hi), (_, v)| (lo.min(*v), hi.max(*v)));
    let margin = ((hi - lo) * 0.1).max(0.1);
    let labels: Vec<String> = shown.iter().map(|(i, _)| format!("\"{i}\"")).collect();
    let values: Vec<f64> = shown.iter().map(|(_, v)| *v).collect();
    let band = |v: f64| numbers(&vec![v; shown.len()]);
    Some(format!(
        "```mermaid\n{}\nxychart-beta\n    title {}\n    x-axis \"round\" [{}]\n    y-axis \"change (%)\" {} --> {}\n    line [{}]\n    line [{}]\n    line [{}]\n```\n\n\
         <sub>Blue: head against base in each round; red: ±{} (δ).</sub>\n",
        init(TREND_HEIGHT, &[CHANGE_COLOUR, BAND_COLOUR, BAND_COLOUR]),
        mermaid_label(title, 80),
        labels.join(", "),
        number(lo - margin),
        number(hi + margin),
        numbers(&values),
        band(delta_pct),
        band(-delta_pct),
        number(delta_pct).trim_end_matches('0').trim_end_matches('.').to_string() + " %"
    ))
}

#[cfg(test)]
mod tests;
