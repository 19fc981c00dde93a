//! The PyTorch profiler (Kineto) Chrome-trace reader: walks the top-level object of one rank's
//! trace and keeps, per event, only what attribution needs ([`RankTrace`]). Events may come in
//! any order; times are kept as exact integer nanoseconds.
//!
//! The same walker recognises the aggregated-events shape (a top-level `events` array,
//! or a bare array whose elements carry `collective`), so one entry point reads any input file.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::classify::{dtype_size, is_moe_marker, is_profiler_step};
use super::events::{self, RawSeedEvent};
use super::flat;
use super::limits::{cap_name, ReadLimits, MAX_ABS_NS};
pub use super::model::Document;
use super::model::{CommMeta, CommOp, GpuAnnotation, Kernel, KernelCat, Launch, Ns, RankTrace, Step};
use super::narrow::{float_to_i64, saturating_u32};
use super::reader::Keep;
use super::reader::{BorrowedDeserialize, JsonStream, Owned, ReadError, MAX_INLINE_VALUE};
use crate::attribute::CommEvent;
use commgate_core::input;

#[derive(Deserialize, Default)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Text<'a>>,
    #[serde(borrow, default)]
    cat: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    ts: Option<Raw<'a>>,
    #[serde(borrow, default)]
    dur: Option<Raw<'a>>,
    #[serde(borrow, default)]
    pid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    tid: Option<Raw<'a>>,
    /// Kept raw: only the few events attribution uses have their `args` parsed (see `args_of`),
    /// which keeps the per-event struct small and skips the rest in one scan.
    #[serde(borrow, default)]
    args: Option<Raw<'a>>,
    /// `args` as the fast path already read it (never from serde).
    #[serde(skip)]
    read_args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(borrow, default)]
    correlation: Option<Raw<'a>>,
    #[serde(borrow, default)]
    stream: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Collective name")]
    collective: Option<Text<'a>>,
    #[serde(borrow, default, rename = "In msg nelems")]
    in_nelems: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Out msg nelems")]
    out_nelems: Option<Raw<'a>>,
    #[serde(borrow, default)]
    dtype: Option<Text<'a>>,
    #[serde(borrow, default, rename = "Process Group Name")]
    pg_name: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Seq")]
    seq: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Group size")]
    group_size: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Input Dims")]
    input_dims: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Input type")]
    input_type: Option<Raw<'a>>,
}

/// A value's JSON text, borrowed from the input (serde_json's `RawValue`, or the fast path's
/// slice of the same text).
#[derive(Clone, Copy)]
struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    fn get(self) -> &'a str {
        self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(d).map(|r| Raw(r.get()))
    }
}

/// A string that borrows from the input unless it holds escapes. (serde's own `Cow<str>`
/// borrows only as a bare field with `#[serde(borrow)]`, never inside an `Option`, and the
/// allocation per field cost a third of the parse time.)
struct Text<'a>(Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

struct EventOf;
impl<'de> BorrowedDeserialize<'de> for EventOf {
    type Out = RawEvent<'de>;
}

struct KeyOf;
impl<'de> BorrowedDeserialize<'de> for KeyOf {
    type Out = Cow<'de, str>;
}

struct SeedOf;
impl<'de> BorrowedDeserialize<'de> for SeedOf {
    type Out = RawSeedEvent;
}

#[derive(Deserialize, Default)]
struct DistributedInfo {
    #[serde(default)]
    rank: Option<serde_json::Value>,
    #[serde(default)]
    world_size: Option<serde_json::Value>,
}

/// What an oversized array element is reduced to: the fields [`RawEvent`], [`RawArgs`] and
/// [`RawSeedEvent`] read (the two formats share no key), each capped.
const ELEMENT: Keep = Keep::Object(&[
    ("ph", Keep::Raw),
    ("cat", Keep::Raw),
    ("name", Keep::Raw),
    ("ts", Keep::Raw),
    ("dur", Keep::Raw),
    ("pid", Keep::Raw),
    ("tid", Keep::Raw),
    (
        "args",
        Keep::Object(&[
            ("correlation", Keep::Raw),
            ("stream", Keep::Raw),
            ("Collective name", Keep::Raw),
            ("In msg nelems", Keep::Raw),
            ("Out msg nelems", Keep::Raw),
            ("dtype", Keep::Raw),
            ("Process Group Name", Keep::Raw),
            ("Seq", Keep::Raw),
            ("Group size", Keep::Raw),
            ("Input Dims", Keep::Raw),
            ("Input type", Keep::Raw),
        ]),
    ),
    ("collective", Keep::Raw),
    ("exposed_comm_ms", Keep::Raw),
    ("total_comm_ms", Keep::Raw),
    ("payload_bytes", Keep::Raw),
    ("overlap_ratio", Keep::Raw),
    ("rank_imbalance_ratio", Keep::Raw),
    ("rank_imbalance_observed", Keep::Raw),
    ("sync_count", Keep::Raw),
]);

const DISTRIBUTED_INFO: Keep = Keep::Object(&[("rank", Keep::Raw), ("world_size", Keep::Raw)]);

/// Just enough of an array element to tell the two formats apart: an aggregated event has a
/// `collective`, or (when it lacks one, which its reader then reports) an aggregated event's figures and
/// none of a trace event's `ph` and `ts`.
#[derive(Deserialize)]
struct Sniff {
    #[serde(default)]
    collective: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    exposed_comm_ms: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    payload_bytes: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    overlap_ratio: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    ph: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    ts: Option<serde::de::IgnoredAny>,
}

