//! A partial file's fields checked against each other, as attribution made them: a file is
//! untrusted input, and one edited field (a step count, a kernel's step, a collective's name in
//! the kernel columns, a per-step exposed time) must not change what the combine reports. Each
//! rule is an identity or a bound that attribution guarantees (`attribute::analyze_rank`); a file
//! that breaks one is refused, naming the fields, never combined.

use std::collections::BTreeMap;

use crate::attribute::series::MAX_STEP_SAMPLES;
use crate::attribute::timeline::{kept, MAX_REPLAYED_STEPS};
use crate::attribute::{Compat, RankAnalysis};
use crate::intervals::{length, union};
use crate::limits::{check_span, MAX_SPAN_NS, OTHER_COLLECTIVES};
use crate::model::{extent, Ns};

use super::Settings;

/// The most bytes one collective call can move: 2^48 (256 TiB), past any device's memory.
pub const MAX_PAYLOAD_BYTES: u64 = 1 << 48;

/// Every rule below, for one rank's analysis.
pub(super) fn analysis(a: &RankAnalysis, settings: &Settings) -> Result<(), String> {
    steps_agree(a, settings.steps)?;
    spans_bounded(a, settings.compat)?;
    figures_agree(a, settings.compat)?;
    kernels_agree(a)?;
    timeline_agrees(a, settings.compat)?;
    if settings.compat == Compat::Default {
        times_agree(a)?;
    }
    Ok(())
}

/// The step counts of a rank's analysis checked against each other, as attribution made them:
/// one changed field (`steps` set to 1,000 where the window holds 7 steps would divide every
/// per-step figure by 1,000) is refused, naming both fields.
/// - With step markers (`window` `steps` or `hta`), `steps` is the number of windows, `samples`.
/// - Without (`trace`), `steps` is the `--steps` setting the file records, else 1, and `samples` 1.
/// - `step_ns` holds one length per window up to the cap (none without compute kernels; 0 or 1 for
///   the whole trace), and every `exposed_by_step` step is one of those windows.
fn steps_agree(a: &RankAnalysis, setting: Option<u64>) -> Result<(), String> {
    let markers = a.window != "trace";
    if a.steps_from_markers != markers {
        return Err(format!(
            "`steps_from_markers` is {} but `window` is \"{}\"; the file was edited: write it again with `commgate attribute --partial`",
            a.steps_from_markers, a.window
        ));
    }
    let expected = if markers { a.samples } else { setting.unwrap_or(1).max(1) };
    if a.steps != expected {
        let from =
            if markers { "`samples` (the step windows)" } else { "the `--steps` setting the file records (else 1)" };
        return Err(format!(
            "`steps` is {} but {from} is {expected}; the file was edited: write it again with `commgate attribute --partial`",
            a.steps
        ));
    }
    if !markers && a.samples != 1 {
        return Err(format!("`samples` is {} for the whole-trace window, which is one sample", a.samples));
    }
    let windows = usize::try_from(a.samples).unwrap_or(usize::MAX).min(MAX_STEP_SAMPLES);
    let lengths_ok = if a.no_compute {
        a.step_ns.is_empty()
    } else if a.samples >= 2 {
        a.step_ns.len() == windows
    } else {
        a.step_ns.len() <= 1
    };
    if !lengths_ok {
        return Err(format!(
            "`step_ns` holds {} lengths for {} step windows; the file was edited: write it again with `commgate attribute --partial`",
            a.step_ns.len(),
            a.samples
        ));
    }
    for (name, c) in &a.by_collective {
        if let Some((step, _)) =
            c.exposed_by_step.iter().find(|(s, _)| usize::try_from(*s).map_or(true, |s| s >= windows))
        {
            return Err(format!(
                "collective `{}`: `exposed_by_step` names step {step} of {} step windows",
                name.escape_debug(),
                a.samples
            ));
        }
    }
    Ok(())
}

