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
use super::table::{self, Column, Context, Field};
use super::whatif;
use commgate_core::units::bytes;
use commgate_gate::decide::mitigation::Diagnosis;
use commgate_trace::attribute::{Attribution, Compat, Hotspot, RankSummary, SizeBucket};
use serde_json::Value;

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
        let columns = table::columns(&COLLECTIVE, Context::Text);
        out.push_str(&table::fitted(&columns, &collective_rows(a, Context::Text), width));
    }
    if let Some(sizes) = size_table(a, Context::Text) {
        out.push_str(&format!("\n{SIZE_TITLE}:\n{sizes}"));
    }
    if let Some(line) = step_summary(a) {
        out.push_str(&format!("\n{line}\n"));
    }
    if !a.ranks.is_empty() {
        out.push_str("\nPer rank (ms per step):\n");
        out.push_str(&table::text(&rank_columns_without_unit(), &rank_rows(a, Context::Text)));
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
        out.push_str(&table::markdown(&table::columns(&RANK, Context::Markdown), &rank_rows(a, Context::Markdown)));
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
    /// `keys` of `v`, when it is an object, set to `null` (in place, as the fields are written).
    fn null(v: &mut Value, keys: &[&str]) {
        if let Some(object) = v.as_object_mut() {
            for &key in keys {
                object.insert(key.to_string(), Value::Null);
            }
        }
    }
    let unmeasured = |h: &mut Value| {
        null(h, &["exposed_comm_ms", "exposed_comm_ms_max_rank", "overlap_ratio"]);
        if let Some(steps) = h.get_mut("steps") {
            null(steps, &["exposed_ms"]);
        }
    };
    v.get_mut("by_collective")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|m| m.values_mut())
        .for_each(unmeasured);
    v.get_mut("priority").into_iter().for_each(unmeasured);
    for r in v.get_mut("ranks").and_then(Value::as_array_mut).into_iter().flatten() {
        null(r, &["compute_ms", "overlapped_ms", "exposed_ms", "overlap_pct"]);
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

/// The per-collective table's columns (text and Markdown), in table order; every figure is per
/// step except `count`, `busbw`, `last arrival` and `unmatched`. A text table that must fit
/// leaves out the least important first (`drop_rank` 1): what the decision and a reviewer need
/// (exposed, comm, overlap, who arrives last, wait, transfer) stays longest. Exposed time and
/// overlap need compute in the source.
const COLLECTIVE: [Field<Hotspot>; 15] = [
    Column::left("collective").cell(|h, ctx| ctx.escape(&h.collective, NAME)),
    Column::right("count").drop_rank(4).cell(|h, _| h.count.to_string()),
    Column::right("sync/step").drop_rank(2).cell(|h, _| two(h.sync_count)),
    Column::right("comm ms/step").drop_rank(13).cell(|h, _| ms(h.total_comm_ms)),
    Column::right("exposed ms/step").drop_rank(14).needs_compute().cell(|h, _| ms(h.exposed_comm_ms)),
    Column::right("worst-rank exposed").drop_rank(3).needs_compute().cell(|h, _| ms(h.exposed_comm_ms_max_rank)),
    Column::right("payload/step").drop_rank(5).cell(|h, _| payload(h)),
    Column::right("overlap").drop_rank(12).needs_compute().cell(|h, _| two(h.overlap_ratio)),
    Column::right("imbalance").drop_rank(8).cell(|h, _| imbalance(h)),
    Column::right("straggler").drop_rank(7).cell(|h, _| straggler(h)),
    Column::right("transfer ms/step").drop_rank(9).cell(|h, _| optional_ms(h.transfer_ms)),
    Column::right("wait ms/step").drop_rank(10).cell(|h, _| optional_ms(h.wait_ms)),
    Column::right("busbw GB/s").drop_rank(6).cell(|h, _| busbw(h)),
    Column::right("last arrival").drop_rank(11).cell(|h, _| last_arrival(h)),
    Column::right("unmatched").drop_rank(1).cell(|h, _| h.unmatched.to_string()),
];

/// The per-collective table's rows in report order (see [`by_exposed_desc`]), the names made
/// safe for `ctx`; without compute in the source, the exposed and overlap cells read `n/a`.
fn collective_rows(a: &Attribution, ctx: Context) -> Vec<Vec<String>> {
    let observed = a.source.compute_observed;
    by_exposed_desc(a).into_iter().map(|h| table::measured_row(&COLLECTIVE, h, ctx, observed)).collect()
}

/// The per-collective table in `ctx`, or `None` without a collective.
fn collective_table(a: &Attribution, ctx: Context) -> Option<String> {
    (!a.by_collective.is_empty()).then(|| ctx.table(&table::columns(&COLLECTIVE, ctx), &collective_rows(a, ctx)))
}

/// One message-size bucket of a collective: a row of the per-size table.
struct Bucket<'a> {
    h: &'a Hotspot,
    b: &'a SizeBucket,
}

