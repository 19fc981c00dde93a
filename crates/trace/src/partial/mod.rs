//! Partial attributions: a job's traces are attributed where they are. Each node reduces its own
//! ranks to a partial file (`commgate attribute --partial OUT`), and one combine reads the
//! partial files into the attribution that reading every trace on one machine gives, figure for
//! figure.
//!
//! A partial holds, per rank, exactly what cross-rank attribution starts from (the rank's
//! [`RankAnalysis`]): its totals and step lengths, each collective's swept times, and every
//! communication kernel's identity (start, duration, payload, match key, step), from which the
//! matched instances give transfer, wait, imbalance and the last-arriving rank. Fractional
//! nanoseconds are written as exact decimal text, so nothing is rounded on the way.
//!
//! The file is JSON (gzip when its name ends in `.gz`) whose first key names it and its version
//! (`{"commgate_partial":1,…`): that is how it is told from a trace. It is read like any other
//! untrusted input: bounded in size, every field checked before attribution uses it, one line
//! that names what is wrong.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::attribute::series::MAX_STEP_SAMPLES;
use super::attribute::timeline::{Seg, StepTimeline, MAX_REPLAYED_STEPS};
use super::attribute::{AttributeOptions, CommKernel, Compat, MatchKey, RankAnalysis, RankCollective, MAX_LOOKALIKES};
use super::limits::{ReadLimits, MAX_ABS_NS, MAX_DISTINCT_COLLECTIVES, MAX_NAME_BYTES, TRUNCATION_MARK};
use super::model::Ns;
use super::narrow::saturating_u32;
use commgate_core::result::field_error;

mod agree;

/// The version this commgate writes and reads.
pub const VERSION: u32 = 1;

/// How every partial file begins: its first key.
const MARKER: &[u8] = b"{\"commgate_partial\":";

/// Bytes of (decompressed) partial file allowed per event of the read limit: a communication
/// kernel takes about 40 bytes, and a partial holds far fewer kernels than its traces' events.
const BYTES_PER_EVENT: u64 = 64;

/// The longest file name kept for a rank (a path on the node that wrote the partial).
const MAX_FILE_BYTES: usize = 4096;

/// One rank as cross-rank attribution takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducedRank {
    pub analysis: RankAnalysis,
    /// At most two of the rank's distinct `ProfilerStep` names, ascending: enough to tell
    /// whether the job as a whole has two or more (which decides the HTA window).
    pub step_names: Vec<String>,
    /// Under `--compat hta`, for a rank with fewer than two step names: its analysis as if the
    /// job had two or more (what a combine needs when other ranks have them; a trace would be
    /// read again instead).
    pub other: Option<RankAnalysis>,
}

/// The settings that shape a rank's analysis. A partial records them; a combine must run with
/// the same, or its figures would mix two definitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub compat: Compat,
    /// The `--steps` setting (it only matters for traces without step markers).
    pub steps: Option<u64>,
    /// The `--comm-pattern`s, as written (`NAME=SUBSTRING` or `SUBSTRING`), in order.
    pub comm_patterns: Vec<String>,
}

impl Settings {
    pub fn of(opts: &AttributeOptions) -> Self {
        Settings {
            compat: opts.compat,
            steps: opts.steps.as_ref().map(|s| s.count),
            comm_patterns: opts
                .comm_patterns
                .iter()
                .map(|p| match &p.row {
                    Some(row) => format!("{row}={}", p.substring),
                    None => p.substring.clone(),
                })
                .collect(),
        }
    }

    /// The first setting in which this partial's (`self`) differs from the run's, worded for the
    /// user; `None` when they agree.
    pub fn mismatch(&self, run: &Settings) -> Option<String> {
        let steps = |s: Option<u64>| s.map_or_else(|| "none".to_string(), |n| n.to_string());
        let compat = |c: Compat| match c {
            Compat::Default => "default",
            Compat::Hta => "hta",
        };
        if self.compat != run.compat {
            Some(format!("--compat {} (this run: --compat {})", compat(self.compat), compat(run.compat)))
        } else if self.steps != run.steps {
            Some(format!("steps {} (this run: steps {})", steps(self.steps), steps(run.steps)))
        } else if self.comm_patterns != run.comm_patterns {
            let list = |p: &[String]| if p.is_empty() { "none".to_string() } else { p.join(", ") };
            Some(format!("comm patterns {} (this run: {})", list(&self.comm_patterns), list(&run.comm_patterns)))
        } else {
            None
        }
    }
}

