//! The paired part of a check report (`check --paired`): what was compared, each metric's
//! ratio head / base over the rounds with its interval, and every round, as text, as Markdown
//! with the per-round chart of the primary metric, and (in the JSON) every round's figures.

use crate::chart;
use crate::escape::{md_cell, md_text, plain, NAME, TEXT};
use commgate_core::units::{change, interval, pct};
use commgate_gate::check::paired::{PairedMetricReport, PairedReport, PairedRound, Stop};

/// At most this many rounds are listed in the text and the comment (the JSON keeps them all).
const ROUNDS_SHOWN: usize = 30;
/// The text's table of rounds: rounds per line, the metric names' column and each round's.
const ROUNDS_PER_LINE: usize = 8;
const ROUND_LABEL: usize = 19;
const ROUND_CELL: usize = 8;

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
    if let Some(h) = &p.history {
        out.push_str(&format!("History: {}\n", plain(h, TEXT)));
    }
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
        // Rounds across, metrics down: eight rounds and the longest metric name fit 100 columns.
        let names: Vec<String> = first.ratios.iter().map(|m| plain(&m.metric, ROUND_LABEL)).collect();
        for chunk in p.rounds.iter().take(ROUNDS_SHOWN).collect::<Vec<_>>().chunks(ROUNDS_PER_LINE) {
            out.push_str(&format!("\n{:<ROUND_LABEL$}", "round"));
            for r in chunk {
                out.push_str(&format!(" {:>ROUND_CELL$}", r.round));
            }
            out.push_str(&format!("\n{:<ROUND_LABEL$}", "first"));
            for r in chunk {
                out.push_str(&format!(" {:>ROUND_CELL$}", r.first.as_str()));
            }
            out.push('\n');
            for (i, name) in names.iter().enumerate() {
                out.push_str(&format!("{name:<ROUND_LABEL$}"));
                for r in chunk {
                    out.push_str(&format!(" {:>ROUND_CELL$}", round_cell(r, i)));
                }
                out.push('\n');
            }
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
    if let Some(h) = &p.history {
        out.push_str(&format!("> {}\n\n", md_text(h, TEXT)));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;
    use commgate_core::result::Schedule;
    use commgate_gate::check::paired::{Arm, MetricRatio, PairedSetup};
    use commgate_gate::check::CheckReport;
    use commgate_gate::compare::paired::ArmMedians;
    use commgate_gate::compare::State;
    use commgate_gate::decide::{Decision, FailOn};

    fn report(ratios: &[f64], decision: Decision, blocking: bool, reason: &str) -> CheckReport {
        let metric = |name: &str, state: State, ratio: f64| PairedMetricReport {
            metric: name.to_string(),
            state,
            ratio: Some(ratio),
            ci: Some([ratio - 0.004, ratio + 0.004]),
            level_spent: Some(0.0105),
            p_slower: Some(0.4),
            p_faster: Some(0.6),
            mde: Some(0.004),
        };
        let rounds = ratios
            .iter()
            .enumerate()
            .map(|(i, &r)| PairedRound {
                round: i + 1,
                first: if i % 2 == 0 { Arm::Base } else { Arm::Head },
                ratios: vec![
                    MetricRatio { metric: "overlap median".into(), ratio: Some(r) },
                    MetricRatio { metric: "exposed comm".into(), ratio: None },
                ],
                medians: vec![ArmMedians { schedule: Schedule::Overlap, base_ms: 10.0, head_ms: 10.0 * r }],
                capture: Vec::new(),
            })
            .collect();
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let state = if blocking { State::Regressed } else { State::Unchanged };
        let paired = PairedReport {
            setup: PairedSetup {
                base: "0123456789abcdef0123456789abcdef01234567".into(),
                alpha: 0.05,
                delta: 0.03,
                max_rounds: 10,
                budget_minutes: 20.0,
                seed: 7,
                prepare: Some("uv sync --frozen".into()),
                capture: None,
            },
            stop: Stop::Decided,
            elapsed_s: 62.4,
            rounds,
            metrics: vec![metric("overlap median", state, mean), metric("exposed comm", State::Inconclusive, 1.0)],
            history: None,
        };
        let mut r = crate::check::tests::report(0, 4);
        r.attribution = None;
        CheckReport {
            verdict: decision,
            blocking,
            reasons: vec![reason.to_string()],
            fail_on: FailOn::Regression,
            paired: Some(paired),
            ..r
        }
    }

    #[test]
    fn a_paired_report_says_what_it_compared_and_shows_every_round() {
        let accept = report(
            &[1.002, 0.998, 1.001],
            Decision::Accept,
            false,
            "head and base are the same within ±3 %: overlap median +0.0 % (−0.4…+0.4 %) over 3 rounds",
        );
        insta::assert_snapshot!("paired_accept_text", crate::render_check(&accept, Format::Text));
        insta::assert_snapshot!("paired_accept_markdown", crate::render_check(&accept, Format::Markdown));
        let tune = report(
            &[1.09, 1.11, 1.10, 1.10],
            Decision::Tune,
            true,
            "head is slower than base: overlap median +10.0 % (+9.6…+10.4 %) over 4 rounds",
        );
        let md = crate::render_check(&tune, Format::Markdown);
        assert!(md.contains("### 🔴 commgate `tune`: head is slower than base"), "{md}");
        assert!(md.contains("head vs base on this runner, 4 rounds, interleaved"), "{md}");
        assert!(md.contains("line [9.00, 11.00, 10.00, 10.00]"), "{md}");
        assert_eq!(md.matches("head vs base on this runner").count(), 1, "said once: {md}");
    }

    /// Twelve rounds wrap after the eighth, and no line of the text is wider than 100 columns,
    /// whatever a metric's ratio.
    #[test]
    fn the_rounds_fit_a_terminal() {
        let many: Vec<f64> = (0..12).map(|i| if i == 5 { 2.412 } else { 0.655 + 0.01 * f64::from(i) }).collect();
        let text = crate::render_check(&report(&many, Decision::Accept, false, "x"), Format::Text);
        let rounds = text.split_once("\nround").map(|(_, t)| t).expect("rounds");
        assert_eq!(text.matches("\nround ").count(), 2, "{text}");
        assert!(rounds.contains("+141.2 %"), "{text}");
        for line in rounds.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
    }
}
