//! `baseline update`: adds a run and/or a trace run to a store file. The whole
//! read-modify-write happens under the store's lock, so parallel updates never lose a run; a run
//! the store already holds (same [`run_id`]) is not added again, so a retried update changes
//! nothing; a store file is rewritten only when something changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{run_id, store_path, store_path_for, validate_store, write_store, BaselineFile, RunId, Runs, StoreLock};
use commgate_core::result::{load_result, read_versioned, FileError, RunResult, SCHEMA_VERSION};
use commgate_core::units::plural;
use commgate_trace::attribute::Attribution;

/// Which store file an update changes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// The file of this result's profile and workload; the result is added to it.
    Result(PathBuf),
    /// An existing file, named by profile and workload id (`--traces` without `--from`).
    File { profile: String, workload_id: String },
}

/// One `baseline update`.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub target: Target,
    /// How many runs the file keeps (the newest).
    pub keep: usize,
    /// How many summaries of evicted runs the file keeps (the newest).
    pub history_keep: usize,
    /// A trace run to append under `traces.<name>`: `(name, attribution)`. The name keeps the
    /// newest `keep` trace runs, like the runs.
    pub traces: Option<(String, Attribution)>,
    /// The environment profile of a result that names none (nccl-tests output).
    pub profile: Option<String>,
}

/// What became of the result of [`Target::Result`].
#[derive(Debug, Clone, PartialEq)]
pub enum RunChange {
    Added {
        id: RunId,
        created_at: String,
        dropped: usize,
    },
    /// The store already held this run: it was not added again.
    AlreadyHeld {
        id: RunId,
        created_at: String,
    },
}

/// What became of the trace run.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesChange {
    pub name: String,
    pub collectives: usize,
    /// Trace runs the name holds now.
    pub runs: usize,
    /// `false`: the name already held an identical run (a retried update).
    pub added: bool,
    /// The oldest trace runs dropped to keep `keep`.
    pub dropped: usize,
}

/// What an update did.
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    pub path: PathBuf,
    /// Runs the file holds now.
    pub runs: usize,
    pub run: Option<RunChange>,
    pub traces: Option<TracesChange>,
    /// Temporary files of interrupted updates that were removed from the store.
    pub removed_leftovers: usize,
    /// Set when the added run's hardware matches none of the kept runs (reported, not refused).
    pub fingerprint_note: Option<String>,
}

impl Updated {
    /// The lines `baseline update` prints on stderr.
    pub fn messages(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.removed_leftovers > 0 {
            let n = self.removed_leftovers;
            lines.push(format!("removed {n} temporary file{} left by an interrupted update", plural(n)));
        }
        if let Some(note) = &self.fingerprint_note {
            lines.push(format!("note: {note}"));
        }
        let path = self.path.display();
        match &self.run {
            Some(RunChange::Added { id, created_at, dropped }) => {
                let dropped = if *dropped > 0 { format!(", dropped the oldest {dropped}") } else { String::new() };
                lines.push(format!(
                    "{path} now holds {} run{} (added run {id}, created {created_at}){dropped}",
                    self.runs,
                    plural(self.runs)
                ));
            }
            Some(RunChange::AlreadyHeld { id, created_at }) => {
                let unchanged = if self.traces.is_some() { "its runs are unchanged" } else { "nothing changed" };
                lines.push(format!("{path} already holds this run (run id {id}, created {created_at}); {unchanged}"));
            }
            None => {}
        }
        if let Some(t) = &self.traces {
            let name = t.name.escape_debug();
            let held = format!("{} trace run{} \"{name}\"", t.runs, plural(t.runs));
            if t.added {
                let dropped = if t.dropped > 0 { format!(", dropped the oldest {}", t.dropped) } else { String::new() };
                lines.push(format!(
                    "{path} now holds {held} (added a run of {} collective{}){dropped}",
                    t.collectives,
                    plural(t.collectives)
                ));
            } else {
                lines.push(format!("{path} already holds this trace run; it holds {held}"));
            }
        }
        lines
    }
}

/// Applies `change` to the store under `dir`, holding the store's lock from reading the file to
/// writing it; `waiting` is called once if another update holds the lock. The new result is read
/// and checked before the lock is taken: a bad result neither waits nor touches the store.
pub fn update(dir: &Path, change: Change, waiting: impl FnOnce()) -> Result<Updated, FileError> {
    let mut all = update_all(dir, vec![change], waiting)?;
    all.pop().ok_or_else(|| FileError::new(dir, "nothing was updated"))
}

