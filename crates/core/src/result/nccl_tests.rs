//! nccl-tests' output, JSON (`all_reduce_perf … -J FILE.json`, file version 3 as nccl-tests 2.19
//! writes it in `src/util.cu`) or the text table its programs print, read into typed data: the sweep's program and collective, NCCL
//! version and `NCCL_*` environment, the processes' hosts and devices, and per size and
//! placement (out-of-place, in-place) the summary (`time`, `alg_bw`, `bus_bw`, `nwrong`) and,
//! with `-I 1`, every iteration's time and each process's. A later file version is refused with
//! one line; so is a run that reported wrong elements (`nwrong > 0`: a failed run, never a slow
//! one). Everything is checked before use: bounded sizes, finite non-negative times, list
//! lengths that agree, and every figure nccl-tests derives from others held against them
//! (`check_figures`, `check_iterations`): a file whose figures no run can print is refused
//! with one line naming the field.

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
        // A job's log may open with the launcher's lines (the command, SSH or kubectl chatter,
        // module loads): the program's own header lines are looked for past them, launcher
        // prefixes (`[1,0]<stdout>:`) taken off.
        let headless = start.lines().next().is_some_and(|l| {
            let words: Vec<&str> = untagged(l).split_whitespace().collect();
            words.first().is_some_and(|w| w.parse::<u64>().is_ok()) && Layout::headless(&words).is_some()
        });
        start.starts_with('#') || headless || start.lines().take(MAX_PREAMBLE_LINES).any(|l| header_line(untagged(l)))
    }
}

/// How far into a log its nccl-tests header is looked for: a job's preamble (the launcher's
/// warnings, a module system's output) is a few hundred lines.
const MAX_PREAMBLE_LINES: usize = 10_000;

/// One of the `#` lines only nccl-tests programs print: `# nccl-tests version`, `# Collective
/// test starting:`, `# nThread …`, or the column heads (`#  size  count  type  redop …`).
fn header_line(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix('#') else { return false };
    let rest = rest.trim_start();
    rest.starts_with("nccl-tests version")
        || rest.starts_with("Collective test starting:")
        || rest.starts_with("nThread ")
        || Layout::of(rest).is_some()
}

/// A log line without the prefix a launcher put before it: `mpirun --tag-output`'s
/// `[1,0]<stdout>:` and Slurm's `srun --label` `0: `.
fn untagged(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        for tag in ["]<stdout>:", "]<stderr>:"] {
            if let Some(at) = trimmed.find(tag) {
                return &trimmed[at + tag.len()..];
            }
        }
    }
    match trimmed.split_once(": ") {
        Some((label, rest)) if !label.is_empty() && label.len() <= 6 && label.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        _ => line,
    }
}

/// The column layout the heads line gives (`#  size  count  type  redop  root  time  algbw  busbw
/// #wrong  time …`): how many columns lead (5 since nccl-tests 2.13; before, 4 without `root`,
/// or 3 for programs without `redop` such as all_gather),
/// how many each placement has (4, or 8 with `-I 1`'s `i_min i_max i_p99 i_cv%`), and whether
/// the fourth of them counts wrong elements (`#wrong`) or is the largest error (`error`, before
/// 2.13: validation's verdict is then the `# Out of bounds values` line).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    lead: usize,
    /// The `redop` column, when the heads have one (before 2.13 broadcast heads `root` there).
    redop: Option<usize>,
    /// The `root` column, when the heads have one.
    root: Option<usize>,
    width: usize,
    per_iter: bool,
    counts_wrong: bool,
    cpu_time: bool,
}

impl Layout {
    /// The layout of a size line pasted without its heads, when its shape allows only one: since
    /// 2.13, `size count type redop root` and 4 columns per placement (13 words, 15 with a time
    /// stamp), or 8 with `-I 1` (21, 23), the root a whole number. Older shapes (12 and 11
    /// columns) are ambiguous without their heads.
    fn headless(words: &[&str]) -> Option<Layout> {
        let width = match words.len() {
            13 | 15 => 4,
            21 | 23 => 8,
            _ => return None,
        };
        words.get(4)?.parse::<i64>().ok()?;
        Some(Layout {
            lead: 5,
            redop: Some(3),
            root: Some(4),
            width,
            per_iter: width == 8,
            counts_wrong: true,
            cpu_time: false,
        })
    }

    /// The layout of a heads line (its text after `#`), or `None` when it is not one.
    fn of(heads: &str) -> Option<Layout> {
        let words: Vec<&str> = heads.split_whitespace().collect();
        if words.first() != Some(&"size") || !words.contains(&"count") {
            return None;
        }
        let is_time = |w: &&str| *w == "time" || *w == "cputime";
        let mut times = words.iter().enumerate().filter(|(_, w)| is_time(w)).map(|(i, _)| i);
        let lead = times.next()?;
        let width = times.next().map_or(words.len() - lead, |second| second - lead);
        let wrong = words.get(lead + 3).copied();
        if !(3..=5).contains(&lead) || !(4..=8).contains(&width) || !matches!(wrong, Some("#wrong" | "error")) {
            return None;
        }
        Some(Layout {
            lead,
            redop: words.iter().position(|w| *w == "redop").filter(|&i| i < lead),
            root: words.iter().position(|w| *w == "root").filter(|&i| i < lead),
            width,
            per_iter: words.contains(&"i_min"),
            counts_wrong: wrong == Some("#wrong"),
            cpu_time: words.contains(&"cputime"),
        })
    }
}

