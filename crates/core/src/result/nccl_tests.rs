//! nccl-tests' output, JSON (`all_reduce_perf … -J FILE.json`, file version 3 as nccl-tests 2.19
//! writes it in `src/util.cu`) or the text table its programs print, read into typed data: the sweep's program and collective, NCCL
//! version and `NCCL_*` environment, the processes' hosts and devices, and per size and
//! placement (out-of-place, in-place) the summary (`time`, `alg_bw`, `bus_bw`, `nwrong`) and,
//! with `-I 1`, every iteration's time and each process's. A later file version is refused with
//! one line; so is a run that reported wrong elements (`nwrong > 0`: a failed run, never a slow
//! one). Everything is checked before use: bounded sizes, finite non-negative times, list
//! lengths that agree.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The JSON file version this commgate reads (and the ones before it).
pub const MAX_VERSION: u64 = 3;

/// The most sizes a sweep may hold: nccl-tests sweeps a few dozen.
pub const MAX_SIZES: usize = 2_048;

/// The most iterations one result may list, and the most processes.
pub const MAX_ITERATIONS: usize = 1_000_000;
pub const MAX_PROCESSES: usize = 65_536;

/// The largest file read: far beyond a sweep with per-iteration times of every process.
pub const MAX_BYTES: u64 = 512 << 20;

/// The most per-iteration times a file may hold, every size, placement and process together
/// (128 MB as numbers): each list is read against what is left of it, so a small file that
/// expands to millions of times is refused before they are in memory.
pub const MAX_PER_ITERATION_TIMES: u64 = 16 << 20;

/// Where a result was measured: nccl-tests times each size out of place and in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Placement {
    OutOfPlace,
    InPlace,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::OutOfPlace => "out_of_place",
            Placement::InPlace => "in_place",
        }
    }
}

/// One nccl-tests run read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The JSON file version; 0 for the text table.
    pub version: u64,
    /// The program (`all_reduce_perf`), the first of `args` without its directory.
    pub program: Option<String>,
    /// The collective the program runs, in commgate's words (`all_reduce`), when known.
    pub collective: Option<&'static str>,
    pub nccl_version: Option<u64>,
    /// The `NCCL_*` variables of the run's environment.
    pub nccl_env: BTreeMap<String, String>,
    /// The processes' hosts and devices (`devices`), as written.
    pub devices: Vec<Device>,
    pub results: Vec<SizeResult>,
    /// When the run started, RFC 3339 (nccl-tests writes its local time without a zone; it is
    /// read as UTC), when the output says.
    pub start_time: Option<String>,
    /// Warm-up and timed iterations per size (`-w`, `-n`), when the output says.
    pub warmup: Option<u32>,
    pub iterations: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub rank: u64,
    pub hostname: String,
    pub device: u64,
    pub device_info: String,
}

/// One size at one placement.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeResult {
    /// Bytes per rank, as nccl-tests counts its `size` column.
    pub size: u64,
    pub count: u64,
    pub dtype: String,
    pub redop: String,
    pub placement: Placement,
    /// The summary's time, µs (the mean over the timed iterations).
    pub time_us: f64,
    pub alg_bw: f64,
    pub bus_bw: f64,
    /// Per-iteration times, µs, when the run had `-I 1` (the slowest process's per iteration).
    pub times_us: Vec<f64>,
    /// Each process's own per-iteration times, µs (one list per process, each as long as
    /// `times_us`), when the run wrote them.
    pub per_process_us: Vec<Vec<f64>>,
}

/// Why an nccl-tests file cannot be used. Each reads after the file name.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SweepError {
    #[error("{0}")]
    Read(String),
    #[error("is not nccl-tests JSON ({0}); pass the file `-J FILE.json` wrote")]
    Syntax(String),
    /// The text table cannot be read: the message says why and what to pass.
    #[error("{0}")]
    Table(String),
    #[error(
        "is nccl-tests JSON of file version {0}, newer than this commgate reads ({MAX_VERSION}); \
         upgrade commgate, or pass the run's text output"
    )]
    Version(u64),
    #[error("`{field}` {why}; the file is damaged or not nccl-tests output")]
    Field { field: String, why: String },
    #[error(
        "reports {nwrong} wrong elements at size {size} ({placement}): the run failed its data check; \
         fix the run (it is not a slow run, and no gate judges it)"
    )]
    Wrong { size: u64, placement: &'static str, nwrong: f64 },
}

