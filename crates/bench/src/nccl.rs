//! NCCL's algorithm and protocol for a run (the result's `software.nccl_choice`): what
//! `--nccl-algo` and `--nccl-proto` pin ([`Algo`], [`Proto`], [`Tuning`]), and, on the CUDA
//! backend when they do not pin both, what NCCL chose, read from NCCL's own tuning log
//! ([`TuningLog`], parsed by [`choice_from_log`]).
//!
//! NCCL reads `NCCL_ALGO`, `NCCL_PROTO` and its debug settings from the process environment
//! when it initialises, and has no other way to be told. So [`TuningLog::start`] and
//! [`Tuning::environment`] give the variables, and [`apply`] puts them into commgate's own
//! environment once, on the main thread, before the backend is probed or any thread is started
//! (the CUDA backend runs NCCL in this process; a launcher's ranks are each a commgate process
//! that does the same). NCCL opens its debug file once per process, so every run of a process
//! appends to one file and each run reads what it added ([`Mark`]).
//!
//! The log is NCCL's `INFO(NCCL_TUNING, …)` line, printed by rank 0 of a communicator for each
//! collective it enqueues (`src/enqueue.cc` in NVIDIA/nccl), in three shapes across the versions
//! pip ships:
//! - 2.21–2.22: `"%ld Bytes -> Algo %d proto %d time %f"` (v2.21.5-1 line 1534, v2.22.3-1 line 1613);
//! - 2.23: `"%s: %ld Bytes -> Algo %d proto %d time %f"` (v2.23.4-1 line 1855);
//! - 2.24 and later: `"%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"` (v2.24.3-1
//!   line 678, v2.27.3-1 line 748), names from `ncclAlgoToString`/`ncclProtoToString`
//!   (`src/collectives.cc`: `RING`, `NVLS_TREE`, `SIMPLE`, …);
//!
//! each after NCCL's prefix `"%s:%d:%d [%d] NCCL INFO "` (host, pid, tid, device; `src/debug.cc`).
//! The numbers are `NCCL_ALGO_*` and `NCCL_PROTO_*` of `src/include/nccl_common.h` (Tree 0, Ring
//! 1, CollNetDirect 2, CollNetChain 3, NVLS 4, NVLSTree 5, PAT 6; LL 0, LL128 1, Simple 2). The
//! benchmark's calls are the all-reduces of its payload's size (the oldest shape names no
//! collective, so the size is what tells them apart). The file is untrusted: at most
//! [`MAX_LOG_BYTES`] are read, lines over [`MAX_LINE_BYTES`] are skipped, and nothing in it can
//! fail the run: no choice found is `None`.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// An NCCL algorithm, as `NCCL_ALGO` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Algo {
    Tree,
    Ring,
    CollNetDirect,
    CollNetChain,
    Nvls,
    NvlsTree,
    Pat,
}

/// An NCCL protocol, as `NCCL_PROTO` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Proto {
    Ll,
    Ll128,
    Simple,
}

/// Each algorithm: its `NCCL_ALGO` name (the canonical spelling), its name in the tuning log of
/// NCCL 2.24 and later, in `NCCL_ALGO_*` order (the index is the older logs' number).
const ALGOS: [(Algo, &str, &str); 7] = [
    (Algo::Tree, "Tree", "TREE"),
    (Algo::Ring, "Ring", "RING"),
    (Algo::CollNetDirect, "CollNetDirect", "COLLNET_DIRECT"),
    (Algo::CollNetChain, "CollNetChain", "COLLNET_CHAIN"),
    (Algo::Nvls, "NVLS", "NVLS"),
    (Algo::NvlsTree, "NVLSTree", "NVLS_TREE"),
    (Algo::Pat, "PAT", "PAT"),
];

/// As [`ALGOS`], for protocols (`NCCL_PROTO_*` order).
const PROTOS: [(Proto, &str, &str); 3] =
    [(Proto::Ll, "LL", "LL"), (Proto::Ll128, "LL128", "LL128"), (Proto::Simple, "Simple", "SIMPLE")];

/// The entry of `table` named `s`: its canonical or log name, in any case.
fn named<T: Copy>(table: &[(T, &str, &str)], s: &str) -> Option<T> {
    let s = s.trim();
    table.iter().find(|(_, name, log)| name.eq_ignore_ascii_case(s) || log.eq_ignore_ascii_case(s)).map(|e| e.0)
}