/// Every time of a rank's analysis within what one profile can hold ([`MAX_SPAN_NS`], 11.6
/// days): each step's length and each step's timeline, the communication kernels from the first
/// start to the last end, each collective's exposed time in a step; the window's totals within
/// one such span per step window, and a collective's time within one per kernel. Values
/// inside ±2^61 ns but past these printed as steps of 10^13 ms. A communication kernel runs
/// forward (under `--compat hta`, whose spans are rounded inward to whole microseconds, a
/// sub-microsecond one ends up to 1 µs before it starts).
fn spans_bounded(a: &RankAnalysis, compat: Compat) -> Result<(), String> {
    let windows = a.samples.max(1) as f64;
    let longest = MAX_SPAN_NS as f64;
    let shortest = if compat == Compat::Hta { -1_000 } else { 0 };
    if let Some((i, k)) = a.comm_kernels.iter().enumerate().find(|(_, k)| k.end.saturating_sub(k.ts) < shortest) {
        return Err(format!(
            "kernel {i} ends {} ns before it starts, which no trace gives",
            k.ts.saturating_sub(k.end)
        ));
    }
    if let Some(ns) = a.step_ns.iter().find(|&&ns| ns > MAX_SPAN_NS) {
        return Err(format!("`step_ns` holds {ns}, a step longer than {longest} ns (11.6 days), which no trace gives"));
    }
    for (field, ns) in [("comm_ns", a.comm_ns), ("compute_ns", a.compute_ns), ("overlapped_ns", a.overlapped_ns)] {
        if ns as f64 > windows * longest {
            return Err(format!("`{field}` is {ns}, more than 11.6 days per step window, which no trace gives"));
        }
    }
    if let Some((first, last)) = extent(a.comm_kernels.iter().map(|k| (k.ts, k.end))) {
        check_span("`kernels`", first, last)?;
    }
    for step in &a.timeline {
        if let Some((first, last)) = extent(step.segs.iter().map(|g| (g.start, g.end))) {
            check_span(&format!("timeline step {}", step.step), first, last)?;
        }
    }
    for (name, c) in &a.by_collective {
        let named = |e: String| format!("collective `{}`: {e}", name.escape_debug());
        let in_a_step = c.exposed_by_step.iter().map(|(_, v)| v.abs()).chain([c.exposed_ns.abs() / windows]);
        if let Some(v) = in_a_step.into_iter().find(|&v| v > longest) {
            return Err(named(format!(
                "an exposed time of {v:e} ns in one step, longer than 11.6 days, which no trace gives"
            )));
        }
        if c.total_ns.abs() > c.kernels.max(1) as f64 * longest {
            return Err(named(format!(
                "`total_ns` ({:e}) is more than 11.6 days for each of its {} kernels, which no trace gives",
                c.total_ns, c.kernels
            )));
        }
    }
    Ok(())
}

/// Figures that are parts of others, as commgate's own attribution makes them (`--compat
/// default`; HTA's spans may run backwards, so its figures are only bounded): the overlap is
/// part of both the communication and the compute time, and a collective's exposed time is
/// part of its time (a rounding's worth of slack), neither below 0.
fn figures_agree(a: &RankAnalysis, compat: Compat) -> Result<(), String> {
    if compat != Compat::Default {
        return Ok(());
    }
    if a.overlapped_ns > a.comm_ns.min(a.compute_ns) {
        return Err(format!(
            "`overlapped_ns` ({}) is more than `comm_ns` ({}) or `compute_ns` ({}): the overlap is part of both",
            a.overlapped_ns, a.comm_ns, a.compute_ns
        ));
    }
    for (name, c) in &a.by_collective {
        let named = |e: String| format!("collective `{}`: {e}", name.escape_debug());
        let steps = c.exposed_by_step.iter().map(|(_, v)| *v);
        if let Some(v) = [c.total_ns, c.exposed_ns].into_iter().chain(steps).find(|v| *v < 0.0) {
            return Err(named(format!("a time of {v} ns, below 0, which no trace gives")));
        }
        if c.exposed_ns > c.total_ns * (1.0 + 1e-9) + 1.0 {
            return Err(named(format!(
                "`exposed_ns` ({}) is more than `total_ns` ({}), which no trace gives",
                c.exposed_ns, c.total_ns
            )));
        }
    }
    Ok(())
}