impl Sniff {
    fn is_aggregated_event(&self) -> bool {
        let figures = self.exposed_comm_ms.is_some() || self.payload_bytes.is_some() || self.overlap_ratio.is_some();
        self.collective.is_some() || (figures && self.ph.is_none() && self.ts.is_none())
    }
}

/// Reads one input document: one JSON value and nothing after it, under the default limits.
pub fn parse_document<R: Read>(input: R) -> Result<Document, ReadError> {
    parse_document_with(input, ReadLimits::default())
}

/// Reads one input document under `limits`.
pub fn parse_document_with<R: Read>(input: R, limits: ReadLimits) -> Result<Document, ReadError> {
    parse_document_by(input, limits, true)
}

/// Reads one input document through serde alone, without the fast path ([`flat`]): the
/// reference the fast path must agree with, byte for byte (tests and benches only).
#[doc(hidden)]
pub fn parse_document_without_fast_path<R: Read>(input: R, limits: ReadLimits) -> Result<Document, ReadError> {
    parse_document_by(input, limits, false)
}

fn parse_document_by<R: Read>(input: R, limits: ReadLimits, fast: bool) -> Result<Document, ReadError> {
    let _reading = Reading::start();
    let mut s = JsonStream::new(input);
    let doc = parse_value(&mut s, limits, fast)?;
    // Data after the document is a sign of two files run together, or of garbage appended.
    match s.peek()? {
        None => Ok(doc),
        Some(b) => Err(syntax(
            &s,
            &format!(
                "unexpected '{}' after the end of the JSON document (two traces in one file?)",
                char::from(b).escape_default()
            ),
        )),
    }
}

fn parse_value<R: Read>(s: &mut JsonStream<R>, limits: ReadLimits, fast: bool) -> Result<Document, ReadError> {
    match s.peek()? {
        Some(b'{') => parse_object(s, limits, fast),
        Some(b'[') => {
            s.expect(b'[', "an array")?;
            match s.peek()? {
                Some(b']') => return Err(syntax(s, "the event array is empty: no trace events to attribute")),
                Some(b'{') => {}
                Some(b) => return Err(ReadError::NotATrace { found: array_of(b) }),
                None => return Err(ReadError::Truncated { offset: s.offset() }),
            }
            // An oversized first element is sniffed from its reduced text, which then stands in
            // for it (the stream has moved past it).
            let (aggregated, first) = match s
                .with_value_within::<Owned<Sniff>, _, _>(false, MAX_INLINE_VALUE, |v| v.is_aggregated_event())?
            {
                Some(aggregated) => (aggregated, None),
                None => {
                    let offset = s.offset();
                    let text = s.reduce(&ELEMENT)?;
                    let aggregated = serde_json::from_slice::<Sniff>(&text).is_ok_and(|v| v.is_aggregated_event());
                    (aggregated, Some((offset, text)))
                }
            };
            if aggregated {
                Ok(Document::Events(event_elements(s, limits, first)?))
            } else {
                let mut b = Builder::new(limits, fast);
                trace_elements(s, &mut b, first)?;
                Ok(Document::Timeline(Box::new(b.finish())))
            }
        }
        Some(other) => match input::json_kind(&[other]) {
            "not JSON" => Err(syntax(
                s,
                &format!(
                    "expected a JSON object or array, found '{}' (is this a trace?)",
                    char::from(other).escape_default()
                ),
            )),
            found => Err(ReadError::NotATrace { found: found.to_string() }),
        },
        None => Err(ReadError::Syntax { offset: 0, message: "the file is empty".to_string() }),
    }
}

/// `a JSON array of numbers`, … from the first byte of the array's first element.
fn array_of(first: u8) -> String {
    let elements = match input::json_kind(&[first]) {
        "a JSON array" => "arrays",
        "a JSON string" => "strings",
        "a number" => "numbers",
        "a boolean" => "booleans",
        "null" => "nulls",
        _ => "values",
    };
    format!("a JSON array of {elements}")
}

/// A malformed value's message, prefixed with where in the document it sits.
fn within(e: ReadError, place: &str) -> ReadError {
    match e {
        ReadError::Syntax { offset, message } => ReadError::Syntax { offset, message: format!("{place}: {message}") },
        other => other,
    }
}

fn syntax<R: Read>(s: &JsonStream<R>, message: &str) -> ReadError {
    ReadError::Syntax { offset: s.offset(), message: message.to_string() }
}

fn parse_object<R: Read>(s: &mut JsonStream<R>, limits: ReadLimits, fast: bool) -> Result<Document, ReadError> {
    s.expect(b'{', "an object")?;
    let mut b = Builder::new(limits, fast);
    let mut saw_trace = false;
    let mut aggregated: Option<Vec<CommEvent>> = None;
    let mut keys = input::DocKeys::default();
    if s.peek()? == Some(b'}') {
        return Err(ReadError::NotATrace { found: "an empty JSON object".to_string() });
    }
    loop {
        // A key too long to be one the reader knows is skipped like any unknown key.
        let key = s.with_reduced::<KeyOf, _, _>(&Keep::Raw, |k| k.into_owned())?;
        s.expect(b':', "':' after a key")?;
        keys.saw(&key);
        match key.as_str() {
            "traceEvents" => {
                expect_array(s, "traceEvents")?;
                trace_elements(s, &mut b, None)?;
                saw_trace = true;
            }
            "events" => {
                expect_array(s, "events")?;
                aggregated = Some(event_elements(s, limits, None)?);
            }
            "distributedInfo" => {
                let info = s
                    .with_reduced::<Owned<DistributedInfo>, _, _>(&DISTRIBUTED_INFO, |d| d)
                    .map_err(|e| within(e, "`distributedInfo`"))?;
                b.trace.rank = info.rank.as_ref().and_then(json_u32);
                b.trace.world_size = info.world_size.as_ref().and_then(json_u32);
            }
            "baseTimeNanoseconds" => {
                let v = s.with_reduced::<Owned<serde_json::Value>, _, _>(&Keep::Raw, |v| v)?;
                b.trace.base_time_ns = v.as_i64();
            }
            _ => s.skip_value()?,
        }
        if !s.next_in_object()? {
            break;
        }
    }
    if saw_trace {
        return Ok(Document::Timeline(Box::new(b.finish())));
    }
    match aggregated {
        Some(events) => Ok(Document::Events(events)),
        None => Err(ReadError::NotATrace {
            found: match keys.kind() {
                Some(kind) => format!("a {}", kind.noun()),
                None => "a JSON object without `traceEvents`".to_string(),
            },
        }),
    }
}