fn canonical<T: Copy + PartialEq>(table: &[(T, &'static str, &str)], v: T) -> &'static str {
    table.iter().find(|e| e.0 == v).map_or("", |e| e.1)
}

fn list<T>(table: &[(T, &str, &str)]) -> String {
    table.iter().map(|e| e.1).collect::<Vec<_>>().join(", ")
}

impl Algo {
    /// The canonical spelling (`NVLSTree`), as `NCCL_ALGO` and the result file hold it.
    pub fn as_str(self) -> &'static str {
        canonical(&ALGOS, self)
    }
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        canonical(&PROTOS, self)
    }
}

impl std::str::FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        named(&ALGOS, s).ok_or_else(|| format!("{s:?} is not an NCCL algorithm: use one of {}", list(&ALGOS)))
    }
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        named(&PROTOS, s).ok_or_else(|| format!("{s:?} is not an NCCL protocol: use one of {}", list(&PROTOS)))
    }
}

impl TryFrom<String> for Algo {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl TryFrom<String> for Proto {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::fmt::Display for Algo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the user pinned (`--nccl-algo`, `--nccl-proto`, `[bench] nccl_algo`, `nccl_proto`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    pub algo: Option<Algo>,
    pub proto: Option<Proto>,
}

impl Tuning {
    /// `ALGO/PROTO` when both are pinned: then that is NCCL's choice, and no log is needed.
    pub fn fixed_choice(&self) -> Option<String> {
        Some(format!("{}/{}", self.algo?, self.proto?))
    }

    /// The variables that pin them for NCCL (and that the result records in `nccl_env`).
    pub fn environment(&self) -> Vec<(String, String)> {
        let algo = self.algo.map(|a| ("NCCL_ALGO".to_string(), a.as_str().to_string()));
        let proto = self.proto.map(|p| ("NCCL_PROTO".to_string(), p.as_str().to_string()));
        algo.into_iter().chain(proto).collect()
    }

