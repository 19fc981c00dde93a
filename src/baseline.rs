//! The baseline store: `baselines/<environment_profile>/<workload_id>.json`, committed in the
//! user's repository, holding up to `keep` earlier runs (newest last) and optional trace
//! summaries. Writes are atomic (temporary file + rename); every error names the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::result::{self, load_result, read_versioned, FileError, RunResult, SCHEMA_VERSION};
use crate::trace::attribute::Attribution;

pub const DEFAULT_KEEP: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineFile {
    pub schema_version: u32,
    pub environment_profile: String,
    pub workload_id: String,
    /// Newest last.
    pub runs: Vec<RunResult>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub traces: BTreeMap<String, Attribution>,
}

/// What `--baseline` pointed at, reduced to the runs a comparison uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    pub path: PathBuf,
    pub runs: Vec<RunResult>,
}

impl Baseline {
    /// A result compares only with the workload its baseline measured.
    pub fn check_workload(&self, current: &RunResult, current_path: &Path) -> Result<(), FileError> {
        let Some(base) = self.runs.last() else { return Ok(()) };
        match base.workload.difference(&current.workload) {
            None => Ok(()),
            Some((field, b, c)) => Err(FileError::new(
                current_path,
                format!(
                    "measures a different workload than {} (`workload.{field}`: {b} there, {c} here); \
                     compare it with a baseline of the same workload",
                    self.path.display()
                ),
            )),
        }
    }

    pub fn fingerprint_match(&self, current: &RunResult) -> bool {
        self.runs.iter().any(|r| r.hardware.fingerprint == current.hardware.fingerprint)
    }
}

/// Loads a baseline store file (runs and trace summaries), checking every run.
pub fn load_store(path: &Path) -> Result<BaselineFile, FileError> {
    let file: BaselineFile = read_versioned(path, "baseline file")?;
    check_store(&file).map_err(|m| FileError::new(path, m))?;
    Ok(file)
}

/// Loads a baseline store file, or a single result file used as a one-run baseline.
pub fn load(path: &Path) -> Result<Baseline, FileError> {
    #[derive(Deserialize)]
    struct Shape {
        runs: Option<serde::de::IgnoredAny>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FileError::new(
            path,
            "does not exist; pass a baseline file (baselines/<profile>/<workload>.json) or a result file",
        ),
        _ => FileError::new(path, format!("cannot be read: {e}")),
    })?;
    let is_store = serde_json::from_str::<Shape>(&text).map(|s| s.runs.is_some()).unwrap_or(false);
    if !is_store {
        let run = load_result(path)?;
        return Ok(Baseline { path: path.to_path_buf(), runs: vec![run] });
    }
    let file: BaselineFile = result::parse_versioned(&text, "baseline file").map_err(|m| FileError::new(path, m))?;
    check_store(&file).map_err(|m| FileError::new(path, m))?;
    Ok(Baseline { path: path.to_path_buf(), runs: file.runs })
}

fn check_store(file: &BaselineFile) -> Result<(), String> {
    if file.runs.is_empty() {
        return Err("holds no runs; add one with `commgate baseline update --from RESULT`".to_string());
    }
    for (i, run) in file.runs.iter().enumerate() {
        result::validate(run).map_err(|m| format!("`runs[{i}]`: {m}"))?;
        if run.workload.id != file.workload_id {
            return Err(format!(
                "`runs[{i}].workload.id` is \"{}\" but the file is for \"{}\"",
                run.workload.id, file.workload_id
            ));
        }
    }
    Ok(())
}

/// A profile or workload id that cannot be a file name in the store (it would escape the store
/// directory or be unportable). The value is shown escaped: it comes from a result file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{field}` {value:?} cannot name a baseline file; use letters, digits, '-', '_', '.' or '+'")]
pub struct BadStoreName {
    pub field: &'static str,
    pub value: String,
}

/// Where a result's baseline lives in a store directory.
pub fn store_path(dir: &Path, run: &RunResult) -> Result<PathBuf, BadStoreName> {
    store_path_for(dir, &run.environment_profile, &run.workload.id)
}

fn path_component<'a>(s: &'a str, field: &'static str) -> Result<&'a str, BadStoreName> {
    let ok = !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    if ok {
        Ok(s)
    } else {
        Err(BadStoreName { field, value: s.to_string() })
    }
}

/// What `baseline update` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub path: PathBuf,
    pub runs: usize,
    pub dropped: usize,
    /// Set when the new run's hardware matches none of the kept runs (reported, not refused).
    pub fingerprint_note: Option<String>,
}

