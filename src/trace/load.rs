//! From paths to parsed inputs: expands directories, detects gzip and SQLite (Nsight Systems)
//! by their magic bytes, parses
//! files in parallel (one rank per thread, as many threads as cores), resolves each rank, and
//! turns every failure into one [`LoadError`] that names the file and what to do.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::attribute::{self, AttributeOptions, Attribution, Compat, RankAnalysis};
use super::classify::rank_from_file_name;
use super::kineto::{parse_document_with, Document};
use super::limits::ReadLimits;
use super::model::RankTrace;
use super::reader::ReadError;
use super::{inspector, nsys};
use crate::input;
use crate::trace::attribute::CommEvent;

/// A problem with one input path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

impl LoadError {
    fn new(path: &Path, message: impl Into<String>) -> Self {
        LoadError { path: path.to_path_buf(), message: message.into() }
    }
}

/// Loads `paths` and attributes them: the whole `commgate attribute` computation.
///
/// Each worker parses a rank and reduces it to its [`RankAnalysis`] at once, so only one raw
/// trace per core is alive at a time: peak memory is a few MB per core plus the small analyses.
pub fn attribute_paths(paths: &[PathBuf], opts: &AttributeOptions) -> Result<Attribution, LoadError> {
    let files = collect_files(paths)?;
    let limits = opts.read_limits();
    let single = files.len() == 1;
    // Each worker reads a file and reduces its ranks (one per GPU of a multi-GPU Nsight Systems
    // export) to their analyses at once, so only one raw file per core is alive at a time.
    let read = map_parallel(&files, |path| {
        let input = read_input(path, limits)?;
        let loaded = input
            .docs
            .into_iter()
            .map(|doc| {
                Ok(match doc {
                    Document::Timeline(mut t) => {
                        t.rank = Some(resolve_rank(&t, single)?);
                        let names = step_names(&t);
                        let analysis = attribute::analyze_rank(&t, opts, names.len() >= 2);
                        Loaded::Rank(Box::new(analysis), names)
                    }
                    Document::Events(events) => Loaded::Events(events),
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok((loaded, input.format))
    })?;
    let (loaded, formats): (Vec<Vec<Loaded>>, Vec<Option<String>>) = read.into_iter().unzip();
    let format = one_trace_format(&files, &formats)?;
    let mut analyses = Vec::new();
    let mut all_steps: Vec<String> = Vec::new();
    let mut events = Vec::new();
    let mut event_files = Vec::new();
    for (path, ls) in files.iter().zip(loaded) {
        for l in ls {
            match l {
                Loaded::Rank(a, names) => {
                    all_steps.extend(names.iter().cloned());
                    analyses.push((*a, names.len()));
                }
                Loaded::Events(e) => {
                    events.extend(e);
                    event_files.push(path.clone());
                }
            }
        }
    }
    check_one_format(!analyses.is_empty(), &event_files)?;
    if analyses.is_empty() {
        let names = event_files.iter().map(|f| f.display().to_string()).collect();
        return Ok(attribute::attribute_events(names, &events));
    }
    check_unique_ranks(analyses.iter().map(|(a, _)| (a.rank, Path::new(a.file.as_str()))))?;
    // HTA picks its window from the step names of all ranks together; a rank whose own names
    // disagree with that choice is analysed again (rare: it needs ranks with different steps).
    all_steps.sort_unstable();
    all_steps.dedup();
    let global = all_steps.len() >= 2;
    let mut ranks = Vec::with_capacity(analyses.len());
    for (a, local) in analyses {
        if opts.compat == Compat::Hta && (local >= 2) != global {
            let mut t = reread_rank(Path::new(&a.file), a.rank, limits)?;
            t.rank = Some(a.rank);
            ranks.push(attribute::analyze_rank(&t, opts, global));
        } else {
            ranks.push(a);
        }
    }
    ranks.sort_by_key(|r| r.rank);
    let mut attribution = attribute::attribute_analyses(ranks, opts);
    if let Some(format) = format {
        attribution.source.format = format;
    }
    Ok(attribution)
}

/// One input file, read: its documents (one per GPU for an Nsight Systems export of several)
/// and, for such an export, the `source.format` that names it.
pub struct Input {
    pub docs: Vec<Document>,
    pub format: Option<String>,
}

/// Profiler traces of one run come from one profiler: Kineto JSON, Nsight Systems exports and
/// NCCL Inspector logs are attributed separately (their clocks and metadata differ). Each
/// file's format is `None` for Kineto JSON, else its `source.format`; the result is the first
/// non-Kineto one, if any.
fn one_trace_format(files: &[PathBuf], formats: &[Option<String>]) -> Result<Option<String>, LoadError> {
    let family = |f: &Option<String>| match f.as_deref() {
        None => 0,
        Some(f) if f.starts_with(inspector::FORMAT) => 2,
        Some(_) => 1,
    };
    const ONE: [&str; 3] = ["a JSON trace", "an Nsight Systems export", "an NCCL Inspector log"];
    const MANY: [&str; 3] = ["Kineto traces", "Nsight Systems exports", "NCCL Inspector logs"];
    let first = formats.first().map(family).unwrap_or(0);
    if let Some(other) = formats.iter().position(|f| family(f) != first) {
        let (a, b) = (first, family(&formats[other]));
        return Err(LoadError::new(
            &files[other],
            format!(
                "is {} while {} is {}; attribute {} and {} separately",
                ONE[b],
                files[0].display(),
                ONE[a],
                MANY[a.min(b)],
                MANY[a.max(b)],
            ),
        ));
    }
    Ok(formats.iter().flatten().next().cloned())
}

/// Reads one rank's trace again (the HTA window's second pass).
fn reread_rank(path: &Path, rank: u32, limits: ReadLimits) -> Result<RankTrace, LoadError> {
    let docs = read_input(path, limits)?.docs;
    let several = docs.len() > 1;
    docs.into_iter()
        .filter_map(|d| match d {
            Document::Timeline(t) => Some(*t),
            Document::Events(_) => None,
        })
        .find(|t| !several || t.rank == Some(rank))
        .ok_or_else(|| LoadError::new(path, "changed while being read; run again"))
}

/// Reads one input file of any kind: Kineto JSON or seed events (plain or gzip), an Nsight
/// Systems SQLite export (told by its header, whatever its name), or a `.nsys-rep` report
/// (exported through `nsys` first).
pub fn read_input(path: &Path, limits: ReadLimits) -> Result<Input, LoadError> {
    let opened = input::open(path).map_err(|e| LoadError::new(path, e.to_string()))?;
    if opened.sqlite {
        drop(opened);
        return read_nsys(path, path, limits);
    }
    if nsys::export::is_report_name(path) {
        drop(opened);
        let dir = tempfile::tempdir()
            .map_err(|e| LoadError::new(path, format!("no temporary directory for the export: {e}")))?;
        let exported = nsys::export::export(path, dir.path()).map_err(|e| LoadError::new(path, e.to_string()))?;
        return read_nsys(path, &exported, limits);
    }
    if path.extension().is_some_and(|e| e == "sqlite") {
        return Err(LoadError::new(
            path,
            "is not an SQLite database (it lacks the `SQLite format 3` header); pass the file `nsys export --type sqlite` writes",
        ));
    }
    let gzip = opened.gzip;
    let sniffed = inspector::sniff(path, opened.reader).map_err(|e| LoadError::new(path, describe_io(&e, gzip)))?;
    if sniffed.inspector {
        let file =
            inspector::read_log(sniffed.reader, limits, gzip).map_err(|e| LoadError::new(path, e.to_string()))?;
        let mut trace = file.trace;
        trace.file = path.to_path_buf();
        return Ok(Input {
            docs: vec![Document::Timeline(Box::new(trace))],
            format: Some(inspector::format_name(file.version.as_deref())),
        });
    }
    let opened = input::Opened { reader: sniffed.reader, gzip, sqlite: false };
    let doc = parse_opened(path, opened, limits)?;
    Ok(Input { docs: vec![doc], format: None })
}

/// A read that failed before any parser ran (while telling the format apart).
fn describe_io(e: &std::io::Error, gzip: bool) -> String {
    if input::inflation_bomb(e).is_some() {
        e.to_string()
    } else if gzip {
        format!("the gzip data is corrupt or truncated ({e}); re-copy or re-export the trace")
    } else {
        format!("cannot be read: {e}")
    }
}

/// An Nsight Systems export at `db`, reported under the name `shown` (the user's file).
fn read_nsys(shown: &Path, db: &Path, limits: ReadLimits) -> Result<Input, LoadError> {
    let file = nsys::read_sqlite(db, limits).map_err(|e| LoadError::new(shown, e.to_string()))?;
    let docs = file
        .traces
        .into_iter()
        .map(|mut t| {
            t.file = shown.to_path_buf();
            Document::Timeline(Box::new(t))
        })
        .collect();
    Ok(Input { docs, format: Some(nsys::format_name(file.version.as_deref())) })
}

/// What a worker hands back for one file.
enum Loaded {
    Rank(Box<RankAnalysis>, Vec<String>),
    Events(Vec<CommEvent>),
}

/// The distinct `ProfilerStep#` names of a rank (the GPU timeline's copies hold the same names).
fn step_names(t: &RankTrace) -> Vec<String> {
    let mut names: Vec<String> = t.steps.iter().chain(&t.gpu_steps).map(|s| s.name.clone()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Expands directories (their `*.json`, `*.gz`, `*.sqlite` and `*.nsys-rep` files, and NCCL
/// Inspector logs `*-pid<N>.log` and `*.jsonl`, sorted) and checks that files exist.
///
/// In a directory, an entry whose name looks like a trace (`*.json`, `*.gz`, `rank-N…`) but is
/// a broken link, a named pipe, a socket, a device or a directory is an error naming it: skipping
/// it would judge a run with a rank silently missing. Everything else in the directory is
/// ignored. Whether each file really is a regular file is decided again when it is opened
/// ([`input::open`]), on the opened handle.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| missing_input(path, &e))?;
        if !meta.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found = list_traces(path)?;
        if found.is_empty() {
            return Err(LoadError::new(
                path,
                "holds no trace files (*.json, *.json.gz, *.sqlite, *.nsys-rep, *-pid<N>.log, *.jsonl); point at the profiler's output",
            ));
        }
        found.sort();
        files.extend(found);
    }
    if files.is_empty() {
        return Err(LoadError::new(Path::new("."), "no input given; pass trace files or directories"));
    }
    Ok(files)
}

/// Why a path given on the command line cannot be read: missing, a dangling link, or the
/// system's reason.
fn missing_input(path: &Path, e: &std::io::Error) -> LoadError {
    if e.kind() != std::io::ErrorKind::NotFound {
        return LoadError::new(path, format!("cannot be read: {e}"));
    }
    if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
        return LoadError::new(path, input::OpenError::BrokenLink.to_string());
    }
    if path.as_os_str() == "-" {
        return LoadError::new(path, input::OpenError::Stdin.to_string());
    }
    LoadError::new(path, "does not exist; pass trace files or a directory of them")
}

/// The trace files in directory `dir` (unsorted); an entry named like a trace that is not a
/// regular file (after following links) is an error.
fn list_traces(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| LoadError::new(dir, format!("cannot list the directory: {e}")))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| LoadError::new(dir, format!("cannot list the directory: {e}")))?;
        let path = entry.path();
        if !looks_like_trace(&path) {
            continue;
        }
        match std::fs::metadata(&path) {
            // A regular `rank-3.txt` is not read (only its name looked like a rank's).
            Ok(m) if m.is_file() => {
                if is_trace_name(&path) {
                    found.push(path);
                }
            }
            Ok(m) => {
                let kind = input::describe_kind(&m.file_type());
                return Err(LoadError::new(
                    &path,
                    format!(
                        "is {kind}, not a regular file; remove it from {} or replace it with the trace",
                        dir.display()
                    ),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LoadError::new(&path, input::OpenError::BrokenLink.to_string()));
            }
            Err(e) => return Err(LoadError::new(&path, format!("cannot be read: {e}"))),
        }
    }
    Ok(found)
}

/// A name commgate reads as a trace in a directory.
fn is_trace_name(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".json")
        || name.ends_with(".json.gz")
        || name.ends_with(".gz")
        || name.ends_with(".sqlite")
        || nsys::export::is_report_name(p)
        || inspector::is_dir_log_name(p)
}

/// A name that is a trace's, or that a rank's trace could have (`rank-3`, `rank-3.pt.trace`):
/// such an entry is never skipped silently.
fn looks_like_trace(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let rank_n = name.strip_prefix("rank-").or_else(|| name.strip_prefix("rank_"));
    is_trace_name(p) || rank_n.is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Seed events and profiler traces are attributed separately, never mixed.
pub(crate) fn check_one_format(traces: bool, event_files: &[PathBuf]) -> Result<(), LoadError> {
    match event_files.first() {
        Some(first) if traces => Err(LoadError::new(
            first,
            "holds seed events while other inputs are profiler traces; attribute them separately",
        )),
        _ => Ok(()),
    }
}

/// Rank from `distributedInfo.rank`, else from the file name; a lone trace without either is
/// rank 0.
pub(crate) fn resolve_rank(t: &RankTrace, single: bool) -> Result<u32, LoadError> {
    let name = t.file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    t.rank.or_else(|| rank_from_file_name(name)).or(single.then_some(0)).ok_or_else(|| {
        LoadError::new(
            &t.file,
            "has no distributedInfo.rank and no rank in its name; rename it rank-N.json (N = its rank)",
        )
    })
}

/// Two files of one rank are an error.
pub(crate) fn check_unique_ranks<'a>(ranks: impl Iterator<Item = (u32, &'a Path)>) -> Result<(), LoadError> {
    let mut seen: Vec<(u32, &Path)> = Vec::new();
    for (rank, path) in ranks {
        if let Some((_, other)) = seen.iter().find(|(r, _)| *r == rank) {
            return Err(LoadError::new(
                path,
                format!("holds rank {rank}, like {}; pass one trace per rank", other.display()),
            ));
        }
        seen.push((rank, path));
    }
    Ok(())
}

