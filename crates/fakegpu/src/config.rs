//! What the emulated machine is and which faults it injects, read once from the environment
//! (`COMMGATE_FAKEGPU_*`). Pure over the variables, so every setting is tested without a process.

use std::fmt;
use std::sync::OnceLock;

/// Prefix of every variable the emulator reads.
pub const PREFIX: &str = "COMMGATE_FAKEGPU_";

/// The name every emulated device reports (`cuDeviceGetName`): commgate recognises it and labels
/// the run as emulated, never as a GPU (one constant, commgate's own).
pub use commgate_core::result::EMULATED_GPU_NAME as DEVICE_NAME;

/// Every variable the emulator reads (without [`PREFIX`]), as `docs/emulator.md` lists them.
pub const VARIABLES: [&str; 8] = ["DEVICES", "CUDA", "NCCL", "MEMORY_MIB", "GFLOPS", "BUSBW_GBPS", "FAULT", "LEDGER"];

/// Every fault's name in `COMMGATE_FAKEGPU_FAULT`, as `docs/emulator.md` lists them.
pub const FAULT_NAMES: [&str; 7] =
    ["alloc-fails", "nccl-init-fails", "async-error-after", "hang-rank", "slow-rank", "stub-library", "no-device"];

/// One fault, injected where a real machine would fail.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The `n`-th device allocation (1-based, counted per process) fails with out of memory.
    AllocFails(u64),
    /// `ncclCommInitAll` / `ncclCommInitRank` fail (`ncclSystemError`).
    NcclInitFails,
    /// After `n` all-reduces completed on a communicator, its transport breaks: the asynchronous
    /// error turns to `ncclRemoteError` and its later collectives never finish (until aborted).
    AsyncErrorAfter(u64),
    /// Rank `rank`'s collectives from the `after`-th on never finish (until aborted).
    HangRank { rank: u32, after: u64 },
    /// Rank `rank`'s collectives take `factor` times as long as the others'.
    SlowRank { rank: u32, factor: f64 },
    /// `cuInit` answers `CUDA_ERROR_STUB_LIBRARY`: the toolkit's stub, not a driver.
    StubLibrary,
    /// `cuDeviceGetCount` answers 0: no device visible.
    NoDevice,
}

/// The emulated machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Devices this process sees (`COMMGATE_FAKEGPU_DEVICES`, default 2).
    pub devices: u32,
    /// What `cuDriverGetVersion` answers, 1000·major + 10·minor (`COMMGATE_FAKEGPU_CUDA`, "13.0").
    pub cuda_version: i32,
    /// NCCL's version, major.minor.patch (`COMMGATE_FAKEGPU_NCCL`, "2.27.3").
    pub nccl_version: (u32, u32, u32),
    /// Memory per device in bytes (`COMMGATE_FAKEGPU_MEMORY_MIB`, default 4096 MiB).
    pub memory_bytes: u64,
    /// The simulated GEMM rate for matmuls too big to compute (`COMMGATE_FAKEGPU_GFLOPS`, 200).
    pub gemm_gflops: f64,
    /// The simulated bus bandwidth of an all-reduce in GB/s (`COMMGATE_FAKEGPU_BUSBW_GBPS`, 20):
    /// a collective lasts at least 2·(n−1)/n·bytes / busbw, so a larger payload takes longer.
    pub busbw_gbps: f64,
    /// Faults to inject (`COMMGATE_FAKEGPU_FAULT`, comma-separated).
    pub faults: Vec<Fault>,
    /// Where every handle made or destroyed and every violation is appended, one line each
    /// (`COMMGATE_FAKEGPU_LEDGER`): the process may end with `_exit`, so nothing waits for exit.
    pub ledger: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            devices: 2,
            cuda_version: 13000,
            nccl_version: (2, 27, 3),
            memory_bytes: 4096 << 20,
            gemm_gflops: 200.0,
            busbw_gbps: 20.0,
            faults: Vec::new(),
            ledger: None,
        }
    }
}

/// A variable the emulator cannot read: the run stops with this line rather than emulate a
/// machine nobody asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct BadSetting {
    pub variable: String,
    pub value: String,
    pub expected: &'static str,
}

