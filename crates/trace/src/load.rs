//! From paths to parsed inputs: expands directories, detects gzip and SQLite (Nsight Systems)
//! by their magic bytes, parses
//! files in parallel (one rank per thread, as many threads as cores), resolves each rank, and
//! turns every failure into one [`LoadError`] that names the file and what to do.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::attribute::{self, AttributeOptions, Attribution, Compat};
use super::classify::rank_from_file_name;
use super::kineto::{parse_document_with, Document};
use super::limits::{self, ReadLimits};
use super::model::RankTrace;
use super::partial::{self, Partial, PartialError, ReducedRank};
use super::reader::ReadError;
use super::{inspector, nsys};
use crate::attribute::CommEvent;
use commgate_core::input;

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

/// Loads `paths` and attributes them: the whole `commgate attribute` computation. Partial files
/// among the inputs ([`partial`]) bring their ranks' analyses, read as they were written.
///
/// Each worker parses a rank and reduces it to its [`RankAnalysis`](crate::attribute::RankAnalysis) at once, so only one raw
/// trace per core is alive at a time: peak memory is a few MB per core plus the small analyses.
pub fn attribute_paths(paths: &[PathBuf], opts: &AttributeOptions) -> Result<Attribution, LoadError> {
    let (ranks, format) = match gather(paths, opts, false)? {
        Gathered::Events { files, events } => {
            let names = files.iter().map(|f| f.display().to_string()).collect();
            return Ok(attribute::attribute_events(names, &events));
        }
        Gathered::Ranks { ranks, format } => (ranks, format),
    };
    // HTA picks its window from the step names of all ranks together; a rank whose own names
    // disagree with that choice is analysed again (rare: it needs ranks with different steps):
    // its trace is read again, or a partial file holds that analysis too.
    let global = job_has_step_names(&ranks);
    let limits = opts.read_limits();
    let mut analyses = Vec::with_capacity(ranks.len());
    for (r, origin) in ranks {
        let local = r.step_names.len() >= 2;
        if opts.compat != Compat::Hta || local == global {
            analyses.push(r.analysis);
            continue;
        }
        let rank = r.analysis.rank;
        analyses.push(match origin {
            AnalysisSource::Trace(path) => {
                let mut t = reread_rank(&path, rank, limits)?;
                t.rank = Some(rank);
                attribute::analyze_rank(&t, opts, global)
            }
            AnalysisSource::Partial(path) => r.other.ok_or_else(|| {
                LoadError::new(
                    &path,
                    format!(
                        "lacks rank {rank}'s analysis under the window the other ranks' steps set; \
                         write it again with `commgate attribute --partial` from the same commgate version"
                    ),
                )
            })?,
        });
    }
    let mut attribution = attribute::attribute_analyses(analyses, opts);
    if let Some(format) = format {
        attribution.source.format = format;
    }
    Ok(attribution)
}

/// Loads `paths` (traces, or partial files themselves) and reduces their ranks to one partial
/// file's content: what `commgate attribute --partial OUT` writes.
pub fn partial_paths(paths: &[PathBuf], opts: &AttributeOptions) -> Result<Partial, LoadError> {
    match gather(paths, opts, true)? {
        Gathered::Events { files, .. } => Err(LoadError::new(
            files.first().map_or(Path::new("."), PathBuf::as_path),
            "holds aggregated events; partial files are written from profiler traces (attribute aggregated events directly)",
        )),
        Gathered::Ranks { ranks, format } => Ok(Partial {
            format,
            settings: partial::Settings::of(opts),
            ranks: ranks.into_iter().map(|(r, _)| r).collect(),
        }),
    }
}

/// Whether the job has two or more distinct step names over all its ranks (HTA's window).
fn job_has_step_names(ranks: &[(ReducedRank, AnalysisSource)]) -> bool {
    let mut names: Vec<&str> = ranks.iter().flat_map(|(r, _)| r.step_names.iter().map(String::as_str)).collect();
    names.sort_unstable();
    names.dedup();
    names.len() >= 2
}

/// Whether a partial file's `format` is one commgate writes: Nsight Systems' or NCCL
/// Inspector's name, alone or with its version after a space (Kineto's is read as `None`).
/// Anything else would be taken for an Nsight Systems export.
fn known_format(format: &str) -> bool {
    [nsys::FORMAT, inspector::FORMAT].into_iter().any(|name| format == name || format.starts_with(&format!("{name} ")))
}

/// Where a rank's analysis came from.
enum AnalysisSource {
    /// Its trace, which can be read again.
    Trace(PathBuf),
    /// A partial file.
    Partial(PathBuf),
}

