//! The baseline store: `baselines/<environment_profile>/<workload_id>.json`, committed in the
//! user's repository, holding up to `keep` earlier runs (newest last) and optional trace
//! summaries. This module owns the store's shape and what a valid store is (every run a valid
//! result of the file's profile and one workload, each run once); [`update()`] owns changing it,
//! under the store's lock (`lock`), with each run known by its identity (`identity`).
//! Writes are atomic (temporary file + rename); every error names the file.

pub mod ceiling;
pub mod history;
mod identity;
pub mod list;
mod lock;
pub mod remove;
pub mod show;
mod traces;
mod update;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use commgate_core::result::{self, load_result, read_versioned, FileError, RunResult};

pub use history::{trend_points, DEFAULT_HISTORY_KEEP};
pub use identity::{run_id, RunId};
pub use lock::StoreLock;
pub use traces::TraceRuns;
pub use update::{update, update_all, Change, RunChange, Target, TracesChange, Updated};

pub const DEFAULT_KEEP: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineFile {
    pub schema_version: u32,
    pub environment_profile: String,
    pub workload_id: String,
    /// Newest last.
    pub runs: Vec<RunResult>,
    /// Summaries of the runs evicted from `runs`, oldest first ([`history`]); never judged.
    /// Optional, so stores written before it existed read as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<history::RunSummary>,
    /// Trace runs by name (`--name`), each list oldest first (`traces`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub traces: BTreeMap<String, TraceRuns>,
    /// nccl-tests sweeps: the best bus bandwidth per machine and point any added run reached,
    /// kept past eviction ([`ceiling`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ceilings: Vec<ceiling::Ceiling>,
}

/// What `--baseline` pointed at, reduced to the runs a comparison uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    pub path: PathBuf,
    pub runs: Vec<RunResult>,
}