/// Reads an nccl-tests output file (plain or gzip), bounded: JSON (`-J`) or the text table the
/// programs print, told apart by content.
pub fn read(path: &Path) -> Result<Sweep, SweepError> {
    let text = crate::input::read_text(path, MAX_BYTES).map_err(|e| SweepError::Read(e.to_string()))?;
    parse_any(&text)
}

/// Parses nccl-tests output: JSON when it opens with `{`, else the text table.
pub fn parse_any(text: &str) -> Result<Sweep, SweepError> {
    if text.trim_start().starts_with('{') {
        parse(text)
    } else {
        parse_text(text)
    }
}

/// Whether `text` is nccl-tests output rather than a commgate file: JSON with nccl-tests' keys
/// (`nccl_version`, or `version` with `results`) and no `schema_version`, or text whose first
/// line is one of the programs' `#` header lines.
pub fn looks_like(text: &str) -> bool {
    let start = text.trim_start();
    if start.starts_with('{') {
        let head: String = start.chars().take(4096).collect();
        !head.contains("\"schema_version\"")
            && (head.contains("\"nccl_version\"") || (head.contains("\"version\"") && start.contains("\"results\"")))
    } else {
        // A job's log may open with the launcher's lines: the program's own header is looked for
        // in the first lines.
        start.lines().take(200).any(|l| {
            let l = l.trim_start();
            l.starts_with("# nccl-tests version") || l.starts_with("# Collective test starting:")
        }) || start.starts_with('#')
    }
}

/// Parses the text table an nccl-tests program prints (2.x layout): the `#` header lines (the
/// program, the NCCL library version, the devices, the column heads), then one line per size
/// with the out-of-place and in-place columns (`time algbw busbw #wrong`, and with `-I 1`
/// `i_min i_max i_p99 i_cv%` after each), and an optional timestamp at the end. The summary
/// figures are those of the JSON of the same run; per-iteration times are not in the text.
pub fn parse_text(output: &str) -> Result<Sweep, SweepError> {
    let mut program = None;
    let mut nccl_version = None;
    let mut devices = Vec::new();
    let mut per_iter = None;
    let mut results = Vec::new();
    let (mut warmup, mut iterations, mut start_time) = (None, None, None);
    for (n, line) in output.lines().enumerate() {
        let line_no = n + 1;
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim();
            if let Some(p) = rest.strip_prefix("Collective test starting:") {
                // A job's log of several runs: which one to judge is the user's choice, not ours.
                if program.is_some() || !results.is_empty() {
                    return Err(SweepError::Table(format!(
                        "holds more than one nccl-tests run (a second `# Collective test starting:` at line {line_no}); \
                         split the log into one file per run"
                    )));
                }
                program = Some(text(p.trim()));
            } else if let Some(v) = rest.split_whitespace().find_map(|w| w.strip_prefix("nccl-library=")) {
                nccl_version = v.parse().ok();
            } else if rest.starts_with("Rank ") {
                devices.extend(device_line(rest));
            } else if rest.starts_with("nThread ") {
                warmup = number_after(rest, "warmup iters:");
                iterations = number_after(rest, " iters:");
            } else if rest.starts_with("size ") || rest.contains(" size ") {
                per_iter = Some(rest.contains("i_min"));
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // What a job's log holds around the table (the launcher's warnings, `NCCL INFO` lines
        // with NCCL_DEBUG=INFO, the command itself) does not open with a size: passed over. A
        // line that does is a size line, and is read as one.
        if words.first().is_none_or(|w| w.parse::<u64>().is_err()) {
            continue;
        }
        let Some(per_iter) = per_iter else {
            return Err(field(&format!("line {line_no}"), "comes before the column heads (`#  size  count …`)".into()));
        };
        if results.len() >= 2 * MAX_SIZES {
            return Err(field("results", format!("holds more than {MAX_SIZES} sizes")));
        }
        results.extend(size_line(&words, per_iter, line_no)?);
        // A timestamp after the columns (`2026-12-01 10:00:00`): the first is the run's start.
        let width = if per_iter { 8 } else { 4 };
        if let (None, Some(date), Some(time)) = (&start_time, words.get(5 + 2 * width), words.get(6 + 2 * width)) {
            start_time = rfc3339_of(&format!("{date} {time}"));
        }
    }
    if results.is_empty() {
        return Err(SweepError::Table(
            "is not an nccl-tests table: no size line under `#  size  count  type …` column heads; pass the output of \
             an nccl-tests program"
                .into(),
        ));
    }
    let collective = program.as_deref().and_then(collective_of);
    Ok(Sweep {
        version: 0,
        program,
        collective,
        nccl_version,
        nccl_env: BTreeMap::new(),
        devices,
        results,
        start_time,
        warmup,
        iterations,
    })
}

/// The whole number after `key` in a header line (`warmup iters: 1 iters: 3`).
fn number_after(line: &str, key: &str) -> Option<u32> {
    let at = line.find(key)? + key.len();
    line[at..].split_whitespace().next()?.parse().ok()
}

/// nccl-tests' time stamp (`2026-12-01 10:00:00`, `strftime("%F %T")` of the local time) as
/// RFC 3339, read as UTC: the zone is not written.
pub fn rfc3339_of(stamp: &str) -> Option<String> {
    let (date, time) = stamp.trim().split_once(' ')?;
    let candidate = format!("{date}T{time}Z");
    let b = candidate.as_bytes();
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let shape = b.len() == 20 && at(4, b'-') && at(7, b'-') && at(13, b':') && at(16, b':');
    let digits = shape
        && [0..4, 5..7, 8..10, 11..13, 14..16, 17..19]
            .into_iter()
            .all(|r| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit)));
    digits.then_some(candidate)
}