impl AnalysisSource {
    fn path(&self) -> &Path {
        match self {
            AnalysisSource::Trace(p) | AnalysisSource::Partial(p) => p,
        }
    }
}

/// Every input, read and reduced.
enum Gathered {
    /// Aggregated events (from these files).
    Events { files: Vec<PathBuf>, events: Vec<CommEvent> },
    /// Ranks, sorted and each once, of one trace format (`None`: Kineto).
    Ranks { ranks: Vec<(ReducedRank, AnalysisSource)>, format: Option<String> },
}

/// Reads every input in parallel and reduces each rank: traces to their analyses, partial files
/// to the analyses they hold (written with the same settings). `keep_other` keeps, under
/// `--compat hta`, the second analysis a partial file needs ([`ReducedRank::other`]).
fn gather(paths: &[PathBuf], opts: &AttributeOptions, keep_other: bool) -> Result<Gathered, LoadError> {
    let files = collect_files(paths)?;
    let limits = opts.read_limits();
    let settings = partial::Settings::of(opts);
    let single = files.len() == 1;
    // Each worker reads a file and reduces its ranks (one per GPU of a multi-GPU Nsight Systems
    // export) to their analyses at once, so only one raw file per core is alive at a time.
    let read = map_parallel(&files, |path| match read_any(path, limits)? {
        Read::Partial(p) => {
            if let Some(f) = p.format.as_deref().filter(|f| !known_format(f)) {
                let why = format!(
                    "`format` is \"{}\", not one commgate writes ({}, {}, {})",
                    f.escape_debug(),
                    partial::KINETO,
                    nsys::FORMAT,
                    inspector::FORMAT
                );
                return Err(LoadError::new(path, PartialError::Damaged(why).to_string()));
            }
            if let Some(why) = p.settings.mismatch(&settings) {
                return Err(LoadError::new(path, PartialError::Settings(why).to_string()));
            }
            let ranks = p.ranks.into_iter().map(|r| Loaded::Rank(Box::new(r), true)).collect();
            Ok((ranks, p.format))
        }
        Read::Traces(input) => {
            let loaded = input
                .docs
                .into_iter()
                .map(|doc| {
                    Ok(match doc {
                        Document::Timeline(mut t) => {
                            t.rank = Some(resolve_rank(&t, single)?);
                            Loaded::Rank(Box::new(reduce(&t, opts, keep_other)), false)
                        }
                        Document::Events(events) => Loaded::Events(events),
                    })
                })
                .collect::<Result<Vec<_>, LoadError>>()?;
            Ok((loaded, input.format))
        }
    })?;
    let (loaded, formats): (Vec<Vec<Loaded>>, Vec<Option<String>>) = read.into_iter().unzip();
    let format = one_trace_format(&files, &formats)?;
    let mut ranks = Vec::new();
    let mut events = Vec::new();
    let mut event_files = Vec::new();
    for (path, ls) in files.iter().zip(loaded) {
        for l in ls {
            match l {
                Loaded::Rank(r, false) => ranks.push((*r, AnalysisSource::Trace(path.clone()))),
                Loaded::Rank(r, true) => ranks.push((*r, AnalysisSource::Partial(path.clone()))),
                Loaded::Events(e) => {
                    events.extend(e);
                    event_files.push(path.clone());
                }
            }
        }
    }
    check_one_format(!ranks.is_empty(), &event_files)?;
    if ranks.is_empty() {
        return Ok(Gathered::Events { files: event_files, events });
    }
    check_each_rank_once(&ranks)?;
    check_no_copies(&ranks)?;
    ranks.sort_by_key(|(r, _)| r.analysis.rank);
    Ok(Gathered::Ranks { ranks, format })
}

/// One rank's trace reduced to what cross-rank attribution needs.
fn reduce(t: &RankTrace, opts: &AttributeOptions, keep_other: bool) -> ReducedRank {
    let step_names = step_names(t);
    let local = step_names.len() >= 2;
    let analysis = attribute::analyze_rank(t, opts, local);
    let other = (keep_other && opts.compat == Compat::Hta && !local).then(|| attribute::analyze_rank(t, opts, true));
    ReducedRank { analysis, step_names, other }
}

