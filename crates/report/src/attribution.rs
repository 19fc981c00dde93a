//! An attribution (`commgate attribute`, and the hotspots of a check report) rendered three
//! ways: a terminal's source line, aligned tables (per collective, per message size, per rank),
//! the what-if section and the decision lines; the Markdown of a PR comment (the follow-up
//! decision first, the per-rank table folded in `<details>`); and the JSON of `docs/formats.md`,
//! "Attribution JSON". The cells, the source line and the decisions are written once here, so a
//! payload or a ratio reads the same in a terminal and in a PR comment.
//!
//! Strings from traces and files (collective names, paths, reasons) pass through the escaping
//! of their context: [`plain`] in a terminal, so a control character in a kernel's metadata
//! cannot move the cursor or issue a CI workflow command; [`md_text`] or a table cell's escape
//! in Markdown, since a trace is untrusted input and a PR comment renders HTML, links and
//! mentions. The terminal output is plain ASCII but for the em dash of `Follow-up: <decision> —
//! <reason>`. Renderers display the decisions a [`Diagnosis`] carries; they never recompute
//! them.

use super::cells::{counted, fixed, ms, optional_ms, two};
use super::escape::{md_text, plain, NAME, TEXT};
use super::table::{self, Align, Context};
use super::whatif;
use commgate_core::units::bytes;
use commgate_gate::decide::mitigation::Diagnosis;
use commgate_trace::attribute::{Attribution, Compat, Hotspot, RankSummary};

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

