//! Renderers: data in, `String` out. No file or network I/O here; the caller writes.
//!
//! This module owns the output [`Format`], the dispatch [`render_attribution`], and what the
//! text and Markdown renderers share: the cell formatting, the table columns and rows, the source
//! line and the decisions (so a payload or a ratio reads the same in a terminal and in a PR
//! comment). Tables are drawn by [`table`], the one table writer: a renderer names the columns
//! and the rows, and the shared rows take the [`Context`] whose escaping their names need. Other
//! trace-supplied strings go through the escaping function the renderer passes from [`escape`]
//! (`plain` for a terminal, `md_text` for Markdown). Renderers display the decisions an
//! [`Attribution`] carries; they never recompute them.

pub mod bench;
pub mod chart;
pub mod check;
pub mod escape;
pub mod gantt;
pub mod history;
#[cfg(test)]
mod injection_tests;
pub mod json;
pub mod markdown;
pub mod sweep;
pub mod table;
pub mod text;
pub(crate) mod whatif;

use commgate_gate::compare::Comparison;
use commgate_gate::decide::mitigation::Diagnosis;
use commgate_trace::attribute::Hotspot;
use commgate_trace::attribute::{Attribution, Compat};
use escape::NAME;

/// How a report is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// An aligned plain-ASCII table for a terminal.
    Text,
    /// Machine-readable JSON (the schemas in docs/formats.md), pretty-printed.
    Json,
    /// GitHub-flavoured Markdown for a PR comment or a job summary.
    Markdown,
}

/// Renders an attribution in the chosen format.
pub fn render_attribution(a: &Diagnosis, format: Format) -> String {
    render_attribution_in(a, format, Width::Fit)
}

/// How wide a text report's tables may be: `table::TEXT_WIDTH` by default (columns are left out,
/// least important first, and named under the table), every column with `--wide`. Markdown and
/// JSON always hold everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Width {
    #[default]
    Fit,
    Wide,
}

impl Width {
    pub fn from_flag(wide: bool) -> Width {
        if wide {
            Width::Wide
        } else {
            Width::Fit
        }
    }

    /// The most characters a text table may take, `None` for no limit.
    pub(crate) fn limit(self) -> Option<usize> {
        match self {
            Width::Fit => Some(table::TEXT_WIDTH),
            Width::Wide => None,
        }
    }
}

/// Renders an attribution, its text tables `width` wide.
pub fn render_attribution_in(a: &Diagnosis, format: Format, width: Width) -> String {
    match format {
        Format::Text => text::attribution(a, width),
        Format::Json => json::attribution(a),
        Format::Markdown => markdown::attribution(a),
    }
}

/// Renders a check report in the chosen format.
pub fn render_check(r: &commgate_gate::check::CheckReport, format: Format) -> String {
    render_check_in(r, format, Width::Fit)
}

/// Renders a check report, its text tables `width` wide.
pub fn render_check_in(r: &commgate_gate::check::CheckReport, format: Format, width: Width) -> String {
    match format {
        Format::Text => check::text(r, width),
        Format::Json => json::check(r),
        Format::Markdown => check::markdown(r),
    }
}

/// Renders a comparison in the chosen format.
pub fn render_comparison(c: &Comparison, format: Format) -> String {
    render_comparison_in(c, format, Width::Fit)
}

/// Renders a comparison, its text table `width` wide.
pub fn render_comparison_in(c: &Comparison, format: Format, width: Width) -> String {
    match format {
        Format::Text => text::comparison(c, width),
        Format::Json => json::comparison(c),
        Format::Markdown => markdown::comparison(c),
    }
}

pub(crate) use commgate_core::units::{change, interval, pct};

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

/// The change cell of a metric row; exposed communication changes as a share of the step.
pub(crate) fn change_cell(m: &commgate_gate::compare::MetricComparison) -> String {
    if m.statistic == commgate_gate::compare::Statistic::ExposedCommMs && m.judged.ratio.is_finite() {
        format!("{} of step", change(m.judged.ratio))
    } else {
        change(m.judged.ratio)
    }
}