/// `Rank  0 Group  0 Pid  11 on     node-a device  0 [0x1] NVIDIA H200`.
fn device_line(rest: &str) -> Option<Device> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let after = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).copied();
    let rank = after("Rank")?.parse().ok()?;
    let hostname = text(after("on")?);
    let device = after("device")?.parse().ok()?;
    let info_at = words.iter().position(|w| w.starts_with('[')).map_or(words.len(), |i| i + 1);
    let info = words.get(info_at..).unwrap_or_default().join(" ");
    Some(Device { rank, hostname, device, device_info: text(&info) })
}

/// One size line: `size count type redop root`, then each placement's columns.
fn size_line(words: &[&str], per_iter: bool, line_no: usize) -> Result<Vec<SizeResult>, SweepError> {
    let at = |what: &str| format!("line {line_no}: {what}");
    let width = if per_iter { 8 } else { 4 };
    if words.len() < 5 + 2 * width {
        return Err(field(
            &at("the size line"),
            format!("has {} columns, not the {} of the heads", words.len(), 5 + 2 * width),
        ));
    }
    // Every column read below is within the length just checked; `word` answers "" past it.
    let word = |i: usize| words.get(i).copied().unwrap_or_default();
    let whole = |i: usize, name: &str| {
        word(i).parse::<u64>().map_err(|_| field(&at(name), format!("is `{}`, not a whole number", text(word(i)))))
    };
    let size = whole(0, "size")?;
    let count = whole(1, "count")?;
    let mut out = Vec::new();
    for (k, placement) in [Placement::OutOfPlace, Placement::InPlace].into_iter().enumerate() {
        let base = 5 + k * width;
        let number = |i: usize, name: &str| match word(base + i).parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(field(
                &at(&format!("{} {name}", placement.as_str())),
                format!("is `{}`, not a time or bandwidth", text(word(base + i))),
            )),
        };
        let nwrong = word(base + 3);
        if nwrong != "N/A" && !nwrong.parse::<f64>().is_ok_and(|w| w == 0.0) {
            let nwrong = nwrong.parse::<f64>().unwrap_or(f64::NAN);
            return Err(SweepError::Wrong { size, placement: placement.as_str(), nwrong });
        }
        out.push(SizeResult {
            size,
            count,
            dtype: text(word(2)),
            redop: text(word(3)),
            placement,
            time_us: number(0, "time")?,
            alg_bw: number(1, "algbw")?,
            bus_bw: number(2, "busbw")?,
            times_us: Vec::new(),
            per_process_us: Vec::new(),
        });
    }
    Ok(out)
}

/// Parses and checks nccl-tests JSON text.
pub fn parse(text: &str) -> Result<Sweep, SweepError> {
    let raw: RawFile = serde_json::from_str(text).map_err(|e| {
        if e.to_string().starts_with(TOO_MANY) {
            field("results", format!("holds more than {MAX_SIZES} sizes"))
        } else {
            SweepError::Syntax(format!("line {}, column {}: {}", e.line(), e.column(), plain(&e)))
        }
    })?;
    raw.check()
}

