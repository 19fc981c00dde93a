//! `baseline remove`: takes runs out of a store file, under the store's lock and with an atomic
//! write, as `update` adds them: a bad run (a benchmark run by its id, a trace run by its name
//! and position) goes without an editor. The file is read without the checks a judged store
//! must pass, so that a store those checks refuse (a run stored twice) can be mended; the file
//! as it will be written must pass them, or nothing is written.

use std::path::{Path, PathBuf};

use super::{run_id, validate_store, write_store, BaselineFile, Runs, StoreLock};
use commgate_core::result::{read_versioned, FileError};
use commgate_core::units::plural;

/// The shortest run id prefix `remove` takes: what `baseline update` prints.
pub const MIN_ID_PREFIX: usize = 12;

/// What to take out of one store file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Removal {
    /// Benchmark runs by run id (a prefix of at least [`MIN_ID_PREFIX`] hex digits), kept or
    /// summarised in the history.
    pub runs: Vec<String>,
    /// Trace runs by name and 1-based position, oldest first.
    pub trace_runs: Vec<(String, usize)>,
}

/// Parses `NAME:N` (`--trace-run default:2`).
pub fn trace_run(value: &str) -> Result<(String, usize), String> {
    let (name, n) = value.rsplit_once(':').ok_or_else(|| {
        format!("`{}`: give NAME:N, the N-th trace run stored under NAME, oldest first", value.escape_debug())
    })?;
    let n: usize = n.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
        format!("`{}`: N is a position from 1 (the oldest trace run under NAME)", value.escape_debug())
    })?;
    if name.is_empty() {
        return Err(format!("`{}`: the trace run's name is empty", value.escape_debug()));
    }
    Ok((name.to_string(), n))
}

/// What a removal did: one line per run taken out, and what the file holds now.
#[derive(Debug, Clone, PartialEq)]
pub struct Removed {
    pub path: PathBuf,
    pub lines: Vec<String>,
}

/// Takes `removal` out of the store file at `path` (in the store `dir`, whose lock it holds).
/// Every run named must be there; the file as written must be a valid store (it may hold no
/// runs); otherwise nothing is written and the error says why.
pub fn remove(dir: &Path, path: &Path, removal: &Removal, waiting: impl FnOnce()) -> Result<Removed, FileError> {
    for id in &removal.runs {
        if id.len() < MIN_ID_PREFIX || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(FileError::new(
                path,
                format!(
                    "run id `{}`: give at least {MIN_ID_PREFIX} hex digits of it, as `baseline update` printed it",
                    id.escape_debug()
                ),
            ));
        }
    }
    let lock = StoreLock::acquire(dir, waiting)?;
    let mut file: BaselineFile = read_versioned(path, "baseline file")?;
    let mut lines = Vec::new();
    for id in &removal.runs {
        lines.push(take_run(&mut file, id).map_err(|m| FileError::new(path, m))?);
    }
    // Highest position first within a name, so that each position names the run `show` listed.
    let mut trace_runs = removal.trace_runs.clone();
    trace_runs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    trace_runs.dedup();
    for (name, n) in &trace_runs {
        lines.push(take_trace_run(&mut file, name, *n).map_err(|m| FileError::new(path, m))?);
    }
    validate_store(&file, Runs::MayBeEmpty).map_err(|m| {
        FileError::new(path, format!("would still not be a valid store after the removal ({m}); nothing was written"))
    })?;
    write_store(path, &file)?;
    drop(lock);
    let traces: usize = file.traces.values().map(|t| t.len()).sum();
    lines.push(format!(
        "{} now holds {} run{} and {traces} trace run{}",
        path.display(),
        file.runs.len(),
        plural(file.runs.len()),
        plural(traces)
    ));
    Ok(Removed { path: path.to_path_buf(), lines })
}

/// Takes the run whose id starts with `prefix` out of the kept runs or the history.
fn take_run(file: &mut BaselineFile, prefix: &str) -> Result<String, String> {
    let prefix = prefix.to_ascii_lowercase();
    let kept: Vec<usize> =
        file.runs.iter().enumerate().filter(|(_, r)| run_id(r).full().starts_with(&prefix)).map(|(i, _)| i).collect();
    let summarised: Vec<usize> =
        file.history.iter().enumerate().filter(|(_, h)| h.run_id.starts_with(&prefix)).map(|(i, _)| i).collect();
    match (kept.as_slice(), summarised.as_slice()) {
        ([i], []) => {
            let run = file.runs.remove(*i);
            Ok(format!("removed run {} (created {})", run_id(&run), run.created_at.escape_debug()))
        }
        ([], [i]) => {
            let summary = file.history.remove(*i);
            Ok(format!(
                "removed the summary of run {} (created {}) from the history",
                prefix,
                summary.created_at.escape_debug()
            ))
        }
        ([], []) => Err(format!("holds no run with id {prefix}: `commgate baseline show` lists the runs")),
        _ => Err(format!("several runs have an id starting with {prefix}: give more of it")),
    }
}

/// Takes the `n`-th (1-based, oldest first) trace run stored under `name` out; a name left with
/// none is removed.
fn take_trace_run(file: &mut BaselineFile, name: &str, n: usize) -> Result<String, String> {
    let Some(runs) = file.traces.get_mut(name) else {
        let names: Vec<String> = file.traces.keys().map(|k| format!("\"{}\"", k.escape_debug())).collect();
        return Err(format!(
            "holds no trace runs \"{}\" (it holds {})",
            name.escape_debug(),
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        ));
    };
    if n == 0 || n > runs.len() {
        return Err(format!(
            "holds {} trace run{} \"{}\": there is no run {n}",
            runs.len(),
            plural(runs.len()),
            name.escape_debug()
        ));
    }
    runs.0.remove(n - 1);
    if runs.is_empty() {
        file.traces.remove(name);
    }
    Ok(format!("removed trace run {n} of \"{}\"", name.escape_debug()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_run_is_named_by_name_and_position() {
        assert_eq!(trace_run("default:2"), Ok(("default".to_string(), 2)));
        assert_eq!(trace_run("a:b:1"), Ok(("a:b".to_string(), 1)));
        for bad in ["default", "default:0", ":1", "default:x"] {
            assert!(trace_run(bad).is_err(), "{bad}");
        }
    }
}