/// A p-value: four decimals, `<0.0001` below that.
pub(crate) fn p_value(p: f64) -> String {
    if !p.is_finite() {
        "n/a".to_string()
    } else if p < 1e-4 {
        "<0.0001".to_string()
    } else {
        format!("{p:.4}")
    }
}

pub(crate) use table::{Align, Context};

/// The collectives in report order: most exposed time per step first, ties by name.
pub(crate) fn by_exposed_desc(a: &Attribution) -> Vec<&Hotspot> {
    let mut hotspots: Vec<&Hotspot> = a.by_collective.values().collect();
    hotspots
        .sort_by(|x, y| y.exposed_comm_ms.total_cmp(&x.exposed_comm_ms).then_with(|| x.collective.cmp(&y.collective)));
    hotspots
}

/// `v` with `decimals` digits; a value that rounds to zero prints without a sign, so a
/// subtraction's `-1e-12` never shows as `-0.000`.
pub(crate) fn fixed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

/// Milliseconds: three decimals (microsecond resolution).
pub(crate) fn ms(v: f64) -> String {
    fixed(v, 3)
}

/// Ratios, per-step call counts and percentages: two decimals.
pub(crate) fn two(v: f64) -> String {
    fixed(v, 2)
}

pub(crate) use commgate_core::units::bytes as human_bytes;

/// The payload cell: human units, or `unknown` when no trace field said (never 0).
pub(crate) fn payload(h: &Hotspot) -> String {
    match h.payload_bytes {
        Some(bytes) if h.payload_known => human_bytes(bytes),
        _ => "unknown".to_string(),
    }
}

/// The imbalance cell: the ratio, or `n/a` when fewer than two ranks let it be observed.
pub(crate) fn imbalance(h: &Hotspot) -> String {
    match h.rank_imbalance_ratio {
        Some(r) if h.rank_imbalance_observed => two(r),
        _ => "n/a".to_string(),
    }
}

/// The straggler cell: a rank, or `-` when none was identified.
pub(crate) fn straggler(h: &Hotspot) -> String {
    h.straggler_rank.map_or_else(|| "-".to_string(), |r| r.to_string())
}

/// The bus bandwidth cell: GB/s with two decimals, `>=` before a lower bound (some of the
/// group's ranks are not in the traces), or `n/a` when no payload or no bus factor left it
/// undefined.
pub(crate) fn busbw(h: &Hotspot) -> String {
    match h.busbw_gbps {
        Some(x) if h.busbw_lower_bound => format!(">={}", two(x)),
        Some(x) => two(x),
        None => "n/a".to_string(),
    }
}

/// A per-step figure only traces give: milliseconds, or `n/a` without a matched instance.
pub(crate) fn optional_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), ms)
}

/// The last-arrival cell: `5 (75%)`, the rank and the share of instances in which it arrived
/// last, when the binomial test claims it; `none (33%, p 0.33)` when the largest share could be
/// chance; `-` when fewer than two ranks took part.
pub(crate) fn last_arrival(h: &Hotspot) -> String {
    match (h.last_arrival_rank, h.last_arrival_share, h.last_arrival_p_value) {
        (Some(rank), Some(share), _) => format!("{rank} ({}%)", fixed(share * 100.0, 0)),
        (None, Some(share), Some(p)) => format!("none ({}%, p {})", fixed(share * 100.0, 0), two(p)),
        _ => "-".to_string(),
    }
}

/// The per-collective table's columns (text and Markdown); every figure is per step except
/// `count`, `busbw`, `last arrival` and `unmatched`. [`collective_cells`] fills them in this order.
pub(crate) const COLLECTIVE_COLUMNS: [(&str, Align); 15] = [
    ("collective", Align::Left),
    ("count", Align::Right),
    ("sync/step", Align::Right),
    ("comm ms/step", Align::Right),
    ("exposed ms/step", Align::Right),
    ("worst-rank exposed", Align::Right),
    ("payload/step", Align::Right),
    ("overlap", Align::Right),
    ("imbalance", Align::Right),
    ("straggler", Align::Right),
    ("transfer ms/step", Align::Right),
    ("wait ms/step", Align::Right),
    ("busbw GB/s", Align::Right),
    ("last arrival", Align::Right),
    ("unmatched", Align::Right),
];