fn plain(e: &serde_json::Error) -> String {
    crate::input::plain_message(&e.to_string())
}

/// The program's collective, from its name: `all_reduce_perf` → `all_reduce`.
pub fn collective_of(program: &str) -> Option<&'static str> {
    let stem = program.strip_suffix("_perf").unwrap_or(program);
    Some(match stem {
        "all_reduce" => "all_reduce",
        "all_gather" => "all_gather",
        "reduce_scatter" => "reduce_scatter",
        "alltoall" => "all_to_all",
        "alltoallv" => "all_to_allv",
        "broadcast" => "broadcast",
        "reduce" => "reduce",
        "sendrecv" => "send_recv",
        "gather" => "gather",
        "scatter" => "scatter",
        "hypercube" => "hypercube",
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// The file as written. Unknown keys are allowed: nccl-tests adds keys within a file version.

#[derive(Deserialize)]
struct RawFile<'a> {
    version: u64,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    nccl_version: Option<u64>,
    /// The run's settings; its `devices` list the processes' hosts and GPUs.
    #[serde(default)]
    config: Option<RawConfig>,
    #[serde(default, deserialize_with = "bounded_results", borrow)]
    results: Vec<RawResult<'a>>,
    #[serde(default)]
    start_time: Option<String>,
}

/// `results`, refused as soon as it holds more than [`MAX_SIZES`] sizes: a million sizes must
/// not be read into memory first.
fn bounded_results<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<RawResult<'de>>, D::Error> {
    struct Bounded;
    impl<'de> serde::de::Visitor<'de> for Bounded {
        type Value = Vec<RawResult<'de>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of sizes")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<RawResult<'de>>, A::Error> {
            let mut out = Vec::new();
            while let Some(r) = seq.next_element()? {
                if out.len() == MAX_SIZES {
                    return Err(serde::de::Error::custom(TOO_MANY));
                }
                out.push(r);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Bounded)
}

/// The message of a `results` list past [`MAX_SIZES`] (told apart from other syntax errors).
const TOO_MANY: &str = "commgate: too many sizes";

#[derive(Deserialize, Default)]
struct RawConfig {
    #[serde(default)]
    devices: Vec<RawDevice>,
    #[serde(default)]
    warmup_iters: Option<u32>,
    #[serde(default)]
    iterations: Option<u32>,
}

#[derive(Deserialize)]
struct RawDevice {
    #[serde(default)]
    rank: u64,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    device: u64,
    #[serde(default)]
    device_info: String,
}

#[derive(Deserialize)]
struct RawResult<'a> {
    size: u64,
    #[serde(default)]
    count: u64,
    #[serde(rename = "type", default)]
    dtype: String,
    #[serde(default)]
    redop: String,
    #[serde(default)]
    out_of_place: Option<RawSummary>,
    #[serde(default)]
    in_place: Option<RawSummary>,
    /// Kept as text until [`per_iteration`] reads it against the file's budget.
    #[serde(default, borrow)]
    out_of_place_per_iter: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    in_place_per_iter: Option<&'a serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct RawSummary {
    /// `time`, or `cpu_time` with `-C 1`.
    #[serde(alias = "cpu_time")]
    time: Option<f64>,
    alg_bw: Option<f64>,
    bus_bw: Option<f64>,
    #[serde(default)]
    nwrong: Option<f64>,
}

/// The longest text kept from a string of the file (names, hosts, environment values).
const MAX_TEXT: usize = 256;

fn text(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

impl RawFile<'_> {
    fn check(self) -> Result<Sweep, SweepError> {
        if self.version > MAX_VERSION {
            return Err(SweepError::Version(self.version));
        }
        let config = self.config.unwrap_or_default();
        let raw_devices = config.devices;
        if raw_devices.len() > MAX_PROCESSES {
            return Err(field("devices", format!("lists more than {MAX_PROCESSES} devices")));
        }
        let program = self.args.first().map(|a| text(a.rsplit('/').next().unwrap_or(a)));
        let collective = program.as_deref().and_then(collective_of);
        let nccl_env = self
            .env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .take(64)
            .map(|(k, v)| (text(k), text(v)))
            .collect();
        let devices = raw_devices
            .iter()
            .map(|d| Device {
                rank: d.rank,
                hostname: text(&d.hostname),
                device: d.device,
                device_info: text(&d.device_info),
            })
            .collect();
        let mut results = Vec::new();
        let mut times_left = MAX_PER_ITERATION_TIMES;
        for (i, r) in self.results.into_iter().enumerate() {
            let placements = [
                (Placement::OutOfPlace, r.out_of_place, r.out_of_place_per_iter),
                (Placement::InPlace, r.in_place, r.in_place_per_iter),
            ];
            for (placement, summary, per_iter) in placements {
                // nccl-tests writes `null` for a placement it did not run.
                let Some(s) = summary else { continue };
                let at = |name: &str| format!("results[{i}].{}.{name}", placement.as_str());
                if let Some(nwrong) = s.nwrong.filter(|n| *n != 0.0) {
                    return Err(SweepError::Wrong { size: r.size, placement: placement.as_str(), nwrong });
                }
                let number = |name: &str, v: Option<f64>| match v {
                    Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
                    Some(x) => Err(field(&at(name), format!("is {x}, not a time or bandwidth"))),
                    None => Err(field(&at(name), "is missing".to_string())),
                };
                let time_us = number("time", s.time)?;
                let alg_bw = number("alg_bw", s.alg_bw)?;
                let bus_bw = number("bus_bw", s.bus_bw)?;
                let (times_us, per_process_us) = match per_iter {
                    Some(p) => {
                        per_iteration(p, &format!("results[{i}].{}_per_iter", placement.as_str()), &mut times_left)?
                    }
                    None => (Vec::new(), Vec::new()),
                };
                results.push(SizeResult {
                    size: r.size,
                    count: r.count,
                    dtype: text(&r.dtype),
                    redop: text(&r.redop),
                    placement,
                    time_us,
                    alg_bw,
                    bus_bw,
                    times_us,
                    per_process_us,
                });
            }
        }
        if results.is_empty() {
            return Err(field("results", "holds no measured size; pass the JSON of a finished run".to_string()));
        }
        Ok(Sweep {
            version: self.version,
            program,
            collective,
            nccl_version: self.nccl_version,
            nccl_env,
            devices,
            results,
            start_time: self.start_time.as_deref().and_then(rfc3339_of),
            warmup: config.warmup_iters,
            iterations: config.iterations,
        })
    }
}

fn field(name: &str, why: String) -> SweepError {
    SweepError::Field { field: name.to_string(), why }
}

/// Per-iteration times (`times_us` and `per_process_max_times_us` of a `*_per_iter` object;
/// other keys skipped), checked as they are read: finite and non-negative, at most
/// [`MAX_ITERATIONS`] a list and [`MAX_PROCESSES`] processes, each process's list as long as
/// `times_us`, and every time counted against `left` (the file's [`MAX_PER_ITERATION_TIMES`]).
fn per_iteration(
    raw: &serde_json::value::RawValue,
    at: &str,
    left: &mut u64,
) -> Result<(Vec<f64>, Vec<Vec<f64>>), SweepError> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let mut failure = None;
    let read = PerIter { at, left, failure: &mut failure }.deserialize(&mut de);
    if let Some(error) = failure {
        return Err(error);
    }
    let (all, per_process) = read.map_err(|e| field(at, plain(&e)))?;
    for (k, own) in per_process.iter().enumerate() {
        if own.len() != all.len() {
            let name = format!("{at}.per_process_max_times_us[{k}]");
            return Err(field(&name, format!("lists {} iterations, `times_us` {}", own.len(), all.len())));
        }
    }
    Ok((all, per_process))
}