/// Two inputs that hold one rank are an error naming both; where a partial file is one of them,
/// the advice says how partial files go together.
fn check_each_rank_once(ranks: &[(ReducedRank, AnalysisSource)]) -> Result<(), LoadError> {
    if ranks.iter().all(|(_, o)| matches!(o, AnalysisSource::Trace(_))) {
        return check_unique_ranks(ranks.iter().map(|(r, o)| (r.analysis.rank, o.path())));
    }
    let mut seen: HashMap<u32, &AnalysisSource> = HashMap::with_capacity(ranks.len());
    for (r, origin) in ranks {
        let rank = r.analysis.rank;
        if let Some(other) = seen.insert(rank, origin) {
            return Err(LoadError::new(
                origin.path(),
                format!(
                    "holds rank {rank}, like {}; pass each node's partial file once, and no trace of a rank \
                     that a partial file holds",
                    other.path().display()
                ),
            ));
        }
    }
    Ok(())
}

/// Two ranks whose communication is the same in every figure (each kernel's start and end, the
/// events counted, the step lengths, the totals) are one trace under two names: no two GPUs of a
/// real job stamp the same nanoseconds. A trace copied over another rank's file would hide that
/// rank's own figures (a straggler's, say), so the copy is an error naming both.
fn check_no_copies(ranks: &[(ReducedRank, AnalysisSource)]) -> Result<(), LoadError> {
    let mut seen: HashMap<u64, (u32, &AnalysisSource)> = HashMap::with_capacity(ranks.len());
    for (r, origin) in ranks {
        let a = &r.analysis;
        if a.comm_kernels.is_empty() {
            continue;
        }
        if let Some((rank, other)) = seen.insert(fingerprint(a), (a.rank, origin)) {
            return Err(LoadError::new(
                origin.path(),
                format!(
                    "holds rank {}, whose kernels and times are exactly those of rank {rank} in {}: one is a copy \
                     of the other; attach each rank's own trace",
                    a.rank,
                    other.path().display()
                ),
            ));
        }
    }
    Ok(())
}

/// A hash of what a rank measured: equal for two copies of one trace, different for two GPUs.
fn fingerprint(a: &attribute::RankAnalysis) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (a.num_events, a.comm_ns, a.compute_ns, a.overlapped_ns, &a.step_ns).hash(&mut h);
    for k in &a.comm_kernels {
        (k.ts, k.end).hash(&mut h);
    }
    h.finish()
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
    let mut families = files.iter().zip(formats).map(|(file, format)| (file, Profiler::of(format)));
    if let Some((first_file, first)) = families.next() {
        if let Some((file, other)) = families.find(|&(_, family)| family != first) {
            return Err(LoadError::new(
                file,
                format!(
                    "is {} while {} is {}; attribute {} and {} separately",
                    other.one(),
                    first_file.display(),
                    first.one(),
                    first.min(other).many(),
                    first.max(other).many(),
                ),
            ));
        }
    }
    Ok(formats.iter().flatten().next().cloned())
}

/// The profiler a trace file comes from, in the order the mixed-input error names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Profiler {
    Kineto,
    Nsight,
    Inspector,
}

impl Profiler {
    /// The profiler of a file whose format is `format` (`None`: Kineto JSON).
    fn of(format: &Option<String>) -> Self {
        match format.as_deref() {
            None => Profiler::Kineto,
            Some(f) if f.starts_with(inspector::FORMAT) => Profiler::Inspector,
            Some(_) => Profiler::Nsight,
        }
    }

    /// One file of it, as the error names it.
    fn one(self) -> &'static str {
        match self {
            Profiler::Kineto => "a JSON trace",
            Profiler::Nsight => "an Nsight Systems export",
            Profiler::Inspector => "an NCCL Inspector log",
        }
    }

    /// Its files, as the error names them.
    fn many(self) -> &'static str {
        match self {
            Profiler::Kineto => "Kineto traces",
            Profiler::Nsight => "Nsight Systems exports",
            Profiler::Inspector => "NCCL Inspector logs",
        }
    }
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

/// Reads one trace file of any kind: Kineto JSON or aggregated events (plain or gzip), an Nsight
/// Systems SQLite export (told by its header, whatever its name), a `.nsys-rep` report
/// (exported through `nsys` first) or an NCCL Inspector log.
pub fn read_input(path: &Path, limits: ReadLimits) -> Result<Input, LoadError> {
    match read_any(path, limits)? {
        Read::Traces(input) => Ok(input),
        Read::Partial(_) => {
            Err(LoadError::new(path, "is a commgate partial file, not a trace; `commgate attribute` combines it"))
        }
    }
}

/// What one input file holds.
enum Read {
    Traces(Input),
    Partial(Partial),
}

/// Reads one input file of any kind: a trace ([`read_input`]) or a partial file.
fn read_any(path: &Path, limits: ReadLimits) -> Result<Read, LoadError> {
    match read_unchecked(path, limits)? {
        Read::Traces(input) => check_spans(path, input).map(Read::Traces),
        partial @ Read::Partial(_) => Ok(partial),
    }
}

