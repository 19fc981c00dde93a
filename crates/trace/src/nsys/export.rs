//! `.nsys-rep` reports: exported to SQLite by the `nsys` on `PATH` into a private temporary
//! directory (removed afterwards), with an environment holding only `PATH` and `HOME`, so that
//! no token of the CI job reaches it. Without `nsys`, the error gives the exact command to run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{err, NsysError};

/// How long one export may take before it is stopped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether `path` is named like an Nsight Systems report (`.nsys-rep`, or the older `.qdrep`).
pub fn is_report_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".nsys-rep") || name.ends_with(".qdrep")
}

/// The command that exports `report` to `output`, as the user would type it.
pub fn command_line(report: &Path, output: &Path) -> String {
    format!("nsys export --type sqlite --output {} {}", quote(output), quote(report))
}

fn quote(p: &Path) -> String {
    let s = p.display().to_string();
    if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b)) {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The suggested output of a manual export: the report's name with `.sqlite`.
fn suggested_output(report: &Path) -> PathBuf {
    let name = report.file_name().and_then(|n| n.to_str()).unwrap_or("report.nsys-rep");
    let stem = name.strip_suffix(".nsys-rep").or_else(|| name.strip_suffix(".qdrep")).unwrap_or(name);
    report.with_file_name(format!("{stem}.sqlite"))
}

/// `nsys` on `path_var` (a `PATH` value), if any.
fn find_nsys(path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?).map(|d| d.join("nsys")).find(|p| p.is_file())
}

/// Exports `report` into `dir` and returns the database's path.
pub fn export(report: &Path, dir: &Path) -> Result<PathBuf, NsysError> {
    let path_var = std::env::var_os("PATH");
    let Some(nsys) = find_nsys(path_var.as_deref()) else {
        return Err(err(format!(
            "is an Nsight Systems report, and `nsys` is not on PATH to export it; run `{}` and pass the .sqlite file",
            command_line(report, &suggested_output(report))
        )));
    };
    let report = std::path::absolute(report).map_err(|e| err(format!("cannot be opened: {e}")))?;
    let output = dir.join("export.sqlite");
    let mut cmd = Command::new(&nsys);
    cmd.args(["export", "--type", "sqlite", "--output"]).arg(&output).arg(&report);
    cmd.env_clear().current_dir(dir).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    for key in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    let mut child = cmd.spawn().map_err(|e| {
        err(format!(
            "`nsys export` could not start ({e}); run `{}` yourself",
            command_line(&report, &suggested_output(&report))
        ))
    })?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > EXPORT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err(format!(
                    "`nsys export` ran over {} s and was stopped; export it yourself and pass the .sqlite file",
                    EXPORT_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(err(format!("`nsys export` could not be waited for: {e}"))),
        }
    };
    if !status.success() || !output.is_file() {
        return Err(err(format!(
            "`nsys export` failed ({status}); run `{}` to see why",
            command_line(&report, &suggested_output(&report))
        )));
    }
    Ok(output)
}