/// The communication kernels against the rank's other fields, in every mode: each kernel's step
/// is one of the windows; each collective's kernel count, payload and whether it is known are
/// those of its kernels, and every kernel's collective is one of the rank's collectives (a
/// collective renamed in the kernel columns alone, or its kernels moved past the last window,
/// dropped them from every per-step figure); folded kernels are kernels of the folded row; a
/// payload within what a call can move; the events counted at least the kernels.
fn kernels_agree(a: &RankAnalysis) -> Result<(), String> {
    let windows = a.samples.max(1);
    let mut seen: BTreeMap<&str, (u64, u64, bool)> = BTreeMap::new();
    for (i, k) in a.comm_kernels.iter().enumerate() {
        if u64::from(k.step) >= windows {
            return Err(format!("kernel {i} is in step {} of {windows} step windows", k.step));
        }
        if let Some(p) = k.payload.filter(|&p| p > MAX_PAYLOAD_BYTES) {
            return Err(format!("kernel {i} moves {p} bytes, more than 2^48, which no call moves"));
        }
        let entry = seen.entry(&k.collective).or_default();
        entry.0 += 1;
        entry.1 = entry.1.saturating_add(k.payload.unwrap_or(0));
        entry.2 |= k.payload.is_some();
    }
    if let Some(name) = seen.keys().find(|name| !a.by_collective.contains_key(**name)) {
        return Err(format!(
            "kernels of collective `{}` are not among `collectives`; the file was edited: write it again with \
             `commgate attribute --partial`",
            name.escape_debug()
        ));
    }
    for (name, c) in &a.by_collective {
        let (kernels, payload, known) = seen.get(name.as_str()).copied().unwrap_or_default();
        if (c.kernels, c.payload_bytes, c.payload_known) != (kernels, payload, known) {
            return Err(format!(
                "collective `{}` says {} kernels moving {} bytes (known: {}) but the kernel columns hold {kernels} \
                 moving {payload} (known: {known}); the file was edited: write it again with `commgate attribute --partial`",
                name.escape_debug(),
                c.kernels,
                c.payload_bytes,
                c.payload_known
            ));
        }
    }
    let folded = seen.get(OTHER_COLLECTIVES).map_or(0, |s| s.0);
    if a.collectives_folded > folded {
        return Err(format!(
            "`collectives_folded` is {} but {folded} kernels are counted under \"{OTHER_COLLECTIVES}\"",
            a.collectives_folded
        ));
    }
    let n = a.comm_kernels.len() as u64;
    if a.num_events < n {
        return Err(format!("`num_events` is {}, fewer than its {n} communication kernels", a.num_events));
    }
    Ok(())
}

/// The kept steps' timelines against the kernels: distinct steps, the ones a window of this many
/// samples keeps (evenly spaced: a step count edited up leaves steps that are not), and each
/// communication segment at its kernel's times (within HTA's rounding to whole microseconds)
/// and in its kernel's step.
fn timeline_agrees(a: &RankAnalysis, compat: Compat) -> Result<(), String> {
    let samples = a.samples.max(1);
    let steps: Vec<u32> = a.timeline.iter().map(|t| t.step).collect();
    if steps.iter().zip(steps.iter().skip(1)).any(|(a, b)| a >= b) {
        return Err("`timeline` steps are not distinct and ascending".to_string());
    }
    let most = MAX_REPLAYED_STEPS.min(samples);
    let len = steps.len() as u64;
    if len > most || !(len.max(1)..=most.max(1)).any(|k| steps.iter().all(|&s| kept(s, samples, k))) {
        return Err(format!(
            "`timeline` holds steps {} that no replay of {samples} step windows keeps; the file was edited: \
             write it again with `commgate attribute --partial`",
            brief(&steps)
        ));
    }
    let slack: Ns = if compat == Compat::Hta { 1_000 } else { 0 };
    for t in &a.timeline {
        for (i, g) in t.segs.iter().enumerate() {
            let Some(c) = g.comm else { continue };
            let Some(k) = a.comm_kernels.get(c as usize) else { continue };
            let near = |x: Ns, y: Ns| x.abs_diff(y) <= slack as u64;
            if !near(g.start, k.ts) || !near(g.end, k.end) || k.step != t.step {
                return Err(format!(
                    "timeline step {} segment {i} is not at communication kernel {c}'s times and step",
                    t.step
                ));
            }
        }
    }
    Ok(())
}