fn expect_array<R: Read>(s: &mut JsonStream<R>, key: &str) -> Result<(), ReadError> {
    match s.peek()? {
        Some(b'[') => s.expect(b'[', "an array"),
        Some(_) => Err(syntax(s, &format!("`{key}` is not an array"))),
        None => Err(ReadError::Truncated { offset: s.offset() }),
    }
}

fn json_u32(v: &serde_json::Value) -> Option<u32> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Bytes the buffer is topped up to before the fast path tries an element: far more than a
/// real event (a few hundred bytes), so that only an element cut by the end of the input or a
/// huge one declines for want of bytes.
const FAST_WINDOW: usize = 64 << 10;

/// The elements of `traceEvents`; `first`, when given, is the first element already reduced
/// (with its offset).
fn trace_elements<R: Read>(
    s: &mut JsonStream<R>,
    b: &mut Builder,
    mut first: Option<(u64, Vec<u8>)>,
) -> Result<(), ReadError> {
    if first.is_none() && s.peek()? == Some(b']') {
        return s.expect(b']', "']'");
    }
    loop {
        if b.fast && first.is_none() {
            read_ahead_on_two_threads(s, b)?;
        }
        let index = b.trace.num_events;
        if index >= b.limits.max_events {
            return Err(ReadError::TooManyEvents { limit: b.limits.max_events });
        }
        let (offset, pushed) = match first.take() {
            Some((offset, text)) => (offset, reduced::<EventOf, _, _>(offset, &text, |e| b.push(e))),
            None => (s.offset(), {
                // The fast path reads the element in place, or declines and serde reads it.
                // An element past the in-place size is serde's to read (or reduce).
                let fast = match b.fast {
                    true => flat_event(s.buffered(FAST_WINDOW)?)
                        .filter(|&(_, used)| used <= MAX_INLINE_VALUE)
                        .map(|(e, used)| (b.push(e), used)),
                    false => None,
                };
                match fast {
                    Some((pushed, used)) => {
                        s.consume(used);
                        Ok(pushed)
                    }
                    None => s.with_reduced::<EventOf, _, _>(&ELEMENT, |e| b.push(e)),
                }
            }),
        };
        pushed
            .map_err(|e| within(e, &format!("traceEvents[{index}]")))?
            .map_err(|message| ReadError::Syntax { offset, message: format!("traceEvents[{index}]: {message}") })?;
        if !s.next_in_array()? {
            return Ok(());
        }
    }
}

/// Documents being read in this process right now: a read splits its buffer over two threads
/// only while fewer documents are being read than there are cores (files read side by side
/// already keep them busy).
static READING: AtomicUsize = AtomicUsize::new(0);

/// One document's place in [`READING`], given back when the read ends however it ends.
struct Reading;

impl Reading {
    fn start() -> Self {
        READING.fetch_add(1, Ordering::Relaxed);
        Reading
    }