impl fmt::Display for BadSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}={:?} is not understood: expected {}", PREFIX, self.variable, self.value, self.expected)
    }
}

impl Config {
    /// Reads the settings through `var` (the variable's name without [`PREFIX`]).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, BadSetting> {
        let mut config = Config::default();
        let bad = |variable: &str, value: &str, expected| BadSetting {
            variable: variable.to_string(),
            value: value.to_string(),
            expected,
        };
        if let Some(v) = var("DEVICES") {
            config.devices = v.trim().parse().ok().filter(|&n| n <= 64).ok_or_else(|| bad("DEVICES", &v, "0..=64"))?;
        }
        if let Some(v) = var("CUDA") {
            config.cuda_version = parse_version(&v)
                .and_then(|(major, minor, _)| i32::try_from(major * 1000 + minor * 10).ok())
                .ok_or_else(|| bad("CUDA", &v, "a CUDA version such as 12.8 or 13.0"))?;
        }
        if let Some(v) = var("NCCL") {
            config.nccl_version = parse_version(&v)
                .filter(|&(major, minor, patch)| major == 2 && minor < 100 && patch < 100)
                .ok_or_else(|| bad("NCCL", &v, "an NCCL version such as 2.18.5 or 2.27.3"))?;
        }
        if let Some(v) = var("MEMORY_MIB") {
            config.memory_bytes = v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|&mib| (1..=1 << 20).contains(&mib))
                .map(|mib| mib << 20)
                .ok_or_else(|| bad("MEMORY_MIB", &v, "1..=1048576"))?;
        }
        if let Some(v) = var("GFLOPS") {
            config.gemm_gflops = positive(&v).ok_or_else(|| bad("GFLOPS", &v, "a positive number"))?;
        }
        if let Some(v) = var("BUSBW_GBPS") {
            config.busbw_gbps = positive(&v).ok_or_else(|| bad("BUSBW_GBPS", &v, "a positive number"))?;
        }
        if let Some(v) = var("FAULT") {
            config.faults = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|one| parse_fault(one).ok_or_else(|| bad("FAULT", one, FAULTS)))
                .collect::<Result<_, _>>()?;
        }
        config.ledger = var("LEDGER").filter(|p| !p.is_empty());
        Ok(config)
    }

    /// `ncclGetVersion`'s code: 10000·major + 100·minor + patch.
    pub fn nccl_code(&self) -> i32 {
        let (major, minor, patch) = self.nccl_version;
        i32::try_from(major * 10000 + minor * 100 + patch).unwrap_or(i32::MAX)
    }

    /// The first fault `pick` selects.
    pub fn fault<T>(&self, pick: impl Fn(&Fault) -> Option<T>) -> Option<T> {
        self.faults.iter().find_map(pick)
    }
}

/// The faults `COMMGATE_FAKEGPU_FAULT` takes, as an error message lists them.
const FAULTS: &str = "alloc-fails[=N], nccl-init-fails, async-error-after=N, hang-rank=R[@N], slow-rank=R:FACTOR, \
                      stub-library or no-device";

fn parse_fault(text: &str) -> Option<Fault> {
    let (name, value) = text.split_once('=').map_or((text, None), |(n, v)| (n, Some(v)));
    match (name, value) {
        ("alloc-fails", None) => Some(Fault::AllocFails(1)),
        ("alloc-fails", Some(n)) => n.parse().ok().filter(|&n| n > 0).map(Fault::AllocFails),
        ("nccl-init-fails", None) => Some(Fault::NcclInitFails),
        ("async-error-after", Some(n)) => n.parse().ok().map(Fault::AsyncErrorAfter),
        ("hang-rank", Some(v)) => {
            let (rank, after) = v.split_once('@').map_or((v, "0"), |(r, a)| (r, a));
            Some(Fault::HangRank { rank: rank.parse().ok()?, after: after.parse().ok()? })
        }
        ("slow-rank", Some(v)) => {
            let (rank, factor) = v.split_once(':')?;
            Some(Fault::SlowRank { rank: rank.parse().ok()?, factor: positive(factor).filter(|&f| f >= 1.0)? })
        }
        ("stub-library", None) => Some(Fault::StubLibrary),
        ("no-device", None) => Some(Fault::NoDevice),
        _ => None,
    }
}

