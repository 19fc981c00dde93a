//! `baseline list`: every store under a store directory (`<dir>/<profile>/<workload>.json`),
//! one row each, with how many runs it knows (judged and summarised), the newest run's date, its
//! overlap and serial medians, and its trace runs per name. A store that fails to load is listed with its error, never
//! left out, so a corrupt store cannot hide; the caller exits 2 when any did.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::history::{entries, Entry};
use super::load_store;
use commgate_core::result::{FileError, Schedule};

/// The most store files a listing reads: far beyond any real store directory.
pub const MAX_STORES: usize = 10_000;

/// What `baseline list` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listing {
    pub dir: String,
    pub stores: Vec<StoreRow>,
}

impl Listing {
    /// The stores that failed to load.
    pub fn failed(&self) -> impl Iterator<Item = &StoreRow> {
        self.stores.iter().filter(|s| s.error.is_some())
    }
}

/// One store file; `stats` when it loaded, else `error`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreRow {
    /// The profile and workload as the file's path names them (untrusted: escape them).
    pub profile: String,
    pub workload: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<StoreStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A loaded store, summed up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreStats {
    /// Judged runs plus summaries.
    pub runs: usize,
    pub judged_runs: usize,
    /// The newest run's `created_at`.
    pub newest: String,
    pub overlap_median_ms: Option<f64>,
    pub serial_median_ms: Option<f64>,
    /// Trace runs per trace baseline name (`baseline update --traces --name`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub trace_runs: std::collections::BTreeMap<String, usize>,
}

/// Lists the stores under `dir`, sorted by profile and workload. Hidden entries (temporary files
/// of an update, `.git`) and files that are not `.json` are skipped.
pub fn list(dir: &Path) -> Result<Listing, FileError> {
    let mut stores = Vec::new();
    for profile_dir in subdirectories(dir)? {
        let profile = name_of(&profile_dir);
        for path in json_files(&profile_dir)? {
            if stores.len() >= MAX_STORES {
                return Err(FileError::new(
                    dir,
                    format!("holds more than {MAX_STORES} store files; is it the store directory?"),
                ));
            }
            let workload = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let (stats, error) = match load_store(&path) {
                Ok(file) => {
                    let mut st = stats(&entries(&file));
                    st.trace_runs = file.traces.iter().map(|(name, runs)| (name.clone(), runs.len())).collect();
                    (Some(st), None)
                }
                Err(e) => (None, Some(e.message)),
            };
            stores.push(StoreRow {
                profile: profile.clone(),
                workload,
                path: path.display().to_string(),
                stats,
                error,
            });
        }
    }
    stores.sort_by(|a, b| (&a.profile, &a.workload).cmp(&(&b.profile, &b.workload)));
    Ok(Listing { dir: dir.display().to_string(), stores })
}

fn stats(all: &[Entry]) -> StoreStats {
    let newest = all.last();
    let median = |s: Schedule| newest.and_then(|e| e.summary.schedules.get(&s)).map(|x| x.median_ms);
    StoreStats {
        runs: all.len(),
        judged_runs: all.iter().filter(|e| e.judged).count(),
        newest: newest.map(|e| e.summary.created_at.clone()).unwrap_or_default(),
        overlap_median_ms: median(Schedule::Overlap),
        serial_median_ms: median(Schedule::Serial),
        trace_runs: Default::default(),
    }
}

fn name_of(path: &Path) -> String {
    path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

fn hidden(path: &Path) -> bool {
    name_of(path).starts_with('.')
}

/// The store directory's entries, or an error saying what to pass.
pub(super) fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, FileError> {
    let entries = std::fs::read_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FileError::new(
            dir,
            "does not exist; pass the baseline store directory with --baselines DIR (default `baselines`)",
        ),
        std::io::ErrorKind::NotADirectory => {
            FileError::new(dir, "is not a directory; pass the baseline store directory with --baselines DIR")
        }
        _ => FileError::new(dir, format!("cannot read the directory: {e}")),
    })?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FileError::new(dir, format!("cannot read the directory: {e}")))?;
        paths.push(entry.path());
        if paths.len() > MAX_STORES {
            return Err(FileError::new(
                dir,
                format!("holds more than {MAX_STORES} entries; is it the store directory?"),
            ));
        }
    }
    paths.sort();
    Ok(paths)
}

/// The profile directories under a store directory.
pub(super) fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>, FileError> {
    Ok(read_dir(dir)?.into_iter().filter(|p| !hidden(p) && p.is_dir()).collect())
}

fn json_files(dir: &Path) -> Result<Vec<PathBuf>, FileError> {
    Ok(read_dir(dir)?
        .into_iter()
        .filter(|p| !hidden(p) && p.extension().is_some_and(|e| e == "json") && !p.is_dir())
        .collect())
}