    /// Whether a core is free for a helper thread.
    fn core_to_spare() -> bool {
        static CORES: OnceLock<usize> = OnceLock::new();
        let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        READING.load(Ordering::Relaxed) < cores
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        READING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Buffered bytes from which the elements ahead are read on two threads: a quarter of the
/// reader's buffer, so that a buffer topped up for one element is split too.
const SPLIT_MIN: usize = 256 << 10;

/// At an element start with a full buffer: reads the buffered elements on two threads, this
/// one up to an element start near the middle and a helper from there, each through the fast
/// path into its own builder, and appends the helper's to `b` when this thread reached exactly
/// the helper's start (the guess could have fallen inside an element). Whatever either thread
/// did not read (an element the fast path declines, one with an error, one cut off by the
/// buffer's end, the last one before `]`) is left where it is, at an element start, for the
/// one-at-a-time loop: so errors, their indices and offsets are the loop's own.
fn read_ahead_on_two_threads<R: Read>(s: &mut JsonStream<R>, b: &mut Builder) -> Result<(), ReadError> {
    if !Reading::core_to_spare() {
        return Ok(());
    }
    let buf = s.buffered(FAST_WINDOW)?;
    if buf.len() < SPLIT_MIN {
        return Ok(());
    }
    let Some(cut) = element_start_after(buf, buf.len() / 2) else {
        return Ok(());
    };
    let Some(tail) = buf.get(cut..) else {
        return Ok(());
    };
    let limits = b.limits;
    let (mine, theirs) = std::thread::scope(|scope| {
        let helper = scope.spawn(|| {
            let mut w = Builder::new(limits, true);
            let read = read_run(tail, &mut w, None);
            (w, read)
        });
        (read_run(buf, b, Some(cut)), helper.join())
    });
    let mut consumed = mine;
    if let (true, Ok((w, read))) = (mine == cut, theirs) {
        if read > 0 && b.trace.num_events + w.trace.num_events <= limits.max_events {
            b.absorb(w);
            consumed = cut + read;
        }
    }
    s.consume(consumed);
    Ok(())
}

/// Where an element probably starts after `from`: just past a `},` that whitespace and a `{`
/// follow (between two events; it may also be inside one, which the caller finds out).
fn element_start_after(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    for _ in 0..64 {
        let i = at + memchr::memmem::find(buf.get(at..)?, b"},")?;
        if buf.get(flat::skip_ws(buf, i + 2)) == Some(&b'{') {
            return Some(i + 2);
        }
        at = i + 2;
    }
    None
}

/// Reads elements from `slice` (which starts at an element start) through the fast path while
/// each is followed by `,`, stopping at the first it does not read or, with `stop`, at the first
/// element start at or past `stop`. Returns where it stopped: an element start.
fn read_run(slice: &[u8], b: &mut Builder, stop: Option<usize>) -> usize {
    let mut pos = 0;
    loop {
        if stop.is_some_and(|c| pos >= c) || b.trace.num_events >= b.limits.max_events {
            return pos;
        }
        let Some((e, used)) = slice.get(pos..).and_then(flat_event).filter(|&(_, used)| used <= MAX_INLINE_VALUE)
        else {
            return pos;
        };
        let after = flat::skip_ws(slice, pos + used);
        if slice.get(after) != Some(&b',') {
            return pos;
        }
        // A failed push changed only these two; the loop reads the element again and reports.
        let (events, fractional) = (b.trace.num_events, b.trace.fractional_ts);
        if b.push(e).is_err() {
            (b.trace.num_events, b.trace.fractional_ts) = (events, fractional);
            return pos;
        }
        pos = after + 1;
    }
}

/// The aggregated events of an array; `first` as for [`trace_elements`].
fn event_elements<R: Read>(
    s: &mut JsonStream<R>,
    limits: ReadLimits,
    mut first: Option<(u64, Vec<u8>)>,
) -> Result<Vec<CommEvent>, ReadError> {
    let mut out = Vec::new();
    if first.is_none() && s.peek()? == Some(b']') {
        s.expect(b']', "']'")?;
        return Ok(out);
    }
    loop {
        let index = out.len();
        if index as u64 >= limits.max_events {
            return Err(ReadError::TooManyEvents { limit: limits.max_events });
        }
        let (offset, event) = match first.take() {
            Some((offset, text)) => (offset, reduced::<SeedOf, _, _>(offset, &text, events::validate)),
            None => (s.offset(), s.with_reduced::<SeedOf, _, _>(&ELEMENT, events::validate)),
        };
        let event = event
            .map_err(|e| within(e, &format!("events[{index}]")))?
            .map_err(|message| ReadError::Syntax { offset, message: format!("events[{index}]: {message}") })?;
        out.push(event);
        if !s.next_in_array()? {
            return Ok(out);
        }
    }
}

/// Parses an element already reduced to `text` (it started at `offset`).
fn reduced<T, O, F>(offset: u64, text: &[u8], mut f: F) -> Result<O, ReadError>
where
    T: for<'de> BorrowedDeserialize<'de>,
    F: for<'de> FnMut(<T as BorrowedDeserialize<'de>>::Out) -> O,
{
    let value: <T as BorrowedDeserialize<'_>>::Out = serde_json::from_slice(text)
        .map_err(|e| ReadError::Syntax { offset, message: input::plain_message(&e.to_string()) })?;
    Ok(f(value))
}

/// Accumulates one rank's events.
struct Builder {
    trace: RankTrace,
    /// Each distinct (capped) kernel name once, shared with `trace.names`.
    name_ids: HashMap<Arc<str>, u32, foldhash::fast::RandomState>,
    /// Each distinct metadata text (collective, dtype, process group) once.
    texts: HashSet<Arc<str>, foldhash::fast::RandomState>,
    limits: ReadLimits,
    /// Whether elements go through the fast path first (always, except for the tests that
    /// compare it with serde).
    fast: bool,
    /// The searcher for `"stream"` in a CPU event's arguments, built once per file.
    stream_key: memchr::memmem::Finder<'static>,
}

impl Builder {
    fn new(limits: ReadLimits, fast: bool) -> Self {
        Builder {
            fast,
            trace: RankTrace::default(),
            name_ids: HashMap::default(),
            texts: HashSet::default(),
            limits,
            stream_key: memchr::memmem::Finder::new(b"\"stream\""),
        }
    }

    fn finish(mut self) -> RankTrace {
        self.trace.moe_markers |= self.trace.names.iter().any(|n| is_moe_marker(n));
        self.trace.launches.seal();
        self.trace
    }

    fn intern(&mut self, name: &str) -> u32 {
        let name = self.cap(name);
        if let Some(&id) = self.name_ids.get(name.as_ref()) {
            return id;
        }
        let id = saturating_u32(self.trace.names.len());
        let shared: Arc<str> = Arc::from(name.as_ref());
        self.trace.names.push(Arc::clone(&shared));
        self.name_ids.insert(shared, id);
        id
    }

    /// The index of a name already kept (capped) by another builder of the same file.
    fn intern_kept(&mut self, name: &Arc<str>) -> u32 {
        if let Some(&id) = self.name_ids.get(&**name) {
            return id;
        }
        let id = saturating_u32(self.trace.names.len());
        self.trace.names.push(Arc::clone(name));
        self.name_ids.insert(Arc::clone(name), id);
        id
    }