/// The per-size table's columns (text and Markdown). A function rather than a constant: its
/// rows borrow the attribution.
fn size_fields<'a>() -> [Field<Bucket<'a>>; 7] {
    fn gbps(v: Option<f64>) -> String {
        v.map_or_else(|| "n/a".to_string(), two)
    }
    [
        Column::left("collective").cell(|r, ctx| ctx.escape(&r.h.collective, NAME)),
        Column::right("size").cell(|r, _| format!("≥ {}", bytes(r.b.bytes_min))),
        Column::right("calls").cell(|r, _| r.b.count.to_string()),
        Column::right("exec ms p50").cell(|r, _| ms(r.b.exec_ms_median)),
        Column::right("exec ms p95").cell(|r, _| ms(r.b.exec_ms_p95)),
        Column::right("busbw GB/s p50").cell(|r, _| gbps(r.b.busbw_gbps_median)),
        Column::right("busbw GB/s p95").cell(|r, _| gbps(r.b.busbw_gbps_p95)),
    ]
}

/// The per-size table in `ctx`, one row per collective and message-size bucket (collectives by
/// name, sizes ascending), the names made safe for `ctx`; `None` when no collective has size
/// buckets.
fn size_table(a: &Attribution, ctx: Context) -> Option<String> {
    let fields = size_fields();
    let rows: Vec<Vec<String>> = a
        .by_collective
        .values()
        .flat_map(|h| h.sizes.iter().map(move |b| Bucket { h, b }))
        .map(|bucket| table::row(&fields, &bucket, ctx))
        .collect();
    (!rows.is_empty()).then(|| ctx.table(&table::columns(&fields, ctx), &rows))
}

/// The title of the per-size table.
const SIZE_TITLE: &str = "Per message size (each call on each rank is one sample)";

/// The per-rank table's columns, headed as the Markdown heads them. The terminal's table says
/// "ms per step" once in its title, so [`rank_columns_without_unit`] drops the ` ms` from its
/// heads. Compute, overlapped and exposed time and the overlap need compute in the source.
const RANK: [Field<RankSummary>; 8] = [
    Column::right("rank").cell(|r, _| r.rank.to_string()),
    Column::right("steps").cell(|r, _| r.steps.to_string()),
    Column::right("comm ms").cell(|r, _| ms(r.comm_ms)),
    Column::right("compute ms").needs_compute().cell(|r, _| ms(r.compute_ms)),
    Column::right("overlapped ms").needs_compute().cell(|r, _| ms(r.overlapped_ms)),
    Column::right("exposed ms").needs_compute().cell(|r, _| ms(r.exposed_ms)),
    Column::right("overlap %").needs_compute().cell(|r, _| two(r.overlap_pct)),
    Column::right("comm kernels").cell(|r, _| r.comm_kernels.to_string()),
];

/// [`RANK`]'s columns with the ` ms` unit taken off the heads (`comm`, `compute`, ...).
fn rank_columns_without_unit() -> Vec<Column> {
    let columns = table::columns(&RANK, Context::Text);
    columns.into_iter().map(|c| Column { head: c.head.strip_suffix(" ms").unwrap_or(c.head), ..c }).collect()
}

/// The per-rank table's rows, one per rank in the attribution's order.
fn rank_rows(a: &Attribution, ctx: Context) -> Vec<Vec<String>> {
    a.ranks.iter().map(|r| table::measured_row(&RANK, r, ctx, a.source.compute_observed)).collect()
}

/// The one-line summary of the per-step samples the JSON carries: how many steps, and the
/// shortest, median and longest step over all ranks; `None` without samples.
fn step_summary(a: &Attribution) -> Option<String> {
    let mut all: Vec<f64> = a.ranks.iter().flat_map(|r| r.step_ms.iter().copied()).collect();
    all.sort_by(f64::total_cmp);
    let (&min, &max) = (all.first()?, all.last()?);
    let samples = a.ranks.iter().map(|r| r.step_ms.len()).max().unwrap_or(0);
    let median = commgate_stats::median(&all);
    // Which "step" this is: the what-if's is the replayed GPU work, first kernel to last.
    let measured = match a.source.window.as_str() {
        "steps" => "ProfilerStep windows",
        "hta" => "HTA's window",
        _ => "the whole trace, first GPU activity to last",
    };
    Some(format!(
        "Step time over {} ({measured}, all ranks): min {} ms, median {} ms, max {} ms; per-step series in the JSON report",
        counted(samples, "step", "steps"),
        ms(min),
        ms(median),
        ms(max)
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
