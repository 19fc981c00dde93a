//! An nccl-tests sweep's comparison as a size × busbw table and a chart of bus bandwidth
//! against size: per point its median time before and now, the change and its interval, the
//! bus bandwidth at both medians, the share of this runner's ceiling and plateau it reached, and
//! the state. The figures are the comparison's ([`commgate_gate::compare::sweep`]); nothing here judges.

use super::cells::{hardware_line, metric_change, p_value, two};
use super::escape::{md_text, NAME};
use super::table::{self, Column, Context, Field};
use commgate_core::result::sweep::SweepData;
use commgate_core::result::RunResult;
use commgate_core::units::interval;
use commgate_gate::compare::{Comparison, MetricComparison};

/// One point of the sweep table: its comparison, and whether its size cell names its curve.
struct Point<'a> {
    m: &'a MetricComparison,
    /// The sweep holds several (collective, dtype, op) curves.
    full: bool,
}

impl Point<'_> {
    /// The bus bandwidth at the current median, GB/s.
    fn busbw_now(&self) -> Option<f64> {
        self.m.throughput.as_ref().map(|t| t.current)
    }
}

/// The sweep table's columns. A text table that must fit 100 characters leaves out the counts,
/// the p-value, the plateau, the baseline time, the interval and the current time, in that order
/// (`drop_rank` 1 first). The Markdown table (a PR comment is about 900 px wide) shows the point,
/// the change and its interval, the bus bandwidth before and now, the share of this runner's
/// peak and the state; the text report (`--wide`) and the JSON carry the rest. A function rather
/// than a constant: its rows borrow the comparison.
fn fields<'a>() -> [Field<Point<'a>>; 13] {
    [
        Column::right("size").cell(|p, ctx| ctx.escape(&size_cell(p.m, p.full), NAME)),
        Column::left("place").cell(|p, ctx| ctx.escape(&place_cell(p.m), NAME)),
        Column::right("base µs").drop_rank(4).text_only().cell(|p, _| two(p.m.judged.baseline * 1e3)),
        Column::right("now µs").drop_rank(6).text_only().cell(|p, _| two(p.m.judged.current * 1e3)),
        Column::right("change").cell(|p, _| metric_change(p.m)),
        Column::right("95 % CI").drop_rank(5).cell(|p, _| interval(p.m.judged.ci)),
        Column::right("busbw base GB/s").cell(|p, _| gbps(p.m.throughput.as_ref().map(|t| t.baseline))),
        Column::right("busbw now GB/s").cell(|p, _| gbps(p.busbw_now())),
        Column::right("of peak")
            .cell(|p, _| share(p.m.point.as_ref().zip(p.busbw_now()).and_then(|(x, b)| x.of_ceiling(b)))),
        Column::right("of plateau")
            .drop_rank(3)
            .text_only()
            .cell(|p, _| share(p.m.point.as_ref().zip(p.busbw_now()).and_then(|(x, b)| x.of_plateau(b)))),
        Column::right("p (Holm)").drop_rank(2).text_only().cell(|p, _| p_value(p.m.judged.p_adjusted)),
        Column::right("n base/cur")
            .drop_rank(1)
            .text_only()
            .cell(|p, _| format!("{}/{}", p.m.judged.n_baseline, p.m.judged.n_current)),
        Column::left("state").cell(|p, ctx| ctx.code(p.m.judged.state.as_str())),
    ]
}

/// Whether a comparison is a sweep's (its metrics are points).
pub(crate) fn is_sweep(c: &Comparison) -> bool {
    c.sweep.is_some() && c.metrics.iter().all(|m| m.point.is_some())
}

/// A point's size in the table, with its collective, dtype and op when the sweep holds more than
/// one of them.
fn size_cell(m: &MetricComparison, full: bool) -> String {
    match &m.point {
        Some(p) if full => {
            format!("{} {} {} {}", p.key.collective, p.key.dtype, p.key.redop, commgate_core::units::bytes(p.key.size))
        }
        Some(p) => commgate_core::units::bytes(p.key.size),
        None => m.label(),
    }
}

/// `out`, `in`: a placement in a narrow cell.
fn place_cell(m: &MetricComparison) -> String {
    match m.point.as_ref().map(|p| p.key.placement.as_str()) {
        Some("out_of_place") => "out".to_string(),
        Some("in_place") => "in".to_string(),
        Some(other) => other.to_string(),
        None => "-".to_string(),
    }
}

/// Whether the points span several (collective, dtype, op) curves.
fn several_curves(c: &Comparison) -> bool {
    let mut curves: Vec<(&str, &str, &str)> = c
        .metrics
        .iter()
        .filter_map(|m| m.point.as_ref())
        .map(|p| (p.key.collective.as_str(), p.key.dtype.as_str(), p.key.redop.as_str()))
        .collect();
    curves.sort_unstable();
    curves.dedup();
    curves.len() > 1
}