    /// The recorded `NCCL_*` variables of a run: the environment's, less the ones commgate set
    /// only to read the tuning log (`log_on`: the user did not set them, and they would read as a
    /// software change), with the pinned algorithm and protocol (which the backend was given,
    /// also where it has no NCCL to give them to).
    pub fn recorded(&self, mut nccl_env: BTreeMap<String, String>, log_on: bool) -> BTreeMap<String, String> {
        if log_on {
            for (k, _) in LOG_VARIABLES {
                nccl_env.remove(k);
            }
        }
        nccl_env.extend(self.environment());
        nccl_env
    }
}

/// The debug settings that make NCCL write its tuning choices to a file (`%h`, `%p`: host and
/// pid, expanded by NCCL); the file's variable is filled in by [`TuningLog::start`].
const LOG_VARIABLES: [(&str, &str); 3] =
    [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "TUNING"), ("NCCL_DEBUG_FILE", "")];
/// Set by commgate to the log's directory, so a process that re-executes itself (to load
/// `libnccl.so.2`, `cuda::prepare_at_start`) knows the debug settings it inherits are its own.
pub const LOG_DIR_VARIABLE: &str = commgate_core::environment::NCCL_TUNING_LOG.name;
/// The log directory's name starts with this, under the temp directory.
const DIR_PREFIX: &str = "commgate-nccl-log-";
/// NCCL's file name in the directory (`NCCL_DEBUG_FILE`'s last part).
const FILE_PATTERN: &str = "nccl.%h.%p";
/// At most this much of the log is read per run: a run of 200 repeats logs about 600 lines.
pub const MAX_LOG_BYTES: u64 = 4 << 20;
/// A longer line is not NCCL's tuning line.
pub const MAX_LINE_BYTES: usize = 1024;
/// At most this many files of the directory are looked at.
const MAX_FILES: usize = 64;

/// The private directory NCCL writes its tuning log to, for the life of the command; removed
/// when dropped.
#[derive(Debug)]
pub struct TuningLog {
    dir: PathBuf,
}

impl TuningLog {
    /// The log for a run that `tuning` does not pin completely, with the variables to [`apply`];
    /// `None` when both are pinned or the user set NCCL's debug settings themselves (their
    /// logging is theirs; the choice is then not recorded). `var` reads the environment.
    pub fn start(tuning: &Tuning, var: impl Fn(&str) -> Option<String>) -> Option<(TuningLog, Vec<(String, String)>)> {
        if tuning.fixed_choice().is_some() {
            return None;
        }
        let set = |k: &str| var(k).is_some_and(|v| !v.is_empty());
        // A process re-executed by commgate inherits its own settings: the same directory.
        if let Some(dir) = var(LOG_DIR_VARIABLE).map(PathBuf::from).filter(|d| is_ours(d)) {
            let file = dir.join(FILE_PATTERN);
            if var("NCCL_DEBUG_FILE").as_deref() == file.to_str() && dir.is_dir() {
                return Some((TuningLog { dir }, Vec::new()));
            }
        }
        if LOG_VARIABLES.iter().any(|(k, _)| set(k)) {
            return None;
        }
        let dir = tempfile::Builder::new().prefix(DIR_PREFIX).tempdir().ok()?.keep();
        let file = dir.join(FILE_PATTERN).to_str()?.to_string();
        let mut vars: Vec<(String, String)> = LOG_VARIABLES
            .iter()
            .map(|(k, v)| (k.to_string(), if v.is_empty() { file.clone() } else { v.to_string() }))
            .collect();
        vars.push((LOG_DIR_VARIABLE.to_string(), dir.display().to_string()));
        Some((TuningLog { dir }, vars))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TuningLog {
    fn drop(&mut self) {
        if is_ours(&self.dir) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A `commgate-nccl-log-*` directory right under the temp directory.
fn is_ours(dir: &Path) -> bool {
    dir.parent() == Some(std::env::temp_dir().as_path())
        && dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX))
}

/// Puts `vars` into this process's environment, for NCCL to read when it initialises.
///
/// Call it on the main thread before any other thread exists and before CUDA or NCCL is loaded
/// (the binary's `commands/` do, right after the settings are resolved): setting a variable while another
/// thread reads the environment is a data race in libc.
pub fn apply(vars: &[(String, String)]) {
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
}

/// How far each log file had grown before a run: the run reads only what it added.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mark(BTreeMap<PathBuf, u64>);

/// NCCL's log files in `dir` (regular files named `nccl.*`, no links), at most [`MAX_FILES`].
fn log_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("nccl."))
        .filter_map(|e| {
            let m = std::fs::symlink_metadata(e.path()).ok()?;
            m.file_type().is_file().then(|| (e.path(), m.len()))
        })
        .take(MAX_FILES)
        .collect()
}

/// The log's size now, before a run.
pub fn mark(dir: &Path) -> Mark {
    Mark(log_files(dir).into_iter().collect())
}

/// What NCCL chose for the run since `before`: the most frequent `ALGO/PROTO` of the all-reduces
/// of `payload_bytes` it logged (`None` when it logged none, or nothing could be read).
pub fn choice_since(dir: &Path, before: &Mark, payload_bytes: u64) -> Option<String> {
    let mut text = String::new();
    let mut budget = MAX_LOG_BYTES;
    for (path, len) in log_files(dir) {
        let from = before.0.get(&path).copied().unwrap_or(0).min(len);
        let take = (len - from).min(budget);
        if take == 0 {
            continue;
        }
        let Ok(mut f) = std::fs::File::open(&path) else { continue };
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(from)).is_err() || f.take(take).read_to_end(&mut bytes).is_err() {
            continue;
        }
        budget -= bytes.len() as u64;
        text.push_str(&String::from_utf8_lossy(&bytes));
        text.push('\n');
    }
    choice_from_log(&text, payload_bytes)
}

/// The most frequent `ALGO/PROTO` (canonical names, `Ring/LL128`) among NCCL's tuning lines for
/// all-reduces of `payload_bytes` in `log` (see the module doc for the shapes read); ties go to
/// the choice seen first. `None` when there is no such line.
pub fn choice_from_log(log: &str, payload_bytes: u64) -> Option<String> {
    let mut counts: BTreeMap<(Algo, Proto), (usize, usize)> = BTreeMap::new();
    for (i, line) in log.lines().filter(|l| l.len() <= MAX_LINE_BYTES).enumerate() {
        if let Some(choice) = tuning_line(line, payload_bytes) {
            let e = counts.entry(choice).or_insert((0, i));
            e.0 += 1;
        }
    }
    let ((algo, proto), _) = counts.into_iter().max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.1 .1.cmp(&a.1 .1)))?;
    Some(format!("{algo}/{proto}"))
}