/// The cells of one collective's row, the name made safe for `ctx`.
pub(crate) fn collective_cells(h: &Hotspot, ctx: Context) -> Vec<String> {
    vec![
        ctx.escape(&h.collective, NAME),
        h.count.to_string(),
        two(h.sync_count),
        ms(h.total_comm_ms),
        ms(h.exposed_comm_ms),
        ms(h.exposed_comm_ms_max_rank),
        payload(h),
        two(h.overlap_ratio),
        imbalance(h),
        straggler(h),
        optional_ms(h.transfer_ms),
        optional_ms(h.wait_ms),
        busbw(h),
        last_arrival(h),
        h.unmatched.to_string(),
    ]
}

/// The per-collective table's rows in report order (see [`by_exposed_desc`]), the names made
/// safe for `ctx`. Without compute in the source, the exposed and overlap cells read `n/a`.
pub(crate) fn collective_rows(a: &Attribution, ctx: Context) -> Vec<Vec<String>> {
    let observed = a.source.compute_observed;
    by_exposed_desc(a)
        .into_iter()
        .map(|h| unmeasured(collective_cells(h, ctx), observed, &COLLECTIVE_UNMEASURED))
        .collect()
}

/// The per-collective table in `ctx`, or `None` without a collective.
pub(crate) fn collective_table(a: &Attribution, ctx: Context) -> Option<String> {
    (!a.by_collective.is_empty()).then(|| ctx.table(&COLLECTIVE_COLUMNS, &collective_rows(a, ctx)))
}

/// The order the per-collective text table leaves columns out in to fit (least important first):
/// what the decision and a reviewer need (exposed, comm, overlap, who arrives last, wait,
/// transfer) stays longest.
pub(crate) const COLLECTIVE_DROP: [usize; 14] = [14, 2, 5, 1, 6, 12, 9, 8, 10, 11, 13, 7, 3, 4];

/// The per-collective columns a source without compute cannot fill: exposed, worst-rank
/// exposed, overlap.
const COLLECTIVE_UNMEASURED: [usize; 3] = [4, 5, 7];

/// The per-rank columns a source without compute cannot fill: compute, overlapped, exposed,
/// overlap %.
const RANK_UNMEASURED: [usize; 4] = [3, 4, 5, 6];

/// `cells` with the columns at `columns` read `n/a` unless compute was `observed`: a figure
/// the source cannot measure is shown absent, never as a zero.
fn unmeasured(mut cells: Vec<String>, observed: bool, columns: &[usize]) -> Vec<String> {
    if !observed {
        for &i in columns {
            if let Some(c) = cells.get_mut(i) {
                *c = "n/a".to_string();
            }
        }
    }
    cells
}

/// The per-size table's columns (text and Markdown); [`size_rows`] fills them in this order.
pub(crate) const SIZE_COLUMNS: [(&str, Align); 7] = [
    ("collective", Align::Left),
    ("size", Align::Right),
    ("calls", Align::Right),
    ("exec ms p50", Align::Right),
    ("exec ms p95", Align::Right),
    ("busbw GB/s p50", Align::Right),
    ("busbw GB/s p95", Align::Right),
];

/// One row per collective and message-size bucket (collectives by name, sizes ascending), the
/// names made safe for `ctx`; empty when no collective has size buckets.
pub(crate) fn size_rows(a: &Attribution, ctx: Context) -> Vec<Vec<String>> {
    let gbps = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), two);
    a.by_collective
        .values()
        .flat_map(|h| {
            h.sizes.iter().map(move |b| {
                vec![
                    ctx.escape(&h.collective, NAME),
                    format!("≥ {}", human_bytes(b.bytes_min)),
                    b.count.to_string(),
                    ms(b.exec_ms_median),
                    ms(b.exec_ms_p95),
                    gbps(b.busbw_gbps_median),
                    gbps(b.busbw_gbps_p95),
                ]
            })
        })
        .collect()
}

/// The per-size table in `ctx`, or `None` when no collective has size buckets.
pub(crate) fn size_table(a: &Attribution, ctx: Context) -> Option<String> {
    let rows = size_rows(a, ctx);
    (!rows.is_empty()).then(|| ctx.table(&SIZE_COLUMNS, &rows))
}