/// A partial file's content.
#[derive(Debug, Clone, PartialEq)]
pub struct Partial {
    /// The traces' format: `None` for Kineto JSON, else the attribution's `source.format`.
    pub format: Option<String>,
    pub settings: Settings,
    /// Sorted by rank.
    pub ranks: Vec<ReducedRank>,
}

/// Why a partial file cannot be combined. Each reads after the file name.
#[derive(Debug, thiserror::Error)]
pub enum PartialError {
    #[error(
        "is a commgate partial file of version {0}, which this commgate reads only at version {VERSION}; \
         combine partial files with the commgate version that wrote them"
    )]
    Version(u64),
    #[error(
        "is larger than {limit} bytes, the most a partial file may hold at {max_events} events per file; \
         raise the limit with --max-events N if the file is genuine"
    )]
    TooLarge { limit: u64, max_events: u64 },
    #[error("cannot be read: {0}")]
    Io(std::io::Error),
    #[error("is a damaged commgate partial file ({0}); write it again with `commgate attribute --partial`")]
    Damaged(String),
    #[error("was written with {0}; combine with the settings the partial files were written with")]
    Settings(String),
}

/// Whether a file's first line makes it a partial file (leading blanks aside).
pub fn is_partial(first_line: &[u8]) -> bool {
    first_line.trim_ascii_start().starts_with(MARKER)
}

/// The partial file's JSON text.
pub fn to_json(p: &Partial) -> Vec<u8> {
    let wire = Wire {
        commgate_partial: u64::from(VERSION),
        written_by: format!("commgate {}", env!("CARGO_PKG_VERSION")),
        format: p.format.clone().unwrap_or_else(|| KINETO.to_string()),
        settings: p.settings.clone(),
        ranks: p
            .ranks
            .iter()
            .map(|r| WireRank {
                step_names: r.step_names.clone(),
                analysis: WireAnalysis::of(&r.analysis),
                other: r.other.as_ref().map(WireAnalysis::of),
            })
            .collect(),
    };
    // Serializing plain data to memory cannot fail.
    serde_json::to_vec(&wire).unwrap_or_default()
}

/// The partial file's bytes: its JSON, gzip-compressed when `gzip`.
pub fn encode(p: &Partial, gzip: bool) -> Vec<u8> {
    let json = to_json(p);
    if !gzip {
        return json;
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(json.len() / 4), flate2::Compression::fast());
    // Writing to memory cannot fail.
    let _ = std::io::Write::write_all(&mut encoder, &json);
    encoder.finish().unwrap_or_default()
}

/// The ranks a partial holds, for the line that reports it written: `ranks 0-7 of 16`.
pub fn describe(p: &Partial) -> String {
    let ranks: Vec<u32> = p.ranks.iter().map(|r| r.analysis.rank).collect();
    let world = p.ranks.iter().filter_map(|r| r.analysis.world_size).max();
    super::caveats::RankCoverage::new(&ranks, world).held()
}

/// Reads a partial file (its decompressed bytes) under `limits`, checking every field.
pub fn read(mut reader: impl Read, limits: ReadLimits) -> Result<Partial, PartialError> {
    let limit = limits.max_events.saturating_mul(BYTES_PER_EVENT);
    let mut bytes = Vec::new();
    (&mut reader).take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(PartialError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(PartialError::TooLarge { limit, max_events: limits.max_events });
    }
    let version = version_of(&bytes)?;
    if version != u64::from(VERSION) {
        return Err(PartialError::Version(version));
    }
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    let wire: Wire = serde_path_to_error::deserialize(de).map_err(|e| PartialError::Damaged(field_error(&e)))?;
    drop(bytes);
    wire.into_partial(limits).map_err(PartialError::Damaged)
}

/// The version the first key states, read before the rest so that a newer file is named as one
/// rather than as damaged.
fn version_of(bytes: &[u8]) -> Result<u64, PartialError> {
    let rest = bytes
        .trim_ascii_start()
        .strip_prefix(MARKER)
        .ok_or_else(|| PartialError::Damaged("it does not begin with `{\"commgate_partial\":`".to_string()))?;
    let digits = rest.trim_ascii_start().split(|b| !b.is_ascii_digit()).next().unwrap_or_default();
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| PartialError::Damaged("`commgate_partial` is not a version number".to_string()))
}

