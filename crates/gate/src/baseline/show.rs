//! `baseline show`: which store a `FILE|WORKLOAD` argument names ([`resolve`]) and every run it
//! knows, oldest first, summaries and judged runs alike ([`show`]). Rendering is the report's.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::history::{entries, Entry};
use super::list::subdirectories;
use super::{load_store, store_path_for};
use commgate_core::result::FileError;

/// The most names an error lists before it says how many more there are.
const MAX_NAMES: usize = 20;

/// One store, run by run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shown {
    pub path: String,
    pub environment_profile: String,
    pub workload_id: String,
    /// Oldest first.
    pub runs: Vec<Entry>,
    /// An nccl-tests store: the newest sweep's bus bandwidth per point, with this runner's
    /// ceiling there. Omitted otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<SweepRow>,
}

/// One point of the newest sweep in a store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    #[serde(flatten)]
    pub key: commgate_core::result::sweep::PointKey,
    /// The newest sweep's bus bandwidth at its median time, GB/s.
    pub newest_gbps: Option<f64>,
    /// The best the store kept for this point on the newest sweep's machine.
    pub ceiling_gbps: Option<f64>,
}

/// Loads the store at `path` and lists its runs.
pub fn show(path: &Path) -> Result<Shown, FileError> {
    let file = load_store(path)?;
    Ok(Shown {
        path: path.display().to_string(),
        runs: entries(&file),
        sweep: sweep_rows(&file),
        environment_profile: file.environment_profile,
        workload_id: file.workload_id,
    })
}

/// The newest sweep's points with their ceilings (empty for a store of benchmark runs).
fn sweep_rows(file: &super::BaselineFile) -> Vec<SweepRow> {
    let Some(newest) = file.runs.last() else { return Vec::new() };
    let Some(sweep) = &newest.sweep else { return Vec::new() };
    sweep
        .points
        .iter()
        .map(|p| SweepRow {
            key: p.key.clone(),
            newest_gbps: p.median_busbw(),
            ceiling_gbps: file
                .ceilings
                .iter()
                .find(|c| c.fingerprint == newest.hardware.fingerprint && c.key == p.key)
                .map(|c| c.busbw_gbps),
        })
        .collect()
}

/// The store file `target` names: a path (it ends in `.json`, holds a path separator, or is an
/// existing file), else a workload id under `dir`, in `profile` when given, else in the one
/// profile that has it. Several profiles having it, or none, is an error that lists them.
pub fn resolve(target: &str, dir: &Path, profile: Option<&str>) -> Result<PathBuf, FileError> {
    let as_path = Path::new(target);
    if target.ends_with(".json") || target.contains(std::path::is_separator) || as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    if let Some(profile) = profile {
        let path = store_path_for(dir, profile, target).map_err(|e| FileError::new(dir, e.to_string()))?;
        if !path.is_file() {
            return Err(FileError::new(
                &path,
                "does not exist: no store of that workload in that profile; `commgate baseline list` shows the stores",
            ));
        }
        return Ok(path);
    }
    store_path_for(dir, "p", target).map_err(|e| FileError::new(dir, e.to_string()))?;
    let file_name = format!("{target}.json");
    let profiles = subdirectories(dir)?;
    let holding: Vec<PathBuf> = profiles.iter().map(|p| p.join(&file_name)).filter(|p| p.is_file()).collect();
    match holding.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(FileError::new(
            dir,
            format!(
                "holds no store of workload \"{}\" in any profile ({}); `commgate baseline list` shows the stores",
                target.escape_debug(),
                names(&profiles)
            ),
        )),
        several => Err(FileError::new(
            dir,
            format!(
                "holds workload \"{}\" in several profiles ({}); pass --profile NAME",
                target.escape_debug(),
                names(&several.iter().filter_map(|p| p.parent().map(Path::to_path_buf)).collect::<Vec<_>>())
            ),
        )),
    }
}

/// Directory names for a message, escaped and bounded.
fn names(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "it has no profile directories".to_string();
    }
    let mut shown: Vec<String> = dirs
        .iter()
        .take(MAX_NAMES)
        .map(|d| d.file_name().map(|n| n.to_string_lossy().escape_debug().to_string()).unwrap_or_default())
        .collect();
    if dirs.len() > MAX_NAMES {
        shown.push(format!("and {} more", dirs.len() - MAX_NAMES));
    }
    format!("profiles: {}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, "{}").expect("write");
    }

    #[test]
    fn a_workload_resolves_to_the_one_profile_that_has_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        touch(&dir.join("A/w1.json"));
        touch(&dir.join("B/w1.json"));
        touch(&dir.join("B/w2.json"));
        std::fs::create_dir_all(dir.join(".git")).expect("mkdir");
        assert_eq!(resolve("w2", dir, None), Ok(dir.join("B/w2.json")));
        assert_eq!(resolve("w1", dir, Some("A")), Ok(dir.join("A/w1.json")));
        let e = resolve("w1", dir, None).unwrap_err().message;
        assert!(e.contains("several profiles (profiles: A, B); pass --profile NAME"), "{e}");
        let e = resolve("w3", dir, None).unwrap_err().message;
        assert!(e.contains("no store of workload \"w3\" in any profile (profiles: A, B)"), "{e}");
        assert!(resolve("w2", dir, Some("A")).unwrap_err().message.contains("does not exist"));
        assert!(resolve("w2", dir, Some("../x")).unwrap_err().message.contains("cannot name a baseline file"));
        assert!(resolve("..", dir, None).unwrap_err().message.contains("cannot name a baseline file"));
        assert!(resolve("w1", &dir.join("missing"), None).unwrap_err().message.contains("does not exist"));
    }

    #[test]
    fn a_path_is_taken_as_it_is() {
        assert_eq!(resolve("some/where.json", Path::new("b"), None), Ok(PathBuf::from("some/where.json")));
        assert_eq!(resolve("x.json", Path::new("b"), Some("P")), Ok(PathBuf::from("x.json")));
    }
}