/// The title of the per-size table.
pub(crate) const SIZE_TITLE: &str = "Per message size (each call on each rank is one sample)";

/// The per-rank table's columns, headed as the Markdown heads them; [`rank_cells`] fills them in
/// this order. The terminal's table says "ms per step" once in its title, so
/// [`rank_columns_without_unit`] drops the ` ms` from its heads.
pub(crate) const RANK_COLUMNS: [(&str, Align); 8] = [
    ("rank", Align::Right),
    ("steps", Align::Right),
    ("comm ms", Align::Right),
    ("compute ms", Align::Right),
    ("overlapped ms", Align::Right),
    ("exposed ms", Align::Right),
    ("overlap %", Align::Right),
    ("comm kernels", Align::Right),
];

/// [`RANK_COLUMNS`] with the ` ms` unit taken off the heads (`comm`, `compute`, ...).
pub(crate) fn rank_columns_without_unit() -> [(&'static str, Align); 8] {
    RANK_COLUMNS.map(|(head, align)| (head.strip_suffix(" ms").unwrap_or(head), align))
}

/// The per-rank table's rows, one per rank in the attribution's order.
pub(crate) fn rank_rows(a: &Attribution) -> Vec<Vec<String>> {
    a.ranks.iter().map(|r| unmeasured(rank_cells(r), a.source.compute_observed, &RANK_UNMEASURED)).collect()
}

/// The cells of one rank's row.
pub(crate) fn rank_cells(r: &commgate_trace::attribute::RankSummary) -> Vec<String> {
    vec![
        r.rank.to_string(),
        r.steps.to_string(),
        ms(r.comm_ms),
        ms(r.compute_ms),
        ms(r.overlapped_ms),
        ms(r.exposed_ms),
        two(r.overlap_pct),
        r.comm_kernels.to_string(),
    ]
}

/// The one-line summary of the per-step samples the JSON carries: how many steps, and the
/// shortest, median and longest step over all ranks; `None` without samples.
pub(crate) fn step_summary(a: &Attribution) -> Option<String> {
    let mut all: Vec<f64> = a.ranks.iter().flat_map(|r| r.step_ms.iter().copied()).collect();
    if all.is_empty() {
        return None;
    }
    all.sort_by(f64::total_cmp);
    let samples = a.ranks.iter().map(|r| r.step_ms.len()).max().unwrap_or(0);
    let median = commgate_stats::median(&all);
    Some(format!(
        "Step time over {} (all ranks): min {} ms, median {} ms, max {} ms; per-step series in the JSON report",
        counted(samples, "step", "steps"),
        ms(all[0]),
        ms(median),
        ms(all[all.len() - 1])
    ))
}

/// Ranks as sorted runs (`0-3, 6, 8-9`), or `none`, so 512 ranks stay one short line.
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for r in sorted {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(r) => *end = r,
            _ => runs.push((r, r)),
        }
    }
    if runs.is_empty() {
        return "none".to_string();
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(start, end)| if start == end { start.to_string() } else { format!("{start}-{end}") })
        .collect();
    parts.join(", ")
}

/// `Source: kineto, 2 files, ranks 0-1, world size 2, steps 4, window steps, compat default`,
/// the trace-supplied strings made safe by `escape`; `files` follows the file count (the
/// Markdown names the traces there, the terminal only counts them).
pub(crate) fn source_line(a: &Attribution, escape: fn(&str) -> String, files: &str) -> String {
    let s = &a.source;
    format!(
        "Source: {}, {}{files}, ranks {}, world size {}, steps {}, window {}, compat {}",
        escape(&s.format),
        counted(s.files.len(), "file", "files"),
        rank_list(&s.ranks),
        s.world_size,
        s.steps,
        escape(&s.window),
        compat_name(s.compat)
    )
}

/// The values of the decision lines, which the text and Markdown label each in their own way.
pub(crate) struct Decisions {
    /// `all_to_all (20.000 ms exposed per step)`, or `none`.
    pub priority: String,
    /// The strategy, then ` on <target>` when the mitigation names one.
    pub mitigation: String,
    /// The next measurements, comma-separated, or `none`.
    pub next: String,
}

