//! `commgate attribute`: traces in, the attribution out (or a partial file of the ranks given).

use std::path::Path;

use anyhow::{Context, Result};

use crate::config;
use commgate_core::diag;
use commgate_gate::decide::mitigation::diagnose;
use commgate_gate::decide::Outcome;
use commgate_report as report;
use commgate_trace::load::{attribute_paths, partial_paths};
use commgate_trace::partial;

use super::{emit_report, print_notes};

/// `commgate attribute`.
pub(super) fn run(args: crate::cli::AttributeArgs, file: &config::FileConfig) -> Result<Outcome> {
    let cfg = config::attribute(args, file)?;
    if let Some(out) = &cfg.partial {
        return write_partial(&cfg, out);
    }
    let attribution = diagnose(attribute_paths(&cfg.paths, &cfg.options)?, &cfg.thresholds);
    print_notes(&attribution);
    let rendered = report::render_attribution_in(&attribution, cfg.format, cfg.width);
    emit_report(&rendered, cfg.format, cfg.output.as_deref())?;
    Ok(Outcome::Passed)
}

/// `commgate attribute --partial OUT`: the ranks given, reduced to a partial file.
fn write_partial(cfg: &config::AttributeConfig, out: &Path) -> Result<Outcome> {
    let reduced = partial_paths(&cfg.paths, &cfg.options)?;
    let gzip = out.extension().is_some_and(|e| e == "gz");
    commgate_core::output::write_atomic(out, &partial::encode(&reduced, gzip))
        .with_context(|| format!("{}: cannot write the partial file (does the directory exist?)", out.display()))?;
    diag::info(format_args!(
        "wrote {} ({}); combine the partial files of every node with `commgate attribute PARTIAL...`",
        out.display(),
        partial::describe(&reduced)
    ));
    Ok(Outcome::Passed)
}
