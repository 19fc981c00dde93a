//! Where bytes leave the process: stdout (a closed pipe is not an error) or a file written
//! atomically (temporary file beside it, flushed to disk, then renamed), so that a failure never
//! leaves a half-written report, result or baseline behind.
//!
//! The bottom layer: it imports nothing from the crate, and every module that writes a file goes
//! through [`write_atomic`].

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes a report to stdout, or atomically to `output`.
pub fn emit(text: &str, output: Option<&Path>) -> Result<()> {
    match output {
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a message.
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.context("cannot write to stdout"),
            }
        }
        Some(path) => write_atomic(path, text.as_bytes())
            .with_context(|| format!("{}: cannot write the report (does the directory exist?)", path.display())),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename; the
/// temporary file is removed when anything fails. Callers add which file it was to the error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("output");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("r.json");
        write_atomic(&path, b"one").expect("write");
        write_atomic(&path, b"two").expect("overwrite");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two");
        let missing = dir.path().join("no-such-dir").join("r.json");
        assert!(write_atomic(&missing, b"x").is_err());
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("ls").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, ["r.json"]);
        let e = emit("x", Some(&missing)).unwrap_err();
        assert!(format!("{e:#}").contains("cannot write the report"), "{e:#}");
    }
}