/// The attribution's decisions, the trace-supplied strings made safe by `escape` and the
/// strategy name written by `strategy` (the Markdown sets it in code).
pub(crate) fn decisions(a: &Diagnosis, escape: fn(&str) -> String, strategy: fn(&str) -> String) -> Decisions {
    let priority = match &a.priority {
        Some(h) if !a.source.compute_observed => {
            format!("{} ({} ms of communication per step)", escape(&h.collective), ms(h.total_comm_ms))
        }
        Some(h) => format!("{} ({} ms exposed per step)", escape(&h.collective), ms(h.exposed_comm_ms)),
        None => "none".to_string(),
    };
    let m = &a.mitigation;
    let name = strategy(m.strategy.as_str());
    let mitigation = match &m.target {
        Some(target) => format!("{name} on {}", escape(target)),
        None => name,
    };
    let next = if m.next_measurements.is_empty() {
        "none".to_string()
    } else {
        m.next_measurements.iter().map(|s| escape(s)).collect::<Vec<_>>().join(", ")
    };
    Decisions { priority, mitigation, next }
}

/// The metric table's leading columns (text and Markdown); each renderer appends its own
/// trailing ones. [`metric_cells`] fills them in this order.
pub(crate) const METRIC_COLUMNS: [(&str, Align); 7] = [
    ("metric", Align::Left),
    ("baseline ms", Align::Right),
    ("current ms", Align::Right),
    ("change", Align::Right),
    ("95 % CI", Align::Right),
    ("p (Holm)", Align::Right),
    ("n base/cur", Align::Right),
];

/// The leading cells of one metric's row (the label is the crate's own; escaping it for `ctx`
/// changes nothing and keeps the rule that every cell goes through its context).
pub(crate) fn metric_cells(m: &commgate_gate::compare::MetricComparison, ctx: Context) -> Vec<String> {
    vec![
        ctx.escape(&m.label(), NAME),
        ms(m.judged.baseline),
        ms(m.judged.current),
        change_cell(m),
        interval(m.judged.ci),
        p_value(m.judged.p_adjusted),
        format!("{}/{}", m.judged.n_baseline, m.judged.n_current),
    ]
}