/// The format name a Kineto partial records (`None` in [`Partial::format`]).
pub(crate) const KINETO: &str = "kineto";

/// The windows an analysis may name.
const WINDOWS: [&str; 3] = ["steps", "trace", "hta"];

// ---------------------------------------------------------------------------------------------
// The file's shape. Kernels are held in columns (one array per field) so that a million of
// them cost a few tens of megabytes of JSON and compress well.

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    commgate_partial: u64,
    /// Which commgate wrote the file (for whoever opens it; not checked).
    written_by: String,
    format: String,
    settings: Settings,
    ranks: Vec<WireRank>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRank {
    step_names: Vec<String>,
    analysis: WireAnalysis,
    other: Option<WireAnalysis>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireAnalysis {
    rank: u32,
    file: String,
    steps: u64,
    steps_from_markers: bool,
    window: String,
    comm_ns: Ns,
    compute_ns: Ns,
    overlapped_ns: Ns,
    base_time_ns: Option<i64>,
    world_size: Option<u32>,
    num_events: u64,
    names_truncated: bool,
    collectives_folded: u64,
    samples: u64,
    step_ns: Vec<Ns>,
    no_compute: bool,
    unlaunched_left_out: u64,
    moe_markers: bool,
    /// The look-alike families of a rank without communication kernels (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    comm_lookalikes: Vec<(String, Ns)>,
    collectives: Vec<WireCollective>,
    kernels: WireKernels,
    /// The kept steps for what-if replay (absent in files written before it existed: their
    /// combine replays nothing).
    #[serde(default)]
    timeline: Vec<WireStep>,
}

/// One kept step: its segments as (stream, start, end, communication kernel) and its
/// dependencies as index pairs into them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireStep {
    step: u32,
    segs: Vec<(i64, Ns, Ns, Option<u32>)>,
    deps: Vec<(u32, u32)>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCollective {
    name: String,
    kernels: u64,
    total_ns: Exact,
    exposed_ns: Exact,
    payload_bytes: u64,
    payload_known: bool,
    exposed_by_step: Vec<(u32, Exact)>,
}

/// The rank's communication kernels, one array per field, all of one length. `texts` holds the
/// collective and process-group names once each; the other columns index into it.
#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WireKernels {
    texts: Vec<String>,
    /// Each kernel's start minus the previous kernel's (the first's minus zero).
    ts_delta: Vec<i64>,
    /// `end - ts`.
    dur: Vec<i64>,
    collective: Vec<u32>,
    payload: Vec<Option<u64>>,
    step: Vec<u32>,
    group_size: Vec<Option<u32>>,
    /// The match key: its process group, its collective (`null` for a (group, `Seq`) key), and
    /// its number (the `Seq`, or the kernel's ordinal).
    key_pg: Vec<u32>,
    key_collective: Vec<Option<u32>>,
    key_n: Vec<u64>,
}

/// A float written as the shortest decimal text that reads back to the same bits.
#[derive(Debug, Clone, Copy)]
struct Exact(f64);

impl Serialize for Exact {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Exact(v)),
            _ => Err(serde::de::Error::custom(format!(
                "`{}` is not a finite number",
                text.chars().take(40).collect::<String>()
            ))),
        }
    }
}

impl WireAnalysis {
    fn of(a: &RankAnalysis) -> Self {
        WireAnalysis {
            rank: a.rank,
            file: a.file.clone(),
            steps: a.steps,
            steps_from_markers: a.steps_from_markers,
            window: a.window.to_string(),
            comm_ns: a.comm_ns,
            compute_ns: a.compute_ns,
            overlapped_ns: a.overlapped_ns,
            base_time_ns: a.base_time_ns,
            world_size: a.world_size,
            num_events: a.num_events,
            names_truncated: a.names_truncated,
            collectives_folded: a.collectives_folded,
            samples: a.samples,
            step_ns: a.step_ns.clone(),
            no_compute: a.no_compute,
            unlaunched_left_out: a.unlaunched_left_out,
            moe_markers: a.moe_markers,
            comm_lookalikes: a.comm_lookalikes.clone(),
            collectives: a
                .by_collective
                .iter()
                .map(|(name, c)| WireCollective {
                    name: name.clone(),
                    kernels: c.kernels,
                    total_ns: Exact(c.total_ns),
                    exposed_ns: Exact(c.exposed_ns),
                    payload_bytes: c.payload_bytes,
                    payload_known: c.payload_known,
                    exposed_by_step: c.exposed_by_step.iter().map(|&(s, ns)| (s, Exact(ns))).collect(),
                })
                .collect(),
            kernels: WireKernels::of(&a.comm_kernels),
            timeline: a
                .timeline
                .iter()
                .map(|t| WireStep {
                    step: t.step,
                    segs: t.segs.iter().map(|s| (s.stream, s.start, s.end, s.comm)).collect(),
                    deps: t.deps.clone(),
                })
                .collect(),
        }
    }
}