/// One thread per core pulls files off a shared index and applies `f`; results keep the file
/// order, and the first error (in file order) wins.
pub(crate) fn map_parallel<T, F>(files: &[PathBuf], f: F) -> Result<Vec<T>, LoadError>
where
    T: Send,
    F: Fn(&Path) -> Result<T, LoadError> + Sync,
{
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(files.len()).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, LoadError>>>> = Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { break };
                let result = f(path);
                if let Ok(mut slots) = results.lock() {
                    slots[i] = Some(result);
                }
            });
        }
    });
    let slots = results.into_inner().unwrap_or_default();
    let mut out = Vec::with_capacity(files.len());
    for (path, slot) in files.iter().zip(slots) {
        match slot {
            Some(r) => out.push(r?),
            None => return Err(LoadError::new(path, "was not read (internal error: a parser thread stopped)")),
        }
    }
    Ok(out)
}

/// Reads one file, plain or gzip, under the default limits.
pub fn read_file(path: &Path) -> Result<Document, LoadError> {
    read_file_with(path, ReadLimits::default())
}

/// Reads one file, plain or gzip, under `limits`.
pub fn read_file_with(path: &Path, limits: ReadLimits) -> Result<Document, LoadError> {
    let opened = input::open(path).map_err(|e| LoadError::new(path, e.to_string()))?;
    if opened.sqlite {
        return Err(LoadError::new(path, "is an Nsight Systems export; `commgate attribute` reads it"));
    }
    parse_opened(path, opened, limits)
}

