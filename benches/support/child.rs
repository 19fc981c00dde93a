//! The shape shared by the benches that measure in a child process (so its `VmHWM` counts the
//! measured work alone): `main` runs the child when its variable is set and the parent
//! otherwise, the parent works in a scratch directory it always removes, and sizes come from
//! environment variables.

use std::error::Error;
use std::path::Path;
use std::process::ExitCode;

/// Runs `child` on the path in `child_env` when it is set, `parent` otherwise; an error is one
/// line on stderr prefixed with the bench's `name`, and exit 1.
pub fn main(
    name: &str,
    child_env: &str,
    child: fn(&Path) -> Result<(), Box<dyn Error>>,
    parent: fn() -> Result<(), Box<dyn Error>>,
) -> ExitCode {
    let outcome = match std::env::var_os(child_env) {
        Some(path) => child(Path::new(&path)),
        None => parent(),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The number in the environment variable `name`, or `default` when it is unset.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> Result<T, Box<dyn Error>> {
    match std::env::var(name) {
        Ok(text) => text.parse().map_err(|_| format!("{name}={text} is not a number").into()),
        Err(_) => Ok(default),
    }
}

/// Runs `work` in a fresh scratch directory under the system's temporary directory (named after
/// `label` and this process), removing it afterwards whatever `work` returned.
pub fn in_scratch_dir(
    label: &str,
    work: impl FnOnce(&Path) -> Result<(), Box<dyn Error>>,
) -> Result<(), Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = work(&dir);
    let cleanup = std::fs::remove_dir_all(&dir);
    result?;
    cleanup.map_err(|e| format!("removing {}: {e}", dir.display()).into())
}

/// `VmHWM` of this process in bytes (Linux only; `None` elsewhere).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
