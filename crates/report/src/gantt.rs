//! The gantt chart of one replayed step: a mermaid `gantt` block, one section per drawn rank,
//! compute, hidden and exposed communication as bars, the critical path marked. Draws a bounded
//! [`Picture`] (`trace::attribute::picture`), so its size is bounded too.
//!
//! What mermaid's gantt needs, and how the chart meets it:
//! - dates: `dateFormat x` (milliseconds since the epoch) with the step's microseconds written as
//!   milliseconds, so one chart millisecond is one microsecond of the step; the axis then reads
//!   `%s` (chart seconds: milliseconds of the step) and `%s.%L` below a 10 ms span, where d3 ticks
//!   fall between chart seconds (its ticks are whole seconds from a 10-second span up);
//! - an end after the start: a bar is at least one unit (1 µs) wide;
//! - rows: `displayMode: compact` puts a rank's bars that do not overlap on one row, so a rank
//!   is one row of compute and exposed communication and one of communication hidden under it;
//! - tags: compute is plain, hidden communication `done`, exposed communication `active`, and a
//!   critical bar adds `crit`.
//!
//! Nothing from a trace is written: every word is fixed and every value a number.

use std::fmt::Write as _;

use crate::cells::{counted, ms};
use commgate_trace::attribute::picture::{Picture, PictureBar, PictureKind, PictureRank, PIXELS};

/// The chart's mermaid configuration: compact rows; room on the left for `rank 1023 (fastest)`;
/// exposed communication orange (mermaid's `active` is a pale blue next to its compute purple,
/// and the exposed time is what a reader looks for) with a brown border, so that the red
/// border of a critical bar stands out (mermaid's own is pink).
const INIT: &str = concat!(
    r#"%%{init: {"gantt": {"displayMode": "compact", "leftPadding": 125, "rightPadding": 25}, "#,
    r##""themeVariables": {"activeTaskBkgColor": "#ffc078", "activeTaskBorderColor": "#a0642a", "critBorderColor": "#e03131"}}}%%"##
);
/// The plot's width at a chart [`PIXELS`] wide, less [`INIT`]'s paddings.
const PLOT_PX: f64 = (PIXELS - 125 - 25) as f64;
/// What a bar too narrow for its word is labelled: mermaid wants a label, and writes one that
/// does not fit next to the bar, over its neighbours. An entity code (mermaid decodes `#32;` to
/// a space after rendering) is a label that draws nothing.
const NO_LABEL: &str = "#32;";

/// Below this span (µs) d3's axis ticks fall between whole milliseconds of the step.
const WHOLE_MS_TICKS_FROM_US: f64 = 10_000.0;

/// The Markdown of the chart (a fenced mermaid block and a key under it), or `None` when the
/// picture draws no bar.
pub fn gantt(p: &Picture) -> Option<String> {
    let drawn: Vec<&PictureRank> = p.ranks.iter().filter(|r| !r.bars.is_empty()).collect();
    if drawn.is_empty() {
        return None;
    }
    let axis = if p.span_us >= WHOLE_MS_TICKS_FROM_US { "%s" } else { "%s.%L" };
    let mut out = format!(
        "```mermaid\n{INIT}\ngantt\n    title Step {}: compute, hidden and exposed communication, critical path in red (ms)\n    dateFormat x\n    axisFormat {axis}\n    todayMarker off\n",
        p.step
    );
    let mut id = 0u64;
    for r in &drawn {
        let _ = writeln!(out, "    section rank {}{}", r.rank, role(r));
        for b in &r.bars {
            id += 1;
            let (start, width) = units(b);
            let _ = writeln!(out, "    {} :{}b{id}, {start}, {width}ms", label(b, p.span_us), tags(b));
        }
    }
    out.push_str("```\n");
    out.push_str(&key(p, drawn.len()));
    Some(out)
}

/// A drawn rank's role as the section names it; only the words the picture gives.
fn role(r: &PictureRank) -> &'static str {
    match r.role.as_deref() {
        Some("late") => " (late)",
        Some("fastest") => " (fastest)",
        Some("median") => " (median)",
        _ => "",
    }
}

/// A bar's kind in a word when the word fits in it (11 px text, under 7 px a letter, and a
/// margin), [`NO_LABEL`] otherwise.
fn label(b: &PictureBar, span_us: f64) -> &'static str {
    let word = match b.kind {
        PictureKind::Compute => "compute",
        PictureKind::Hidden => "hidden",
        PictureKind::Exposed => "exposed",
    };
    let px = b.dur_us / span_us * PLOT_PX;
    if px >= 7.0 * word.len() as f64 + 10.0 {
        word
    } else {
        NO_LABEL
    }
}