impl WireKernels {
    fn of(kernels: &[CommKernel]) -> Self {
        let mut w = WireKernels::default();
        let mut texts = Texts::default();
        let mut previous: Ns = 0;
        for k in kernels {
            w.ts_delta.push(k.ts.wrapping_sub(previous));
            previous = k.ts;
            w.dur.push(k.end - k.ts);
            w.collective.push(texts.id(&k.collective));
            w.payload.push(k.payload);
            w.step.push(k.step);
            w.group_size.push(k.group_size);
            let (pg, collective, n) = match &k.key {
                MatchKey::Seq { pg, seq } => (pg, None, *seq),
                MatchKey::Ordinal { pg, collective, ordinal } => (pg, Some(collective), *ordinal),
            };
            w.key_pg.push(texts.id(pg));
            w.key_collective.push(collective.map(|c| texts.id(c)));
            w.key_n.push(n);
        }
        w.texts = texts.texts;
        w
    }
}

/// Each distinct name once, in order of first use.
#[derive(Default)]
struct Texts<'a> {
    ids: HashMap<&'a str, u32>,
    texts: Vec<String>,
}

impl<'a> Texts<'a> {
    fn id(&mut self, s: &'a str) -> u32 {
        let next = saturating_u32(self.texts.len());
        *self.ids.entry(s).or_insert_with(|| {
            self.texts.push(s.to_string());
            next
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Reading back: every field checked, so that attribution meets only values a trace could give.

impl Wire {
    fn into_partial(self, limits: ReadLimits) -> Result<Partial, String> {
        check_text("format", &self.format, MAX_NAME_BYTES)?;
        // Which formats commgate writes is the loader's to check (`load::known_format`).
        let format = (self.format != KINETO).then_some(self.format);
        for p in &self.settings.comm_patterns {
            check_text("settings.comm_patterns", p, MAX_NAME_BYTES)?;
        }
        let mut kernels_left = limits.max_events;
        let mut ranks = Vec::with_capacity(self.ranks.len());
        for r in self.ranks {
            let rank = r.analysis.rank;
            let at = |e: String| format!("rank {rank}: {e}");
            if r.step_names.len() > 2 {
                return Err(at("`step_names` holds more than two names".to_string()));
            }
            for name in &r.step_names {
                check_text("step_names", name, MAX_NAME_BYTES).map_err(at)?;
            }
            let analysis = r.analysis.into_analysis(&mut kernels_left).map_err(at)?;
            agree::analysis(&analysis, &self.settings).map_err(at)?;
            let other = match r.other {
                Some(o) if o.rank != rank => return Err(at(format!("`other` is rank {}", o.rank))),
                Some(o) => {
                    let o = o.into_analysis(&mut kernels_left).map_err(|e| at(format!("other: {e}")))?;
                    agree::analysis(&o, &self.settings).map_err(|e| at(format!("other: {e}")))?;
                    Some(o)
                }
                None => None,
            };
            ranks.push(ReducedRank { analysis, step_names: r.step_names, other });
        }
        ranks.sort_by_key(|r| r.analysis.rank);
        if let Some((r, _)) = ranks.iter().zip(ranks.iter().skip(1)).find(|(a, b)| a.analysis.rank == b.analysis.rank) {
            return Err(format!("rank {} appears twice", r.analysis.rank));
        }
        Ok(Partial { format, settings: self.settings, ranks })
    }
}

fn check_text(field: &str, s: &str, max: usize) -> Result<(), String> {
    if s.len() > max + TRUNCATION_MARK.len() {
        return Err(format!("`{field}` is longer than {max} bytes"));
    }
    Ok(())
}

/// A time (ns) kept as a float: within ±2^61 ns, as the integer times are (under `--compat hta`
/// a collective's time can be negative, as HTA's own spans are).
fn check_time(field: &str, ns: f64) -> Result<(), String> {
    if (-(MAX_ABS_NS as f64)..=MAX_ABS_NS as f64).contains(&ns) {
        Ok(())
    } else {
        let shown = if ns.abs() < 1e15 { format!("{ns}") } else { format!("{ns:e}") };
        Err(format!("`{field}` is {shown}, outside ±2^61 ns"))
    }
}

fn check_ns(field: &str, ns: Ns) -> Result<Ns, String> {
    if (0..=MAX_ABS_NS).contains(&ns) {
        Ok(ns)
    } else {
        Err(format!("`{field}` is {ns}, outside 0..=2^61 ns"))
    }
}

impl WireAnalysis {
    fn into_analysis(self, kernels_left: &mut u64) -> Result<RankAnalysis, String> {
        check_text("file", &self.file, MAX_FILE_BYTES)?;
        let window = WINDOWS
            .into_iter()
            .find(|w| *w == self.window)
            .ok_or_else(|| format!("`window` is not one of {}", WINDOWS.join(", ")))?;
        if self.steps == 0 || self.samples == 0 {
            return Err("`steps` and `samples` must be at least 1".to_string());
        }
        if self.step_ns.len() > MAX_STEP_SAMPLES {
            return Err(format!("`step_ns` holds more than {MAX_STEP_SAMPLES} steps"));
        }
        for &ns in &self.step_ns {
            check_ns("step_ns", ns)?;
        }
        if self.collectives.len() > MAX_DISTINCT_COLLECTIVES + 1 {
            return Err(format!("more than {} collectives", MAX_DISTINCT_COLLECTIVES + 1));
        }
        let mut by_collective = BTreeMap::new();
        for c in self.collectives {
            check_text("collectives.name", &c.name, MAX_NAME_BYTES)?;
            if c.exposed_by_step.len() > MAX_STEP_SAMPLES {
                return Err(format!("collective `{}`: more than {MAX_STEP_SAMPLES} steps", c.name.escape_debug()));
            }
            let named = |e: String| format!("collective `{}`: {e}", c.name.escape_debug());
            for (field, v) in [("total_ns", c.total_ns.0), ("exposed_ns", c.exposed_ns.0)]
                .into_iter()
                .chain(c.exposed_by_step.iter().map(|(_, v)| ("exposed_by_step", v.0)))
            {
                check_time(field, v).map_err(named)?;
            }
            let collective = RankCollective {
                kernels: c.kernels,
                total_ns: c.total_ns.0,
                exposed_ns: c.exposed_ns.0,
                payload_bytes: c.payload_bytes,
                payload_known: c.payload_known,
                exposed_by_step: c.exposed_by_step.into_iter().map(|(s, ns)| (s, ns.0)).collect(),
            };
            if by_collective.insert(c.name, collective).is_some() {
                return Err("a collective appears twice".to_string());
            }
        }
        let comm_ns = check_ns("comm_ns", self.comm_ns)?;
        let compute_ns = check_ns("compute_ns", self.compute_ns)?;
        let overlapped_ns = check_ns("overlapped_ns", self.overlapped_ns)?;
        let comm_kernels = self.kernels.into_kernels(kernels_left)?;
        let timeline = into_timeline(self.timeline, comm_kernels.len(), kernels_left)?;
        if self.comm_lookalikes.len() > MAX_LOOKALIKES {
            return Err(format!("`comm_lookalikes` holds more than {MAX_LOOKALIKES} families"));
        }
        if !self.comm_lookalikes.is_empty() && !comm_kernels.is_empty() {
            return Err("`comm_lookalikes` is only for a rank without communication kernels".to_string());
        }
        for (family, ns) in &self.comm_lookalikes {
            check_text("comm_lookalikes", family, MAX_NAME_BYTES)?;
            check_ns("comm_lookalikes", *ns)?;
        }
        Ok(RankAnalysis {
            rank: self.rank,
            file: self.file,
            steps: self.steps,
            steps_from_markers: self.steps_from_markers,
            window,
            comm_ns,
            compute_ns,
            overlapped_ns,
            comm_kernels,
            by_collective,
            base_time_ns: self.base_time_ns,
            world_size: self.world_size,
            num_events: self.num_events,
            names_truncated: self.names_truncated,
            collectives_folded: self.collectives_folded,
            samples: self.samples,
            step_ns: self.step_ns,
            no_compute: self.no_compute,
            timeline,
            unlaunched_left_out: self.unlaunched_left_out,
            moe_markers: self.moe_markers,
            comm_lookalikes: self.comm_lookalikes,
        })
    }
}

/// The kept steps, each segment and dependency checked: a start and an end within ±2^61 ns,
/// end after start, a communication kernel that exists, dependencies between segments of the
/// step, at most [`MAX_REPLAYED_STEPS`] steps, and the segments counted against the events limit.
fn into_timeline(steps: Vec<WireStep>, kernels: usize, left: &mut u64) -> Result<Vec<StepTimeline>, String> {
    if steps.len() as u64 > MAX_REPLAYED_STEPS {
        return Err(format!("`timeline` holds more than {MAX_REPLAYED_STEPS} steps"));
    }
    let mut out = Vec::with_capacity(steps.len());
    for w in steps {
        let at = |e: String| format!("timeline step {}: {e}", w.step);
        *left = left
            .checked_sub((w.segs.len() + w.deps.len()) as u64)
            .ok_or_else(|| "it holds more segments than the events limit per file".to_string())?;
        let mut segs = Vec::with_capacity(w.segs.len());
        for (i, &(stream, start, end, comm)) in w.segs.iter().enumerate() {
            let inside = |t: Ns| (-MAX_ABS_NS..=MAX_ABS_NS).contains(&t);
            if !inside(start) || !inside(end) || end < start {
                return Err(at(format!("segment {i} does not run forward within ±2^61 ns")));
            }
            if comm.is_some_and(|c| c as usize >= kernels) {
                return Err(at(format!("segment {i} names a communication kernel past `kernels`")));
            }
            segs.push(Seg { stream, start, end, comm });
        }
        if let Some(&(a, b)) = w.deps.iter().find(|&&(a, b)| a as usize >= segs.len() || b as usize >= segs.len()) {
            return Err(at(format!("dependency ({a}, {b}) names a segment past `segs`")));
        }
        out.push(StepTimeline { step: w.step, segs, deps: w.deps });
    }
    Ok(out)
}

impl WireKernels {
    fn into_kernels(self, kernels_left: &mut u64) -> Result<Vec<CommKernel>, String> {
        let n = self.ts_delta.len();
        let lengths = [
            ("dur", self.dur.len()),
            ("collective", self.collective.len()),
            ("payload", self.payload.len()),
            ("step", self.step.len()),
            ("group_size", self.group_size.len()),
            ("key_pg", self.key_pg.len()),
            ("key_collective", self.key_collective.len()),
            ("key_n", self.key_n.len()),
        ];
        if let Some((field, len)) = lengths.iter().find(|(_, len)| *len != n) {
            return Err(format!("`kernels.{field}` holds {len} entries, `kernels.ts_delta` {n}"));
        }
        *kernels_left = kernels_left
            .checked_sub(n as u64)
            .ok_or_else(|| "it holds more kernels than the events limit per file".to_string())?;
        for t in &self.texts {
            check_text("kernels.texts", t, MAX_NAME_BYTES)?;
        }
        let texts: Vec<Arc<str>> = self.texts.iter().map(|t| Arc::from(t.as_str())).collect();
        let text = |field: &str, i: u32| {
            texts.get(i as usize).cloned().ok_or_else(|| format!("`kernels.{field}` names text {i}, past `texts`"))
        };
        let mut kernels = Vec::with_capacity(n);
        let mut ts: Ns = 0;
        // The columns are all `n` long (checked above), so this reads every kernel.
        for (i, k) in (0..n).map_while(|i| self.row(i)).enumerate() {
            ts = ts
                .checked_add(k.ts_delta)
                .filter(|t| (-MAX_ABS_NS..=MAX_ABS_NS).contains(t))
                .ok_or_else(|| format!("kernel {i}: its start is outside ±2^61 ns"))?;
            if !(-MAX_ABS_NS..=MAX_ABS_NS).contains(&k.dur) {
                return Err(format!("kernel {i}: `dur` is outside ±2^61 ns"));
            }
            let pg = text("key_pg", k.key_pg)?;
            let key = match k.key_collective {
                None => MatchKey::Seq { pg, seq: k.key_n },
                Some(c) => MatchKey::Ordinal { pg, collective: text("key_collective", c)?, ordinal: k.key_n },
            };
            kernels.push(CommKernel {
                ts,
                end: ts + k.dur,
                collective: text("collective", k.collective)?,
                payload: k.payload,
                key,
                step: k.step,
                group_size: k.group_size,
            });
        }
        Ok(kernels)
    }

    /// Kernel `i`'s entry in each column; `None` past the end of any.
    fn row(&self, i: usize) -> Option<WireKernel> {
        Some(WireKernel {
            ts_delta: *self.ts_delta.get(i)?,
            dur: *self.dur.get(i)?,
            collective: *self.collective.get(i)?,
            payload: *self.payload.get(i)?,
            step: *self.step.get(i)?,
            group_size: *self.group_size.get(i)?,
            key_pg: *self.key_pg.get(i)?,
            key_collective: *self.key_collective.get(i)?,
            key_n: *self.key_n.get(i)?,
        })
    }
}

/// One kernel of [`WireKernels`]: its entry in each column.
struct WireKernel {
    ts_delta: i64,
    dur: i64,
    collective: u32,
    payload: Option<u64>,
    step: u32,
    group_size: Option<u32>,
    key_pg: u32,
    key_collective: Option<u32>,
    key_n: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::CommPattern;

    fn kernel(ts: Ns, dur: Ns, collective: &str, key: MatchKey) -> CommKernel {
        CommKernel {
            ts,
            end: ts + dur,
            collective: Arc::from(collective),
            payload: Some(1 << 20),
            key,
            step: 0,
            group_size: Some(8),
        }
    }

    fn analysis(rank: u32) -> RankAnalysis {
        let pg: Arc<str> = Arc::from("0");
        let mut by_collective = BTreeMap::new();
        by_collective.insert(
            "all_reduce".to_string(),
            RankCollective {
                kernels: 2,
                total_ns: 1234.5,
                exposed_ns: 0.1 + 0.2,
                payload_bytes: 2 << 20,
                payload_known: true,
                exposed_by_step: vec![(0, 1.0 / 3.0), (1, 2.5)],
            },
        );
        RankAnalysis {
            rank,
            file: "traces/rank-\u{1b}[31m.json".to_string(),
            steps: 2,
            steps_from_markers: true,
            window: "steps",
            comm_ns: 1_700,
            compute_ns: 9_000,
            overlapped_ns: 1_000,
            comm_kernels: vec![
                kernel(1_700_000_000_000_000_000, 700, "all_reduce", MatchKey::Seq { pg: pg.clone(), seq: 1 }),
                CommKernel {
                    step: 1,
                    ..kernel(
                        1_699_999_999_999_999_000,
                        1_000,
                        "all_reduce",
                        MatchKey::Ordinal { pg, collective: Arc::from("all_reduce"), ordinal: 7 },
                    )
                },
            ],
            by_collective,
            base_time_ns: Some(-5),
            world_size: Some(16),
            num_events: 99,
            names_truncated: false,
            collectives_folded: 0,
            samples: 2,
            step_ns: vec![10, 20],
            no_compute: false,
            timeline: Vec::new(),
            unlaunched_left_out: 3,
            moe_markers: true,
            comm_lookalikes: Vec::new(),
        }
    }

    fn partial() -> Partial {
        let opts = AttributeOptions {
            comm_patterns: vec![CommPattern::parse("dispatch=deep_ep").unwrap()],
            ..AttributeOptions::default()
        };
        Partial {
            format: None,
            settings: Settings::of(&opts),
            ranks: vec![
                ReducedRank {
                    analysis: analysis(0),
                    step_names: vec!["ProfilerStep#1".into()],
                    other: Some(analysis(0)),
                },
                ReducedRank { analysis: analysis(3), step_names: vec![], other: None },
            ],
        }
    }

    fn read_back(bytes: &[u8]) -> Result<Partial, PartialError> {
        read(bytes, ReadLimits::default())
    }

    #[test]
    fn a_partial_reads_back_exactly_as_written() {
        let p = partial();
        let json = to_json(&p);
        assert!(is_partial(&json));
        assert_eq!(read_back(&json).unwrap(), p);
    }

    #[test]
    fn settings_that_differ_are_named() {
        let a = Settings { compat: Compat::Default, steps: None, comm_patterns: vec![] };
        assert_eq!(a.mismatch(&a.clone()), None);
        let hta = Settings { compat: Compat::Hta, ..a.clone() };
        assert_eq!(hta.mismatch(&a).unwrap(), "--compat hta (this run: --compat default)");
        let steps = Settings { steps: Some(4), ..a.clone() };
        assert_eq!(steps.mismatch(&a).unwrap(), "steps 4 (this run: steps none)");
        let patterns = Settings { comm_patterns: vec!["x=y".into()], ..a.clone() };
        assert_eq!(patterns.mismatch(&a).unwrap(), "comm patterns x=y (this run: none)");
    }

    #[test]
    fn a_newer_version_is_named_before_anything_else_is_read() {
        let err = read_back(b"{\"commgate_partial\": 2, \"anything\": [").unwrap_err();
        assert!(matches!(err, PartialError::Version(2)), "{err}");
        assert!(err.to_string().contains("version 2"), "{err}");
    }

    #[test]
    fn damaged_fields_are_named_and_never_reach_attribution() {
        let json = String::from_utf8(to_json(&partial())).unwrap();
        let cases = [
            (json.replacen("\"dur\":[700,", "\"dur\":[700,1,", 1), "`kernels.dur` holds 3 entries"),
            (json.replacen("\"collective\":[0,0]", "\"collective\":[0,9]", 1), "past `texts`"),
            (json.replacen("\"window\":\"steps\"", "\"window\":\"all\"", 1), "`window`"),
            (json.replacen("\"steps\":2,", "\"steps\":0,", 1), "at least 1"),
            (json.replacen("\"comm_ns\":1700", "\"comm_ns\":-1", 1), "`comm_ns` is -1"),
            (json.replacen("\"comm_ns\":1700", "\"comm_ns\":1800", 1), "`comm_ns` is 1800 but the communication"),
            (json.replacen("\"step\":[0,1]", "\"step\":[0,9]", 1), "kernel 1 is in step 9 of 2 step windows"),
            (json.replacen("\"kernels\":2,", "\"kernels\":3,", 1), "says 3 kernels moving 2097152 bytes"),
            (
                json.replacen("\"exposed_ns\":\"0.30000000000000004\"", "\"exposed_ns\":\"1000\"", 1),
                "`exposed_by_step` adds up to 2.8333333333333335 ns, less than `exposed_ns` (1000)",
            ),
            (json.replacen("\"total_ns\":\"1234.5\"", "\"total_ns\":\"NaN\"", 1), "not a finite number"),
            (json.replacen("\"ts_delta\":[1700000000000000000", "\"ts_delta\":[9223372036854775807", 1), "outside"),
            (json.replacen("\"rank\":3", "\"rank\":0", 2), "rank 0 appears twice"),
            (
                json.replacen("\"exposed_ns\":\"0.30000000000000004\"", "\"exposed_ns\":\"-5\"", 1),
                "a time of -5 ns, below 0",
            ),
            (json.replacen("\"total_ns\":\"1234.5\"", "\"total_ns\":\"1e308\"", 1), "`total_ns` is 1e308"),
            (
                json.replacen("\"exposed_ns\":\"0.30000000000000004\"", "\"exposed_ns\":\"5000\"", 1),
                "`exposed_ns` (5000) is more than `total_ns` (1234.5)",
            ),
            (json.replacen("\"overlapped_ns\":1000", "\"overlapped_ns\":6000", 1), "`overlapped_ns` (6000) is more"),
            (
                json.replacen("\"moe_markers\":true", "\"moe_markers\":true,\"extra\":1", 1),
                "`ranks[0].analysis.extra`: unknown key `extra`",
            ),
            (json[..json.len() / 2].to_string(), "the JSON ends early"),
        ];
        for (text, expected) in cases {
            let err = read_back(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "expected {expected:?} in {err}");
            assert!(err.contains("damaged"), "{err}");
        }
    }

    #[test]
    fn a_partial_larger_than_the_limit_is_refused_before_it_is_parsed() {
        let json = to_json(&partial());
        let err = read(json.as_slice(), ReadLimits { max_events: 2 }).unwrap_err();
        assert!(matches!(err, PartialError::TooLarge { limit: 128, max_events: 2 }), "{err}");
        // Six kernels (two per analysis) against a limit of five.
        let wire: Wire = serde_json::from_slice(&json).unwrap();
        let err = wire.into_partial(ReadLimits { max_events: 5 }).unwrap_err();
        assert!(err.contains("more kernels than the events limit"), "{err}");
    }

    #[test]
    fn only_the_first_key_makes_a_partial() {
        assert!(is_partial(b"  {\"commgate_partial\":1"));
        assert!(!is_partial(b"{\"traceEvents\":[], \"commgate_partial\":1}"));
        assert!(!is_partial(b""));
    }
}