/// The row under a phase median that shows it as a throughput (busbw, matmul TFLOPS), when it
/// has one: the same test, so the p-value cell says so instead of repeating it, and the values
/// carry their unit because the column heads say ms.
pub(crate) fn throughput_cells(m: &commgate_gate::compare::MetricComparison, ctx: Context) -> Option<Vec<String>> {
    let t = m.throughput.as_ref()?;
    // A CPU run's matmul does tens of GFLOPS: shown in TFLOPS it would read 0.01 against 0.02.
    let small = t.kind == commgate_gate::compare::ThroughputKind::MatmulTflops && t.baseline.max(t.current) < 1.0;
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

/// `1 file`, `2 files`.
pub(crate) fn counted(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// The compat mode as the JSON spells it.
pub(crate) fn compat_name(c: Compat) -> &'static str {
    match c {
        Compat::Default => "default",
        Compat::Hta => "hta",
    }
}

/// The attributions the renderers' tests share: the seed's fixture, a two-rank Kineto-like
/// result and an empty one.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::BTreeMap;

    use commgate_gate::decide::mitigation::{diagnose, Diagnosis, Thresholds};
    use commgate_trace::attribute::{attribute_events, conclude, seed_events, Compat, RankSummary, Source};
    use commgate_trace::attribute::{Hotspot, StepSeries};
    use commgate_trace::caveats::{RankCoverage, StepsIgnored};

    /// The seed's fixture through the events path, with its exact values.
    pub fn seed() -> Diagnosis {
        diagnose(attribute_events(vec!["seed.json".into()], &seed_events()), &Thresholds::default())
    }

    fn hotspot(collective: &str) -> Hotspot {
        Hotspot { overlap_ratio: 0.0, ..Hotspot::empty(collective) }
    }

    fn kineto_source(files: &[&str], ranks: Vec<u32>) -> Source {
        Source {
            format: "kineto".to_string(),
            files: files.iter().map(|f| f.to_string()).collect(),
            world_size: ranks.len() as u32,
            coverage: Some(RankCoverage::new(&ranks, None)),
            ranks,
            steps: 4,
            window: "steps".to_string(),
            compat: Compat::Default,
            steps_ignored: None,
            names_truncated: false,
            collectives_folded: 0,
            steps_past_sample_cap: 0,
            compute_observed: true,
            queued_before_capture: 0,
            moe_markers: false,
        }
    }

    fn rank(rank: u32, comm: f64, compute: f64, overlapped: f64, kernels: u64) -> RankSummary {
        RankSummary {
            rank,
            file: format!("rank-{rank}.json.gz"),
            steps: 4,
            comm_ms: comm,
            compute_ms: compute,
            overlapped_ms: overlapped,
            exposed_ms: comm - overlapped,
            overlap_pct: 100.0 * overlapped / comm,
            comm_kernels: kernels,
            step_ms: vec![comm + compute - overlapped; 4],
        }
    }

    /// Two ranks over four steps: an imbalanced all_reduce with rank 1 as straggler (the
    /// priority, so `rebalance_ranks_or_experts` and `tune`), an all_gather whose payload no
    /// trace field gave, and a send_recv that matched on no instance (imbalance not observed).
    pub fn multi_rank() -> Diagnosis {
        let all_reduce = Hotspot {
            count: 48,
            sync_count: 6.0,
            total_comm_ms: 12.5,
            exposed_comm_ms: 7.25,
            exposed_comm_ms_max_rank: 8.125,
            worst_exposed_rank: Some(1),
            participants: 2,
            payload_bytes: Some(8 * 1024 * 1024),
            payload_known: true,
            overlap_ratio: 0.35,
            rank_imbalance_ratio: Some(0.27),
            rank_imbalance_observed: true,
            straggler_rank: Some(1),
            start_skew_ms: Some(0.042),
            transfer_ms: Some(9.125),
            wait_ms: Some(3.375),
            busbw_gbps: Some(7.35),
            last_arrival_rank: Some(1),
            last_arrival_share: Some(0.75),
            last_arrival_instances: 24,
            last_arrival_p_value: Some(0.023),
            steps: Some(StepSeries {
                exposed_ms: vec![8.125, 8.0, 7.5, 8.125],
                transfer_ms: vec![9.0, 9.25, 9.0, 9.25],
                wait_ms: vec![3.5, 3.25, 3.5, 3.25],
            }),
            ..hotspot("all_reduce")
        };
        let all_gather = Hotspot {
            count: 16,
            sync_count: 2.0,
            total_comm_ms: 3.25,
            exposed_comm_ms: 1.125,
            exposed_comm_ms_max_rank: 1.375,
            worst_exposed_rank: Some(0),
            participants: 2,
            overlap_ratio: 0.5769,
            rank_imbalance_ratio: Some(0.04),
            rank_imbalance_observed: true,
            unmatched: 2,
            transfer_ms: Some(3.0),
            wait_ms: Some(0.125),
            last_arrival_share: Some(0.5),
            last_arrival_instances: 6,
            last_arrival_p_value: Some(1.0),
            ..hotspot("all_gather")
        };
        let send_recv = Hotspot {
            count: 6,
            sync_count: 0.75,
            total_comm_ms: 0.5,
            exposed_comm_ms: 0.5,
            exposed_comm_ms_max_rank: 0.625,
            worst_exposed_rank: Some(0),
            participants: 2,
            payload_bytes: Some(1_572_864),
            payload_known: true,
            unmatched: 6,
            ..hotspot("send_recv")
        };
        let by_collective: BTreeMap<String, Hotspot> =
            [all_reduce, all_gather, send_recv].into_iter().map(|h| (h.collective.clone(), h)).collect();
        // Rank means add up to the collectives' sums (16.25 ms comm, 8.875 ms exposed), as the
        // sweep guarantees; rank 0 waits for the straggler, so its kernels run longer.
        let ranks = vec![rank(0, 17.0, 41.875, 7.5, 35), rank(1, 15.5, 40.5, 7.25, 35)];
        let source = kineto_source(&["rank-0.json.gz", "rank-1.json.gz"], vec![0, 1]);
        diagnose(conclude(source, by_collective, ranks, 70), &Thresholds::default())
    }

    /// [`multi_rank`] as ranks 0 and 1 of an 8-rank job, analysed with a `steps = 2` the
    /// markers overrode: both notes.
    pub fn partial() -> Diagnosis {
        let mut a = multi_rank();
        a.attribution.source.coverage = Some(RankCoverage::new(&a.source.ranks, Some(8)));
        a.attribution.source.world_size = 8;
        a.attribution.source.steps_ignored =
            Some(StepsIgnored { requested: 2, set_by: "steps = 2 (commgate.toml)".to_string(), marker_steps: 4 });
        a
    }

    /// One rank whose trace held no communication kernel.
    pub fn empty() -> Diagnosis {
        let ranks = vec![RankSummary {
            steps: 1,
            comm_ms: 0.0,
            overlapped_ms: 0.0,
            exposed_ms: 0.0,
            overlap_pct: 0.0,
            file: "train.pt.trace.json.gz".to_string(),
            ..rank(0, 1.0, 25.5, 0.0, 0)
        }];
        let source =
            Source { steps: 1, window: "trace".to_string(), ..kineto_source(&["train.pt.trace.json.gz"], vec![0]) };
        diagnose(conclude(source, BTreeMap::new(), ranks, 0), &Thresholds::default())
    }

    /// A collective named to break out of a table and inject HTML, from a file named likewise.
    pub fn hostile() -> Diagnosis {
        let h = Hotspot {
            count: 1,
            sync_count: 1.0,
            exposed_comm_ms: 9.0,
            total_comm_ms: 9.0,
            ..hotspot("<script>|**x**")
        };
        let by_collective = BTreeMap::from([(h.collective.clone(), h)]);
        let source = kineto_source(&["[x](javascript:alert(1)).json"], vec![0]);
        diagnose(conclude(source, by_collective, Vec::new(), 1), &Thresholds::default())
    }
}