fn tags(b: &PictureBar) -> &'static str {
    match (b.kind, b.critical) {
        (PictureKind::Compute, false) => "",
        (PictureKind::Compute, true) => "crit, ",
        (PictureKind::Hidden, false) => "done, ",
        (PictureKind::Hidden, true) => "crit, done, ",
        (PictureKind::Exposed, false) => "active, ",
        (PictureKind::Exposed, true) => "crit, active, ",
    }
}

/// A bar's start and width in chart units (µs of the step, written as ms): whole units, at
/// least one wide, within the dates JavaScript holds (a picture read from a file may say
/// anything).
fn units(b: &PictureBar) -> (u64, u64) {
    const LATEST: f64 = 1e15;
    let whole = |us: f64| if us.is_finite() && us > 0.0 { us.min(LATEST).round() as u64 } else { 0 };
    let start = whole(b.start_us);
    let end = whole(b.start_us + b.dur_us).max(start.saturating_add(1));
    (start, end - start)
}

/// The key under the chart: what the bars are (their words fit only the wider ones), which ranks
/// are drawn and what merged.
fn key(p: &Picture, drawn: usize) -> String {
    // Folded past eight ranks: the fastest and the median are named only then.
    let folded = p.ranks.iter().any(|r| matches!(r.role.as_deref(), Some("fastest" | "median")));
    let ranks = if folded {
        format!(
            "{drawn} of its {} ranks drawn (the late one, the fastest and the median by compute time)",
            p.ranks_in_step
        )
    } else if drawn < p.ranks_in_step as usize {
        format!("{drawn} of its {} ranks drawn (the others ran nothing in it)", p.ranks_in_step)
    } else {
        counted(drawn, "rank", "ranks")
    };
    let merged = match p.bars_merged {
        0 => String::new(),
        n => format!(
            "; {} merged into a neighbour or left out (narrower than a pixel, or past {} a rank)",
            counted(usize::try_from(n).unwrap_or(usize::MAX), "bar", "bars"),
            p.max_bars_per_rank
        ),
    };
    format!(
        "\nEach rank: compute, communication hidden under it (grey, below) and exposed (orange); the critical path in red. Step {}, {} ms: {ranks}{merged}.\n",
        p.step,
        ms(if p.span_us.is_finite() { p.span_us / 1e3 } else { 0.0 })
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_trace::attribute::picture::{picture, Bar, BarKind, RankBars};
    use commgate_trace::model::Ns;

    fn bar(start_us: Ns, end_us: Ns, kind: BarKind, critical: bool) -> Bar {
        Bar { start: start_us * 1_000, end: end_us * 1_000, kind, critical }
    }

    /// Two ranks over 400 µs: rank 0 waits in a critical collective, rank 1 is late.
    fn two_ranks() -> Picture {
        let ranks = [
            RankBars {
                rank: 0,
                bars: vec![
                    bar(100, 200, BarKind::Compute, false),
                    bar(250, 400, BarKind::Compute, true),
                    bar(180, 300, BarKind::Comm, true),
                ],
            },
            RankBars {
                rank: 1,
                bars: vec![bar(110, 390, BarKind::Compute, true), bar(390, 500, BarKind::Comm, false)],
            },
        ];
        picture(7, &ranks, Some(1))
    }

    /// 64 ranks of 30 ms: rank r computes (r mod 16 + 10) ms in kernels of 250 µs with 50 µs
    /// between them, then waits in a collective that ends at 30 ms; rank 31 (25 ms) is late.
    fn sixty_four() -> Picture {
        let ranks: Vec<RankBars> = (0..64u32)
            .map(|rank| {
                let busy = Ns::from(rank % 16 + 10) * 1_000;
                let mut bars: Vec<Bar> =
                    (0..busy / 300).map(|k| bar(300 * k, 300 * k + 250, BarKind::Compute, rank == 31)).collect();
                bars.push(bar(busy / 2, busy / 2 + 3_000, BarKind::Comm, false));
                bars.push(bar(busy, 30_000, BarKind::Comm, true));
                RankBars { rank, bars }
            })
            .collect();
        picture(12, &ranks, Some(31))
    }

    fn tasks(chart: &str) -> Vec<&str> {
        chart.lines().filter(|l| l.contains(":") && l.trim_end().ends_with("ms")).collect()
    }

    #[test]
    fn snapshot_two_ranks() {
        insta::assert_snapshot!(gantt(&two_ranks()).expect("a chart"));
    }

    #[test]
    fn snapshot_folded_sixty_four_ranks() {
        let p = sixty_four();
        assert_eq!(p.ranks.len(), 3);
        insta::assert_snapshot!(gantt(&p).expect("a chart"));
    }

    #[test]
    fn a_picture_without_bars_draws_no_chart() {
        assert_eq!(gantt(&picture(0, &[], None)), None);
        let idle = Picture {
            step: 1,
            span_us: 10.0,
            ranks: vec![PictureRank { rank: 0, role: None, bars: vec![] }],
            ranks_in_step: 1,
            bars_merged: 0,
            max_bars_per_rank: 40,
        };
        assert_eq!(gantt(&idle), None);
        // A rank without work beside one with: the key says why one is missing.
        let mut one = idle.clone();
        one.ranks_in_step = 2;
        one.ranks.push(PictureRank {
            rank: 1,
            role: None,
            bars: vec![PictureBar { kind: PictureKind::Compute, start_us: 0.0, dur_us: 10.0, critical: false }],
        });
        let chart = gantt(&one).expect("a chart");
        assert!(!chart.contains("section rank 0"), "{chart}");
        assert!(
            chart.contains("Step 1, 0.010 ms: 1 of its 2 ranks drawn (the others ran nothing in it).\n"),
            "{chart}"
        );
    }

    #[test]
    fn every_bar_is_a_task_with_its_own_id_and_at_least_one_unit_wide() {
        let chart = gantt(&two_ranks()).expect("a chart");
        let ids: Vec<&str> = tasks(&chart).iter().filter_map(|t| t.rsplit(", ").nth(2)).collect();
        let unique: std::collections::BTreeSet<&&str> = ids.iter().collect();
        assert_eq!((ids.len(), unique.len()), (7, 7), "{chart}");
        // A bar narrower than a chart unit (1 µs) is one unit wide.
        let thin = PictureBar { kind: PictureKind::Compute, start_us: 3.2, dur_us: 0.1, critical: false };
        assert_eq!(units(&thin), (3, 1));
        let empty = PictureBar { dur_us: 0.0, ..thin };
        assert_eq!(units(&empty), (3, 1));
        let wide = PictureBar { start_us: 10.6, dur_us: 4.8, ..thin };
        assert_eq!(units(&wide), (11, 4));
        let huge = PictureBar { start_us: f64::MAX, dur_us: f64::MAX, ..thin };
        assert_eq!(units(&huge), (1_000_000_000_000_000, 1));
    }

    #[test]
    fn the_axis_reads_milliseconds_with_decimals_only_below_ten() {
        assert!(gantt(&two_ranks()).expect("a chart").contains("\n    axisFormat %s.%L\n"));
        assert!(gantt(&sixty_four()).expect("a chart").contains("\n    axisFormat %s\n"));
    }

    #[test]
    fn tags_mark_the_kind_and_the_critical_path() {
        let chart = gantt(&two_ranks()).expect("a chart");
        let t = tasks(&chart);
        assert!(t.iter().any(|l| l.contains(":crit, active, ")), "{chart}");
        assert!(t.iter().any(|l| l.contains(":crit, done, ")), "{chart}");
        assert!(t.iter().any(|l| l.contains(":b1, ")), "plain compute: {chart}");
        assert!(t.iter().any(|l| l.contains(":active, ")), "{chart}");
    }

    #[test]
    fn nothing_but_fixed_words_and_numbers_reach_the_chart() {
        // A picture read back from a file: a role that is not one of the picture's, and values
        // that are not numbers.
        let hostile = Picture {
            step: 2,
            span_us: f64::NAN,
            ranks: vec![PictureRank {
                rank: 3,
                role: Some("late)\n    click b1 href \"javascript:alert(1)\"".to_string()),
                bars: vec![PictureBar {
                    kind: PictureKind::Exposed,
                    start_us: f64::NEG_INFINITY,
                    dur_us: f64::NAN,
                    critical: true,
                }],
            }],
            ranks_in_step: 1,
            bars_merged: 0,
            max_bars_per_rank: 40,
        };
        let chart = gantt(&hostile).expect("a chart");
        assert!(chart.contains("\n    section rank 3\n"), "{chart}");
        assert!(chart.contains(":crit, active, b1, 0, 1ms\n"), "{chart}");
        assert!(!chart.contains("click") && !chart.contains("NaN") && !chart.contains("inf"), "{chart}");
    }
}