/// Applies several changes (`baseline update --from A --from B`) under one hold of the lock, in
/// order: every result is read and checked before the lock is taken, and every change is applied
/// in memory before any file is written, so a result that a store refuses changes nothing. Each
/// store file is then written once, atomically; only a failing disk between two files can leave
/// the first written and not the second (the error names the file).
pub fn update_all(dir: &Path, changes: Vec<Change>, waiting: impl FnOnce()) -> Result<Vec<Updated>, FileError> {
    let prepared = changes.into_iter().map(|c| prepare(dir, c)).collect::<Result<Vec<_>, _>>()?;
    let lock = StoreLock::acquire(dir, waiting)?;
    // The store files touched, as they will be written, in the order first touched.
    let mut files: Vec<(PathBuf, BaselineFile, bool)> = Vec::new();
    let mut done = Vec::with_capacity(prepared.len());
    for (change, new_run, path) in prepared {
        // The store file as held in memory once touched; read (or started) on the first touch.
        let updated = match files.iter_mut().find(|(p, _, _)| *p == path) {
            Some((_, file, changed)) => applied(file, changed, path, change, new_run)?,
            None => {
                let mut file = match &new_run {
                    Some((_, run)) if !path.exists() => empty_store(run),
                    _ => {
                        let file: BaselineFile = read_versioned(&path, "baseline file")?;
                        validate_store(&file, Runs::MayBeEmpty).map_err(|m| FileError::new(&path, m))?;
                        file
                    }
                };
                let mut changed = false;
                let updated = applied(&mut file, &mut changed, path.clone(), change, new_run)?;
                files.push((path, file, changed));
                updated
            }
        };
        done.push(updated);
    }
    for (path, file, changed) in &files {
        if *changed {
            write_store(path, file)?;
        }
    }
    if let Some(first) = done.first_mut() {
        first.removed_leftovers = lock.removed().len();
    }
    drop(lock);
    Ok(done)
}

/// A change with its result read and checked, and the store file it goes to.
type Prepared = (Change, Option<(PathBuf, RunResult)>, PathBuf);

/// Reads and checks what `change` adds, before the lock is taken.
fn prepare(dir: &Path, change: Change) -> Result<Prepared, FileError> {
    match &change.target {
        Target::Result(from) => {
            if change.keep == 0 {
                return Err(FileError::new(from, "--keep 0 would keep no runs; use 1 or more"));
            }
            let run = commgate_core::result::with_profile(addable_run(from)?, change.profile.as_deref(), from)?;
            let path = store_path(dir, &run).map_err(|e| FileError::new(from, e.to_string()))?;
            let from = from.clone();
            Ok((change, Some((from, run)), path))
        }
        Target::File { profile, workload_id } => {
            let path = store_path_for(dir, profile, workload_id).map_err(|e| FileError::new(dir, e.to_string()))?;
            if !path.exists() {
                return Err(FileError::new(
                    &path,
                    "does not exist yet: add a run first (`commgate baseline update --from RESULT --traces …` does both)",
                ));
            }
            Ok((change, None, path))
        }
    }
}

/// What one change did to a store file held in memory.
type Applied = (Option<RunChange>, Option<TracesChange>, Option<String>);

/// [`apply`], with what it did as the [`Updated`] of the store file at `path`.
fn applied(
    file: &mut BaselineFile,
    changed: &mut bool,
    path: PathBuf,
    change: Change,
    new_run: Option<(PathBuf, RunResult)>,
) -> Result<Updated, FileError> {
    let (run, traces, fingerprint_note) = apply(file, changed, &path, change, new_run)?;
    Ok(Updated { runs: file.runs.len(), path, run, traces, removed_leftovers: 0, fingerprint_note })
}