/// A share as a whole percent (`78 %`), or `-`.
fn share(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "-".to_string(), |v| format!("{:.0} %", 100.0 * v))
}

/// GB/s with two decimals, or `-`.
fn gbps(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite() && *v > 0.0).map_or_else(|| "-".to_string(), two)
}

/// Every point's row of the columns `ctx` shows, in the sweep's order.
pub fn rows(c: &Comparison, ctx: Context) -> Vec<Vec<String>> {
    let fields = fields();
    let full = several_curves(c);
    c.metrics.iter().map(|m| table::row(&fields, &Point { m, full }, ctx)).collect()
}

/// The text table, `width` wide.
pub(crate) fn text_table(c: &Comparison, width: crate::Width) -> String {
    table::fitted(&table::columns(&fields(), Context::Text), &rows(c, Context::Text), width)
}

/// At most this many points are rows of the Markdown table (a sweep of every dtype has
/// hundreds, and a PR comment holds 65,536 characters): every point that is not `unchanged`
/// first, then unchanged ones, in the sweep's order; a line says how many were left out.
pub const MARKDOWN_ROWS: usize = 64;

/// The Markdown table: the Markdown columns of at most [`MARKDOWN_ROWS`] points.
pub fn markdown_table(c: &Comparison) -> String {
    let unchanged = |m: &MetricComparison| m.judged.state == commgate_gate::compare::State::Unchanged;
    let changed = c.metrics.iter().filter(|m| !unchanged(m)).count().min(MARKDOWN_ROWS);
    // Every changed point up to the limit, then unchanged ones in the room left, in order.
    let (mut changed_left, mut quiet_left) = (changed, MARKDOWN_ROWS - changed);
    let keep: Vec<bool> = c
        .metrics
        .iter()
        .map(|m| {
            let left = if unchanged(m) { &mut quiet_left } else { &mut changed_left };
            let kept = *left > 0;
            *left = left.saturating_sub(1);
            kept
        })
        .collect();
    let rows: Vec<Vec<String>> =
        rows(c, Context::Markdown).into_iter().zip(&keep).filter(|(_, &k)| k).map(|(r, _)| r).collect();
    let mut out = table::markdown(&table::columns(&fields(), Context::Markdown), &rows);
    let left_out = c.metrics.len() - rows.len();
    if left_out > 0 {
        let quiet = c.metrics.iter().zip(&keep).filter(|(m, &k)| unchanged(m) && !k).count();
        out.push_str(&format!(
            "\n{left_out} more points are not listed ({quiet} of them unchanged); the text report and the JSON list \
             every point.\n"
        ));
    }
    out
}

/// "nccl-tests all_reduce_perf on 2 × NVIDIA H200 · 2 nodes, NCCL 2.27.3: 8 sizes × 2
/// placements, 50 iterations each": the run line of a sweep (untrusted names: the caller escapes),
/// `None` for a benchmark run.
pub(crate) fn run_line(b: &RunResult) -> Option<String> {
    let s = b.sweep.as_ref()?;
    let machine = hardware_line(&b.hardware);
    let nccl = b.software.nccl.as_deref().map(|v| format!(", NCCL {v}")).unwrap_or_default();
    Some(format!("nccl-tests {} on {machine}{nccl}: {}", s.program, points_line(s)))
}