impl Baseline {
    /// A result compares only with the workload its baseline measured.
    pub fn validate_workload(&self, current: &RunResult, current_path: &Path) -> Result<(), FileError> {
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

/// Loads a baseline store file (runs and trace runs), checking every run and that the runs
/// can be compared with each other (`validate_store`).
pub fn load_store(path: &Path) -> Result<BaselineFile, FileError> {
    let file: BaselineFile = read_versioned(path, "baseline file")?;
    validate_store(&file, Runs::Required).map_err(|m| FileError::new(path, m))?;
    Ok(file)
}

/// Loads a baseline store file, or a single result file used as a one-run baseline.
pub fn load(path: &Path) -> Result<Baseline, FileError> {
    load_kept(path).map(|(b, _)| b)
}

/// [`load`] with the nccl-tests ceilings a store file keeps ([`ceiling`]); none for a result file.
pub fn load_kept(path: &Path) -> Result<(Baseline, Vec<ceiling::Ceiling>), FileError> {
    #[derive(Deserialize)]
    struct Shape {
        runs: Option<serde::de::IgnoredAny>,
    }
    let text = commgate_core::input::read_text(path, result::MAX_FILE_BYTES).map_err(|e| match e {
        commgate_core::input::TextError::NotFound => FileError::new(
            path,
            "does not exist; pass a baseline file (baselines/<profile>/<workload>.json) or a result file",
        ),
        other => FileError::new(path, other.to_string()),
    })?;
    let is_store = serde_json::from_str::<Shape>(&text).map(|s| s.runs.is_some()).unwrap_or(false);
    if !is_store {
        let run = load_result(path)?;
        return Ok((Baseline { path: path.to_path_buf(), runs: vec![run] }, Vec::new()));
    }
    let file: BaselineFile = result::parse_versioned(&text, "baseline file").map_err(|m| FileError::new(path, m))?;
    validate_store(&file, Runs::Required).map_err(|m| FileError::new(path, m))?;
    Ok((Baseline { path: path.to_path_buf(), runs: file.runs }, file.ceilings))
}

/// Whether a store file may hold no runs: only while `baseline update` is adding one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runs {
    Required,
    MayBeEmpty,
}

/// What makes a store usable as a baseline: every run is a valid result of the file's profile
/// and workload; all runs measure one workload (else the spread between them is not noise but a
/// different measurement); no run is stored twice (else it counts twice and the spread shrinks).
/// The message names the run (`runs[3]`).
fn validate_store(file: &BaselineFile, runs: Runs) -> Result<(), String> {
    if file.runs.is_empty() && runs == Runs::Required {
        return Err("holds no runs; add one with `commgate baseline update --from RESULT`".to_string());
    }
    for (i, run) in file.runs.iter().enumerate() {
        result::validate(run).map_err(|m| format!("`runs[{i}]`: {m}"))?;
        if run.workload.id != file.workload_id {
            return Err(format!(
                "`runs[{i}].workload.id` is \"{}\" but the file is for \"{}\"",
                run.workload.id.escape_debug(),
                file.workload_id.escape_debug()
            ));
        }
        if run.environment_profile != file.environment_profile {
            return Err(format!(
                "`runs[{i}].environment_profile` is \"{}\" but the file is for \"{}\"",
                run.environment_profile.escape_debug(),
                file.environment_profile.escape_debug()
            ));
        }
    }
    if let Some((newest, older)) = file.runs.split_last() {
        let newest_index = older.len();
        for (i, run) in older.iter().enumerate() {
            if let Some((field, there, here)) = run.workload.difference(&newest.workload) {
                return Err(format!(
                    "`runs[{i}].workload.{field}` is {} but the newest run's (`runs[{newest_index}]`) is {}; \
                     a baseline's runs must all measure one workload: remove the runs that differ, or give \
                     them their own workload id",
                    there.escape_debug(),
                    here.escape_debug()
                ));
            }
        }
    }
    let mut seen: HashMap<RunId, usize> = HashMap::new();
    let mut step_times: HashMap<Vec<u64>, usize> = HashMap::new();
    for (i, run) in file.runs.iter().enumerate() {
        let id = run_id(run);
        if let Some(first) = seen.get(&id) {
            return Err(format!(
                "`runs[{i}]` is the same run as `runs[{first}]` (run id {id}); a baseline counts each run \
                 once: delete one copy"
            ));
        }
        seen.insert(id, i);
        // A clock never measures the same step times twice: the same samples under another
        // `created_at` are one run stored again (the mock backend repeats by design).
        if run.workload.backend != "mock" {
            let samples = step_time_bits(run);
            if let Some(first) = step_times.get(&samples) {
                return Err(format!(
                    "`runs[{i}]` holds the same step times as `runs[{first}]` under another `created_at`: one \
                     measurement stored twice counts twice and shrinks the spread; delete one copy"
                ));
            }
            step_times.insert(samples, i);
        }
    }
    for (name, runs) in &file.traces {
        runs.validate(name)?;
    }
    ceiling::validate(&file.ceilings)?;
    history::validate(file)
}

/// Every step time of a run, schedule by schedule (then an nccl-tests sweep's, point by point), as
/// bits (for "the same samples").
fn step_time_bits(run: &RunResult) -> Vec<u64> {
    let mut rows: Vec<&result::Row> = run.rows.iter().collect();
    rows.sort_by_key(|r| r.schedule);
    let points = run.sweep.iter().flat_map(|s| &s.points);
    rows.iter()
        .map(|r| &r.samples_ms)
        .chain(points.map(|p| &p.samples_ms))
        .flat_map(|samples| samples.iter().map(|x| x.to_bits()).chain([u64::MAX]))
        .collect()
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
    if commgate_core::result::is_store_name(s) {
        Ok(s)
    } else {
        Err(BadStoreName { field, value: s.to_string() })
    }
}

/// The store file for an environment profile and workload id under `dir`.
pub fn store_path_for(dir: &Path, profile: &str, workload_id: &str) -> Result<PathBuf, BadStoreName> {
    let profile = path_component(profile, "environment_profile")?;
    let workload = path_component(workload_id, "workload.id")?;
    Ok(dir.join(profile).join(format!("{workload}.json")))
}

/// Writes a store file atomically, creating its directory. Within commgate only [`update()`]
/// calls it, holding the store's lock; a generator that owns a fresh directory may call it alone.
pub fn write_store(path: &Path, file: &BaselineFile) -> Result<(), FileError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).map_err(|e| FileError::new(dir, format!("cannot create the directory: {e}")))?;
        // The new profile directory's own entry, so that a crash cannot lose it after the rename.
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            commgate_core::output::sync_dir(parent)
                .map_err(|e| FileError::new(parent, format!("cannot flush the directory to disk: {e}")))?;
        }
    }
    let mut text = serde_json::to_string_pretty(file)
        .map_err(|e| FileError::new(path, format!("cannot serialise the baseline: {e}")))?;
    text.push('\n');
    commgate_core::output::write_atomic(path, text.as_bytes())
        .map_err(|e| FileError::new(path, format!("cannot write the baseline (does the directory exist?): {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::SCHEMA_VERSION;
    use commgate_testkit::results as fixtures;

    fn write_result(dir: &Path, name: &str, r: &RunResult) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_string(r).expect("json")).expect("write");
        p
    }

    /// A store of `n` distinct runs (their first overlap sample differs).
    fn store(n: usize) -> BaselineFile {
        let runs = (0..n)
            .map(|i| {
                let mut r = fixtures::run(&[1.0, 2.0, 3.0]);
                r.rows[3].samples_ms[0] = 1.0 + i as f64 / 100.0;
                r
            })
            .collect();
        BaselineFile {
            schema_version: SCHEMA_VERSION,
            environment_profile: "PAR-MOCK".into(),
            workload_id: "par-overlap-allreduce-matmul".into(),
            runs,
            history: Vec::new(),
            traces: BTreeMap::new(),
            ceilings: Vec::new(),
        }
    }

    fn load_error(file: &BaselineFile) -> String {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = tmp.path().join("store.json");
        std::fs::write(&p, serde_json::to_string(file).expect("json")).expect("write");
        let from_load = load(&p).unwrap_err().to_string();
        let from_load_store = load_store(&p).unwrap_err().to_string();
        assert_eq!(from_load, from_load_store, "both readers refuse alike");
        assert!(from_load.starts_with(&p.display().to_string()), "names the file: {from_load}");
        from_load
    }

    #[test]
    fn a_result_file_is_a_one_run_baseline_and_empty_stores_are_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = fixtures::run(&[1.0, 2.0]);
        let p = write_result(tmp.path(), "r.json", &r);
        assert_eq!(load(&p).expect("loads").runs.len(), 1);
        assert!(load_error(&store(0)).contains("holds no runs"));
    }

    #[test]
    fn a_store_mixing_workloads_is_refused_naming_the_run() {
        let mut mixed = store(10);
        mixed.runs[3].workload.world_size = 4;
        let e = load_error(&mixed);
        assert!(e.contains("`runs[3].workload.world_size` is 4 but the newest run's (`runs[9]`) is 2"), "{e}");
        type Edit = fn(&mut commgate_core::result::Workload);
        let edits: [(&str, Edit); 5] = [
            ("payload_elements", |w| w.payload_elements *= 2),
            ("dtype", |w| w.dtype = "float32".into()),
            ("collective", |w| w.collective = "all_gather".into()),
            ("compute_dim", |w| w.compute_dim = 4096),
            ("backend", |w| w.backend = "cpu".into()),
        ];
        for (field, edit) in edits {
            let mut mixed = store(3);
            edit(&mut mixed.runs[2].workload);
            // The newest run is the odd one: the first run that disagrees with it is named.
            assert!(load_error(&mixed).contains(&format!("`runs[0].workload.{field}`")), "{field}");
        }
        let mut other_profile = store(2);
        other_profile.runs[1].environment_profile = "PAR-CPU".into();
        assert!(load_error(&other_profile).contains("`runs[1].environment_profile`"));
        let mut fewer_repeats = store(3);
        fewer_repeats.runs[0].workload.warmup = 3;
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = tmp.path().join("store.json");
        std::fs::write(&p, serde_json::to_string(&fewer_repeats).expect("json")).expect("write");
        assert_eq!(load_store(&p).expect("warm-up may change between runs").runs.len(), 3);
    }

    #[test]
    fn a_run_stored_twice_is_refused() {
        let mut twice = store(5);
        let copy = twice.runs[1].clone();
        twice.runs.push(copy);
        let id = run_id(&twice.runs[1]);
        let e = load_error(&twice);
        assert!(e.contains(&format!("`runs[5]` is the same run as `runs[1]` (run id {id})")), "{e}");
    }

    /// The same measured step times under a new `created_at` are one measurement stored again
    /// (a clock never repeats itself); the mock backend repeats by design and is let be.
    #[test]
    fn the_same_samples_under_another_time_are_refused() {
        let mut again = store(3);
        for run in &mut again.runs {
            run.workload.backend = "cuda".into();
        }
        let mut copy = again.runs[1].clone();
        copy.created_at = "2026-12-01T00:00:00Z".into();
        again.runs.push(copy);
        let e = load_error(&again);
        assert!(e.contains("`runs[3]` holds the same step times as `runs[1]`"), "{e}");
        let mut mock = store(3);
        let mut copy = mock.runs[1].clone();
        copy.created_at = "2026-12-01T00:00:00Z".into();
        mock.runs.push(copy);
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = tmp.path().join("store.json");
        std::fs::write(&p, serde_json::to_string(&mock).expect("json")).expect("write");
        assert_eq!(load_store(&p).expect("mock runs may repeat").runs.len(), 4);
    }

    #[test]
    fn unsafe_names_cannot_escape_the_store() {
        let mut r = fixtures::run(&[1.0]);
        r.environment_profile = "../etc".into();
        assert!(store_path(Path::new("b"), &r).is_err());
    }
}