/// "8 × NVIDIA H200 · 143771 MiB · nvlink · 2 nodes": what is known, unescaped.
pub fn hardware_line(h: &commgate_core::result::Hardware) -> String {
    let gpus = match (h.gpu_count, h.gpu_name.as_deref()) {
        (0, _) => "no GPU".to_string(),
        (n, Some(name)) => format!("{n} × {name}"),
        (n, None) => format!("{n} GPU{}", if n == 1 { "" } else { "s" }),
    };
    let mut parts = vec![gpus];
    parts.extend(h.gpu_memory_mib.map(|m| format!("{m} MiB")));
    parts.extend(h.topology.clone());
    parts.push(if h.nodes == 1 { "1 node".to_string() } else { format!("{} nodes", h.nodes) });
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::fixtures::{empty, multi_rank, partial, seed};
    use super::*;

    #[test]
    fn human_bytes_picks_the_unit_that_keeps_the_number_below_1024() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(3072), "3.0 KiB");
        assert_eq!(human_bytes(8 * 1024 * 1024), "8.0 MiB");
        assert_eq!(human_bytes(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn fixed_never_prints_negative_zero() {
        assert_eq!(fixed(-1e-12, 3), "0.000");
        assert_eq!(fixed(-0.0, 2), "0.00");
        assert_eq!(fixed(-0.004, 2), "0.00");
        assert_eq!(fixed(-0.006, 2), "-0.01");
        assert_eq!(fixed(1.23456, 3), "1.235");
        assert_eq!(ms(20.0), "20.000");
        assert_eq!(two(0.6), "0.60");
    }

    #[test]
    fn rank_list_compresses_runs() {
        assert_eq!(rank_list(&[]), "none");
        assert_eq!(rank_list(&[0]), "0");
        assert_eq!(rank_list(&[1, 0]), "0-1");
        assert_eq!(rank_list(&[9, 0, 1, 2, 3, 6, 8, 3]), "0-3, 6, 8-9");
        assert_eq!(rank_list(&[u32::MAX - 1, u32::MAX]), format!("{}-{}", u32::MAX - 1, u32::MAX));
    }

    #[test]
    fn cells_say_unknown_and_not_applicable_instead_of_zero() {
        let a = multi_rank();
        let gather = &a.by_collective["all_gather"];
        assert_eq!(payload(gather), "unknown");
        let send_recv = &a.by_collective["send_recv"];
        assert_eq!(imbalance(send_recv), "n/a");
        assert_eq!(straggler(send_recv), "-");
        let reduce = &a.by_collective["all_reduce"];
        assert_eq!(payload(reduce), "8.0 MiB");
        assert_eq!(imbalance(reduce), "0.27");
        assert_eq!(straggler(reduce), "1");
    }

    #[test]
    fn collectives_sort_by_exposed_time_then_name() {
        let order: Vec<String> = by_exposed_desc(&seed()).iter().map(|h| h.collective.clone()).collect();
        assert_eq!(order, ["all_to_all", "all_reduce", "broadcast"]);

        let mut a = seed();
        for h in a.attribution.by_collective.values_mut() {
            h.exposed_comm_ms = 1.0;
        }
        let order: Vec<String> = by_exposed_desc(&a).iter().map(|h| h.collective.clone()).collect();
        assert_eq!(order, ["all_reduce", "all_to_all", "broadcast"]);
    }

    #[test]
    fn render_attribution_dispatches_on_format() {
        let a = seed();
        assert_eq!(render_attribution(&a, Format::Text), text::attribution(&a, crate::Width::Fit));
        assert_eq!(render_attribution(&a, Format::Json), json::attribution(&a));
        assert_eq!(render_attribution(&a, Format::Markdown), markdown::attribution(&a));
    }

    /// Snapshots `a` in the three formats, as `<name>_text`, `<name>_markdown` and `<name>_json`.
    fn assert_snapshots(name: &str, a: Diagnosis) {
        insta::assert_snapshot!(format!("{name}_text"), text::attribution(&a, crate::Width::Fit));
        insta::assert_snapshot!(format!("{name}_markdown"), markdown::attribution(&a));
        insta::assert_snapshot!(format!("{name}_json"), json::attribution(&a));
    }

    #[test]
    fn snapshot_seed_events() {
        assert_snapshots("seed", seed());
    }

    #[test]
    fn snapshot_multi_rank_kineto() {
        assert_snapshots("multi_rank", multi_rank());
    }

    #[test]
    fn snapshot_empty_asks_for_more_evidence() {
        assert_snapshots("empty", empty());
    }

    #[test]
    fn snapshot_partial_rank_set_and_ignored_steps() {
        assert_snapshots("partial", partial());
    }

    #[test]
    fn every_rendering_names_the_missing_ranks_and_the_ignored_setting() {
        let a = partial();
        for (format, missing, set_by) in [
            (Format::Text, "ranks 0-1 of 8: 6 missing (2-7)", "steps = 2 (commgate.toml) ignored"),
            (Format::Markdown, "ranks 0-1 of 8: 6 missing \\(2-7\\)", "steps = 2 \\(commgate.toml\\) ignored"),
        ] {
            let out = render_attribution(&a, format);
            assert!(out.contains(missing), "{format:?}: {out}");
            assert!(out.contains(set_by), "{format:?}: {out}");
        }
        let v: serde_json::Value = serde_json::from_str(&json::attribution(&a)).expect("JSON");
        let coverage = &v["source"]["coverage"];
        assert_eq!((coverage["ranks_present"].as_u64(), coverage["world_size"].as_u64()), (Some(2), Some(8)));
        assert_eq!(coverage["missing_ranks"], serde_json::json!([{"first": 2, "last": 7}]));
        assert_eq!(v["source"]["steps_ignored"]["marker_steps"], 4);
        let text = text::attribution(&a, crate::Width::Fit);
        assert!(text.contains("Note: partial rank set: ranks 0-1 of 8: 6 missing (2-7)\n"), "{text}");
        assert!(!text::attribution(&multi_rank(), crate::Width::Fit).contains("Note:"), "a full rank set says nothing");
    }
}