fn read_unchecked(path: &Path, limits: ReadLimits) -> Result<Read, LoadError> {
    let opened = input::open(path).map_err(|e| LoadError::new(path, e.to_string()))?;
    if opened.sqlite {
        drop(opened);
        return read_nsys(path, path, limits).map(Read::Traces);
    }
    if nsys::export::is_report_name(path) {
        drop(opened);
        let dir = tempfile::tempdir()
            .map_err(|e| LoadError::new(path, format!("no temporary directory for the export: {e}")))?;
        let exported = nsys::export::export(path, dir.path()).map_err(|e| LoadError::new(path, e.to_string()))?;
        return read_nsys(path, &exported, limits).map(Read::Traces);
    }
    if path.extension().is_some_and(|e| e == "sqlite") {
        return Err(LoadError::new(
            path,
            "is not an SQLite database (it lacks the `SQLite format 3` header); pass the file `nsys export --type sqlite` writes",
        ));
    }
    let gzip = opened.gzip;
    let sniffed = inspector::sniff(path, opened.reader).map_err(|e| LoadError::new(path, describe_io(&e, gzip)))?;
    if sniffed.partial {
        return partial::read(sniffed.reader, limits)
            .map(Read::Partial)
            .map_err(|e| LoadError::new(path, e.to_string()));
    }
    if sniffed.inspector {
        let file =
            inspector::read_log(sniffed.reader, limits, gzip).map_err(|e| LoadError::new(path, e.to_string()))?;
        let mut trace = file.trace;
        trace.file = path.to_path_buf();
        return Ok(Read::Traces(Input {
            docs: vec![Document::Timeline(Box::new(trace))],
            format: Some(inspector::format_name(file.version.as_deref())),
        }));
    }
    let opened = input::Opened { reader: sniffed.reader, gzip, sqlite: false };
    let doc = parse_opened(path, opened, limits)?;
    Ok(Read::Traces(Input { docs: vec![doc], format: None }))
}

/// Each rank's trace in `input` covers at most [`limits::MAX_SPAN_NS`]: a longer one holds a
/// time no profiler wrote, which every figure derived from it would print.
fn check_spans(path: &Path, input: Input) -> Result<Input, LoadError> {
    for doc in &input.docs {
        let Document::Timeline(t) = doc else { continue };
        if let Some((first, last)) = t.time_range() {
            let what = match (input.docs.len(), t.rank) {
                (2.., Some(rank)) => format!("rank {rank}'s trace"),
                _ => "the trace".to_string(),
            };
            limits::check_span(&what, first, last).map_err(|e| LoadError::new(path, e))?;
        }
    }
    Ok(input)
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

/// What a worker hands back for one file: ranks (`true` when a partial file held them) or
/// aggregated events.
enum Loaded {
    Rank(Box<ReducedRank>, bool),
    Events(Vec<CommEvent>),
}

/// The first two distinct `ProfilerStep#` names of a rank, ascending (the GPU timeline's copies
/// hold the same names): all that the HTA window's choice needs.
fn step_names(t: &RankTrace) -> Vec<String> {
    let mut names: Vec<&str> = t.steps.iter().chain(&t.gpu_steps).map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names.into_iter().take(2).map(str::to_string).collect()
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

/// Aggregated events and profiler traces are attributed separately, never mixed.
pub fn check_one_format(traces: bool, event_files: &[PathBuf]) -> Result<(), LoadError> {
    match event_files.first() {
        Some(first) if traces => Err(LoadError::new(
            first,
            "holds aggregated events while other inputs are profiler traces; attribute them separately",
        )),
        _ => Ok(()),
    }
}

/// Rank from `distributedInfo.rank`, else from the file name; a lone trace without either is
/// rank 0.
pub fn resolve_rank(t: &RankTrace, single: bool) -> Result<u32, LoadError> {
    let name = t.file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    t.rank.or_else(|| rank_from_file_name(name)).or(single.then_some(0)).ok_or_else(|| {
        LoadError::new(
            &t.file,
            "has no distributedInfo.rank and no rank in its name; rename it rank-N.json (N = its rank)",
        )
    })
}

/// Two files of one rank are an error.
pub fn check_unique_ranks<'a>(ranks: impl Iterator<Item = (u32, &'a Path)>) -> Result<(), LoadError> {
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
pub fn map_parallel<T, F>(files: &[PathBuf], f: F) -> Result<Vec<T>, LoadError>
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
                    if let Some(slot) = slots.get_mut(i) {
                        *slot = Some(result);
                    }
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
             or aggregated events (an array of objects with `collective`, or `{{\"events\": [...]}}`)"
        ),
    }
}