/// Adds the run and the trace run of one change to `file` (in memory), setting `changed`.
fn apply(
    file: &mut BaselineFile,
    changed: &mut bool,
    path: &Path,
    change: Change,
    new_run: Option<(PathBuf, RunResult)>,
) -> Result<Applied, FileError> {
    let mut fingerprint_note = None;
    let run = match new_run {
        None => None,
        Some((from, run)) => {
            if let Some(last) = file.runs.last() {
                if let Some((field, base, new)) = last.workload.difference(&run.workload) {
                    return Err(FileError::new(
                        &from,
                        format!(
                            "measures a different workload than {} (`workload.{field}`: {} there, {} here); {}",
                            path.display(),
                            base.escape_debug(),
                            new.escape_debug(),
                            commgate_core::result::Workload::mismatch_advice(field)
                        ),
                    ));
                }
            }
            let id = run_id(&run);
            let created_at = run.created_at.escape_debug().to_string();
            // A run evicted to the history is held too: adding it back would store it twice.
            if file.runs.iter().any(|r| run_id(r) == id) || file.history.iter().any(|h| h.run_id == id.full()) {
                Some(RunChange::AlreadyHeld { id, created_at })
            } else {
                fingerprint_note = fingerprint_note_for(&file.runs, &run);
                super::ceiling::record(&mut file.ceilings, &run);
                file.runs.push(run);
                let dropped = file.runs.len().saturating_sub(change.keep);
                let evicted: Vec<RunResult> = file.runs.drain(..dropped).collect();
                super::history::record(&mut file.history, &evicted, change.history_keep);
                *changed = true;
                Some(RunChange::Added { id, created_at, dropped })
            }
        }
    };
    let traces = match change.traces {
        None => None,
        Some((name, mut attribution)) => {
            // The store keeps the what-if's figures, not its picture.
            if let Some(w) = attribution.what_if.as_mut() {
                w.picture = None;
            }
            let collectives = attribution.by_collective.len();
            let runs = file.traces.entry(name.clone()).or_default();
            // Traces of another job (world size) are refused, naming the store.
            if let Some(newest) = runs.newest().filter(|n| n.source.world_size != attribution.source.world_size) {
                return Err(FileError::new(
                    path,
                    format!(
                        "holds trace runs \"{}\" of {} ranks and these traces have {}: a trace baseline's runs \
                         must come from one job; store them under another --name",
                        name.escape_debug(),
                        newest.source.world_size,
                        attribution.source.world_size
                    ),
                ));
            }
            let (added, dropped) = runs.add(attribution, change.keep);
            *changed |= added;
            Some(TracesChange { name, collectives, runs: runs.len(), added, dropped })
        }
    };
    Ok((run, traces, fingerprint_note))
}

/// Reads the result to add and refuses what a baseline must not hold.
fn addable_run(from: &Path) -> Result<RunResult, FileError> {
    let run = load_result(from)?;
    if let Some(f) = &run.failure {
        return Err(FileError::new(
            from,
            format!(
                "is a failed run ({}: {}); a baseline only takes finished runs",
                f.kind.escape_debug(),
                f.message.escape_debug()
            ),
        ));
    }
    if !run.is_usable() {
        return Err(FileError::new(from, "is a dry run with no samples; a baseline only takes measured runs"));
    }
    Ok(run)
}

fn empty_store(run: &RunResult) -> BaselineFile {
    BaselineFile {
        schema_version: SCHEMA_VERSION,
        environment_profile: run.environment_profile.clone(),
        workload_id: run.workload.id.clone(),
        runs: Vec::new(),
        history: Vec::new(),
        traces: BTreeMap::new(),
        ceilings: Vec::new(),
    }
}