/// A `*_per_iter` object read with the file's budget; the first checked failure is kept in
/// `failure` (serde's errors carry text only) and stops the read.
struct PerIter<'b> {
    at: &'b str,
    left: &'b mut u64,
    failure: &'b mut Option<SweepError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for PerIter<'_> {
    type Value = (Vec<f64>, Vec<Vec<f64>>);
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PerIter<'_> {
    type Value = (Vec<f64>, Vec<Vec<f64>>);
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object of per-iteration times")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut all, mut per_process) = (Vec::new(), Vec::new());
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "times_us" => {
                    let name = format!("{}.times_us", self.at);
                    all = map.next_value_seed(Times { name: &name, left: self.left, failure: self.failure })?;
                }
                "per_process_max_times_us" => {
                    let name = format!("{}.per_process_max_times_us", self.at);
                    per_process =
                        map.next_value_seed(Processes { name: &name, left: self.left, failure: self.failure })?;
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok((all, per_process))
    }
}

/// Records `error` as the read's failure and gives serde an error that stops it.
fn stop<E: serde::de::Error, T>(failure: &mut Option<SweepError>, error: SweepError) -> Result<T, E> {
    let text = error.to_string();
    failure.get_or_insert(error);
    Err(E::custom(text))
}

/// One list of times (`null` or a missing list is an error naming the element).
struct Times<'b> {
    name: &'b str,
    left: &'b mut u64,
    failure: &'b mut Option<SweepError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Times<'_> {
    type Value = Vec<f64>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<f64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Times<'_> {
    type Value = Vec<f64>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of times")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f64>, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Option<f64>>()? {
            let k = out.len();
            if k == MAX_ITERATIONS {
                return stop(self.failure, field(self.name, format!("lists more than {MAX_ITERATIONS} iterations")));
            }
            if *self.left == 0 {
                return stop(
                    self.failure,
                    field(
                        self.name,
                        format!(
                            "takes the file past {MAX_PER_ITERATION_TIMES} per-iteration times; run nccl-tests with \
                             fewer iterations or processes"
                        ),
                    ),
                );
            }
            *self.left -= 1;
            match v {
                Some(x) if x.is_finite() && x >= 0.0 => out.push(x),
                _ => {
                    let why = "is not a time (a finite number of µs, at least 0)".to_string();
                    return stop(self.failure, field(&format!("{}[{k}]", self.name), why));
                }
            }
        }
        Ok(out)
    }
}