/// Parses an opened JSON input (plain or gzip).
fn parse_opened(path: &Path, opened: input::Opened, limits: ReadLimits) -> Result<Document, LoadError> {
    let gzip = opened.gzip;
    let mut doc = parse_document_with(opened.reader, limits).map_err(|e| LoadError::new(path, describe(&e, gzip)))?;
    if let Document::Timeline(t) = &mut doc {
        t.file = path.to_path_buf();
    }
    Ok(doc)
}

fn describe(e: &ReadError, gzip: bool) -> String {
    let place = if gzip { "decompressed byte" } else { "byte" };
    match e {
        ReadError::Io { source, .. } if input::inflation_bomb(source).is_some() => source.to_string(),
        ReadError::Io { offset, source } if gzip => format!(
            "the gzip data is corrupt or truncated after {place} {offset} ({source}); re-copy or re-export the trace"
        ),
        ReadError::Io { offset, source } => format!("cannot be read after {place} {offset}: {source}"),
        ReadError::Syntax { offset, message } => format!("{place} {offset}: {message}"),
        ReadError::Truncated { offset } => {
            format!("the JSON ends early at {place} {offset}: the file is truncated; re-export the trace")
        }
        ReadError::TooManyEvents { limit } => format!(
            "holds more than {limit} events, the limit per file; attribute a shorter capture, or {}",
            super::limits::RAISE_HINT
        ),
        ReadError::NotATrace { found } => format!(
            "is not a profiler trace ({found}); expected a PyTorch profiler trace (an object with `traceEvents`) \
             or seed events (an array of objects with `collective`, or `{{\"events\": [...]}}`)"
        ),
    }
}