    /// Appends what `w` read from the elements that follow this builder's: the same trace, in
    /// the same order, as if this builder had read them itself (its names keep their order of
    /// first appearance).
    fn absorb(&mut self, w: Builder) {
        let remap: Vec<u32> = w.trace.names.iter().map(|n| self.intern_kept(n)).collect();
        let name = |id: u32| remap.get(id as usize).copied().unwrap_or(id);
        let t = w.trace;
        self.trace.kernels.extend(t.kernels.into_iter().map(|mut k| {
            k.name = name(k.name);
            k
        }));
        self.trace.stream_ops.extend(t.stream_ops.into_iter().map(|mut k| {
            k.name = name(k.name);
            k
        }));
        for (c, l) in t.launches.iter() {
            self.trace.launches.insert(c, l);
        }
        self.trace.comm_ops.extend(t.comm_ops);
        self.trace.gpu_annotations.extend(t.gpu_annotations);
        self.trace.steps.extend(t.steps);
        self.trace.gpu_steps.extend(t.gpu_steps);
        self.trace.moe_markers |= t.moe_markers;
        self.trace.fractional_ts |= t.fractional_ts;
        self.trace.names_truncated |= t.names_truncated;
        self.trace.num_events += t.num_events;
    }

    /// A string to keep, cut to the name limit (and the cut remembered for the note).
    fn cap<'a>(&mut self, s: &'a str) -> Cow<'a, str> {
        let (kept, cut) = cap_name(s);
        self.trace.names_truncated |= cut;
        kept
    }

    fn meta(&mut self, args: &RawArgs<'_>, with_shapes: bool) -> CommMeta {
        CommMeta {
            collective: args.collective.as_deref().map(|s| self.share(s)),
            in_nelems: args.in_nelems.and_then(|v| lenient_u64(v.get())),
            out_nelems: args.out_nelems.and_then(|v| lenient_u64(v.get())),
            dtype: args.dtype.as_deref().map(|s| self.share(s)),
            pg_name: args.pg_name.map(|v| self.share(v.get().trim_matches('"'))),
            seq: args.seq.and_then(|v| lenient_u64(v.get())),
            group_size: args.group_size.and_then(|v| lenient_u64(v.get())).and_then(|n| u32::try_from(n).ok()),
            shapes_bytes: if with_shapes { shapes_bytes(args.input_dims, args.input_type) } else { None },
        }
    }

    /// A metadata text to keep (capped), shared with every equal one of this rank.
    fn share(&mut self, s: &str) -> Arc<str> {
        let s = self.cap(s);
        if let Some(shared) = self.texts.get(s.as_ref()) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(s.as_ref());
        self.texts.insert(Arc::clone(&shared));
        shared
    }

    /// Keeps what attribution needs of one event; `Err` names the bad field.
    fn push(&mut self, mut e: RawEvent<'_>) -> Result<(), String> {
        self.trace.num_events += 1;
        // HTA's frame holds every event: one `ts` written as a float (or missing) makes its
        // whole `ts` column float64, which is when HTA rounds.
        if !self.trace.fractional_ts {
            self.trace.fractional_ts = e.ts.is_none_or(|t| t.get().bytes().any(|b| matches!(b, b'.' | b'e' | b'E')));
        }
        if e.ph.as_deref() != Some("X") {
            return Ok(());
        }
        let ts_raw = e.ts.ok_or("a complete event (ph \"X\") has no `ts`")?;
        let dur_raw = e.dur.ok_or("a complete event (ph \"X\") has no `dur`")?;
        let (ts, _) = parse_micros(ts_raw.get()).map_err(|m| format!("`ts` {m}"))?;
        let (dur, _) = parse_micros(dur_raw.get()).map_err(|m| format!("`dur` {m}"))?;
        if dur < 0 {
            return Err(format!("`dur` is negative ({}); durations must be ≥ 0", excerpt(dur_raw.get())));
        }
        if !(-MAX_ABS_NS..=MAX_ABS_NS).contains(&ts) {
            return Err(format!(
                "`ts` is out of range ({}); timestamps must lie within ±2^61 ns",
                excerpt(ts_raw.get())
            ));
        }
        if dur > MAX_ABS_NS {
            return Err(format!(
                "`dur` is out of range ({}); durations must be at most 2^61 ns",
                excerpt(dur_raw.get())
            ));
        }
        let name = e.name.as_deref().unwrap_or("");
        let cat = e.cat.as_deref().unwrap_or("");
        let wanted = matches!(cat, "kernel" | "gpu_memcpy" | "gpu_memset" | "cuda_runtime" | "cuda_driver" | "runtime")
            || name == "record_param_comms"
            || name.starts_with("nccl:");
        let args = match e.read_args.take() {
            Some(args) if wanted => args,
            _ if wanted => args_of(e.args, self.fast)?,
            _ => RawArgs::default(),
        };
        let pid = e.pid.map(id_of).unwrap_or(0);
        let tid = e.tid.map(id_of).unwrap_or(0);
        match cat {
            "kernel" | "gpu_memcpy" | "gpu_memset" => {
                let kcat = match cat {
                    "kernel" => KernelCat::Kernel,
                    "gpu_memcpy" => KernelCat::Memcpy,
                    _ => KernelCat::Memset,
                };
                let meta = self.meta(&args, false);
                let stream = args.stream.and_then(|v| lenient_i64(v.get())).unwrap_or(tid);
                let correlation = args.correlation.and_then(|v| lenient_u64(v.get()));
                let mut kernel = Kernel::new(ts, dur, self.intern(name), kcat, stream, correlation);
                kernel.meta = (meta != CommMeta::default()).then(|| Box::new(meta));
                self.trace.kernels.push(kernel);
            }
            "gpu_user_annotation" => {
                if let Some(op) = name.strip_prefix("nccl:") {
                    let op = self.cap(op).into_owned();
                    self.trace.gpu_annotations.push(GpuAnnotation { ts, end: ts + dur, stream: tid, op });
                } else if is_profiler_step(name) {
                    let name = self.cap(name).into_owned();
                    self.trace.gpu_steps.push(Step { name, ts });
                } else {
                    self.trace.moe_markers |= is_moe_marker(name);
                }
            }
            "cuda_runtime" | "cuda_driver" | "runtime" => {
                if let Some(c) = args.correlation.and_then(|v| lenient_u64(v.get())) {
                    self.trace.launches.insert(c, Launch { ts, pid, tid });
                }
            }
            _ => {
                if name == "record_param_comms" || name.starts_with("nccl:") {
                    let annotation = name.strip_prefix("nccl:").map(|op| self.cap(op).into_owned());
                    let meta = self.meta(&args, annotation.is_some());
                    self.trace.comm_ops.push(CommOp { ts, end: ts + dur, pid, tid, annotation, meta });
                } else if is_profiler_step(name) {
                    let name = self.cap(name).into_owned();
                    self.trace.steps.push(Step { name, ts });
                } else {
                    if cat == "user_annotation" {
                        self.trace.moe_markers |= is_moe_marker(name);
                    }
                    self.keep_stream_op(e.args, ts, dur, name);
                }
            }
        }
        Ok(())
    }
}

