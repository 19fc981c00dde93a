//! What would fix it, the what-if section of an attribution, as every renderer shows it: the
//! fixes ranked by the time they would save (a table, and one line for the decision lines), the
//! critical path of the median step, and in Markdown the gantt of that step. Its JSON is the
//! attribution's `what_if` field. Collective names come from traces and are escaped for the
//! context.

use super::cells::{counted, fixed, ms};
use super::escape::{md_text, plain, NAME, TEXT};
use super::table::{self, Column, Context, Field};
use commgate_trace::attribute::whatif::{PathPart, PathRole, Scenario, ScenarioKind, WhatIf};

/// The columns of the fixes table, one row per fix. A text table that must fit leaves out the
/// predicted step, the spread over the steps and the share of the step, in that order; what a
/// fix is and what it saves stay.
const FIXES: [Field<Scenario>; 5] = [
    Column::left("fix").cell(|s, ctx| fix(s, ctx, true)),
    Column::right("saves ms/step").cell(|s, _| ms(s.saving_ms)),
    Column::right("of step").drop_rank(3).cell(|s, _| format!("{} %", fixed(s.saving_pct, 1))),
    Column::right("10-90 % of steps")
        .drop_rank(2)
        .cell(|s, _| format!("{}-{}", ms(s.saving_low_ms), ms(s.saving_high_ms))),
    Column::right("step ms").drop_rank(1).cell(|s, _| ms(s.step_ms)),
];

/// The most fixes the tables and the line show (the JSON has every one).
const MAX_FIXES: usize = 6;

/// The title above the table: how much was replayed.
fn title(w: &WhatIf) -> String {
    let steps = counted(w.steps as usize, "step", "steps");
    format!("What would fix it (replay of {steps}; median step {} ms from first kernel to last):", ms(w.step_ms))
}

/// A trace's name made safe in running text of `ctx` (a table cell escapes it as a cell).
fn in_text(s: &str, ctx: Context) -> String {
    match ctx {
        Context::Text => plain(s, NAME),
        Context::Markdown => md_text(s, NAME),
    }
}

/// What a scenario changes, in a reviewer's words, for a cell (`cell`) or running text.
fn fix(s: &Scenario, ctx: Context, cell: bool) -> String {
    let collective = s.collective.as_deref().unwrap_or("?");
    let name = || if cell { ctx.escape(collective, NAME) } else { in_text(collective, ctx) };
    match s.kind {
        ScenarioKind::LateRankOnTime => format!("rank {} on time", s.rank.map_or("?".into(), |r| r.to_string())),
        ScenarioKind::Hidden => format!("{} hidden", name()),
        ScenarioKind::TransferAtBusbw => {
            format!("{} at {} GB/s busbw", name(), s.busbw_gbps.map_or("?".into(), |b| fixed(b, 1)))
        }
        ScenarioKind::Earlier => {
            // The terminal stays ASCII.
            let unit = if ctx == Context::Text { "us" } else { "µs" };
            format!("{} {} {unit} earlier", name(), s.earlier_us.map_or("?".into(), |u| fixed(u, 0)))
        }
    }
}

/// One row per fix, largest saving first, at most [`MAX_FIXES`].
fn fix_rows(w: &WhatIf, ctx: Context) -> Vec<Vec<String>> {
    w.scenarios.iter().take(MAX_FIXES).map(|s| table::row(&FIXES, s, ctx)).collect()
}

/// The fixes that save something, ranked, for the decision lines: `all_to_all hidden saves
/// ≈1.66 ms per step (−14.2 %); rank 5 on time ≈1.36 ms` (`~` and `-` in a terminal). `None`
/// when none saves a microsecond.
pub(crate) fn ranked_line(w: &WhatIf, ctx: Context) -> Option<String> {
    let saving: Vec<&Scenario> = w.scenarios.iter().filter(|s| s.saving_ms >= 0.001).take(3).collect();
    let (first, rest) = saving.split_first()?;
    // The terminal stays ASCII.
    let (about, minus) = match ctx {
        Context::Text => ("~", "-"),
        Context::Markdown => ("≈", "−"),
    };
    let mut line = format!(
        "{} saves {about}{} ms per step ({minus}{} %)",
        fix(first, ctx, false),
        fixed(first.saving_ms, 2),
        fixed(first.saving_pct, 1)
    );
    for s in rest {
        line.push_str(&format!("; {} {about}{} ms", fix(s, ctx, false), fixed(s.saving_ms, 2)));
    }
    Some(line)
}

