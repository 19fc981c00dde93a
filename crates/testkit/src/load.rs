//! Whole-trace loading for tests: every input file parsed into its complete [`RankTrace`] (or
//! its aggregated events), ranks resolved and checked as `commgate attribute` does. The shipped path,
//! [`commgate_trace::load::attribute_paths`], reduces each rank to its analysis as soon as it is
//! parsed instead; tests that inspect the parsed traces themselves use this.

use std::path::PathBuf;

use commgate_trace::attribute::CommEvent;
use commgate_trace::kineto::Document;
use commgate_trace::load::{check_one_format, check_unique_ranks, map_parallel, read_file, resolve_rank, LoadError};
use commgate_trace::model::RankTrace;

/// Parsed inputs, all of one format.
#[derive(Debug)]
pub enum Inputs {
    /// One trace per rank, sorted by rank.
    Kineto(Vec<RankTrace>),
    /// Aggregated events from every file, in file order.
    Events { files: Vec<PathBuf>, events: Vec<CommEvent> },
}

/// Parses files in parallel and checks they form one input: a single format, one file per rank.
pub fn load_files(files: &[PathBuf]) -> Result<Inputs, LoadError> {
    let docs = map_parallel(files, read_file)?;
    let mut traces = Vec::new();
    let mut events = Vec::new();
    let mut event_files = Vec::new();
    for (path, doc) in files.iter().zip(docs) {
        match doc {
            Document::Timeline(t) => traces.push(*t),
            Document::Events(e) => {
                events.extend(e);
                event_files.push(path.clone());
            }
        }
    }
    check_one_format(!traces.is_empty(), &event_files)?;
    if traces.is_empty() {
        return Ok(Inputs::Events { files: event_files, events });
    }
    let single = traces.len() == 1;
    for t in traces.iter_mut() {
        t.rank = Some(resolve_rank(t, single)?);
    }
    check_unique_ranks(traces.iter().map(|t| (t.rank.unwrap_or(0), t.file.as_path())))?;
    traces.sort_by_key(|t| t.rank);
    Ok(Inputs::Kineto(traces))
}
