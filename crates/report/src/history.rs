//! The renderings of `baseline list` and `baseline show`: an aligned table for a terminal (with a
//! sparkline per schedule for `show`), JSON, and Markdown (a table, and for `show` a mermaid line
//! chart of the overlap median). Every string here comes from a store or a file name and is
//! untrusted: it passes through one function of [`super::escape`] where it enters the output.

use super::escape::{md_text, plain, NAME, PATH, TEXT};
use super::json::pretty;
use super::table::{self, Column, Context};
use super::Format;
use commgate_core::result::Schedule;
use commgate_gate::baseline::history::{distinct_labels, Entry};
use commgate_gate::baseline::list::Listing;
use commgate_gate::baseline::show::Shown;

/// How many of the newest runs a sparkline or the chart draws.
pub const TREND_POINTS: usize = 60;

/// The schedules in the order a table shows them.
const SCHEDULES: [Schedule; 4] = [Schedule::Overlap, Schedule::Serial, Schedule::CommOnly, Schedule::ComputeOnly];

/// Renders a store listing.
pub fn list(l: &Listing, format: Format) -> String {
    match format {
        Format::Json => pretty(&Versioned { schema_version: HISTORY_SCHEMA_VERSION, body: l }),
        Format::Text => list_text(l),
        Format::Markdown => list_markdown(l),
    }
}

/// Renders one store's runs.
pub fn show(s: &Shown, format: Format) -> String {
    match format {
        Format::Json => pretty(&Versioned { schema_version: HISTORY_SCHEMA_VERSION, body: s }),
        Format::Text => show_text(s),
        Format::Markdown => show_markdown(s),
    }
}

/// The `schema_version` of `baseline list` and `baseline show` JSON, as every JSON commgate
/// writes carries one.
pub const HISTORY_SCHEMA_VERSION: u32 = 1;

/// A JSON body with `schema_version` first.
#[derive(serde::Serialize)]
struct Versioned<'a, T: serde::Serialize> {
    schema_version: u32,
    #[serde(flatten)]
    body: &'a T,
}

fn ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"))
}