impl Builder {
    /// Keeps a CPU event whose `args` carry a `stream` other than −1 (HTA's "no stream"), for
    /// HTA's rules. The arguments are parsed only when their text holds `"stream"`; arguments
    /// that do not parse are left alone, as for any event attribution does not read.
    fn keep_stream_op(&mut self, args: Option<Raw<'_>>, ts: Ns, dur: Ns, name: &str) {
        let Some(raw) = args.filter(|a| self.stream_key.find(a.get().as_bytes()).is_some()) else {
            return;
        };
        let Some(stream) = args_of(Some(raw), self.fast).ok().and_then(|a| a.stream).and_then(|v| lenient_i64(v.get()))
        else {
            return;
        };
        if stream != -1 {
            let name = self.intern(name);
            let op = Kernel::new(ts, dur, name, KernelCat::Kernel, stream, None);
            self.trace.stream_ops.push(op);
        }
    }
}

/// An event's `args`, through the fast path when `fast` and it has the common shape.
fn args_of(raw: Option<Raw<'_>>, fast: bool) -> Result<RawArgs<'_>, String> {
    match raw {
        None => Ok(RawArgs::default()),
        Some(raw) if raw.get() == "null" => Ok(RawArgs::default()),
        Some(raw) => match fast.then(|| flat_args(raw.get())).flatten() {
            Some(args) => Ok(args),
            None => {
                serde_json::from_str(raw.get()).map_err(|e| format!("`args`: {}", input::plain_message(&e.to_string())))
            }
        },
    }
}

/// [`RawArgs`] through the fast path ([`flat`]), when the object has its common shape.
fn flat_args(text: &str) -> Option<RawArgs<'_>> {
    flat_args_prefix(text.as_bytes()).filter(|&(_, used)| used == text.len()).map(|(a, _)| a)
}

/// [`RawArgs`] from the object at the start of `b`, with the bytes it used.
fn flat_args_prefix(b: &[u8]) -> Option<(RawArgs<'_>, usize)> {
    let mut a = RawArgs::default();
    let mut seen = Seen::default();
    let used = flat::object(b, |key, v| match key {
        "correlation" => seen.raw(0, v, &mut a.correlation),
        "stream" => seen.raw(1, v, &mut a.stream),
        "Collective name" => seen.text(2, v, &mut a.collective),
        "In msg nelems" => seen.raw(3, v, &mut a.in_nelems),
        "Out msg nelems" => seen.raw(4, v, &mut a.out_nelems),
        "dtype" => seen.text(5, v, &mut a.dtype),
        "Process Group Name" => seen.raw(6, v, &mut a.pg_name),
        "Seq" => seen.raw(7, v, &mut a.seq),
        "Group size" => seen.raw(8, v, &mut a.group_size),
        "Input Dims" => seen.raw(9, v, &mut a.input_dims),
        "Input type" => seen.raw(10, v, &mut a.input_type),
        _ => true,
    })?;
    Some((a, used))
}

/// [`RawEvent`] through the fast path, with the bytes it used, when the element at the start
/// of `b` has the common shape.
fn flat_event<'a>(b: &'a [u8]) -> Option<(RawEvent<'a>, usize)> {
    let mut e = RawEvent::default();
    let mut seen = Seen::default();
    let mut read_args = None;
    // `args` is read as the scanner meets it (a first `args`; a repeated one declines anyway).
    let nested = |key: &[u8], rest: &'a [u8]| {
        if key != b"args" || rest.first() != Some(&b'{') || read_args.is_some() {
            return Some(None);
        }
        Some(flat_args_prefix(rest).map(|(a, used)| {
            read_args = Some(a);
            used
        }))
    };
    let used = flat::object_with(b, nested, |key, v| match key {
        "ph" => seen.text(0, v, &mut e.ph),
        "cat" => seen.text(1, v, &mut e.cat),
        "name" => seen.text(2, v, &mut e.name),
        "ts" => seen.raw(3, v, &mut e.ts),
        "dur" => seen.raw(4, v, &mut e.dur),
        "pid" => seen.raw(5, v, &mut e.pid),
        "tid" => seen.raw(6, v, &mut e.tid),
        "args" => seen.raw(7, v, &mut e.args),
        _ => true,
    })?;
    e.read_args = read_args;
    Some((e, used))
}

