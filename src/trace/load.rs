//! From paths to parsed inputs: expands directories, detects gzip by its magic bytes, parses
//! files in parallel (one rank per thread, as many threads as cores), resolves each rank, and
//! turns every failure into one [`LoadError`] that names the file and what to do.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use flate2::read::MultiGzDecoder;

use super::attribute::{self, AttributeOptions, Attribution};
use super::classify::rank_from_file_name;
use super::kineto::{parse_document, Document};
use super::model::RankTrace;
use super::reader::ReadError;
use crate::hotspots::CommEvent;

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

/// Parsed inputs, all of one format.
#[derive(Debug)]
pub enum Inputs {
    /// One trace per rank, sorted by rank.
    Kineto(Vec<RankTrace>),
    /// Seed events from every file, in file order.
    Events { files: Vec<PathBuf>, events: Vec<CommEvent> },
}

/// Loads `paths` and attributes them: the whole `commgate attribute` computation.
pub fn attribute_paths(paths: &[PathBuf], opts: &AttributeOptions) -> Result<Attribution, LoadError> {
    let files = collect_files(paths)?;
    Ok(match load_files(&files)? {
        Inputs::Kineto(ranks) => attribute::attribute_ranks(&ranks, opts),
        Inputs::Events { files, events } => {
            let names = files.iter().map(|f| f.display().to_string()).collect();
            attribute::attribute_events(names, &events, &opts.thresholds)
        }
    })
}

/// Expands directories (their `*.json` and `*.gz` files, sorted) and checks that files exist.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                LoadError::new(path, "does not exist; pass trace files or a directory of them")
            }
            _ => LoadError::new(path, format!("cannot be read: {e}")),
        })?;
        if !meta.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| LoadError::new(path, format!("cannot list the directory: {e}")))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && is_trace_name(p))
            .collect();
        if found.is_empty() {
            return Err(LoadError::new(
                path,
                "holds no trace files (*.json, *.json.gz); point at the profiler's output",
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

fn is_trace_name(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".json") || name.ends_with(".json.gz") || name.ends_with(".gz")
}

/// Parses files in parallel and checks they form one input: a single format, one file per rank.
pub fn load_files(files: &[PathBuf]) -> Result<Inputs, LoadError> {
    let docs = parse_parallel(files)?;
    let mut traces = Vec::new();
    let mut events = Vec::new();
    let mut event_files = Vec::new();
    for (path, doc) in files.iter().zip(docs) {
        match doc {
            Document::Kineto(t) => traces.push(*t),
            Document::Events(e) => {
                events.extend(e);
                event_files.push(path.clone());
            }
        }
    }
    if !traces.is_empty() && !event_files.is_empty() {
        return Err(LoadError::new(
            &event_files[0],
            "holds seed events while other inputs are profiler traces; attribute them separately",
        ));
    }
    if traces.is_empty() {
        return Ok(Inputs::Events { files: event_files, events });
    }
    resolve_ranks(&mut traces)?;
    traces.sort_by_key(|t| t.rank);
    Ok(Inputs::Kineto(traces))
}

/// Rank from `distributedInfo.rank`, else from the file name; a lone trace without either is
/// rank 0. Two files of one rank are an error.
fn resolve_ranks(traces: &mut [RankTrace]) -> Result<(), LoadError> {
    let single = traces.len() == 1;
    for t in traces.iter_mut() {
        if t.rank.is_none() {
            let name = t.file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            t.rank = rank_from_file_name(name).or(single.then_some(0));
        }
        if t.rank.is_none() {
            return Err(LoadError::new(
                &t.file,
                "has no distributedInfo.rank and no rank in its name; rename it rank-N.json (N = its rank)",
            ));
        }
    }
    let mut seen: Vec<(u32, &Path)> = Vec::new();
    for t in traces.iter() {
        let rank = t.rank.unwrap_or(0);
        if let Some((_, other)) = seen.iter().find(|(r, _)| *r == rank) {
            return Err(LoadError::new(
                &t.file,
                format!("holds rank {rank}, like {}; pass one trace per rank", other.display()),
            ));
        }
        seen.push((rank, &t.file));
    }
    Ok(())
}

/// One thread per core pulls files off a shared index; the first error wins.
fn parse_parallel(files: &[PathBuf]) -> Result<Vec<Document>, LoadError> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(files.len()).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Document, LoadError>>>> = Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { break };
                let result = read_file(path);
                if let Ok(mut slots) = results.lock() {
                    slots[i] = Some(result);
                }
            });
        }
    });
    let slots = results.into_inner().unwrap_or_default();
    let mut docs = Vec::with_capacity(files.len());
    for (path, slot) in files.iter().zip(slots) {
        match slot {
            Some(r) => docs.push(r?),
            None => return Err(LoadError::new(path, "was not read (internal error: a parser thread stopped)")),
        }
    }
    Ok(docs)
}

/// Reads one file, plain or gzip.
pub fn read_file(path: &Path) -> Result<Document, LoadError> {
    let mut file = File::open(path).map_err(|e| LoadError::new(path, format!("cannot be opened: {e}")))?;
    let mut magic = [0u8; 2];
    let n = read_prefix(&mut file, &mut magic).map_err(|e| LoadError::new(path, format!("cannot be read: {e}")))?;
    let file = File::open(path).map_err(|e| LoadError::new(path, format!("cannot be opened: {e}")))?;
    let gzip = n == 2 && magic == [0x1f, 0x8b];
    let result = if gzip {
        parse_document(MultiGzDecoder::new(BufReader::with_capacity(1 << 16, file)))
    } else {
        parse_document(file)
    };
    let mut doc = result.map_err(|e| LoadError::new(path, describe(&e, gzip)))?;
    if let Document::Kineto(t) = &mut doc {
        t.file = path.to_path_buf();
    }
    Ok(doc)
}

fn read_prefix(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn describe(e: &ReadError, gzip: bool) -> String {
    let place = if gzip { "decompressed byte" } else { "byte" };
    match e {
        ReadError::Io { offset, source } if gzip => format!(
            "the gzip data is corrupt or truncated after {place} {offset} ({source}); re-copy or re-export the trace"
        ),
        ReadError::Io { offset, source } => format!("cannot be read after {place} {offset}: {source}"),
        ReadError::Syntax { offset, message } => format!("{place} {offset}: {message}"),
        ReadError::Truncated { offset } => {
            format!("the JSON ends early at {place} {offset}: the file is truncated; re-export the trace")
        }
    }
}