/// Every column of these tables is left-aligned, numbers too (as they have always read).
fn left<const N: usize>(heads: [&'static str; N]) -> [Column; N] {
    heads.map(Column::left)
}

/// The listing's columns; [`list_rows`] fills them in this order.
fn list_columns() -> [Column; 7] {
    left(["profile", "workload", "runs", "newest", "overlap median ms", "serial median ms", "trace runs"])
}

/// "default: 5, nightly: 2", or `-` without trace runs.
fn trace_runs(st: &commgate_gate::baseline::list::StoreStats, ctx: Context) -> String {
    if st.trace_runs.is_empty() {
        return "-".to_string();
    }
    let names: Vec<String> = st.trace_runs.iter().map(|(name, n)| format!("{}: {n}", ctx.escape(name, NAME))).collect();
    names.join(", ")
}

/// A listing's rows, every string from the store escaped for `ctx`.
fn list_rows(l: &Listing, ctx: Context) -> Vec<Vec<String>> {
    let esc = |s: &str, max: usize| ctx.escape(s, max);
    l.stores
        .iter()
        .map(|s| {
            let (profile, workload) = (esc(&s.profile, NAME), esc(&s.workload, NAME));
            match (&s.stats, &s.error) {
                (Some(st), _) => vec![
                    profile,
                    workload,
                    format!("{} ({} judged)", st.runs, st.judged_runs),
                    esc(&st.newest, NAME),
                    ms(st.overlap_median_ms),
                    ms(st.serial_median_ms),
                    trace_runs(st, ctx),
                ],
                (None, e) => vec![
                    profile,
                    workload,
                    "error".into(),
                    esc(e.as_deref().unwrap_or(""), TEXT),
                    String::new(),
                    String::new(),
                    String::new(),
                ],
            }
        })
        .collect()
}

fn list_text(l: &Listing) -> String {
    let dir = plain(&l.dir, PATH);
    if l.stores.is_empty() {
        return format!("No baseline stores in {dir}.\n");
    }
    let mut out = format!("Baseline stores in {dir} ({}):\n\n", l.stores.len());
    out.push_str(&table::text_unruled(&list_columns(), &list_rows(l, Context::Text)));
    out
}

fn list_markdown(l: &Listing) -> String {
    let dir = md_text(&l.dir, PATH);
    if l.stores.is_empty() {
        return format!("No baseline stores in {dir}\\.\n");
    }
    let mut out = format!("### Baseline stores in {dir}\n\n");
    out.push_str(&table::markdown(&list_columns(), &list_rows(l, Context::Markdown)));
    out
}

/// A commit as a table shows it: its first 12 characters.
fn short_commit(commit: Option<&str>) -> String {
    commit.map_or_else(|| "-".to_string(), |c| c.chars().take(12).collect())
}

/// Driver / CUDA / NCCL, `-` for each unknown (a CPU run knows none).
fn short_software(e: &Entry) -> String {
    let s = &e.summary.software;
    [&s.driver, &s.cuda, &s.nccl].iter().map(|p| p.as_deref().unwrap_or("-")).collect::<Vec<_>>().join(" / ")
}

/// A store's columns, one row per run; [`show_rows`] fills them in this order (a median and a
/// P95 per schedule of [`SCHEDULES`]).
fn show_columns() -> [Column; 16] {
    left([
        "#",
        "run id",
        "date",
        "commit",
        "driver / CUDA / NCCL",
        "kept",
        "overlap med",
        "overlap p95",
        "serial med",
        "serial p95",
        "comm med",
        "comm p95",
        "compute med",
        "compute p95",
        "busbw GB/s",
        "overlap IQR/med",
    ])
}

fn show_rows(s: &Shown, ctx: Context) -> Vec<Vec<String>> {
    let esc = |s: &str, max: usize| ctx.escape(s, max);
    s.runs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let stat = |sch: Schedule| e.summary.schedules.get(&sch);
            let mut cells = vec![
                (i + 1).to_string(),
                // What `baseline remove --run` takes.
                esc(&e.summary.run_id.chars().take(12).collect::<String>(), NAME),
                esc(&e.summary.created_at, NAME),
                esc(&short_commit(e.summary.commit.as_deref()), NAME),
                esc(&short_software(e), NAME),
                if e.judged { "judged" } else { "summary" }.to_string(),
            ];
            for sch in SCHEDULES {
                cells.push(ms(stat(sch).map(|x| x.median_ms)));
                cells.push(ms(stat(sch).map(|x| x.p95_ms)));
            }
            cells.push(e.summary.busbw_gbps.map_or_else(|| "-".into(), |x| format!("{x:.2}")));
            cells.push(e.summary.overlap_spread.map_or_else(|| "-".into(), |x| format!("{:.1}%", x * 100.0)));
            cells
        })
        .collect()
}

fn heading(s: &Shown, esc: impl Fn(&str, usize) -> String) -> String {
    let judged = s.runs.iter().filter(|e| e.judged).count();
    format!(
        "profile {}, workload {}: {} runs ({judged} judged, {} summaries only), oldest first",
        esc(&s.environment_profile, NAME),
        esc(&s.workload_id, NAME),
        s.runs.len(),
        s.runs.len() - judged
    )
}

/// The newest [`TREND_POINTS`] medians of `schedule`, oldest first (runs without it skipped).
fn medians(s: &Shown, schedule: Schedule) -> Vec<f64> {
    let all: Vec<f64> = s.runs.iter().filter_map(|e| e.summary.schedules.get(&schedule)).map(|x| x.median_ms).collect();
    let newest = all.len().saturating_sub(TREND_POINTS);
    all.into_iter().skip(newest).collect()
}