/// "8 sizes × 2 placements, 50 iterations each (-I 1)", or "… one summary time each (no -I 1)".
pub(crate) fn points_line(s: &SweepData) -> String {
    let mut sizes: Vec<u64> = s.points.iter().map(|p| p.key.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let placements = if s.points.iter().any(|p| p.key.placement == "in_place") { 2 } else { 1 };
    let per = if s.per_iteration {
        let n = s.points.iter().map(|p| p.samples_ms.len()).max().unwrap_or(0);
        format!("{n} iterations each (-I 1)")
    } else {
        "one summary time each (no -I 1)".to_string()
    };
    format!(
        "{} size{} × {placements} placement{}, {per}",
        sizes.len(),
        if sizes.len() == 1 { "" } else { "s" },
        if placements == 1 { "" } else { "s" }
    )
}

/// The hosts of a sweep, at most four named then a count.
pub(crate) fn hosts_line(hosts: &[&str]) -> String {
    let mut distinct: Vec<&str> = hosts.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let shown: Vec<&str> = distinct.iter().take(4).copied().collect();
    let more = distinct.len() - shown.len();
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else if shown.is_empty() {
        "-".to_string()
    } else {
        shown.join(", ")
    }
}

/// The chart's colours: current, baseline, ceiling.
const CURRENT: &str = "#0969da";
const BASELINE: &str = "#8c959f";
const CEILING: &str = "#1a7f37";

/// At most this many sizes are drawn (the largest, where bandwidth is measured); the table
/// lists them all.
pub const MAX_SIZES: usize = 40;

/// A chart of bus bandwidth against size (mermaid `xychart-beta`, sizes as categories in the
/// sweep's geometric order, so the x axis reads as a log axis): the current and baseline medians
/// and this runner's ceiling, for the primary point's curve out of place; and a key under it.
/// `None` when fewer than two sizes have a bandwidth.
pub fn busbw_chart(c: &Comparison) -> Option<String> {
    let primary = c.metrics.iter().find(|m| m.primary)?.point.as_ref()?;
    let same = |m: &&MetricComparison| {
        m.point.as_ref().is_some_and(|p| {
            (&p.key.collective, &p.key.dtype, &p.key.redop, &p.key.placement)
                == (&primary.key.collective, &primary.key.dtype, &primary.key.redop, &primary.key.placement)
        })
    };
    let mut drawn: Vec<&MetricComparison> =
        c.metrics.iter().filter(same).filter(|m| m.throughput.as_ref().is_some_and(|t| t.current > 0.0)).collect();
    drawn.sort_by_key(|m| m.point.as_ref().map_or(0, |p| p.key.size));
    let skipped = drawn.len().saturating_sub(MAX_SIZES);
    let drawn: Vec<&MetricComparison> = drawn.into_iter().skip(skipped).collect();
    if drawn.len() < 2 {
        return None;
    }
    let value = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(0.0);
    let series =
        |f: &dyn Fn(&MetricComparison) -> Option<f64>| -> Vec<f64> { drawn.iter().map(|m| value(f(m))).collect() };
    let current = series(&|m| m.throughput.as_ref().map(|t| t.current));
    let baseline = series(&|m| m.throughput.as_ref().map(|t| t.baseline));
    let ceiling = series(&|m| m.point.as_ref().and_then(|p| p.ceiling_gbps));
    let has_ceiling = ceiling.iter().any(|v| *v > 0.0);
    let top = current.iter().chain(&baseline).chain(&ceiling).copied().fold(0.0, f64::max);
    let top = nice_top(top);
    let labels: Vec<String> = drawn.iter().map(|m| short_size(m.point.as_ref().map_or(0, |p| p.key.size))).collect();
    let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ");
    let curve = format!(
        "{} {} {} {}",
        primary.key.collective,
        primary.key.dtype,
        primary.key.redop,
        primary.key.placement.replace('_', "-")
    );
    // Drawn in this order, the current line last: on top where the three agree.
    let mut palette = Vec::new();
    let mut lines = String::new();
    if has_ceiling {
        palette.push(CEILING);
        lines.push_str(&format!("    line [{}]\n", fmt(&ceiling)));
    }
    palette.extend([BASELINE, CURRENT]);
    lines.push_str(&format!("    line [{}]\n    line [{}]\n", fmt(&baseline), fmt(&current)));
    let chart = format!(
        "```mermaid\n---\nconfig:\n  xyChart:\n    width: 900\n    height: 250\n    xAxis:\n      labelFontSize: 12\n  themeVariables:\n    xyChart:\n      plotColorPalette: \"{}\"\n---\nxychart-beta\n    title \"Bus bandwidth (GB/s) by size\"\n    x-axis [{}]\n    y-axis \"GB/s\" 0 --> {top}\n{lines}```\n",
        palette.join(", "),
        labels.iter().map(|l| format!("\"{l}\"")).collect::<Vec<_>>().join(", "),
    );
    let mut key = format!("Key ({curve}): blue = now (median), grey = baseline (median)");
    if has_ceiling {
        key.push_str(", green = this runner's ceiling (best stored run)");
    }
    if skipped > 0 {
        key.push_str(&format!("; the {skipped} smallest sizes are not drawn (the table lists them)"));
    }
    Some(format!("{chart}\n{}\n", md_text(&key, super::escape::TEXT)))
}

/// An axis end a little above `v`, rounded to two significant digits.
fn nice_top(v: f64) -> String {
    if !(v.is_finite() && v > 0.0) {
        return "1".to_string();
    }
    let v = v * 1.1;
    let step = 10f64.powf(v.log10().floor() - 1.0);
    let top = (v / step).ceil() * step;
    if top >= 10.0 {
        format!("{top:.0}")
    } else {
        format!("{top:.2}")
    }
}

/// `1K`, `64K`, `16M`, `2G`: a size in the few characters an axis label has (binary units).
fn short_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if v.fract() == 0.0 { format!("{v:.0}{unit}") } else { format!("{v:.1}{unit}") };
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_short_and_axes_end_above_the_data() {
        assert_eq!(short_size(1024), "1K");
        assert_eq!(short_size(3 << 19), "1.5M");
        assert_eq!(short_size(8), "8");
        assert_eq!(short_size(16 << 30), "16G");
        assert_eq!(nice_top(370.0), "410");
        assert_eq!(nice_top(0.5), "0.55");
        assert_eq!(nice_top(f64::NAN), "1");
    }
}