fn positive(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0)
}

/// "2.27.3" or "13.0" as (major, minor, patch).
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().unwrap_or(Some(0))?;
    let patch = parts.next().unwrap_or(Some(0))?;
    (parts.next().is_none() && major < 100 && minor < 100).then_some((major, minor, patch))
}

/// The settings, read once; an unreadable variable stops the process with one line (the
/// emulator never runs a machine nobody asked for).
pub fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_vars(|name| std::env::var(format!("{PREFIX}{name}")).ok()).unwrap_or_else(|bad| {
            eprintln!("commgate-fakegpu: {bad}");
            std::process::exit(2)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manual lists every variable and fault the emulator reads, and each one listed is read.
    #[test]
    fn the_manual_lists_every_variable_and_fault() {
        let manual =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/emulator.md")).unwrap_or_default();
        for variable in VARIABLES {
            assert!(manual.contains(&format!("`{PREFIX}{variable}`")), "docs/emulator.md lacks {PREFIX}{variable}");
            // Each listed variable is one `from_vars` asks for.
            let asked = std::cell::RefCell::new(Vec::new());
            let _ = Config::from_vars(|name| {
                asked.borrow_mut().push(name.to_string());
                None
            });
            assert!(asked.borrow().iter().any(|a| a == variable), "{variable} is not read");
        }
        for fault in FAULT_NAMES {
            assert!(manual.contains(&format!("`{fault}")), "docs/emulator.md lacks the fault {fault}");
            assert!(FAULTS.contains(fault), "{fault} is missing from the error message's list");
        }
    }

    fn read(pairs: &[(&str, &str)]) -> Result<Config, BadSetting> {
        Config::from_vars(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn the_default_machine_has_two_devices_and_current_libraries() {
        let config = read(&[]).unwrap_or_default();
        assert_eq!((config.devices, config.cuda_version, config.nccl_code()), (2, 13000, 22703));
        assert!(config.faults.is_empty());
    }

    #[test]
    fn versions_and_sizes_are_read_as_people_write_them() {
        let config = read(&[("CUDA", "12.8"), ("NCCL", "2.21.5"), ("DEVICES", "8"), ("MEMORY_MIB", "64")]);
        let Ok(config) = config else { panic!("{config:?}") };
        assert_eq!((config.cuda_version, config.nccl_code(), config.devices), (12080, 22105, 8));
        assert_eq!(config.memory_bytes, 64 << 20);
    }

    #[test]
    fn every_fault_is_read_and_nonsense_is_refused_with_the_list() {
        let config = read(&[(
            "FAULT",
            "alloc-fails=3, nccl-init-fails,async-error-after=5,hang-rank=1@4,slow-rank=0:2.5,stub-library,no-device",
        )]);
        let Ok(config) = config else { panic!("{config:?}") };
        assert_eq!(
            config.faults,
            [
                Fault::AllocFails(3),
                Fault::NcclInitFails,
                Fault::AsyncErrorAfter(5),
                Fault::HangRank { rank: 1, after: 4 },
                Fault::SlowRank { rank: 0, factor: 2.5 },
                Fault::StubLibrary,
                Fault::NoDevice,
            ]
        );
        assert_eq!(
            read(&[("FAULT", "hang-rank=1")]).map(|c| c.faults),
            Ok(vec![Fault::HangRank { rank: 1, after: 0 }])
        );
        for nonsense in ["alloc-fails=0", "slow-rank=1:0.5", "explode", "hang-rank=x"] {
            let Err(error) = read(&[("FAULT", nonsense)]) else { panic!("{nonsense} accepted") };
            assert!(error.to_string().contains("stub-library"), "{error}");
        }
        assert!(read(&[("NCCL", "3.0.0")]).is_err());
        assert!(read(&[("DEVICES", "-1")]).is_err());
        assert!(read(&[("GFLOPS", "nan")]).is_err());
    }
}