/// The fields a fast-path object has set, so that a repeated one (an error serde names)
/// declines. Each setter stores the member as serde would (`null` is `None`) and returns false
/// to decline.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, bit: u32) -> bool {
        let fresh = self.0 & (1 << bit) == 0;
        self.0 |= 1 << bit;
        fresh
    }

    fn raw<'a>(&mut self, bit: u32, v: &'a str, slot: &mut Option<Raw<'a>>) -> bool {
        if !self.first(bit) {
            return false;
        }
        if v != "null" {
            *slot = Some(Raw(v));
        }
        true
    }

    fn text<'a>(&mut self, bit: u32, v: &'a str, slot: &mut Option<Text<'a>>) -> bool {
        if !self.first(bit) {
            return false;
        }
        match flat::text(v) {
            Some(t) => {
                *slot = t.map(|t| Text(Cow::Borrowed(t)));
                true
            }
            None => false,
        }
    }
}

/// Σ over inputs of ∏ dims × dtype size, for the inputs whose dtype is known; `None` when no
/// input has a known size.
fn shapes_bytes(dims: Option<Raw<'_>>, types: Option<Raw<'_>>) -> Option<u64> {
    let dims: Vec<serde_json::Value> = serde_json::from_str(dims?.get()).ok()?;
    let types: Vec<serde_json::Value> = serde_json::from_str(types?.get()).ok()?;
    let mut total: Option<u64> = None;
    for (d, t) in dims.iter().zip(&types) {
        let (Some(d), Some(size)) = (d.as_array(), t.as_str().and_then(dtype_size)) else {
            continue;
        };
        let mut n: u64 = 1;
        for x in d {
            n = n.saturating_mul(x.as_u64()?);
        }
        total = Some(total.unwrap_or(0).saturating_add(n.saturating_mul(size)));
    }
    total
}

/// A pid or tid: integers as they are, strings (some tools write names) hashed to a stable id.
fn id_of(v: Raw<'_>) -> i64 {
    let raw = v.get();
    if let Some(n) = lenient_i64(raw) {
        return n;
    }
    // FNV-1a: stable across runs and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in raw.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 2) as i64 | (1 << 61)
}

fn lenient_u64(raw: &str) -> Option<u64> {
    raw.trim_matches('"').parse().ok()
}

fn lenient_i64(raw: &str) -> Option<i64> {
    raw.trim_matches('"').parse().ok()
}

