//! The paired part of a check report (`check --paired`): what was compared, each metric's
//! ratio head / base over the rounds with its interval, and every round, as text, as Markdown
//! with the per-round chart of the primary metric, and (in the JSON) every round's figures.

use crate::chart;
use crate::escape::{md_cell, plain, NAME, TEXT};
use commgate_core::units::{change, interval, pct};
use commgate_gate::check::paired::{PairedMetricReport, PairedReport, PairedRound, Stop};

/// At most this many rounds are listed in the text and the comment (the JSON keeps them all).
const ROUNDS_SHOWN: usize = 30;

/// The line under the verdict: what was compared and how the sequence ended.
pub(super) fn compared(p: &PairedReport) -> String {
    let ended = match p.stop {
        Stop::Decided => "decided",
        Stop::MaxRounds => "the last round was done undecided",
        Stop::TimeBudget => "the time budget ended",
        Stop::Failed => "an arm failed",
    };
    format!(
        "{} ({ended}, {:.0} s); base `{}`",
        p.compared(),
        p.elapsed_s,
        p.setup.base.chars().take(12).collect::<String>()
    )
}

fn state(m: &PairedMetricReport) -> &'static str {
    m.state.as_str()
}

fn ratio(m: &PairedMetricReport) -> String {
    m.ratio.map_or_else(|| "n/a".to_string(), change)
}

fn ci(m: &PairedMetricReport) -> String {
    m.ci.map_or_else(|| "n/a".to_string(), interval)
}

fn mde(m: &PairedMetricReport) -> String {
    m.mde.map_or_else(|| "n/a".to_string(), |v| format!("±{}", pct(v)))
}

fn round_cell(r: &PairedRound, metric: usize) -> String {
    r.ratios.get(metric).and_then(|m| m.ratio).map_or_else(|| "n/a".to_string(), change)
}

/// Terminal text: the metrics, then the rounds.
pub(super) fn text(p: &PairedReport) -> String {
    let mut out = format!("Paired: {}\n", plain(&compared(p), TEXT));
    if !p.metrics.is_empty() {
        out.push_str(&format!(
            "\n{:<22} {:<13} {:>10} {:>22} {:>10}\n",
            "metric", "state", "head/base", "interval", "MDE"
        ));
        for m in &p.metrics {
            out.push_str(&format!(
                "{:<22} {:<13} {:>10} {:>22} {:>10}\n",
                plain(&m.metric, 22),
                state(m),
                ratio(m),
                ci(m),
                mde(m)
            ));
        }
    }
    if let Some(first) = p.rounds.first() {
        let names: Vec<String> = first.ratios.iter().map(|m| plain(&m.metric, 19)).collect();
        out.push_str(&format!("\n{:<6} {:<6}", "round", "first"));
        for n in &names {
            out.push_str(&format!(" {n:>19}"));
        }
        out.push('\n');
        for r in p.rounds.iter().take(ROUNDS_SHOWN) {
            out.push_str(&format!("{:<6} {:<6}", r.round, r.first.as_str()));
            for i in 0..names.len() {
                out.push_str(&format!(" {:>19}", round_cell(r, i)));
            }
            out.push('\n');
        }
        if p.rounds.len() > ROUNDS_SHOWN {
            out.push_str(&format!("… and {} more rounds in the JSON report\n", p.rounds.len() - ROUNDS_SHOWN));
        }
    }
    out
}

/// Markdown for the comment (under the head, which says what was compared): the metric table, the chart of the primary metric round by round,
/// and the rounds folded.
pub(super) fn markdown(p: &PairedReport) -> String {
    let mut out = String::new();
    if !p.metrics.is_empty() {
        out.push_str("| metric | state | head / base | interval | MDE |\n|---|---|---:|---:|---:|\n");
        for m in &p.metrics {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                md_cell(&m.metric, NAME),
                state(m),
                ratio(m),
                ci(m),
                mde(m)
            ));
        }
    }
    let primary: Vec<Option<f64>> =
        p.rounds.iter().map(|r| r.ratios.first().and_then(|m| m.ratio).map(|v| 100.0 * (v - 1.0))).collect();
    let title = p.rounds.first().and_then(|r| r.ratios.first()).map_or("overlap median", |m| m.metric.as_str());
    if let Some(c) = chart::rounds_chart(&format!("{title}, head vs base per round"), &primary, 100.0 * p.setup.delta) {
        out.push('\n');
        out.push_str(&c);
    }
    if let Some(first) = p.rounds.first() {
        let mut table = String::from("| round | first |");
        for m in &first.ratios {
            table.push_str(&format!(" {} |", md_cell(&m.metric, NAME)));
        }
        table.push_str(&format!("\n|---:|---|{}\n", "---:|".repeat(first.ratios.len())));
        for r in p.rounds.iter().take(ROUNDS_SHOWN) {
            table.push_str(&format!("| {} | {} |", r.round, r.first.as_str()));
            for i in 0..first.ratios.len() {
                table.push_str(&format!(" {} |", round_cell(r, i)));
            }
            table.push('\n');
        }
        out.push_str(&format!("\n<details><summary>Every round (head / base − 1)</summary>\n\n{table}\n</details>\n"));
    }
    out
}