/// The share of the critical path on no GPU work above which the reports warn that the step is
/// host-bound.
const HOST_BOUND_SHARE: f64 = 0.25;

/// The warning of a host-bound step: the path's time on no GPU work, when it is at least
/// [`HOST_BOUND_SHARE`] of the step.
fn host_bound_note(w: &WhatIf) -> Option<String> {
    let p = &w.critical_path;
    let idle: f64 = p.parts.iter().filter(|part| part.role == PathRole::Gap).map(|part| part.ms).sum();
    (p.step_ms > 0.0 && idle >= HOST_BOUND_SHARE * p.step_ms).then(|| {
        format!(
            "{} ms ({} %) of the critical path is time on no GPU work: kernels the host launched late, or \
             waits the trace does not explain. The replay keeps it as observed, so where the host was \
             waiting for the GPU the savings above are too small.",
            ms(idle),
            fixed(100.0 * idle / p.step_ms, 0)
        )
    })
}

/// The note for a hidden collective that saves more than its own communication time: the work
/// behind it stops waiting for what it waited for too (its stream's earlier work, its launch,
/// the other ranks), so the saving is an upper bound of hiding it. The largest such first.
fn beyond_own_note(w: &WhatIf) -> Option<String> {
    let s = w
        .scenarios
        .iter()
        .filter(|s| s.kind == ScenarioKind::Hidden)
        .find(|s| s.collective_comm_ms.is_some_and(|own| s.saving_ms > own + 0.0005))?;
    let (name, own) = (s.collective.as_deref()?, s.collective_comm_ms?);
    Some(format!(
        "{name} hidden saves {} ms per step, more than {name}'s own {} ms of communication per step: the work \
         behind it also stops waiting for what {name} waited for (its stream's earlier work, its launch, the other \
         ranks); read it as an upper bound of hiding {name}.",
        ms(s.saving_ms),
        ms(own)
    ))
}

/// The parts of the critical path the reports show, largest first.
const PATH_PARTS: usize = 6;

/// What the critical path is of: `Critical path of the median step (step 9, 11.632 ms)`.
fn path_head(w: &WhatIf) -> String {
    let p = &w.critical_path;
    format!("Critical path of the median step (step {}, {} ms)", p.step, ms(p.step_ms))
}

/// How many parts past [`PATH_PARTS`] are not shown.
fn parts_left_out(w: &WhatIf) -> usize {
    w.critical_path.parts.len().saturating_sub(PATH_PARTS)
}

/// The critical path of the median step by part, largest first, one line of text.
fn path_line(w: &WhatIf, ctx: Context) -> String {
    let parts: Vec<String> = w
        .critical_path
        .parts
        .iter()
        .take(PATH_PARTS)
        .map(|part| format!("{} {} ms", part_name(part, ctx, false), ms(part.ms)))
        .collect();
    let more = parts_left_out(w);
    let tail = if more > 0 { format!(", {more} more") } else { String::new() };
    format!("{}: {}{tail}", path_head(w), parts.join(", "))
}

/// The same as a Markdown table: a collective's name (from a trace) stays in a cell, where a
/// hostile one cannot read as a fence or a table in running text.
fn path_table(w: &WhatIf) -> String {
    const PARTS: [Field<PathPart>; 2] = [
        Column::left("on the critical path").cell(|part, ctx| part_name(part, ctx, true)),
        Column::right("ms").cell(|part, _| ms(part.ms)),
    ];
    let ctx = Context::Markdown;
    let rows: Vec<Vec<String>> =
        w.critical_path.parts.iter().take(PATH_PARTS).map(|part| table::row(&PARTS, part, ctx)).collect();
    let columns = table::columns(&PARTS, ctx);
    let more = parts_left_out(w);
    let more = if more > 0 { format!("\n_{more} more parts in the JSON report._\n") } else { String::new() };
    format!("{}:\n\n{}{more}", path_head(w), table::markdown(&columns, &rows))
}