/// Raw JSON text fit for a one-line message: whitespace runs (newlines included) become one
/// space, and anything past 40 characters becomes `…`.
fn excerpt(raw: &str) -> String {
    let flat = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// Parses a JSON number of microseconds into exact nanoseconds: up to three decimals are exact,
/// further digits round half up; exponents go through f64. Returns whether a fraction was
/// present. Strings, `null` and non-finite values are errors.
pub fn parse_micros(raw_text: &str) -> Result<(Ns, bool), String> {
    // `raw` is only for messages: an object or a long string must not flood the one error line.
    let raw = || excerpt(raw_text);
    let raw_text = raw_text.trim();
    let bytes = raw_text.as_bytes();
    match bytes.first() {
        Some(b'"') => return Err(format!("is a string ({}); expected a number of microseconds", raw())),
        Some(b'-' | b'0'..=b'9') => {}
        _ => return Err(format!("is not a number ({})", raw())),
    }
    if raw_text.contains(['e', 'E']) {
        let v: f64 = raw_text.parse().map_err(|_| format!("is not a number ({})", raw()))?;
        let ns = v * 1000.0;
        if !ns.is_finite() || ns.abs() > 9.0e18 {
            return Err(format!("is out of range ({})", raw()));
        }
        return Ok((float_to_i64(ns.round()), ns.fract() != 0.0 || (v.fract() != 0.0)));
    }
    let (negative, digits) = match raw_text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, raw_text),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if int_part.is_empty()
        || !int_part.bytes().all(|c| c.is_ascii_digit())
        || !frac_part.bytes().all(|c| c.is_ascii_digit())
    {
        return Err(format!("is not a number ({})", raw()));
    }
    let whole: i64 = int_part.parse().map_err(|_| format!("is out of range ({})", raw()))?;
    let mut frac: i64 = 0;
    for (c, scale) in frac_part.bytes().zip([100, 10, 1]) {
        frac += i64::from(c - b'0') * scale;
    }
    if frac_part.as_bytes().get(3).is_some_and(|&c| c >= b'5') {
        frac += 1;
    }
    let ns = whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(frac))
        .ok_or_else(|| format!("is out of range ({})", raw()))?;
    let fractional = frac_part.bytes().any(|c| c != b'0');
    Ok((if negative { -ns } else { ns }, fractional))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(doc: &str) -> Result<Document, ReadError> {
        parse_document(doc.as_bytes())
    }

    fn rank(doc: &str) -> RankTrace {
        match parse(doc) {
            Ok(Document::Timeline(t)) => *t,
            other => panic!("expected a trace, got {other:?}"),
        }
    }

    #[test]
    fn micros_are_exact_nanoseconds() {
        assert_eq!(parse_micros("4458677009853.422"), Ok((4_458_677_009_853_422, true)));
        assert_eq!(parse_micros("12"), Ok((12_000, false)));
        assert_eq!(parse_micros("12.0"), Ok((12_000, false)));
        assert_eq!(parse_micros("0.0005"), Ok((1, true)));
        assert_eq!(parse_micros("-3.5"), Ok((-3_500, true)));
        assert_eq!(parse_micros("1.5e3"), Ok((1_500_000, false)));
        assert!(parse_micros("\"12\"").unwrap_err().contains("string"));
        assert!(parse_micros("null").is_err());
        assert!(parse_micros("99999999999999999999").unwrap_err().contains("out of range"));
        let e =
            parse_micros("{\n\"a\": 1,\n\"b\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}").unwrap_err();
        assert!(!e.contains('\n') && e.contains("{ \"a\": 1,") && e.contains('…'), "{e}");
    }

    #[test]
    fn keeps_kernels_launches_ops_and_steps_in_any_order() {
        let t = rank(
            r#"{"traceEvents": [
            {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":20,"ts":110.5,"dur":20,
             "args":{"correlation":7,"stream":20,"Collective name":"allreduce","In msg nelems":4,"Out msg nelems":4,"dtype":"Float","Process Group Name":"0","Seq":3}},
            {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":2,"ts":101,"dur":1,"args":{"correlation":7}},
            {"ph":"X","cat":"user_annotation","name":"nccl:all_reduce","pid":1,"tid":2,"ts":100,"dur":5,"args":{"Input Dims":[[4]],"Input type":["float"]}},
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#3","pid":1,"tid":1,"ts":50,"dur":500},
            {"ph":"X","cat":"gpu_user_annotation","name":"nccl:all_reduce","pid":0,"tid":20,"ts":110,"dur":30},
            {"ph":"M","name":"process_name","pid":0,"args":{"name":"GPU 0"}},
            {"ph":"f","id":7,"pid":0,"tid":20,"ts":110,"cat":"ac2g","name":"ac2g"}
            ], "distributedInfo": {"rank": 3, "world_size": 8}, "baseTimeNanoseconds": 1700000000000000000}"#,
        );
        assert_eq!(t.rank, Some(3));
        assert_eq!(t.world_size, Some(8));
        assert_eq!(t.base_time_ns, Some(1_700_000_000_000_000_000));
        assert_eq!(t.num_events, 7);
        assert!(t.fractional_ts);
        assert_eq!(t.kernels.len(), 1);
        let k = &t.kernels[0];
        assert_eq!((k.ts, k.dur, k.stream, k.correlation()), (110_500, 20_000, 20, Some(7)));
        let meta = k.meta.as_deref().expect("metadata");
        assert_eq!(meta.seq, Some(3));
        assert_eq!(meta.pg_name.as_deref(), Some("0"));
        assert_eq!(t.launches.get(&7).map(|l| l.ts), Some(101_000));
        assert_eq!(t.comm_ops.len(), 1);
        assert_eq!(t.comm_ops[0].meta.shapes_bytes, Some(16));
        assert_eq!(t.gpu_annotations.len(), 1);
        assert_eq!(t.steps, vec![Step { name: "ProfilerStep#3".into(), ts: 50_000 }]);
    }

    /// Aggregated events without `collective` are malformed aggregated-events input, named, not an empty trace.
    #[test]
    fn seed_events_without_a_collective_are_refused_as_seed_input() {
        for doc in [
            r#"[{"exposed_comm_ms": 5.0, "payload_bytes": 1024, "overlap_ratio": 0.5}]"#,
            r#"[{"collective": "all_reduce", "exposed_comm_ms": 1, "payload_bytes": 1, "overlap_ratio": 0.5}, {"exposed_comm_ms": 5.0, "payload_bytes": 1, "overlap_ratio": 0.5}]"#,
            r#"{"events": [{"exposed_comm_ms": 5.0, "payload_bytes": 1024, "overlap_ratio": 0.5}]}"#,
        ] {
            let e = parse(doc).expect_err(doc).to_string();
            assert!(e.contains("`collective` is missing") && e.contains("events["), "{doc}: {e}");
        }
        // A bare array of trace events is still a trace.
        let trace = r#"[{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,"ts":1,"dur":2}]"#;
        assert!(matches!(parse(trace), Ok(Document::Timeline(_))));
    }

    #[test]
    fn seed_documents_are_recognised() {
        let doc = r#"[{"collective":"all_reduce","exposed_comm_ms":8.0,"payload_bytes":1024,"overlap_ratio":0.6}]"#;
        assert!(matches!(parse(doc), Ok(Document::Events(e)) if e.len() == 1));
        let doc =
            r#"{"events":[{"collective":"broadcast","exposed_comm_ms":2.0,"payload_bytes":512,"overlap_ratio":0.9}]}"#;
        assert!(matches!(parse(doc), Ok(Document::Events(e)) if e[0].collective == "broadcast"));
    }

    #[test]
    fn bad_fields_name_the_event_and_field() {
        let err = |doc: &str| match parse(doc) {
            Err(e) => e.to_string(),
            Ok(d) => panic!("expected an error, got {d:?}"),
        };
        let e = err(r#"{"traceEvents":[{"ph":"X","ts":1,"dur":"5"}]}"#);
        assert!(e.contains("traceEvents[0]") && e.contains("`dur` is a string"), "{e}");
        let e = err(r#"{"traceEvents":[{"ph":"X","ts":1,"dur":1},{"ph":"X","ts":1,"dur":-5}]}"#);
        assert!(e.contains("traceEvents[1]") && e.contains("negative"), "{e}");
        assert!(err(r#"{"schemaVersion":1}"#).contains("traceEvents"));
        assert!(err("").contains("empty"));
        assert!(err(r#"{"traceEvents":[{"ph":"X","ts":1,"dur":1}"#).contains("truncated"));
        assert!(err("\u{1}\u{2}garbage").contains("expected a JSON object"));
        assert!(err(r#"{"traceEvents":[]} {"traceEvents":[]}"#).contains("after the end"));
        let e = err(r#"{"traceEvents":[{"ph":"X","ts":9000000000000000,"dur":9000000000000000}]}"#);
        assert!(e.contains("`ts` is out of range"), "{e}");
        assert!(err(r#"{"traceEvents":[{"ph":"X","ts":1,"dur":3e15}]}"#).contains("`dur` is out of range"));
    }
}