/// The program a job's log names in the command that ran it (`mpirun … ./build/all_reduce_perf
/// -b 8 …`, `all_gather_perf_mpi`): the first word whose file name ends in `_perf` or
/// `_perf_mpi`.
fn program_in(line: &str) -> Option<String> {
    line.split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'' || c == '`'))
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .find(|w| {
            (w.ends_with("_perf") || w.ends_with("_perf_mpi"))
                && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .map(text)
}

/// Why `text`, which [`looks_like`] does not take for nccl-tests output, still is some, in a
/// layout this commgate does not read: at least two kinds of the lines only its programs print
/// (`# nThread …`, `#  Rank  0 … device`, the `out-of-place` heads, `# Out of bounds values`,
/// `# Avg bus bandwidth`) in a text whose table cannot be found (neither its `# nThread` line nor
/// its column heads among the first `MAX_PREAMBLE_LINES` lines). `None` for anything else,
/// which is then read as a commgate file and refused as one.
pub fn unread_layout(text: &str) -> Option<String> {
    if text.trim_start().starts_with(['{', '[']) {
        return None;
    }
    let kinds: [fn(&str) -> bool; 5] = [
        |l| l.starts_with("nThread "),
        |l| l.starts_with("Rank ") && l.contains(" device "),
        |l| l.contains("out-of-place"),
        |l| l.starts_with("Out of bounds values"),
        |l| l.starts_with("Avg bus bandwidth"),
    ];
    let mut seen = [false; 5];
    for line in text.lines().take(2_000) {
        let Some(rest) = line.trim_start().strip_prefix('#') else { continue };
        let rest = rest.trim_start();
        for (kind, saw) in kinds.iter().zip(seen.iter_mut()) {
            *saw |= kind(rest);
        }
    }
    (seen.iter().filter(|s| **s).count() >= 2).then(|| {
        "looks like nccl-tests output in a layout this commgate does not read (neither its `# nThread` line nor its \
         column heads are among the first 10000 lines); pass the program's whole output, or the JSON that `-J FILE` \
         writes"
            .to_string()
    })
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
    let mut layout: Option<Layout> = None;
    let mut results = Vec::new();
    // Per result, its line and how finely its time, algbw and busbw were printed.
    let mut written: Vec<(usize, [f64; 3])> = Vec::new();
    let (mut warmup, mut iterations, mut start_time) = (None, None, None);
    let mut header_at: Option<usize> = None;
    let mut last_size: Option<u64> = None;
    let mut shape = Shape::default();
    // The layout the size lines are read with: the heads', else the first line's shape.
    let mut layout_used: Option<Layout> = None;
    for (n, raw) in output.lines().enumerate() {
        let line_no = n + 1;
        let line = untagged(raw);
        if let Some(rest) = line.trim_start().strip_prefix('#') {
            let rest = rest.trim();
            if let Some(p) = rest.strip_prefix("Collective test starting:") {
                // A job's log of several runs: which one to judge is the user's choice, not ours.
                if (program.is_some() && header_at.is_some()) || !results.is_empty() {
                    return Err(several_runs(line_no, "`# Collective test starting:`"));
                }
                program = Some(text(p.trim()));
            } else if let Some(v) = rest.split_whitespace().find_map(|w| w.strip_prefix("nccl-library=")) {
                nccl_version = v.parse().ok();
            } else if rest.starts_with("Rank ") {
                devices.extend(device_line(rest));
            } else if rest.starts_with("nThread ") {
                if header_at.is_some() {
                    return Err(several_runs(line_no, "`# nThread` header"));
                }
                header_at = Some(line_no);
                (warmup, iterations) = counts(rest);
            } else if let Some(heads) = Layout::of(rest) {
                layout = Some(heads);
            } else if let Some(v) = rest.strip_prefix("Out of bounds values") {
                let bad: u64 = v
                    .trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(0);
                if bad > 0 {
                    return Err(SweepError::Table(format!(
                        "reports {bad} out-of-bounds values (line {line_no}): the run failed its data check; fix the run \
                         (it is not a slow run, and no gate judges it)"
                    )));
                }
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // What a job's log holds around the table (the launcher's warnings, `NCCL INFO` lines
        // with NCCL_DEBUG=INFO, the command itself) does not open with a size: passed over, the
        // command read for the program when no `# Collective test starting:` line names it. A
        // line that does open with a size is a size line, and is read as one.
        if words.first().is_none_or(|w| w.parse::<u64>().is_err()) {
            if program.is_none() && results.is_empty() {
                program = program_in(line);
            }
            continue;
        }
        // A table pasted without its heads: the layout its size lines' shape can only be.
        let Some(layout) = layout.or_else(|| Layout::headless(&words)) else {
            return Err(field(&format!("line {line_no}"), "comes before the column heads (`#  size  count …`)".into()));
        };
        let layout = *layout_used.get_or_insert(layout);
        if results.len() >= 2 * MAX_SIZES {
            return Err(field("results", format!("holds more than {MAX_SIZES} sizes")));
        }
        shape.see(&words, layout);
        let lines = size_line(&words, layout, line_no)?;
        // nccl-tests prints a size again when the count it asks for rounds to the same (the
        // 0-byte lines of all_gather and alltoall below ranks × 4 bytes): the first is kept.
        let size = lines.first().map(|(r, _)| r.size);
        if size.is_some() && size == last_size {
            continue;
        }
        last_size = size;
        for (result, resolution) in lines {
            results.push(result);
            written.push((line_no, resolution));
        }
        // A timestamp after the columns (`2026-12-01 10:00:00`): the first is the run's start.
        let end = layout.lead + 2 * layout.width;
        if let (None, Some(date), Some(time)) = (&start_time, words.get(end), words.get(end + 1)) {
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
    // The table lists every rank (`#  Rank  3 …`), one line each.
    let ranks = ranks_listed(devices.iter().map(|d| d.rank), 1);
    let collective = program.as_deref().and_then(collective_of).or_else(|| inferred(&results, ranks, shape));
    let cpu_time = layout.or(layout_used).is_some_and(|l| l.cpu_time);
    for (r, (line_no, resolution)) in results.iter().zip(&written) {
        let at = |name: &str| format!("line {line_no}: {} {name}", r.placement.as_str());
        let figures =
            Written { size: r.size, time: r.time_us, alg: r.alg_bw, bus: r.bus_bw, resolution: *resolution, cpu_time };
        check_figures(&figures, [at("algbw"), at("busbw")], collective, ranks)?;
    }
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

/// A log of more than one run: where the second begins and how to judge one.
fn several_runs(line_no: usize, what: &str) -> SweepError {
    SweepError::Table(format!(
        "holds more than one nccl-tests run (a second {what} at line {line_no}); split the log into one file per run \
         (each from its `# nThread` line to its `# Avg bus bandwidth` line) and pass each"
    ))
}

/// The warm-up and timed iteration counts of the `# nThread` line (`warmup iters: 5 iters: 20`).
fn counts(line: &str) -> (Option<u32>, Option<u32>) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |i: usize| words.get(i + 1).and_then(|w| w.parse().ok());
    let mut found = (None, None);
    for (i, _) in words.iter().enumerate().filter(|(_, w)| **w == "iters:") {
        match words.get(i.wrapping_sub(1)).copied() {
            Some("warmup") => found.0 = after(i),
            Some("agg") => {}
            _ => found.1 = after(i),
        }
    }
    found
}

/// What a table's columns show besides its figures, for naming its collective.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    /// Heads without `redop` or `root` (all_gather before 2.13).
    no_redop: bool,
    /// A `redop` column left blank (alltoall before 2.13).
    blank_redop: bool,
    /// Some line's root is a rank (broadcast, reduce), not -1.
    rooted: bool,
}

impl Shape {
    fn see(&mut self, words: &[&str], layout: Layout) {
        self.no_redop |= layout.redop.is_none() && layout.root.is_none();
        self.blank_redop |= layout.redop.is_some() && layout.lead == 4 && words.len() == 3 + 2 * layout.width;
        let root = layout.root.and_then(|i| words.get(i)).and_then(|w| w.parse::<i64>().ok());
        self.rooted |= root.is_some_and(|r| r >= 0);
    }
}

/// The collective a table without its program's name shows, when only one can: a reduction
/// (`redop` other than `none`) whose bus bandwidth is 2(n − 1)/n of the algorithm bandwidth is an
/// all-reduce, one at (n − 1)/n a reduce-scatter, a rooted one at 1 a reduce; a rooted move at 1
/// is a broadcast; before 2.13, all_gather heads neither `redop` nor `root` and alltoall leaves
/// its `redop` blank. Since 2.13 all-gather and alltoall print the same columns and factor: such
/// a table stays unnamed.
fn inferred(results: &[SizeResult], ranks: Option<u64>, shape: Shape) -> Option<&'static str> {
    let n = ranks.filter(|&n| n >= 2)? as f64;
    let reduction = results.iter().all(|r| r.redop != "none" && !r.redop.is_empty());
    // Figures printed with two decimals: only those large enough to show the factor.
    let mut factors: Vec<f64> = results.iter().filter(|r| r.alg_bw >= 0.2).map(|r| r.bus_bw / r.alg_bw).collect();
    factors.sort_by(f64::total_cmp);
    let median = *factors.get(factors.len() / 2)?;
    let near = |f: f64| (median - f).abs() <= 0.03 * f;
    let movement = near((n - 1.0) / n);
    match () {
        _ if reduction && shape.rooted && near(1.0) => Some("reduce"),
        _ if reduction && near(2.0 * (n - 1.0) / n) => Some("all_reduce"),
        _ if reduction && movement => Some("reduce_scatter"),
        _ if !reduction && shape.rooted && near(1.0) => Some("broadcast"),
        _ if !reduction && shape.no_redop && movement => Some("all_gather"),
        _ if !reduction && shape.blank_redop && movement => Some("all_to_all"),
        _ => None,
    }
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

/// One size line: `size count type redop root`, then each placement's columns; with each
/// result, how finely its time, algbw and busbw were printed ([`resolution`]).
fn size_line(words: &[&str], layout: Layout, line_no: usize) -> Result<Vec<(SizeResult, [f64; 3])>, SweepError> {
    let at = |what: &str| format!("line {line_no}: {what}");
    let Layout { mut lead, mut redop, width, counts_wrong, .. } = layout;
    // Before 2.13, alltoall heads a `redop` column and leaves it blank: one column short.
    if redop.is_some() && lead == 4 && words.len() == lead - 1 + 2 * width {
        (lead, redop) = (lead - 1, None);
    }
    if words.len() < lead + 2 * width {
        return Err(field(
            &at("the size line"),
            format!("has {} columns, not the {} of the heads", words.len(), lead + 2 * width),
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
        let base = lead + k * width;
        let number = |i: usize, name: &str| match word(base + i).parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(field(
                &at(&format!("{} {name}", placement.as_str())),
                format!("is `{}`, not a time or bandwidth", text(word(base + i))),
            )),
        };
        // Before 2.13 the column is the largest error (`2e-07`, `N/A`), not a count: the run's
        // `# Out of bounds values` line says whether validation failed.
        let nwrong = word(base + 3);
        if counts_wrong && nwrong != "N/A" && !nwrong.parse::<f64>().is_ok_and(|w| w == 0.0) {
            let nwrong = nwrong.parse::<f64>().unwrap_or(f64::NAN);
            return Err(SweepError::Wrong { size, placement: placement.as_str(), nwrong });
        }
        let result = SizeResult {
            size,
            count,
            dtype: text(word(2)),
            redop: redop.map_or_else(|| "none".to_string(), |i| text(word(i))),
            placement,
            time_us: number(0, "time")?,
            alg_bw: number(1, "algbw")?,
            bus_bw: number(2, "busbw")?,
            times_us: Vec::new(),
            per_process_us: Vec::new(),
        };
        out.push((result, [0, 1, 2].map(|i| resolution(word(base + i)))));
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

/// The nccl-tests program that runs `collective` (the inverse of [`collective_of`]):
/// `all_to_all` → `alltoall_perf`.
pub fn program_of(collective: &str) -> String {
    let stem = match collective {
        "all_to_all" => "alltoall",
        "all_to_allv" => "alltoallv",
        "send_recv" => "sendrecv",
        other => other,
    };
    format!("{stem}_perf")
}

/// The program's collective, from its name: `all_reduce_perf` → `all_reduce` (a build suffix,
/// `all_reduce_perf_mpi`, taken off).
pub fn collective_of(program: &str) -> Option<&'static str> {
    let program = program.strip_suffix("_mpi").unwrap_or(program);
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
    /// Threads per process and GPUs per thread (`-t`, `-g`): `devices` lists one line per
    /// process, its first rank's.
    #[serde(default)]
    nthreads: Option<u64>,
    #[serde(default)]
    ngpus: Option<u64>,
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
    #[serde(default, borrow)]
    out_of_place: Option<RawSummary<'a>>,
    #[serde(default, borrow)]
    in_place: Option<RawSummary<'a>>,
    /// Kept as text until [`per_iteration`] reads it against the file's budget.
    #[serde(default, borrow)]
    out_of_place_per_iter: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    in_place_per_iter: Option<&'a serde_json::value::RawValue>,
}

/// A placement's summary; its figures kept as written, so that how finely each was printed is
/// known when they are held against each other ([`check_figures`]).
#[derive(Deserialize)]
struct RawSummary<'a> {
    #[serde(default, borrow)]
    time: Option<&'a serde_json::value::RawValue>,
    /// `cpu_time` in place of `time` with `-C 1`: the host's time, not the one the bandwidths
    /// were computed from.
    #[serde(default, borrow)]
    cpu_time: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    alg_bw: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    bus_bw: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    nwrong: Option<f64>,
}

/// The longest text kept from a string of the file (names, hosts, environment values).
const MAX_TEXT: usize = 256;

fn text(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

/// [`text`] on one line: a value quoted from the file in a message (an object spans lines).
fn one_line(s: &str) -> String {
    text(&s.split_whitespace().collect::<Vec<_>>().join(" "))
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
        // One device line per process, each its first rank's: the ranks are those lines times
        // the ranks of a process, when the file says how many that is.
        let per_process = config.nthreads.zip(config.ngpus).map(|(t, g)| t.saturating_mul(g));
        let ranks = per_process.and_then(|k| ranks_listed(raw_devices.iter().map(|d| d.rank), k));
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
                let number = |name: &str, v: Option<&serde_json::value::RawValue>| {
                    let Some(raw) = v else { return Err(field(&at(name), "is missing".to_string())) };
                    match serde_json::from_str::<f64>(raw.get()) {
                        Ok(x) if x.is_finite() && x >= 0.0 => Ok((x, resolution(raw.get()))),
                        Ok(x) => Err(field(&at(name), format!("is {x}, not a time or bandwidth"))),
                        Err(_) => {
                            Err(field(&at(name), format!("is `{}`, not a time or bandwidth", one_line(raw.get()))))
                        }
                    }
                };
                let (time_name, time) = match (s.time, s.cpu_time) {
                    (Some(_), Some(_)) => {
                        return Err(field(&at("time"), "is written twice, as `time` and as `cpu_time`".to_string()))
                    }
                    (None, Some(cpu)) => ("cpu_time", Some(cpu)),
                    (time, None) => ("time", time),
                };
                let (time_us, time_printed) = number(time_name, time)?;
                let (alg_bw, alg_printed) = number("alg_bw", s.alg_bw)?;
                let (bus_bw, bus_printed) = number("bus_bw", s.bus_bw)?;
                let (times_us, per_process_us) = match per_iter {
                    Some(p) => {
                        let name = format!("results[{i}].{}_per_iter", placement.as_str());
                        let read = per_iteration(p, &name, &mut times_left)?;
                        // nccl-tests writes a process's list per device line (`totalProcs` both).
                        if !read.1.is_empty() && !raw_devices.is_empty() && read.1.len() != raw_devices.len() {
                            return Err(field(
                                &format!("{name}.per_process_max_times_us"),
                                format!(
                                    "lists {} processes, `devices` {}: nccl-tests writes one of each per process",
                                    read.1.len(),
                                    raw_devices.len()
                                ),
                            ));
                        }
                        read
                    }
                    None => (Vec::new(), Vec::new()),
                };
                let figures = Written {
                    size: r.size,
                    time: time_us,
                    alg: alg_bw,
                    bus: bus_bw,
                    resolution: [time_printed, alg_printed, bus_printed],
                    cpu_time: time_name == "cpu_time",
                };
                check_figures(&figures, [at("alg_bw"), at("bus_bw")], collective, ranks)?;
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
/// Then held against each other and against the object's own summary ([`check_iterations`]).
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
    let read = read.map_err(|e| field(at, plain(&e)))?;
    for (k, own) in read.per_process.iter().enumerate() {
        if own.len() != read.times.len() {
            let name = format!("{at}.per_process_max_times_us[{k}]");
            return Err(field(&name, format!("lists {} iterations, `times_us` {}", own.len(), read.times.len())));
        }
    }
    check_iterations(at, &read)?;
    Ok((read.times, read.per_process))
}

/// A `*_per_iter` object as read: its lists, and the summary of them it writes beside them.
#[derive(Debug, Default)]
struct PerIterRead {
    times: Vec<f64>,
    per_process: Vec<Vec<f64>>,
    /// `skipped_iterations` (`-K`), as written.
    skipped: Option<Figure>,
    /// The summary figures ([`ITERATION_STATS`], in order), as written when present (the last
    /// of a key written twice: a file of one key a million times holds eight).
    stats: [Option<Figure>; 8],
}

/// A single figure of a `*_per_iter` object: a number, or the text nccl-tests writes for one it
/// could not compute (`"nan"`). Anything else (a list, an object) stops the read at once, so a
/// figure cannot carry a list past the file's budget of times.
#[derive(Debug, Clone, PartialEq)]
enum Figure {
    Number(f64),
    Text(String),
}

impl<'de> Deserialize<'de> for Figure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Figure, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Figure;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Figure, E> {
                Ok(Figure::Number(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Figure, E> {
                Ok(Figure::Number(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Figure, E> {
                Ok(Figure::Number(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Figure, E> {
                Ok(Figure::Text(one_line(v)))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// The summary figures nccl-tests writes beside the times (`writePerIterReport`).
const ITERATION_STATS: [&str; 8] = ["min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us", "stdev_us", "cv_pct"];

/// A `*_per_iter` object read with the file's budget; the first checked failure is kept in
/// `failure` (serde's errors carry text only) and stops the read.
struct PerIter<'b> {
    at: &'b str,
    left: &'b mut u64,
    failure: &'b mut Option<SweepError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for PerIter<'_> {
    type Value = PerIterRead;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PerIter<'_> {
    type Value = PerIterRead;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object of per-iteration times")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = PerIterRead::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "times_us" => {
                    let name = format!("{}.times_us", self.at);
                    out.times = map.next_value_seed(Times { name: &name, left: self.left, failure: self.failure })?;
                }
                "per_process_max_times_us" => {
                    let name = format!("{}.per_process_max_times_us", self.at);
                    out.per_process =
                        map.next_value_seed(Processes { name: &name, left: self.left, failure: self.failure })?;
                }
                "skipped_iterations" => out.skipped = Some(map.next_value::<Figure>()?),
                other => match ITERATION_STATS.iter().position(|s| *s == other).and_then(|k| out.stats.get_mut(k)) {
                    Some(slot) => *slot = Some(map.next_value::<Figure>()?),
                    None => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                },
            }
        }
        Ok(out)
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

// ---------------------------------------------------------------------------------------------
// The figures held against each other. nccl-tests derives some of what it writes from the rest:
// a file where they disagree was not written by it, and is refused naming the field.

/// The finest a summary figure is taken to be printed, µs or GB/s: the text table's two
/// decimals. nccl-tests' JSON prints six (`%lf`), but files written from the table, by hand or by
/// other tools carry two, and a figure that far off cannot move a verdict.
pub const FIGURE_RESOLUTION: f64 = 0.005;

/// The relative slack beyond the printing: every real log under `nccl-tests-real/` agrees with
/// none at all (`docs/nccl-tests.md`, "What is checked").
pub const FIGURE_SLACK: f64 = 1e-3;

/// How far a per-iteration figure may lie from the one it is derived from, µs, relative and
/// absolute: nccl-tests prints both with `%lf` from the same doubles.
pub const ITERATION_TOLERANCE: f64 = 1e-6;

/// No collective's bus factor exceeds this (all-reduce's 2(n−1)/n tends to it).
const MAX_BUS_FACTOR: f64 = 2.0;

/// A placement's summary as written: the size, the time and the two bandwidths, with how finely
/// each of the three was printed.
struct Written {
    size: u64,
    time: f64,
    alg: f64,
    bus: f64,
    /// Half the last printed digit of the time, algbw and busbw ([`resolution`]).
    resolution: [f64; 3],
    /// The time is `cpu_time` (`-C 1`): the host's, while the bandwidths divide the time the
    /// ranks averaged, so the two are not held against each other.
    cpu_time: bool,
}

/// Half a unit of the last digit `token` was printed with: `11.74` → 0.005, `19902` → 0.5,
/// `1.2e+03` → 50. How far the value printed may lie from the one computed.
fn resolution(token: &str) -> f64 {
    let t = token.trim().trim_start_matches(['+', '-']);
    let (mantissa, exponent) = match t.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (t, 0),
    };
    let decimals = mantissa.split_once('.').map_or(0, |(_, d)| d.len());
    let decimals = i32::try_from(decimals).unwrap_or(i32::MAX);
    0.5 * 10f64.powi(exponent.saturating_sub(decimals))
}

/// How many ranks ran, when the device report lists them all: its ranks are exactly 0, k, 2k, …
/// (`per_process` = k: the text lists every rank, k = 1; the JSON one line per process, its
/// first rank's). `None` when a line is missing, repeated or out of place.
fn ranks_listed(ranks: impl Iterator<Item = u64>, per_process: u64) -> Option<u64> {
    let mut listed: Vec<u64> = ranks.collect();
    listed.sort_unstable();
    let whole = !listed.is_empty()
        && per_process > 0
        && listed.iter().zip(0u64..).all(|(r, i)| i.checked_mul(per_process) == Some(*r));
    whole.then(|| u64::try_from(listed.len()).unwrap_or(u64::MAX).saturating_mul(per_process))
}

/// nccl-tests' bus factor of `collective` on `n` ranks (`getBw` in `src/<collective>.cu`).
fn bus_factor(collective: &str, n: u64) -> Option<f64> {
    let n = n as f64;
    match collective {
        "all_reduce" => Some(2.0 * (n - 1.0) / n),
        "all_gather" | "reduce_scatter" | "all_to_all" | "all_to_allv" | "gather" | "scatter" => Some((n - 1.0) / n),
        "broadcast" | "reduce" | "send_recv" | "hypercube" => Some(1.0),
        _ => None,
    }
}

/// Holds a placement's bandwidths against its size and time as nccl-tests computes them: algbw
/// is the `size` column's bytes over the time (GB/s = bytes per µs / 1e3; hypercube moves
/// (n−1)/n of them; alltoallv's count its busiest rank and are not held), busbw is algbw times
/// the collective's bus factor on the run's ranks, or at most twice it when either is unknown.
/// Each within what the printing of each figure allows ([`resolution`], at least
/// [`FIGURE_RESOLUTION`]) and [`FIGURE_SLACK`]. A time of 0 divides nothing and is not held.
fn check_figures(
    w: &Written,
    [alg_name, bus_name]: [String; 2],
    collective: Option<&str>,
    ranks: Option<u64>,
) -> Result<(), SweepError> {
    let [time_res, alg_res, bus_res] = w.resolution.map(|r| r.max(FIGURE_RESOLUTION));
    let share_of_ranks = ranks.filter(|n| *n > 0).map(|n| (n as f64 - 1.0) / n as f64);
    // The share of `size / time` algbw is, low and high: an unknown collective only bounds it.
    let bounded = (0.0, 1.0, false);
    let shares = match collective {
        Some("all_to_allv") => None,
        Some("hypercube") => Some(share_of_ranks.map_or(bounded, |s| (s, s, true))),
        Some(c) if bus_factor(c, 2).is_some() => Some((1.0, 1.0, true)),
        _ => Some(bounded),
    };
    let size = w.size as f64;
    if let Some((low_share, high_share, exact)) = shares.filter(|_| !w.cpu_time && w.time > 0.0) {
        let rate = |time: f64| size / (time * 1e3);
        let low = low_share * rate(w.time + time_res) * (1.0 - FIGURE_SLACK) - alg_res;
        let high = if w.time > time_res {
            high_share * rate(w.time - time_res) * (1.0 + FIGURE_SLACK) + alg_res
        } else {
            f64::INFINITY
        };
        if w.alg < low || w.alg > high {
            let said = if exact { "gives" } else { "allows at most" };
            return Err(field(
                &alg_name,
                format!(
                    "is {} GB/s, but its size and time ({} B in {} µs) {said} {} GB/s: nccl-tests computes the \
                     one from the others",
                    shown(w.alg),
                    w.size,
                    shown(w.time),
                    computed(high_share * rate(w.time))
                ),
            ));
        }
    }
    let factor = collective.zip(ranks).and_then(|(c, n)| bus_factor(c, n).map(|f| (c, n, f)));
    match factor {
        Some((c, n, f)) => {
            if (w.bus - f * w.alg).abs() > bus_res + f * alg_res + FIGURE_SLACK * f * w.alg {
                return Err(field(
                    &bus_name,
                    format!(
                        "is {} GB/s, but {c}'s bus factor on {n} ranks ({f:.4}) times its algbw ({} GB/s) is {} GB/s: \
                         nccl-tests computes the one from the other",
                        shown(w.bus),
                        shown(w.alg),
                        computed(f * w.alg)
                    ),
                ));
            }
        }
        None => {
            let most = MAX_BUS_FACTOR * w.alg * (1.0 + FIGURE_SLACK) + bus_res + MAX_BUS_FACTOR * alg_res;
            if w.bus > most {
                return Err(field(
                    &bus_name,
                    format!(
                        "is {} GB/s, more than twice its algbw ({} GB/s): no collective's bus factor is above 2",
                        shown(w.bus),
                        shown(w.alg)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A figure in a message: as written, or in exponent form when far from any time or bandwidth
/// (`1e308` would print 309 digits).
fn shown(x: f64) -> String {
    if far(x) {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

/// A figure computed here, to six decimals (or in exponent form, as [`shown`]).
fn computed(x: f64) -> String {
    if far(x) {
        format!("{x:e}")
    } else {
        format!("{x:.6}")
    }
}

fn far(x: f64) -> bool {
    x != 0.0 && !(1e-6..1e12).contains(&x.abs())
}

/// `tolerance` relative to `expected`, and absolute below 1.
fn within(expected: f64, tolerance: f64) -> f64 {
    tolerance * expected.abs().max(1.0)
}

/// nccl-tests' percentile index (`percentileIndex` in `src/util.cu`) in `n` sorted times.
fn percentile_index(n: usize, percentile: usize) -> usize {
    (n.saturating_mul(percentile).saturating_add(99) / 100).saturating_sub(1).min(n.saturating_sub(1))
}

/// The summary nccl-tests writes of `times` (`computeIterStats`), in [`ITERATION_STATS`]' order,
/// each with how far the written one may lie from it: the order statistics are times as
/// written, the mean and deviation sums of them (each time off by its printing), the cv their
/// quotient. `None` for no time.
fn iteration_stats(times: &[f64]) -> Option<[(f64, f64); 8]> {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let at = |k: usize| sorted.get(k).copied();
    let (min, max) = (at(0)?, at(n.checked_sub(1)?)?);
    let (p50, p95, p99) = (at(n / 2)?, at(percentile_index(n, 95))?, at(percentile_index(n, 99))?);
    let avg = sorted.iter().sum::<f64>() / n as f64;
    let stdev = (sorted.iter().map(|t| (t - avg) * (t - avg)).sum::<f64>() / n as f64).sqrt();
    let cv = if avg > 0.0 { stdev / avg * 100.0 } else { 0.0 };
    let exact = |v: f64| (v, within(v, ITERATION_TOLERANCE));
    let summed = within(avg, 2.0 * ITERATION_TOLERANCE);
    // cv = 100 σ / mean, σ and the mean each off by `summed`.
    let cv_off = if avg > 0.0 { 100.0 * summed * (1.0 + cv / 100.0) / avg } else { 0.0 };
    Some([
        exact(min),
        exact(max),
        (avg, summed),
        exact(p50),
        exact(p95),
        exact(p99),
        (stdev, summed),
        (cv, cv_off + within(cv, ITERATION_TOLERANCE)),
    ])
}

/// Holds a `*_per_iter` object's figures against each other as nccl-tests writes them
/// (`ReduceProcessMaxIterTimes` in `src/common.cu`, `writePerIterReport` in `src/util.cu`): each
/// `times_us[i]` is the largest of the processes' `per_process_max_times_us[p][i]`, and the
/// summary figures present (`min_us` … `cv_pct`) are those of `times_us` after its
/// `skipped_iterations`; within [`ITERATION_TOLERANCE`].
fn check_iterations(at: &str, read: &PerIterRead) -> Result<(), SweepError> {
    if !read.per_process.is_empty() {
        for (i, t) in read.times.iter().enumerate() {
            let slowest = read.per_process.iter().filter_map(|p| p.get(i)).fold(0.0, |a: f64, b| a.max(*b));
            if (t - slowest).abs() > within(slowest, ITERATION_TOLERANCE) {
                return Err(field(
                    &format!("{at}.times_us[{i}]"),
                    format!(
                        "is {} µs, but the slowest process's time of that iteration (`per_process_max_times_us`) is \
                         {} µs: nccl-tests writes the one as the largest of the others",
                        shown(*t),
                        shown(slowest)
                    ),
                ));
            }
        }
    }
    if read.times.is_empty() {
        return Ok(());
    }
    let skipped = match &read.skipped {
        None => 0,
        Some(Figure::Number(k)) if k.fract() == 0.0 && *k >= 0.0 && *k < read.times.len() as f64 => {
            // Whole, and below the list's length (at most MAX_ITERATIONS): exact as an index.
            #[expect(clippy::cast_possible_truncation, reason = "a whole number below the list's length")]
            let k = *k as usize;
            k
        }
        Some(other) => {
            let shown = match other {
                Figure::Number(k) => shown(*k),
                Figure::Text(t) => format!("`{t}`"),
            };
            return Err(field(
                &format!("{at}.skipped_iterations"),
                format!(
                    "is {shown}, but `times_us` lists {} iterations: nccl-tests skips a whole number of them, fewer \
                     than it ran",
                    read.times.len()
                ),
            ));
        }
    };
    let kept = read.times.get(skipped..).unwrap_or_default();
    let Some(expected) = iteration_stats(kept) else { return Ok(()) };
    for ((name, written), (value, tolerance)) in ITERATION_STATS.iter().zip(&read.stats).zip(expected) {
        let Some(written) = written else { continue };
        let fits = matches!(written, Figure::Number(x) if (x - value).abs() <= tolerance);
        if !fits {
            let shown = match written {
                Figure::Number(x) => shown(*x),
                Figure::Text(t) => format!("`{t}`"),
            };
            return Err(field(
                &format!("{at}.{name}"),
                format!(
                    "is {shown}, but `times_us` after its {skipped} skipped iterations gives {}: nccl-tests \
                     computes the one from the other",
                    computed(value)
                ),
            ));
        }
    }
    Ok(())
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
{"size":8,"count":2,"type":"float","redop":"sum","root":"-1","out_of_place":{"time":10.5,"alg_bw":0.0,"bus_bw":0.0,"nwrong":0},"out_of_place_per_iter":{"skipped_iterations":0,"min_us":10,"max_us":11,"avg_us":10.5,"p50_us":10.5,"p95_us":11,"p99_us":11,"stdev_us":0.408248,"cv_pct":3.888079,"times_us":[10,10.5,11],"per_process_max_times_us":[[9,10,11],[10,10.5,10.9]]},"in_place":{"time":10.2,"alg_bw":0.0,"bus_bw":0.0,"nwrong":0},"in_place_per_iter":{"skipped_iterations":0,"times_us":[10,10.2,10.4],"per_process_max_times_us":[[10,10.2,10.4],[9,9,9]]},"actual_iterations":3,"experiment_name":""},
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
           8             2     float     sum      -1    10.50    0.00    0.00       0    10.00    11.00    11.00     3.89    10.20    0.00    0.00       0    10.00    10.40    10.40     1.60
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
        // A size line without heads: read by its shape when only one layout has it (13 columns
        // since 2.13), refused when the shape is an older one's (12 columns).
        assert!(read_errors("8 2 float sum 1 1 1 0 1 1 1 0\n".to_string()).contains("before the column heads"));
        let pasted = parse_text("8 2 float sum -1 10.5 0.00 0.00 0 10.2 0.00 0.00 0\n").expect("by its shape");
        assert_eq!((pasted.results.len(), pasted.results[0].time_us), (2, 10.5));
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
        let lists = raw(r#"{"min_us":1,"times_us":[1,2,3],"per_process_max_times_us":[[1,2,3],[1,2,1]]}"#);
        let mut left = 9;
        assert_eq!(
            per_iteration(&lists, "results[0].in_place_per_iter", &mut left),
            Ok((vec![1.0, 2.0, 3.0], vec![vec![1.0, 2.0, 3.0], vec![1.0, 2.0, 1.0]]))
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

    /// `times_us` is the slowest process's time per iteration (`ReduceProcessMaxIterTimes`):
    /// one changed alone is refused naming it; a difference of the printing is not.
    #[test]
    fn times_us_is_the_largest_of_the_processes_times() {
        let unslowed = SWEEP.replacen("\"times_us\":[10,10.5,11]", "\"times_us\":[10,10.2,11]", 1);
        let e = parse(&unslowed).unwrap_err().to_string();
        assert!(e.starts_with("`results[0].out_of_place_per_iter.times_us[1]` is 10.2 µs, but the slowest"), "{e}");
        // The minimum over processes in place of the maximum.
        let minimum = SWEEP.replacen("\"times_us\":[10,10.5,11]", "\"times_us\":[9,10,10.9]", 1);
        assert!(parse(&minimum).unwrap_err().to_string().contains("times_us[0]` is 9 µs"));
        let printed = SWEEP.replacen("\"times_us\":[10,10.5,11]", "\"times_us\":[10.0000004,10.5,11]", 1);
        assert!(parse(&printed).is_ok(), "within %lf's printing");
        // A process list more or fewer than the devices.
        let three = SWEEP.replacen("[[9,10,11],[10,10.5,10.9]]", "[[9,10,11],[10,10.5,10.9],[1,1,1]]", 1);
        assert!(parse(&three).unwrap_err().to_string().contains("lists 3 processes, `devices` 2"));
    }

    /// The per-iteration object's own summary is that of `times_us` after `skipped_iterations`
    /// (`computeIterStats`).
    #[test]
    fn the_per_iteration_summary_is_that_of_its_times() {
        assert!(parse(SWEEP).is_ok());
        let cases = [
            ("\"avg_us\":10.5", "\"avg_us\":11.5", "out_of_place_per_iter.avg_us` is 11.5, but `times_us` after its 0"),
            ("\"max_us\":11", "\"max_us\":10.6", "max_us` is 10.6"),
            ("\"p50_us\":10.5", "\"p50_us\":10", "p50_us` is 10"),
            ("\"stdev_us\":0.408248", "\"stdev_us\":0.5", "stdev_us` is 0.5"),
            ("\"cv_pct\":3.888079", "\"cv_pct\":4.7", "cv_pct` is 4.7"),
            ("\"min_us\":10,", "\"min_us\":\"nan\",", "min_us` is `nan`"),
            // One skipped iteration: the summary is then that of [10.5, 11].
            (
                "\"skipped_iterations\":0,\"min",
                "\"skipped_iterations\":1,\"min",
                "min_us` is 10, but `times_us` after its 1",
            ),
            ("\"skipped_iterations\":0,\"min", "\"skipped_iterations\":3,\"min", "skipped_iterations` is 3, but"),
            ("\"skipped_iterations\":0,\"min", "\"skipped_iterations\":0.5,\"min", "skipped_iterations` is 0.5"),
        ];
        for (from, to, expected) in cases {
            let e = parse(&SWEEP.replacen(from, to, 1)).unwrap_err().to_string();
            assert!(e.contains(expected), "{to}: {e}");
        }
        // A list where a figure stands is refused before it is read.
        let list = SWEEP.replacen("\"min_us\":10,", "\"min_us\":[1,2,3],", 1);
        assert!(parse(&list).unwrap_err().to_string().contains("out_of_place_per_iter"));
        // The summary of the last two, with one skipped, and %lf's digits.
        let skipped = SWEEP.replacen(
            concat!(
                "\"skipped_iterations\":0,\"min_us\":10,\"max_us\":11,\"avg_us\":10.5,\"p50_us\":10.5,",
                "\"p95_us\":11,\"p99_us\":11,\"stdev_us\":0.408248,\"cv_pct\":3.888079"
            ),
            concat!(
                "\"skipped_iterations\":1,\"min_us\":10.500000,\"max_us\":11.000000,\"avg_us\":10.750000,",
                "\"p50_us\":11.000000,\"p95_us\":11.000000,\"p99_us\":11.000000,\"stdev_us\":0.250000,",
                "\"cv_pct\":2.325581"
            ),
            1,
        );
        assert!(skipped.contains("\"skipped_iterations\":1"), "the edit applies");
        assert_eq!(parse(&skipped).map(|s| s.results.len()), Ok(3));
        assert_eq!(percentile_index(3, 95), 2);
        assert_eq!(percentile_index(100, 95), 94);
        assert_eq!(percentile_index(1, 99), 0);
    }

    /// algbw is the size over the time, busbw algbw times the collective's bus factor on the
    /// run's ranks: a bandwidth that disagrees is refused naming it, within the printing.
    #[test]
    fn the_bandwidths_are_those_of_the_size_and_time() {
        // 1 MiB all-reduce in 20.1 µs (in place 19.9 µs) on 2 ranks: 52.17 GB/s, bus factor 1.
        let run = |alg: &str, bus: &str| {
            SWEEP
                .replacen("\"size\":8,\"count\":2", "\"size\":1048576,\"count\":262144", 1)
                .replacen(
                    "\"time\":10.5,\"alg_bw\":0.0,\"bus_bw\":0.0",
                    &format!("\"time\":20.1,\"alg_bw\":{alg},\"bus_bw\":{bus}"),
                    1,
                )
                .replacen(
                    "\"time\":10.2,\"alg_bw\":0.0,\"bus_bw\":0.0",
                    "\"time\":19.9,\"alg_bw\":52.69,\"bus_bw\":52.69",
                    1,
                )
        };
        assert!(parse(&run("52.17", "52.17")).is_ok());
        assert!(parse(&run("52.167654", "52.167654")).is_ok(), "%lf's digits");
        let e = parse(&run("1e15", "1e15")).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "`results[0].out_of_place.alg_bw` is 1e15 GB/s, but its size and time (1048576 B in 20.1 µs) \
                 gives 52.167"
            ),
            "{e}"
        );
        let e = parse(&run("52.17", "104.3")).unwrap_err().to_string();
        assert!(
            e.contains(
                "`results[0].out_of_place.bus_bw` is 104.3 GB/s, but all_reduce's bus factor on 2 ranks (1.0000)"
            ),
            "{e}"
        );
        // Four ranks (two processes of two GPUs, one device line each): the factor is 1.5.
        let four = run("52.17", "78.26")
            .replacen("\"ngpus\":1", "\"ngpus\":2", 1)
            .replacen("\"rank\":1,", "\"rank\":2,", 1)
            .replacen("\"bus_bw\":52.69", "\"bus_bw\":79.04", 1);
        assert!(parse(&four).is_ok());
        assert!(parse(&four.replacen("78.26", "52.17", 1)).unwrap_err().to_string().contains("on 4 ranks (1.5000)"));
        // Without the program or a full device list: busbw at most twice algbw.
        let unknown = run("52.17", "104.3").replacen("\"./build/all_reduce_perf\"", "\"./build/mine\"", 1);
        assert!(parse(&unknown).is_ok());
        let e = parse(&unknown.replacen("104.3", "105.5", 1)).unwrap_err().to_string();
        assert!(e.contains("more than twice its algbw"), "{e}");
        // `cpu_time` (-C 1) is the host's time: the bandwidths divide another.
        let cpu = run("52.17", "52.17").replacen("\"time\":20.1", "\"cpu_time\":25.3", 1);
        assert!(parse(&cpu).is_ok());
        let both = run("52.17", "52.17").replacen("\"time\":20.1", "\"time\":20.1,\"cpu_time\":25.3", 1);
        assert!(parse(&both).unwrap_err().to_string().contains("written twice"));
        let null = run("52.17", "52.17").replacen("\"time\":20.1", "\"time\":null", 1);
        assert!(parse(&null).unwrap_err().to_string().starts_with("`results[0].out_of_place.time` is missing"));
        let text = run("52.17", "\"N/A\"");
        assert!(parse(&text).unwrap_err().to_string().contains("`results[0].out_of_place.bus_bw` is `\"N/A\"`"));
        // In the table: a busbw edited, and the 0.00 of a small size as printed.
        let e = read_errors(TABLE.replacen("    0.00       0    10.00", "    9.00       0    10.00", 1));
        assert!(
            e.starts_with("`line 13: out_of_place busbw` is 9 GB/s, but all_reduce's bus factor on 2 ranks"),
            "{e}"
        );
        assert!(parse_text(TABLE).is_ok(), "8 B in 10.5 µs prints 0.00 GB/s");
    }

    #[test]
    fn printing_resolutions_and_listed_ranks() {
        assert_eq!(resolution("11.74"), 0.005);
        assert_eq!(resolution("19902"), 0.5);
        assert_eq!(resolution("1.2e+03"), 50.0);
        assert_eq!(resolution("5.582282"), 0.5e-6);
        assert_eq!(ranks_listed([1, 0, 2].into_iter(), 1), Some(3));
        assert_eq!(ranks_listed([0, 8].into_iter(), 8), Some(16));
        assert_eq!(ranks_listed([0, 2].into_iter(), 1), None, "rank 1 is missing");
        assert_eq!(ranks_listed([0, 0].into_iter(), 1), None);
        assert_eq!(ranks_listed(std::iter::empty(), 1), None);
        assert_eq!(bus_factor("all_gather", 4), Some(0.75));
    }

    /// A job's log of nccl-tests 2.13–2.16 (no `# Collective test starting:` line, the launcher's
    /// lines first) is read as the table it holds.
    #[test]
    fn a_job_log_without_the_programs_name_is_read() {
        let log = format!(
            "kubectl exec pod -- run_nccl_tests.sh\nHello from pod-0\n{}",
            TABLE.replacen("# Collective test starting: all_reduce_perf\n", "", 1).replacen(
                "# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703\n",
                "",
                1
            )
        );
        assert!(looks_like(&log));
        let s = parse_text(&log).expect("reads");
        // Its sizes are too small for two decimals to show the bus factor: left unnamed.
        assert_eq!((s.program.as_deref(), s.collective, s.results.len()), (None, None, 2));
        assert_eq!(unread_layout("{\"rows\": [\"# nThread 1\", \"# Avg bus bandwidth\"]}"), None);
        assert_eq!(unread_layout("# nThread 1 nGpus 1\njust text\n"), None, "one kind of line is not enough");
        let headless = "job log\n#  Rank  0 Group  0 Pid 1 on a device  0 [0x1] H200\n# Avg bus bandwidth : 1.0\n";
        assert!(!looks_like(headless));
        assert!(unread_layout(headless).expect("named").contains("neither its `# nThread` line nor its column heads"));
    }

    /// Launcher prefixes, the counts of the `# nThread` line, suffixed programs, repeated sizes,
    /// and a second run in one log.
    #[test]
    fn logs_as_launchers_write_them() {
        assert_eq!(untagged("[1,0]<stdout>:#  Rank  0 Group"), "#  Rank  0 Group");
        assert_eq!(untagged("3: # nThread 1"), "# nThread 1");
        assert_eq!(untagged("        1024   256  float"), "        1024   256  float");
        assert_eq!(
            counts("nThread 1 nGpus 1 warmup iters: 5 iters: 20 agg iters: 1 validation: 1"),
            (Some(5), Some(20))
        );
        assert_eq!(collective_of("all_gather_perf_mpi"), Some("all_gather"));
        assert_eq!(program_in("+ mpirun -np 16 ./build/all_gather_perf_mpi -b 8"), Some("all_gather_perf_mpi".into()));
        assert_eq!(program_of("all_to_all"), "alltoall_perf");
        let tagged: String = TABLE.lines().map(|l| format!("[1,0]<stdout>:{l}\n")).collect();
        assert_eq!(parse_text(&tagged).expect("tagged").results, parse_text(TABLE).expect("plain").results);
        let twice = format!("{TABLE}{}", TABLE.replacen("# Collective test starting: all_reduce_perf\n", "", 1));
        let e = parse_text(&twice).unwrap_err().to_string();
        assert!(e.starts_with("holds more than one nccl-tests run (a second `# nThread` header at line"), "{e}");
    }

    #[test]
    fn programs_name_their_collectives() {
        assert_eq!(collective_of("all_gather_perf"), Some("all_gather"));
        assert_eq!(collective_of("alltoall_perf"), Some("all_to_all"));
        assert_eq!(collective_of("sendrecv_perf"), Some("send_recv"));
        assert_eq!(collective_of("my_perf"), None);
    }
}
