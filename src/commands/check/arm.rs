//! One step of a paired check's arm as a child process: `prepare`, `capture` or the benchmark,
//! started in the arm's tree with the job's environment less what no pull request's code may
//! see ([`withheld_from_children`]), its output kept in a log file, stopped with its whole
//! process group when it runs past its time, and its failure told in one line (the step, the
//! exit status, the log's last line, the log's path).

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use commgate_core::environment::withheld_from_children;

/// What a step runs: a program with arguments, or a shell command line (`sh -c`).
pub(super) enum Program<'a> {
    Exec { program: &'a Path, args: &'a [OsString] },
    Shell(&'a str),
}

/// One child process of an arm.
pub(super) struct Step<'a> {
    /// "the base arm's prepare (`uv sync`)", for messages.
    pub what: String,
    pub program: Program<'a>,
    /// The arm's tree: the child's working directory.
    pub dir: &'a Path,
    /// Variables set for this child over the job's (after the withheld ones are removed).
    pub env: Vec<(OsString, OsString)>,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    pub timeout: Duration,
}

/// Runs `step` to its end: `Err` says which step failed and how, in one line.
pub(super) fn run(step: &Step<'_>) -> Result<(), String> {
    let log = File::create(&step.log)
        .map_err(|e| format!("{}: cannot create its log {}: {e}", step.what, step.log.display()))?;
    let err = log.try_clone().map_err(|e| format!("{}: cannot share its log: {e}", step.what))?;
    let mut cmd = match &step.program {
        Program::Exec { program, args } => {
            let mut c = Command::new(program);
            c.args(*args);
            c
        }
        Program::Shell(line) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(line);
            c
        }
    };
    cmd.current_dir(step.dir).stdin(Stdio::null()).stdout(log).stderr(err).process_group(0);
    cmd.env_clear();
    for (k, v) in std::env::vars_os() {
        if !withheld_from_children(&k.to_string_lossy()) {
            cmd.env(k, v);
        }
    }
    for (k, v) in &step.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| format!("{} could not start: {e}", step.what))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > step.timeout => {
                kill_group(child.id());
                let _ = child.wait();
                return Err(format!(
                    "{} ran past {} s and was stopped (its log: {})",
                    step.what,
                    step.timeout.as_secs(),
                    step.log.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                kill_group(child.id());
                return Err(format!("{} could not be waited for: {e}", step.what));
            }
        }
    };
    // Whatever it left running in its group goes with it.
    kill_group(child.id());
    if status.success() {
        return Ok(());
    }
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "failed".to_string(),
    };
    let last = last_line(&step.log).map(|l| format!(": {l}")).unwrap_or_default();
    Err(format!("{} {how}{last} (its log: {})", step.what, step.log.display()))
}

/// Stops every process of the group `pid` leads (the step and what it started).
fn kill_group(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        // The group may be gone already: nothing to stop then.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The last non-empty line of the log's last 4 KiB, at most 300 characters (what the step said
/// last: usually why it failed).
fn last_line(path: &Path) -> Option<String> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut tail = Vec::new();
    f.take(4096).read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().map(str::trim).rev().find(|l| !l.is_empty())?;
    Some(line.chars().take(300).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step<'a>(dir: &'a Path, line: &'a str, timeout: Duration) -> Step<'a> {
        Step {
            what: "the head arm's prepare".to_string(),
            program: Program::Shell(line),
            dir,
            env: vec![("ARM_UNDER_TEST".into(), "head".into())],
            log: dir.join("step.log"),
            timeout,
        }
    }

    #[test]
    fn a_step_runs_in_its_tree_with_its_variables() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let s = step(tmp.path(), "echo $ARM_UNDER_TEST > arm.txt", Duration::from_secs(30));
        assert_eq!(run(&s), Ok(()));
        assert_eq!(std::fs::read_to_string(tmp.path().join("arm.txt")).expect("written"), "head\n");
    }

    #[test]
    fn a_failing_step_says_how_and_what_it_said_last() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = run(&step(tmp.path(), "echo working; echo 'no lock file' >&2; exit 3", Duration::from_secs(30)))
            .unwrap_err();
        assert!(e.starts_with("the head arm's prepare exited 3: no lock file (its log: "), "{e}");
    }

    #[test]
    fn a_step_past_its_time_is_stopped_with_what_it_started() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let started = Instant::now();
        let e = run(&step(tmp.path(), "sleep 30 & sleep 30", Duration::from_millis(300))).unwrap_err();
        assert!(e.contains("ran past 0 s and was stopped"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10), "stopped, not waited for");
    }
}
