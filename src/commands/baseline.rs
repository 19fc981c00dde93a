//! `commgate baseline update | list | show | remove`: the store changed under its lock, listed,
//! shown, mended.

use commgate_gate::baseline;

use anyhow::Result;

use crate::config;
use commgate_core::diag;
use commgate_core::output::emit;
use commgate_gate::decide::Outcome;
use commgate_report as report;
use commgate_trace::load::attribute_paths;

use super::print_notes;

/// `commgate baseline update`.
pub(super) fn update(args: crate::cli::UpdateArgs, file: &config::FileConfig) -> Result<Outcome> {
    let cfg = config::update(args, file)?;
    // Attributed before the store is locked or touched: bad traces change nothing.
    let traces = if cfg.traces.is_empty() {
        None
    } else {
        let attribution = attribute_paths(&cfg.traces, &config::attribute_defaults(file)?)?;
        print_notes(&attribution);
        Some((cfg.name, attribution))
    };
    let targets: Vec<baseline::Target> = if cfg.from.is_empty() {
        vec![baseline::Target::File {
            profile: cfg.environment_profile.clone().unwrap_or_default(),
            workload_id: cfg.workload_id,
        }]
    } else {
        cfg.from.into_iter().map(baseline::Target::Result).collect()
    };
    let changes: Vec<baseline::Change> = targets
        .into_iter()
        .map(|target| baseline::Change {
            target,
            keep: cfg.keep,
            history_keep: cfg.history_keep,
            traces: traces.clone(),
            profile: cfg.environment_profile.clone(),
        })
        .collect();
    let waiting = || diag::info(format_args!("waiting for another update of {} to finish", cfg.dir.display()));
    for updated in baseline::update_all(&cfg.dir, changes, waiting)? {
        for line in updated.messages() {
            diag::info(line);
        }
    }
    Ok(Outcome::Passed)
}

/// `commgate baseline list`.
pub(super) fn list(args: crate::cli::ListArgs, file: &config::FileConfig) -> Result<Outcome> {
    let dir = config::store_dir(&args.store, file);
    let listing = baseline::list::list(&dir)?;
    emit(&report::history::list(&listing, args.format), None)?;
    let esc = |p: &str| report::escape::plain(p, report::escape::PATH);
    let failed: Vec<String> = listing.failed().map(|s| esc(&s.path)).collect();
    if !failed.is_empty() {
        anyhow::bail!("{} store(s) could not be read (listed above): {}", failed.len(), failed.join(", "));
    }
    Ok(Outcome::Passed)
}

/// `commgate baseline show`.
pub(super) fn show(args: crate::cli::ShowArgs, file: &config::FileConfig) -> Result<Outcome> {
    let (_, path) = store_file(&args.file, file)?;
    let shown = baseline::show::show(&path)?;
    emit(&report::history::show(&shown, args.format), None)?;
    Ok(Outcome::Passed)
}

/// `commgate baseline remove`.
pub(super) fn remove(args: crate::cli::RemoveArgs, file: &config::FileConfig) -> Result<Outcome> {
    let trace_runs = args
        .trace_run
        .iter()
        .map(|t| baseline::remove::trace_run(t))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|m| anyhow::anyhow!("--trace-run {m}"))?;
    let (dir, path) = store_file(&args.file, file)?;
    let removal = baseline::remove::Removal { runs: args.runs, trace_runs };
    // The lock of the store the file is in (`<dir>/<profile>/<workload>.json`), as `update` takes it.
    let store = path.parent().and_then(std::path::Path::parent).filter(|d| !d.as_os_str().is_empty());
    let lock_dir = store.map_or_else(|| dir.clone(), std::path::Path::to_path_buf);
    let waiting = || diag::info(format_args!("waiting for another update of {} to finish", lock_dir.display()));
    for line in baseline::remove::remove(&lock_dir, &path, &removal, waiting)?.lines {
        diag::info(line);
    }
    Ok(Outcome::Passed)
}

/// The store directory and the store file `args` names.
fn store_file(
    args: &crate::cli::StoreFile,
    file: &config::FileConfig,
) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let dir = config::store_dir(&args.store, file);
    let path = baseline::show::resolve(&args.target, &dir, args.profile.as_deref())?;
    Ok((dir, path))
}
