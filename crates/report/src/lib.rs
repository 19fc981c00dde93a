//! Renderers: data in, `String` out. No file or network I/O here; the caller writes.
//!
//! One module per content, each rendering it as terminal text, GitHub-flavoured Markdown and
//! JSON (where the content has that form), on a few shared modules below them:
//!
//! | module | renders |
//! |---|---|
//! | [`attribution`] | `attribute`: the per-collective, per-size and per-rank tables, the source line, the decisions |
//! | [`comparison`] | `compare`: the baseline line, the metric table with its changes and power, the verdict |
//! | [`check`] | `check`: the verdict first, then the comparison and the attribution; the PR comment within GitHub's limit |
//! | [`sweep`] | an nccl-tests sweep's comparison: the size × busbw table and chart |
//! | `whatif` | the attribution's "what would fix it": the fixes, the critical path, the gantt of a step |
//! | [`history`] | `baseline list` and `baseline show` |
//! | [`bench`](mod@bench) | what `bench` says about the runs it wrote (text for stderr) |
//!
//! | shared module | owns |
//! |---|---|
//! | [`table`] | the one table writer: columns declared with their head, alignment and drop rank; text and GFM tables |
//! | [`escape`] | the escaping of a string from a file, one function per output context |
//! | `cells` | how a number reads in every report: decimals, milliseconds, p-values, counts, changes |
//! | `json` | pretty JSON with a trailing newline |
//! | [`chart`], [`gantt`] | the mermaid charts of the Markdown reports |
//!
//! A content module uses the shared ones and, where a report holds another (a check report holds
//! a comparison and an attribution), that content's module, never the other way round. Trace-
//! and file-supplied strings go through the escaping of their context ([`escape::plain`] for a
//! terminal, [`escape::md_text`] or a table cell's escape in Markdown). Renderers display the
//! decisions the data carries; they never recompute them.

// This crate renders untrusted files and traces: no index or slice that could panic on their
// contents (`get`, iterators and patterns instead); tests are exempt through clippy.toml.
#![deny(clippy::indexing_slicing)]

pub mod attribution;
pub mod bench;
mod cells;
pub mod chart;
pub mod check;
pub mod comparison;
pub mod escape;
pub mod gantt;
pub mod history;
#[cfg(test)]
mod injection_tests;
mod json;
pub mod sweep;
pub mod table;
#[cfg(test)]
mod tests;
pub(crate) mod whatif;

use commgate_gate::check::CheckReport;
use commgate_gate::compare::Comparison;
use commgate_gate::decide::mitigation::Diagnosis;

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

/// Renders an attribution in the chosen format.
pub fn render_attribution(a: &Diagnosis, format: Format) -> String {
    render_attribution_in(a, format, Width::Fit)
}

/// Renders an attribution, its text tables `width` wide.
pub fn render_attribution_in(a: &Diagnosis, format: Format, width: Width) -> String {
    match format {
        Format::Text => attribution::text(a, width),
        Format::Json => attribution::json(a),
        Format::Markdown => attribution::markdown(a),
    }
}

/// Renders a check report in the chosen format.
pub fn render_check(r: &CheckReport, format: Format) -> String {
    render_check_in(r, format, Width::Fit)
}

/// Renders a check report, its text tables `width` wide.
pub fn render_check_in(r: &CheckReport, format: Format, width: Width) -> String {
    match format {
        Format::Text => check::text(r, width),
        Format::Json => check::json(r),
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
        Format::Text => comparison::text(c, width),
        Format::Json => comparison::json(c),
        Format::Markdown => comparison::markdown(c),
    }
}