/// Renders an attribution for a terminal, its tables `width` wide.
pub fn text(a: &Diagnosis, width: crate::Width) -> String {
    let mut out = source_line(a, |s| plain(s, NAME), "");
    out.push('\n');
    for note in a.notes() {
        out.push_str(&format!("Note: {}\n", plain(&note, TEXT)));
    }
    out.push('\n');
    if a.by_collective.is_empty() {
        out.push_str("No communication kernels found.\n");
    } else {
        let rows = collective_rows(a, Context::Text);
        let (t, dropped) = table::text_fitted(&COLLECTIVE_COLUMNS, &rows, &COLLECTIVE_DROP, width.limit());
        out.push_str(&t);
        out.push_str(&table::left_out_line(&dropped));
    }
    if let Some(sizes) = size_table(a, Context::Text) {
        out.push_str(&format!("\n{SIZE_TITLE}:\n{sizes}"));
    }
    if let Some(line) = step_summary(a) {
        out.push_str(&format!("\n{line}\n"));
    }
    if !a.ranks.is_empty() {
        out.push_str("\nPer rank (ms per step):\n");
        out.push_str(&table::text(&rank_columns_without_unit(), &rank_rows(a)));
    }
    if let Some(w) = &a.what_if {
        out.push_str(&whatif::text(w, width));
    }
    out.push('\n');
    for line in text_decisions(a) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Renders an attribution as Markdown: the follow-up decision and its reason, the source line
/// naming the traces, the tables (sizes and ranks folded), the what-if section, the decisions.
pub fn markdown(a: &Diagnosis) -> String {
    let f = &a.followup;
    let mut out = format!("**commgate attribute: `{}`** — {}\n\n", f.decision.as_str(), md_text(&f.reason, TEXT));
    out.push_str(&source_line(a, |s| md_text(s, NAME), &format!(" ({})", file_list(&a.source.files))));
    out.push_str("\n\n");
    out.push_str(&notes(a));
    let collectives = collective_table(a, Context::Markdown);
    out.push_str(collectives.as_deref().unwrap_or("_No communication kernels found._\n"));
    if let Some(sizes) = size_table(a, Context::Markdown) {
        out.push_str(&format!("\n<details><summary>{SIZE_TITLE}</summary>\n\n{sizes}\n</details>\n"));
    }
    if let Some(line) = step_summary(a) {
        out.push_str(&format!("\n{line}\n"));
    }
    if !a.ranks.is_empty() {
        out.push_str("\n<details><summary>Per rank</summary>\n\n");
        out.push_str(&table::markdown(&RANK_COLUMNS, &rank_rows(a)));
        out.push_str("\n</details>\n");
    }
    if let Some(w) = &a.what_if {
        out.push_str(&format!("\n{}", whatif::markdown(w)));
    }
    out.push('\n');
    out.push_str(&markdown_decisions(a));
    out
}

/// Renders an attribution as pretty JSON ending in a newline. When the source has no compute
/// (`source.compute_observed` is false), the figures it cannot measure are `null`, not zero.
pub fn json(a: &Diagnosis) -> String {
    if a.source.compute_observed {
        return super::json::pretty(a);
    }
    #[expect(clippy::expect_used, reason = "infallible: the same derived types that `pretty` serialises")]
    let mut v = serde_json::to_value(a).expect("report types always serialise to JSON");
    let unmeasured = |h: &mut serde_json::Value| {
        if !h.is_object() {
            return;
        }
        for key in ["exposed_comm_ms", "exposed_comm_ms_max_rank", "overlap_ratio"] {
            h[key] = serde_json::Value::Null;
        }
        if h["steps"].is_object() {
            h["steps"]["exposed_ms"] = serde_json::Value::Null;
        }
    };
    v["by_collective"].as_object_mut().into_iter().flat_map(|m| m.values_mut()).for_each(unmeasured);
    unmeasured(&mut v["priority"]);
    for r in v["ranks"].as_array_mut().into_iter().flatten() {
        for key in ["compute_ms", "overlapped_ms", "exposed_ms", "overlap_pct"] {
            r[key] = serde_json::Value::Null;
        }
    }
    super::json::pretty(&v)
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

/// The collectives in report order: most exposed time per step first, ties by name.
fn by_exposed_desc(a: &Attribution) -> Vec<&Hotspot> {
    let mut hotspots: Vec<&Hotspot> = a.by_collective.values().collect();
    hotspots
        .sort_by(|x, y| y.exposed_comm_ms.total_cmp(&x.exposed_comm_ms).then_with(|| x.collective.cmp(&y.collective)));
    hotspots
}

/// The payload cell: human units, or `unknown` when no trace field said (never 0).
pub(crate) fn payload(h: &Hotspot) -> String {
    match h.payload_bytes {
        Some(b) if h.payload_known => bytes(b),
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
fn straggler(h: &Hotspot) -> String {
    h.straggler_rank.map_or_else(|| "-".to_string(), |r| r.to_string())
}

/// The bus bandwidth cell: GB/s with two decimals, `>=` before a lower bound (some of the
/// group's ranks are not in the traces), or `n/a` when no payload or no bus factor left it
/// undefined.
fn busbw(h: &Hotspot) -> String {
    match h.busbw_gbps {
        Some(x) if h.busbw_lower_bound => format!(">={}", two(x)),
        Some(x) => two(x),
        None => "n/a".to_string(),
    }
}

/// The last-arrival cell: `5 (75%)`, the rank and the share of instances in which it arrived
/// last, when the binomial test claims it; `none (33%, p 0.33)` when the largest share could be
/// chance; `-` when fewer than two ranks took part.
fn last_arrival(h: &Hotspot) -> String {
    match (h.last_arrival_rank, h.last_arrival_share, h.last_arrival_p_value) {
        (Some(rank), Some(share), _) => format!("{rank} ({}%)", fixed(share * 100.0, 0)),
        (None, Some(share), Some(p)) => format!("none ({}%, p {})", fixed(share * 100.0, 0), two(p)),
        _ => "-".to_string(),
    }
}

/// The per-collective table's columns (text and Markdown); every figure is per step except
/// `count`, `busbw`, `last arrival` and `unmatched`. [`collective_cells`] fills them in this order.
const COLLECTIVE_COLUMNS: [(&str, Align); 15] = [
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
fn collective_cells(h: &Hotspot, ctx: Context) -> Vec<String> {
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
fn collective_rows(a: &Attribution, ctx: Context) -> Vec<Vec<String>> {
    let observed = a.source.compute_observed;
    by_exposed_desc(a)
        .into_iter()
        .map(|h| unmeasured(collective_cells(h, ctx), observed, &COLLECTIVE_UNMEASURED))
        .collect()
}

/// The per-collective table in `ctx`, or `None` without a collective.
fn collective_table(a: &Attribution, ctx: Context) -> Option<String> {
    (!a.by_collective.is_empty()).then(|| ctx.table(&COLLECTIVE_COLUMNS, &collective_rows(a, ctx)))
}

/// The order the per-collective text table leaves columns out in to fit (least important first):
/// what the decision and a reviewer need (exposed, comm, overlap, who arrives last, wait,
/// transfer) stays longest.
const COLLECTIVE_DROP: [usize; 14] = [14, 2, 5, 1, 6, 12, 9, 8, 10, 11, 13, 7, 3, 4];

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
const SIZE_COLUMNS: [(&str, Align); 7] = [
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
fn size_rows(a: &Attribution, ctx: Context) -> Vec<Vec<String>> {
    let gbps = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), two);
    a.by_collective
        .values()
        .flat_map(|h| {
            h.sizes.iter().map(move |b| {
                vec![
                    ctx.escape(&h.collective, NAME),
                    format!("≥ {}", bytes(b.bytes_min)),
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
fn size_table(a: &Attribution, ctx: Context) -> Option<String> {
    let rows = size_rows(a, ctx);
    (!rows.is_empty()).then(|| ctx.table(&SIZE_COLUMNS, &rows))
}

/// The title of the per-size table.
const SIZE_TITLE: &str = "Per message size (each call on each rank is one sample)";

/// The per-rank table's columns, headed as the Markdown heads them; [`rank_cells`] fills them in
/// this order. The terminal's table says "ms per step" once in its title, so
/// [`rank_columns_without_unit`] drops the ` ms` from its heads.
const RANK_COLUMNS: [(&str, Align); 8] = [
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
fn rank_columns_without_unit() -> [(&'static str, Align); 8] {
    RANK_COLUMNS.map(|(head, align)| (head.strip_suffix(" ms").unwrap_or(head), align))
}

/// The per-rank table's rows, one per rank in the attribution's order.
fn rank_rows(a: &Attribution) -> Vec<Vec<String>> {
    a.ranks.iter().map(|r| unmeasured(rank_cells(r), a.source.compute_observed, &RANK_UNMEASURED)).collect()
}

/// The cells of one rank's row.
fn rank_cells(r: &RankSummary) -> Vec<String> {
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
fn step_summary(a: &Attribution) -> Option<String> {
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
fn rank_list(ranks: &[u32]) -> String {
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
fn source_line(a: &Attribution, escape: fn(&str) -> String, files: &str) -> String {
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

/// The compat mode as the JSON spells it.
fn compat_name(c: Compat) -> &'static str {
    match c {
        Compat::Default => "default",
        Compat::Hta => "hta",
    }
}

/// The values of the decision lines, which the text and Markdown label each in their own way.
struct Decisions {
    /// `all_to_all (20.000 ms exposed per step)`, or `none`.
    priority: String,
    /// The strategy, then ` on <target>` when the mitigation names one.
    mitigation: String,
    /// The next measurements, comma-separated, or `none`.
    next: String,
}

/// The attribution's decisions, the trace-supplied strings made safe by `escape` and the
/// strategy name written by `strategy` (the Markdown sets it in code).
fn decisions(a: &Diagnosis, escape: fn(&str) -> String, strategy: fn(&str) -> String) -> Decisions {
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

/// Priority, mitigation, the fixes ranked by saving (when the steps were replayed), next
/// measurements and follow-up, one line each.
fn text_decisions(a: &Diagnosis) -> Vec<String> {
    let d = decisions(a, |s| plain(s, NAME), str::to_owned);
    let f = &a.followup;
    let fixes = a.what_if.as_ref().and_then(|w| whatif::ranked_line(w, Context::Text));
    [format!("Priority: {}", d.priority), format!("Mitigation: {}", d.mitigation)]
        .into_iter()
        .chain(fixes.map(|l| format!("Would save: {l}")))
        .chain([
            format!("Next measurements: {}", d.next),
            format!("Follow-up: {} — {}", f.decision.as_str(), plain(&f.reason, TEXT)),
        ])
        .collect()
}

/// Priority, mitigation, the fixes ranked by saving (when the steps were replayed) and next
/// measurements, as a list.
fn markdown_decisions(a: &Diagnosis) -> String {
    let d = decisions(a, |s| md_text(s, NAME), |strategy| format!("`{strategy}`"));
    let fixes = a.what_if.as_ref().and_then(|w| whatif::ranked_line(w, Context::Markdown));
    format!(
        "- **Priority:** {}\n- **Mitigation:** {}\n{}- **Next measurements:** {}\n",
        d.priority,
        d.mitigation,
        fixes.map(|l| format!("- **Would save:** {l}\n")).unwrap_or_default(),
        d.next
    )
}