/// One character per value, `▁` for the smallest to `█` for the largest; all equal is a flat
/// `▄` line, and a value that is not finite is a space.
pub fn sparkline(values: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let finite = values.iter().copied().filter(|x| x.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    values
        .iter()
        .map(|&x| {
            if !x.is_finite() {
                ' '
            } else if hi - lo <= 0.0 {
                BARS[3]
            } else {
                let level = ((x - lo) / (hi - lo) * 7.0).round() as usize;
                BARS.get(level).copied().unwrap_or('█')
            }
        })
        .collect()
}

/// The newest sweep's table of an nccl-tests store: each point's bus bandwidth and the ceiling
/// this runner keeps for it.
fn sweep_columns() -> [Column; 5] {
    left(["size", "place", "newest busbw GB/s", "ceiling GB/s", "of ceiling"])
}

fn sweep_rows(s: &Shown, ctx: Context) -> Vec<Vec<String>> {
    let gbps = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    s.sweep
        .iter()
        .map(|r| {
            let share = r
                .newest_gbps
                .zip(r.ceiling_gbps)
                .map_or_else(|| "-".to_string(), |(n, c)| format!("{:.0} %", 100.0 * n / c));
            vec![
                ctx.escape(&commgate_core::units::bytes(r.key.size), NAME),
                ctx.escape(&r.key.placement.replace('_', "-"), NAME),
                gbps(r.newest_gbps),
                gbps(r.ceiling_gbps),
                share,
            ]
        })
        .collect()
}

fn show_text(s: &Shown) -> String {
    let mut out = format!("Store {}\n{}\n\n", plain(&s.path, PATH), heading(s, plain));
    if !s.sweep.is_empty() {
        out.push_str("The newest nccl-tests sweep against this runner's ceiling:\n");
        out.push_str(&table::text_unruled(&sweep_columns(), &sweep_rows(s, Context::Text)));
        out.push('\n');
    }
    out.push_str(&table::text_unruled(&show_columns(), &show_rows(s, Context::Text)));
    out.push_str(&format!("\nTrend of the medians (ms; the newest {TREND_POINTS} runs at most, oldest first):\n"));
    for sch in SCHEDULES {
        let m = medians(s, sch);
        if let (Some(first), Some(last)) = (m.first(), m.last()) {
            out.push_str(&format!("  {:<13}{}  {first:.3} -> {last:.3}\n", sch.as_str(), sparkline(&m)));
        }
    }
    out
}

fn show_markdown(s: &Shown) -> String {
    let mut out = format!("### Baseline {}\n\n{}\n\n", md_text(&s.path, PATH), heading(s, md_text));
    if !s.sweep.is_empty() {
        out.push_str("The newest nccl-tests sweep against this runner's ceiling:\n\n");
        out.push_str(&table::markdown(&sweep_columns(), &sweep_rows(s, Context::Markdown)));
        out.push('\n');
    }
    out.push_str(&table::markdown(&show_columns(), &show_rows(s, Context::Markdown)));
    out.push('\n');
    out.push_str(&chart(s));
    out
}

/// A mermaid line chart of the overlap median over the newest runs, labelled by short date.
fn chart(s: &Shown) -> String {
    let runs: Vec<(&str, f64)> = s
        .runs
        .iter()
        .filter_map(|e| {
            e.summary.schedules.get(&Schedule::Overlap).map(|x| (e.summary.created_at.as_str(), x.median_ms))
        })
        .collect();
    let newest = runs.len().saturating_sub(TREND_POINTS);
    let runs: Vec<(&str, f64)> = runs.into_iter().skip(newest).collect();
    let labels = distinct_labels(&runs.iter().map(|(c, _)| *c).collect::<Vec<_>>());
    let points: Vec<(String, f64)> = labels.into_iter().zip(&runs).map(|(l, (_, ms))| (l, *ms)).collect();
    super::chart::trend_chart("Overlap median (ms), oldest to newest", &points, None).unwrap_or_default()
}

#[cfg(test)]
mod tests;