/// Under `--compat default`, the times attribution derives from the kernels: the communication
/// time is the union of the kernels' spans; a collective's time at most its kernels' durations;
/// per step, its exposed time at most its kernels' durations in that step, on exactly the steps
/// that hold its kernels, and all together at least its exposed time (each step's sweep sees
/// only that step's kernels, so it can only give a collective more).
fn times_agree(a: &RankAnalysis) -> Result<(), String> {
    let spans: Vec<(Ns, Ns)> = a.comm_kernels.iter().map(|k| (k.ts, k.end)).collect();
    let comm = length(&union(spans));
    if a.comm_ns != comm {
        return Err(format!(
            "`comm_ns` is {} but the communication kernels cover {comm} ns; the file was edited: write it again \
             with `commgate attribute --partial`",
            a.comm_ns
        ));
    }
    // Per collective: its kernels' durations in all, and by step (below the sample cap).
    let mut durations: BTreeMap<&str, (f64, BTreeMap<u32, f64>)> = BTreeMap::new();
    for k in &a.comm_kernels {
        let d = k.end.saturating_sub(k.ts) as f64;
        let entry = durations.entry(&k.collective).or_default();
        entry.0 += d;
        if (k.step as usize) < MAX_STEP_SAMPLES {
            *entry.1.entry(k.step).or_default() += d;
        }
    }
    let slack = |v: f64| v * 1e-9 + 1.0;
    let all_steps = usize::try_from(a.samples).is_ok_and(|n| n <= MAX_STEP_SAMPLES);
    for (name, c) in &a.by_collective {
        let named = |e: String| format!("collective `{}`: {e}", name.escape_debug());
        let (total, by_step) = durations.get(name.as_str()).cloned().unwrap_or_default();
        if c.total_ns > total + slack(total) {
            return Err(named(format!("`total_ns` ({}) is more than its kernels' {total} ns", c.total_ns)));
        }
        let steps: Vec<u32> = c.exposed_by_step.iter().map(|&(s, _)| s).collect();
        let expected: Vec<u32> = if a.samples > 1 { by_step.keys().copied().collect() } else { vec![0] };
        if !by_step.is_empty() && steps != expected {
            return Err(named(format!(
                "`exposed_by_step` names steps {} but its kernels are in steps {}",
                brief(&steps),
                brief(&expected)
            )));
        }
        if a.samples > 1 {
            if let Some(&(s, v)) = c.exposed_by_step.iter().find(|&&(s, v)| {
                let d = by_step.get(&s).copied().unwrap_or(0.0);
                v > d + slack(d)
            }) {
                return Err(named(format!("an exposed time of {v} ns in step {s}, more than its kernels' time there")));
            }
        }
        let sum: f64 = c.exposed_by_step.iter().map(|&(_, v)| v).sum();
        if all_steps && sum + slack(c.exposed_ns) < c.exposed_ns {
            return Err(named(format!(
                "`exposed_by_step` adds up to {sum} ns, less than `exposed_ns` ({}); the file was edited: write it \
                 again with `commgate attribute --partial`",
                c.exposed_ns
            )));
        }
    }
    Ok(())
}

/// Up to five steps and how many more, for a message.
fn brief(steps: &[u32]) -> String {
    let shown: Vec<String> = steps.iter().take(5).map(u32::to_string).collect();
    match steps.len() {
        0 => "none".to_string(),
        n if n > 5 => format!("{}, … ({n} in all)", shown.join(", ")),
        _ => shown.join(", "),
    }
}