fn part_name(p: &PathPart, ctx: Context, cell: bool) -> String {
    let rank = p.rank.map(|r| format!(" on rank {r}")).unwrap_or_default();
    let name = || if cell { ctx.escape(&p.what, NAME) } else { in_text(&p.what, ctx) };
    match p.role {
        PathRole::Work if p.what == "compute" => format!("compute{rank}"),
        PathRole::Work => format!("{}{rank}", name()),
        PathRole::Transfer => format!("{} transfer", name()),
        PathRole::Gap => format!("idle{rank}"),
    }
}

/// The terminal section, under the attribution's tables: the title, the fixes table `width`
/// wide, the critical path in one line and the host-bound note.
pub(crate) fn text(w: &WhatIf, width: crate::Width) -> String {
    let mut out = format!("\n{}\n", title(w));
    out.push_str(&table::fitted(&table::columns(&FIXES, Context::Text), &fix_rows(w, Context::Text), width));
    out.push_str(&format!("{}\n", path_line(w, Context::Text)));
    if let Some(note) = beyond_own_note(w) {
        out.push_str(&format!("Note: {}\n", plain(&note, TEXT)));
    }
    if let Some(note) = host_bound_note(w) {
        out.push_str(&format!("Note: {note}\n"));
    }
    out
}

/// The Markdown section: the fixes table, the critical path and, folded, the gantt of the median
/// step.
pub(crate) fn markdown(w: &WhatIf) -> String {
    let ctx = Context::Markdown;
    let mut out = format!("**{}**\n\n", title(w).trim_end_matches(':'));
    if w.scenarios.is_empty() {
        out.push_str("_No fix to replay: no rank stood out as late and no collective ran._\n");
    } else {
        out.push_str(&table::markdown(&table::columns(&FIXES, ctx), &fix_rows(w, ctx)));
    }
    out.push_str(&format!("\n{}", path_table(w)));
    if let Some(note) = beyond_own_note(w) {
        out.push_str(&format!("\n**Note:** {}\n", md_text(&note, TEXT)));
    }
    if let Some(note) = host_bound_note(w) {
        out.push_str(&format!("\n**Note:** {note}\n"));
    }
    // Folded: the chart is a picture to open, a hundred and more lines of source otherwise.
    if let Some(chart) = w.picture.as_ref().and_then(super::gantt::gantt) {
        out.push_str(&format!(
            "\n<details><summary>The median step, rank by rank (gantt)</summary>\n\n{chart}\n\n</details>\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A what-if with one hidden collective saving `saving` ms against its own `own` ms.
    fn what_if(saving: f64, own: Option<f64>) -> WhatIf {
        let own = own.map_or_else(String::new, |o| format!(r#", "collective_comm_ms": {o}"#));
        let json = format!(
            r#"{{"steps": 2, "step_ms": 10.0, "scenarios": [{{"kind": "hidden", "collective": "all_gather",
                "step_ms": 9.5, "saving_ms": {saving}, "saving_pct": 4.4, "saving_low_ms": 0.4,
                "saving_high_ms": 0.5{own}}}],
                "critical_path": {{"step": 0, "step_ms": 10.0, "parts": [], "path": []}}}}"#
        );
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
    }

    /// The B200 trace's case: a hidden all_gather saving 0.443 ms per step against its own
    /// 0.022 ms says why, in both renderings; a saving within its own time says nothing.
    #[test]
    fn a_hidden_collective_that_saves_more_than_its_own_time_says_why() {
        let w = what_if(0.443, Some(0.022));
        let note = beyond_own_note(&w).unwrap_or_default();
        assert!(
            note.starts_with("all_gather hidden saves 0.443 ms per step, more than all_gather's own 0.022 ms"),
            "{note}"
        );
        assert!(note.contains("upper bound"), "{note}");
        assert!(text(&w, crate::Width::Wide).contains("Note: all_gather hidden saves 0.443 ms"));
        assert!(markdown(&w).contains("**Note:** all\\_gather hidden saves 0.443 ms"));
        assert_eq!(beyond_own_note(&what_if(0.02, Some(0.022))), None);
        assert_eq!(beyond_own_note(&what_if(0.443, None)), None);
    }
}