/// The processes' lists of times.
struct Processes<'b> {
    name: &'b str,
    left: &'b mut u64,
    failure: &'b mut Option<SweepError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Processes<'_> {
    type Value = Vec<Vec<f64>>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<Vec<f64>>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Processes<'_> {
    type Value = Vec<Vec<f64>>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of each process's times")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Vec<f64>>, A::Error> {
        let mut out = Vec::new();
        loop {
            if out.len() == MAX_PROCESSES {
                // One more element is one process too many; the end of the list is not.
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return stop(self.failure, field(self.name, format!("lists more than {MAX_PROCESSES} processes")));
                }
                return Ok(out);
            }
            let name = format!("{}[{}]", self.name, out.len());
            match seq.next_element_seed(Times { name: &name, left: self.left, failure: self.failure })? {
                Some(list) => out.push(list),
                None => return Ok(out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sizes as nccl-tests 2.19 writes them with `-I 1` on two processes (the shape of
    /// `src/util.cu`; the numbers are this test's own).
    const SWEEP: &str = r#"{"version":3,"start_time":"2026-12-01 10:00:00","args":["./build/all_reduce_perf","-b","8","-e","16","-f","2","-I","1","-J","r.json"],
"env":["PATH=/usr/bin","NCCL_ALGO=Ring","NCCL_DEBUG=WARN"],"nccl_version":22703,
"config":{"nthreads":1,"ngpus":1,"minimum_bytes":8,"maximum_bytes":16,"step_factor":2,"warmup_iters":1,"iterations":3,"aggregated_iterations":1,"validation":1,"graph":0,"blocking_collectives":false,"per_iter_timing":true,"per_iter_skip":0,"parallel_init":false,
"devices":[{"rank":0,"group":0,"pid":11,"hostname":"node-a","device":0,"device_hex":"0x1","device_info":"NVIDIA H200"},{"rank":1,"group":0,"pid":12,"hostname":"node-b","device":0,"device_hex":"0x1","device_info":"NVIDIA H200"}]},
"results":[
{"size":8,"count":2,"type":"float","redop":"sum","root":"-1","out_of_place":{"time":10.5,"alg_bw":0.0,"bus_bw":0.0,"nwrong":0},"out_of_place_per_iter":{"skipped_iterations":0,"min_us":10,"max_us":11,"avg_us":10.5,"p50_us":10.5,"p95_us":11,"p99_us":11,"stdev_us":0.5,"cv_pct":4.7,"times_us":[10,10.5,11],"per_process_max_times_us":[[9,10,11],[10,10.5,10.9]]},"in_place":{"time":10.2,"alg_bw":0.0,"bus_bw":0.0,"nwrong":0},"in_place_per_iter":{"skipped_iterations":0,"times_us":[10,10.2,10.4],"per_process_max_times_us":[[10,10.2,10.4],[9,9,9]]},"actual_iterations":3,"experiment_name":""},
{"size":16,"count":4,"type":"float","redop":"sum","root":"-1","out_of_place":{"time":11.0,"alg_bw":0.0,"bus_bw":0.0,"nwrong":null},"in_place":null,"actual_iterations":3,"experiment_name":""}
],"end_time":"2026-12-01 10:00:01"}"#;

    #[test]
    fn a_sweep_reads_its_sizes_placements_and_iterations() {
        let s = parse(SWEEP).expect("reads");
        assert_eq!(s.program.as_deref(), Some("all_reduce_perf"));
        assert_eq!(s.collective, Some("all_reduce"));
        assert_eq!(s.nccl_version, Some(22703));
        assert_eq!(s.nccl_env.keys().collect::<Vec<_>>(), ["NCCL_ALGO", "NCCL_DEBUG"]);
        assert_eq!(s.results.len(), 3, "8 B out of place and in place, 16 B out of place");
        let first = &s.results[0];
        assert_eq!((first.size, first.placement, first.time_us), (8, Placement::OutOfPlace, 10.5));
        assert_eq!(first.times_us, [10.0, 10.5, 11.0]);
        assert_eq!(first.per_process_us.len(), 2);
        assert_eq!(s.results[1].placement, Placement::InPlace);
        assert!(s.results[2].times_us.is_empty(), "no -I: one summary, no iterations");
        let hosts: Vec<&str> = s.devices.iter().map(|d| d.hostname.as_str()).collect();
        assert_eq!(hosts, ["node-a", "node-b"]);
    }

    #[test]
    fn a_newer_version_a_failed_check_and_damage_are_named() {
        let newer = SWEEP.replacen("\"version\":3", "\"version\":4", 1);
        assert_eq!(parse(&newer), Err(SweepError::Version(4)));
        let wrong = SWEEP.replacen("\"nwrong\":0}", "\"nwrong\":12}", 1);
        let e = parse(&wrong).unwrap_err();
        assert!(matches!(e, SweepError::Wrong { size: 8, placement: "out_of_place", .. }), "{e}");
        assert!(e.to_string().contains("12 wrong elements at size 8 (out_of_place)"), "{e}");
        let cases = [
            (SWEEP.replacen("\"time\":10.5", "\"time\":-1", 1), "results[0].out_of_place.time"),
            (SWEEP.replacen("[9,10,11]", "[9,10]", 1), "lists 2 iterations, `times_us` 3"),
            (SWEEP.replacen("\"times_us\":[10,10.5,11]", "\"times_us\":[10,null,11]", 1), "times_us[1]"),
            (SWEEP.replacen("\"results\":[", "\"results\":[] ,\"x\":[", 1), "holds no measured size"),
        ];
        for (text, expected) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(expected), "expected {expected:?} in {e}");
        }
        assert!(parse("{\"traceEvents\":[]}").unwrap_err().to_string().contains("is not nccl-tests JSON"));
        let one = r#"{"size":8,"out_of_place":{"time":1,"alg_bw":0,"bus_bw":0}}"#;
        let many = format!("{{\"version\":3,\"results\":[{}]}}", vec![one; MAX_SIZES + 1].join(","));
        let e = parse(&many).unwrap_err().to_string();
        assert!(e.contains("`results` holds more than 2048 sizes"), "{e}");
    }

    /// The same run as [`SWEEP`] (its first size), as the program prints it with `-I 1`.
    const TABLE: &str = "\
# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 3 agg iters: 1 validation: 1 graph: 0 unalign: 0
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows
#
# Using devices
#  Rank  0 Group  0 Pid     11 on     node-a device  0 [0x1] NVIDIA H200
#  Rank  1 Group  0 Pid     12 on     node-b device  0 [0x1] NVIDIA H200
#
#                                              out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)
           8             2     float     sum      -1    10.50    0.00    0.00       0    10.00    11.00    11.00     4.70    10.20    0.00    0.00       0    10.00    10.40    10.40     1.60
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
#
# Collective test concluded: all_reduce_perf
";

    #[test]
    fn the_text_table_gives_the_summary_figures_of_the_json() {
        let table = parse_text(TABLE).expect("reads");
        let json = parse(SWEEP).expect("reads");
        // The summary figures: each result without its per-iteration lists (the text has none).
        let summary = |s: &Sweep| -> Vec<SizeResult> {
            s.results
                .iter()
                .filter(|r| r.size == 8)
                .map(|r| SizeResult { times_us: Vec::new(), per_process_us: Vec::new(), ..r.clone() })
                .collect()
        };
        assert_eq!(summary(&table), summary(&json));
        assert_eq!((table.collective, table.nccl_version), (json.collective, json.nccl_version));
        assert_eq!(table.devices.iter().map(|d| &d.hostname).collect::<Vec<_>>(), ["node-a", "node-b"]);
        assert_eq!(table.devices[0].device_info, "NVIDIA H200");
        // Without -I, and with a timestamp column at the end.
        let plain = "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n\
                     1048576 262144 float sum -1 20.1 52.2 97.9 0 19.9 52.7 98.8 0 2026-12-01 10:00:00\n";
        let s = parse_text(plain).expect("reads");
        assert_eq!(s.results.len(), 2);
        assert_eq!((s.results[1].placement, s.results[1].bus_bw), (Placement::InPlace, 98.8));
        assert!(read_errors(TABLE.replacen("       0    10.00", "       3    10.00", 1))
            .contains("3 wrong elements at size 8"));
        assert!(read_errors(TABLE.replacen("10.50", "nan", 1)).contains("out_of_place time"));
        assert!(read_errors("8 2 float sum -1 1 1 1 0 1 1 1 0\n".to_string()).contains("before the column heads"));
        // A job's log around the table: the launcher's warnings before it, NCCL's INFO lines in it.
        let log = format!(
            "$ mpirun -n 2 ./build/all_reduce_perf -b 8 -e 8\nTwo mutually-exclusive MCA variables were specified.\n{}",
            TABLE.replacen("(%)\n", "(%)\nnode-a:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n", 1)
        );
        assert!(log.contains("(%)\nnode-a:11:11 [0] NCCL INFO"), "{log}");
        assert!(looks_like(&log));
        let from_log = parse_text(&log).expect("a log reads");
        assert_eq!(from_log.results, table.results);
        // A log of two runs: which one is judged is not guessed.
        let two = format!("{TABLE}{TABLE}");
        assert!(read_errors(two)
            .contains("holds more than one nccl-tests run (a second `# Collective test starting:` at line"));
        assert!(read_errors("# nothing\n".to_string()).contains("no size line"));
    }

    fn read_errors(text: String) -> String {
        parse_text(&text).unwrap_err().to_string()
    }

    #[test]
    fn per_iteration_times_are_read_against_the_files_budget() {
        let raw = |text: &str| serde_json::value::RawValue::from_string(text.to_string()).expect("raw");
        let lists = raw(r#"{"min_us":1,"times_us":[1,2,3],"per_process_max_times_us":[[1,2,3],[3,2,1]]}"#);
        let mut left = 9;
        assert_eq!(
            per_iteration(&lists, "results[0].in_place_per_iter", &mut left),
            Ok((vec![1.0, 2.0, 3.0], vec![vec![1.0, 2.0, 3.0], vec![3.0, 2.0, 1.0]]))
        );
        assert_eq!(left, 0);
        // One time more than is left: refused at that list, before the rest is read.
        let mut left = 8;
        let e = per_iteration(&lists, "results[0].in_place_per_iter", &mut left).unwrap_err().to_string();
        assert!(e.contains("per_process_max_times_us[1]") && e.contains("per-iteration times"), "{e}");
        let bad = raw(r#"{"times_us":[1,null]}"#);
        let e = per_iteration(&bad, "r", &mut 10).unwrap_err().to_string();
        assert!(e.contains("r.times_us[1]") && e.contains("is not a time"), "{e}");
        let short = raw(r#"{"times_us":[1,2],"per_process_max_times_us":[[1]]}"#);
        let e = per_iteration(&short, "r", &mut 10).unwrap_err().to_string();
        assert!(e.contains("r.per_process_max_times_us[0]") && e.contains("lists 1 iterations"), "{e}");
    }

    #[test]
    fn programs_name_their_collectives() {
        assert_eq!(collective_of("all_gather_perf"), Some("all_gather"));
        assert_eq!(collective_of("alltoall_perf"), Some("all_to_all"));
        assert_eq!(collective_of("sendrecv_perf"), Some("send_recv"));
        assert_eq!(collective_of("my_perf"), None);
    }
}