fn fingerprint_note_for(kept: &[RunResult], run: &RunResult) -> Option<String> {
    (!kept.is_empty() && !kept.iter().any(|r| r.hardware.fingerprint == run.hardware.fingerprint)).then(|| {
        format!(
            "hardware fingerprint {} matches none of the {} stored runs: comparisons against them will ask for more evidence",
            run.hardware.fingerprint.escape_debug(),
            kept.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::load;
    use commgate_testkit::results as fixtures;

    fn write_result(dir: &Path, name: &str, r: &RunResult) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_string(r).expect("json")).expect("write");
        p
    }

    /// A finished run that differs from the others by its `i`.
    fn run(i: usize) -> RunResult {
        let mut r = fixtures::run(&[1.0, 2.0, 3.0]);
        r.run_label = format!("run{i}");
        r.created_at = format!("2026-11-30T00:00:{i:02}Z");
        r
    }

    fn add(store: &Path, from: &Path, keep: usize) -> Result<Updated, FileError> {
        update(
            store,
            Change {
                target: Target::Result(from.to_path_buf()),
                keep,
                history_keep: 1000,
                traces: None,
                profile: None,
            },
            || {},
        )
    }

    fn attribution() -> Attribution {
        let seed = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/seed_events.json"));
        commgate_trace::load::attribute_paths(&[seed], &Default::default()).expect("attributes")
    }

    #[test]
    fn several_results_go_to_their_own_files_under_one_lock_all_or_nothing() {
        let (dir, store) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("store"));
        let mut small = run(1);
        small.workload.id = "small".into();
        let change = |p: PathBuf| Change {
            target: Target::Result(p),
            keep: 10,
            history_keep: 1000,
            traces: None,
            profile: None,
        };
        let (a, b, c) = (
            write_result(dir.path(), "a.json", &run(1)),
            write_result(dir.path(), "b.json", &small),
            write_result(dir.path(), "c.json", &run(2)),
        );
        let done = update_all(store.path(), vec![change(a.clone()), change(b), change(c)], || {}).expect("stored");
        let runs: Vec<(String, usize)> = done
            .iter()
            .map(|u| (u.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), u.runs))
            .collect();
        assert_eq!(
            runs,
            [
                ("par-overlap-allreduce-matmul.json".into(), 1),
                ("small.json".into(), 1),
                ("par-overlap-allreduce-matmul.json".into(), 2)
            ],
            "two results of one workload land in one file, in order"
        );
        assert_eq!(load(&done[2].path).expect("store").runs.len(), 2);
        // One refused result: nothing of the others is written either.
        let mut other = run(3);
        other.workload.compute_dim += 1;
        let (d, e) = (write_result(dir.path(), "d.json", &run(4)), write_result(dir.path(), "e.json", &other));
        let err = update_all(store.path(), vec![change(d), change(e)], || {}).unwrap_err();
        assert!(err.to_string().contains("measures a different workload"), "{err}");
        assert_eq!(load(&done[2].path).expect("store").runs.len(), 2, "run 4 was not added");
    }

    #[test]
    fn update_appends_keeps_newest_and_refuses_mismatches() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = tmp.path().join("baselines");
        for i in 0..4 {
            let from = write_result(tmp.path(), &format!("r{i}.json"), &run(i));
            let u = add(&store, &from, 3).expect("updates");
            assert_eq!(u.runs, (i + 1).min(3));
            assert!(matches!(u.run, Some(RunChange::Added { dropped, .. }) if dropped == usize::from(i == 3)));
        }
        let b = load(&store.join("PAR-MOCK/par-overlap-allreduce-matmul.json")).expect("loads");
        let labels: Vec<&str> = b.runs.iter().map(|r| r.run_label.as_str()).collect();
        assert_eq!(labels, ["run1", "run2", "run3"]);

        let mut other = run(9);
        other.workload.payload_elements = 1024;
        let from = write_result(tmp.path(), "other.json", &other);
        let e = add(&store, &from, 3).unwrap_err();
        assert!(e.message.contains("workload.payload_elements"), "{e}");

        let mut failed = run(9);
        failed.failure = Some(commgate_core::result::Failure {
            kind: "timeout".into(),
            message: "rank 1 hung".into(),
            rank: Some(1),
        });
        let from = write_result(tmp.path(), "failed.json", &failed);
        assert!(add(&store, &from, 3).unwrap_err().message.contains("failed run"));
        assert!(add(&store, &from, 0).unwrap_err().message.contains("--keep 0"));

        let mut moved = run(9);
        moved.hardware.gpu_name = Some("other-gpu".into());
        let from = write_result(tmp.path(), "moved.json", &moved);
        assert!(add(&store, &from, 3).expect("accepted").fingerprint_note.is_some());
    }

    #[test]
    fn the_same_run_twice_is_stored_once_and_the_file_is_not_rewritten() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = tmp.path().join("baselines");
        let first = write_result(tmp.path(), "a.json", &run(1));
        let added = add(&store, &first, 10).expect("adds");
        let Some(RunChange::Added { id, .. }) = &added.run else { panic!("added: {added:?}") };
        let before = std::fs::read(&added.path).expect("store");

        // The same run relabelled (a retry of the same upload) is the same run.
        let mut again = run(1);
        again.run_label = "retry".into();
        let second = write_result(tmp.path(), "b.json", &again);
        let u = add(&store, &second, 10).expect("idempotent");
        assert_eq!(u.run, Some(RunChange::AlreadyHeld { id: id.clone(), created_at: "2026-11-30T00:00:01Z".into() }));
        assert_eq!(u.runs, 1);
        assert_eq!(std::fs::read(&added.path).expect("store"), before, "not rewritten");
        let lines = u.messages();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with(&format!(
            "already holds this run (run id {id}, created 2026-11-30T00:00:01Z); nothing changed"
        )));
    }

    #[test]
    fn traces_go_in_under_the_lock_with_or_without_a_run() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = tmp.path().join("baselines");
        let target = Target::File { profile: "PAR-MOCK".into(), workload_id: "par-overlap-allreduce-matmul".into() };
        let traces_only = || Change {
            target: target.clone(),
            keep: 10,
            history_keep: 1000,
            traces: Some(("default".into(), attribution())),
            profile: None,
        };
        let e = update(&store, traces_only(), || {}).unwrap_err();
        assert!(e.message.contains("does not exist yet"), "{e}");
        assert!(!store.exists(), "a refused update creates nothing");

        let from = write_result(tmp.path(), "a.json", &run(1));
        let both = Change {
            target: Target::Result(from.clone()),
            keep: 10,
            history_keep: 1000,
            traces: Some(("nightly".into(), attribution())),
            profile: None,
        };
        let u = update(&store, both, || {}).expect("run and traces");
        assert!(matches!(u.run, Some(RunChange::Added { .. })));
        assert_eq!(u.traces.as_ref().map(|t| t.name.as_str()), Some("nightly"));

        let u = update(&store, traces_only(), || {}).expect("traces only");
        assert_eq!(u.run, None);
        let file = crate::baseline::load_store(&u.path).expect("loads");
        assert_eq!(file.traces.keys().collect::<Vec<_>>(), ["default", "nightly"]);

        let again = Change {
            target: Target::Result(from),
            keep: 10,
            history_keep: 1000,
            traces: Some(("nightly".into(), attribution())),
            profile: None,
        };
        let lines = update(&store, again, || {}).expect("again").messages();
        assert!(lines[0].ends_with("its runs are unchanged"), "{lines:?}");
        assert!(lines[1].ends_with("already holds this trace run; it holds 1 trace run \"nightly\""), "{lines:?}");
        let file = crate::baseline::load_store(&u.path).expect("loads");
        assert_eq!(file.traces["nightly"].len(), 1, "an identical trace run is stored once");
    }

    #[test]
    fn trace_runs_append_keep_the_newest_and_refuse_another_job() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = tmp.path().join("baselines");
        let from = write_result(tmp.path(), "a.json", &run(1));
        update(
            &store,
            Change { target: Target::Result(from), keep: 3, history_keep: 10, traces: None, profile: None },
            || {},
        )
        .expect("run");
        let target = Target::File { profile: "PAR-MOCK".into(), workload_id: "par-overlap-allreduce-matmul".into() };
        let traces = |a: Attribution| Change {
            target: target.clone(),
            keep: 3,
            history_keep: 10,
            traces: Some(("n".into(), a)),
            profile: None,
        };
        for i in 0..4u32 {
            let mut a = attribution();
            a.num_events += u64::from(i);
            let u = update(&store, traces(a), || {}).expect("appends");
            let t = u.traces.clone().expect("traces");
            assert_eq!((t.runs, t.added, t.dropped), ((i as usize + 1).min(3), true, usize::from(i == 3)));
            if i == 3 {
                assert!(
                    u.messages()[0]
                        .ends_with("now holds 3 trace runs \"n\" (added a run of 3 collectives), dropped the oldest 1"),
                    "{:?}",
                    u.messages()
                );
            }
        }
        let mut other = attribution();
        other.source.world_size = 64;
        let e = update(&store, traces(other), || {}).unwrap_err();
        assert!(e.message.starts_with("holds trace runs \"n\" of 0 ranks and these traces have 64"), "{e}");
        let file =
            crate::baseline::load_store(&store.join("PAR-MOCK/par-overlap-allreduce-matmul.json")).expect("loads");
        assert_eq!(file.traces["n"].len(), 3, "the refused run changed nothing");
    }

    #[test]
    fn messages_show_the_run_id_and_when_it_was_made() {
        let u = Updated {
            path: PathBuf::from("baselines/P/w.json"),
            runs: 10,
            run: Some(RunChange::Added { id: run_id(&run(1)), created_at: "2026-11-30T00:00:01Z".into(), dropped: 1 }),
            traces: None,
            removed_leftovers: 2,
            fingerprint_note: None,
        };
        let id = run_id(&run(1));
        assert_eq!(
            u.messages(),
            [
                "removed 2 temporary files left by an interrupted update".to_string(),
                format!("baselines/P/w.json now holds 10 runs (added run {id}, created 2026-11-30T00:00:01Z), dropped the oldest 1"),
            ]
        );
    }
}