/// Adds the result at `from` to its baseline under `dir`, keeping the newest `keep` runs.
pub fn update(dir: &Path, from: &Path, keep: usize) -> Result<Update, FileError> {
    if keep == 0 {
        return Err(FileError::new(from, "--keep 0 would keep no runs; use 1 or more"));
    }
    let run = load_result(from)?;
    if let Some(f) = &run.failure {
        return Err(FileError::new(
            from,
            format!("is a failed run ({}: {}); a baseline only takes finished runs", f.kind, f.message),
        ));
    }
    if !run.is_usable() {
        return Err(FileError::new(from, "is a dry run with no samples; a baseline only takes measured runs"));
    }
    let path = store_path(dir, &run).map_err(|e| FileError::new(from, e.to_string()))?;
    let mut file = if path.exists() {
        let file: BaselineFile = read_versioned(&path, "baseline file")?;
        if let Some(last) = file.runs.last() {
            if let Some((field, base, new)) = last.workload.difference(&run.workload) {
                return Err(FileError::new(
                    from,
                    format!(
                        "measures a different workload than {} (`workload.{field}`: {base} there, {new} here); \
                         give it its own workload id",
                        path.display()
                    ),
                ));
            }
        }
        file
    } else {
        BaselineFile {
            schema_version: SCHEMA_VERSION,
            environment_profile: run.environment_profile.clone(),
            workload_id: run.workload.id.clone(),
            runs: Vec::new(),
            traces: BTreeMap::new(),
        }
    };
    let fingerprint_note = (!file.runs.is_empty()
        && !file.runs.iter().any(|r| r.hardware.fingerprint == run.hardware.fingerprint))
    .then(|| {
        format!(
            "hardware fingerprint {} matches none of the {} stored runs: comparisons against them will ask for more evidence",
            run.hardware.fingerprint,
            file.runs.len()
        )
    });
    file.runs.push(run);
    let dropped = file.runs.len().saturating_sub(keep);
    file.runs.drain(..dropped);
    write_store(&path, &file)?;
    Ok(Update { path, runs: file.runs.len(), dropped, fingerprint_note })
}

/// Stores an attribution summary under `name` in the existing baseline file at `path`, for
/// `check --traces` to compare each collective's exposed time against.
pub fn add_traces(path: &Path, name: &str, attribution: Attribution) -> Result<usize, FileError> {
    if !path.exists() {
        return Err(FileError::new(
            path,
            "does not exist yet: add a run first (`commgate baseline update --from RESULT --traces …` does both)",
        ));
    }
    let mut file = load_store(path)?;
    let collectives = attribution.by_collective.len();
    file.traces.insert(name.to_string(), attribution);
    write_store(path, &file)?;
    Ok(collectives)
}

/// The store file for an environment profile and workload id under `dir`.
pub fn store_path_for(dir: &Path, profile: &str, workload_id: &str) -> Result<PathBuf, BadStoreName> {
    let profile = path_component(profile, "environment_profile")?;
    let workload = path_component(workload_id, "workload.id")?;
    Ok(dir.join(profile).join(format!("{workload}.json")))
}

/// Writes a store file atomically, creating its directory.
pub fn write_store(path: &Path, file: &BaselineFile) -> Result<(), FileError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| FileError::new(dir, format!("cannot create the directory: {e}")))?;
    }
    let mut text = serde_json::to_string_pretty(file)
        .map_err(|e| FileError::new(path, format!("cannot serialise the baseline: {e}")))?;
    text.push('\n');
    crate::output::write_atomic(path, text.as_bytes())
        .map_err(|e| FileError::new(path, format!("cannot write the baseline (does the directory exist?): {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::fixtures;

    fn write_result(dir: &Path, name: &str, r: &RunResult) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_string(r).expect("json")).expect("write");
        p
    }

    #[test]
    fn update_appends_keeps_newest_and_refuses_mismatches() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = tmp.path().join("baselines");
        for i in 0..4 {
            let mut r = fixtures::run(&[1.0, 2.0, 3.0]);
            r.run_label = format!("run{i}");
            let from = write_result(tmp.path(), &format!("r{i}.json"), &r);
            let u = update(&store, &from, 3).expect("updates");
            assert_eq!(u.runs, (i + 1).min(3));
        }
        let b = load(&store.join("PAR-MOCK/par-overlap-allreduce-matmul.json")).expect("loads");
        let labels: Vec<&str> = b.runs.iter().map(|r| r.run_label.as_str()).collect();
        assert_eq!(labels, ["run1", "run2", "run3"]);

        let mut other = fixtures::run(&[1.0]);
        other.workload.payload_elements = 1024;
        let from = write_result(tmp.path(), "other.json", &other);
        let e = update(&store, &from, 3).unwrap_err();
        assert!(e.message.contains("workload.payload_elements"), "{e}");

        let mut failed = fixtures::run(&[1.0]);
        failed.failure =
            Some(crate::result::Failure { kind: "timeout".into(), message: "rank 1 hung".into(), rank: Some(1) });
        let from = write_result(tmp.path(), "failed.json", &failed);
        assert!(update(&store, &from, 3).unwrap_err().message.contains("failed run"));

        let mut moved = fixtures::run(&[1.0]);
        moved.hardware.gpu_name = Some("other-gpu".into());
        let from = write_result(tmp.path(), "moved.json", &moved);
        assert!(update(&store, &from, 3).expect("accepted").fingerprint_note.is_some());
    }

    #[test]
    fn a_result_file_is_a_one_run_baseline_and_empty_stores_are_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = fixtures::run(&[1.0, 2.0]);
        let p = write_result(tmp.path(), "r.json", &r);
        assert_eq!(load(&p).expect("loads").runs.len(), 1);
        let empty = BaselineFile {
            schema_version: SCHEMA_VERSION,
            environment_profile: "PAR-MOCK".into(),
            workload_id: "w".into(),
            runs: vec![],
            traces: BTreeMap::new(),
        };
        let p = tmp.path().join("empty.json");
        std::fs::write(&p, serde_json::to_string(&empty).expect("json")).expect("write");
        assert!(load(&p).unwrap_err().message.contains("holds no runs"));
    }

    #[test]
    fn unsafe_names_cannot_escape_the_store() {
        let mut r = fixtures::run(&[1.0]);
        r.environment_profile = "../etc".into();
        assert!(store_path(Path::new("b"), &r).is_err());
    }
}