/// One line's choice, when it is NCCL's tuning line for an all-reduce of `payload_bytes`.
fn tuning_line(line: &str, payload_bytes: u64) -> Option<(Algo, Proto)> {
    let (_, message) = line.split_once(" NCCL INFO ")?;
    let (size, choice) = message.split_once(" Bytes -> Algo ")?;
    let bytes = match size.split_once(": ") {
        Some((func, bytes)) if func.trim() == "AllReduce" => bytes,
        Some(_) => return None,
        None => size,
    };
    if bytes.trim().parse::<u64>().ok()? != payload_bytes {
        return None;
    }
    let mut words = choice.split_whitespace();
    let algo = words.next()?;
    (words.next()? == "proto").then_some(())?;
    let proto = words.next()?;
    let algo = match algo.parse::<usize>() {
        Ok(i) => ALGOS.get(i)?.0,
        Err(_) => named(&ALGOS, algo)?,
    };
    let proto = match proto.parse::<usize>() {
        Ok(i) => PROTOS.get(i)?.0,
        Err(_) => named(&PROTOS, proto)?,
    };
    Some((algo, proto))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8 MiB per rank: the default bfloat16 payload of 4Mi elements.
    const BYTES: u64 = 8 << 20;

    #[test]
    fn names_are_nccls_in_any_case_and_stored_canonically() {
        assert_eq!("ring".parse::<Algo>(), Ok(Algo::Ring));
        assert_eq!("nvlstree".parse::<Algo>().map(Algo::as_str), Ok("NVLSTree"));
        assert_eq!("COLLNETDIRECT".parse::<Algo>().map(Algo::as_str), Ok("CollNetDirect"));
        assert_eq!("ll128".parse::<Proto>().map(Proto::as_str), Ok("LL128"));
        assert_eq!("SIMPLE".parse::<Proto>().map(Proto::as_str), Ok("Simple"));
        let e = "Butterfly".parse::<Algo>().unwrap_err();
        assert_eq!(
            e,
            "\"Butterfly\" is not an NCCL algorithm: use one of Tree, Ring, CollNetDirect, CollNetChain, NVLS, \
             NVLSTree, PAT"
        );
        assert!("LL64".parse::<Proto>().unwrap_err().ends_with("use one of LL, LL128, Simple"));
    }

    #[test]
    fn a_pinned_pair_is_the_choice_and_is_recorded() {
        let both = Tuning { algo: Some(Algo::Ring), proto: Some(Proto::Ll128) };
        assert_eq!(both.fixed_choice().as_deref(), Some("Ring/LL128"));
        assert_eq!(Tuning { proto: None, ..both }.fixed_choice(), None);
        let user = BTreeMap::from([
            ("NCCL_ALGO".to_string(), "Tree".to_string()),
            ("NCCL_DEBUG".to_string(), "INFO".to_string()),
            ("NCCL_IB_HCA".to_string(), "mlx5".to_string()),
        ]);
        let recorded = both.recorded(user.clone(), false);
        assert_eq!(recorded["NCCL_ALGO"], "Ring", "the flag wins");
        assert_eq!((recorded["NCCL_PROTO"].as_str(), recorded["NCCL_DEBUG"].as_str()), ("LL128", "INFO"));
        let ours = Tuning::default().recorded(user, true);
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            ["NCCL_ALGO", "NCCL_IB_HCA"],
            "the log's settings are not the user's"
        );
    }

    #[test]
    fn the_log_is_asked_for_only_when_the_user_has_not_set_nccls_debug_settings() {
        assert!(TuningLog::start(&Tuning { algo: Some(Algo::Tree), proto: Some(Proto::Ll) }, |_| None).is_none());
        let debug = |k: &str| (k == "NCCL_DEBUG").then(|| "WARN".to_string());
        assert!(TuningLog::start(&Tuning::default(), debug).is_none());
        let (log, vars) = TuningLog::start(&Tuning::default(), |_| None).expect("a log");
        let dir = log.dir().to_path_buf();
        assert!(dir.is_dir() && is_ours(&dir), "{dir:?}");
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("NCCL_DEBUG").as_deref(), Some("INFO"));
        assert_eq!(get("NCCL_DEBUG_SUBSYS").as_deref(), Some("TUNING"));
        assert_eq!(get("NCCL_DEBUG_FILE"), dir.join("nccl.%h.%p").to_str().map(String::from));
        // The same process after re-executing itself: its own settings, the same directory.
        let again = TuningLog::start(&Tuning::default(), |k| get(k));
        let (adopted, none) = again.expect("adopted");
        assert_eq!((adopted.dir(), none.len()), (dir.as_path(), 0));
        std::mem::forget(adopted);
        drop(log);
        assert!(!dir.exists(), "removed with the command");
    }

    /// Lines as NCCL prints them, from the format strings of each version (module doc).
    const V2_27: &str =
        "gpu-7:4242:4242 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}";
    const V2_23: &str = "gpu-7:4242:4242 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo 5 proto 2 time 61.503998";
    const V2_21: &str = "gpu-7:4242:4242 [0] NCCL INFO 8388608 Bytes -> Algo 0 proto 2 time 48.253002";

    #[test]
    fn each_versions_tuning_line_is_read() {
        assert_eq!(choice_from_log(V2_27, BYTES).as_deref(), Some("Ring/LL128"));
        assert_eq!(choice_from_log(V2_23, BYTES).as_deref(), Some("NVLSTree/Simple"));
        assert_eq!(choice_from_log(V2_21, BYTES).as_deref(), Some("Tree/Simple"));
        let nvls =
            "h:1:2 [3] NCCL INFO AllReduce: 8388608 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..31}";
        assert_eq!(choice_from_log(nvls, BYTES).as_deref(), Some("NVLSTree/Simple"));
    }

    #[test]
    fn the_most_frequent_choice_of_the_benchmarks_all_reduces_wins() {
        let other_size = V2_27.replace("8388608", "1024");
        let gather = V2_27.replace("AllReduce", "AllGather");
        let simple = V2_27.replace("LL128", "SIMPLE");
        let log = [
            "gpu-7:4242:4242 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
            &simple,
            V2_27,
            &other_size,
            &other_size,
            &gather,
            &gather,
            V2_27,
            "gpu-7:4242:4242 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo WARP proto LL128 channel{Lo..Hi}={0..1}",
        ]
        .join("\n");
        assert_eq!(choice_from_log(&log, BYTES).as_deref(), Some("Ring/LL128"));
        let tie = [simple.as_str(), V2_27].join("\n");
        assert_eq!(choice_from_log(&tie, BYTES).as_deref(), Some("Ring/Simple"), "the first seen");
    }

    #[test]
    fn hostile_logs_give_no_choice_and_no_panic() {
        let long = format!("{V2_27}{}", " ".repeat(MAX_LINE_BYTES));
        for log in [
            "",
            "\0\u{fffd}garbage",
            "x NCCL INFO AllReduce: 8388608 Bytes -> Algo 99 proto 1 time 1",
            "x NCCL INFO AllReduce: 8388608 Bytes -> Algo 1 proto 7 time 1",
            "x NCCL INFO AllReduce: -1 Bytes -> Algo 1 proto 1 time 1",
            "x NCCL INFO AllReduce: 8388608 Bytes -> Algo",
            "x NCCL INFO AllReduce: 8388608 Bytes -> Algo RING",
            "x NCCL INFO AllReduce: 8388608 Bytes -> Algo RING prot LL",
            long.as_str(),
        ] {
            assert_eq!(choice_from_log(log, BYTES), None, "{log:?}");
        }
    }

    #[test]
    fn each_run_reads_what_it_added_to_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("nccl.gpu-7.4242");
        std::fs::write(&file, format!("{V2_27}\n")).expect("write");
        let before = mark(dir.path());
        assert_eq!(choice_since(dir.path(), &Mark::default(), BYTES).as_deref(), Some("Ring/LL128"));
        assert_eq!(choice_since(dir.path(), &before, BYTES), None, "nothing new");
        let mut text = std::fs::read_to_string(&file).expect("read");
        text.push_str(&format!("{V2_21}\n"));
        std::fs::write(&file, text).expect("append");
        assert_eq!(choice_since(dir.path(), &before, BYTES).as_deref(), Some("Tree/Simple"));
        std::os::unix::fs::symlink(&file, dir.path().join("nccl.link")).expect("link");
        assert_eq!(log_files(dir.path()).len(), 1, "links are not followed");
        assert_eq!(choice_since(Path::new("/nonexistent-commgate"), &before, BYTES), None);
    }
}
