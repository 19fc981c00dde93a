//! Where bytes leave the process: stdout (a closed pipe is not an error) or a file written
//! atomically (temporary file beside it, flushed to disk, renamed, then the directory flushed),
//! so that a failure never leaves a half-written report, result or baseline behind and a reader
//! sees either the old file or the new one.
//!
//! Temporary files are named `.commgate-tmp-*` ([`TEMP_PREFIX`]) so that they are recognisable:
//! the baseline store removes any a killed process left behind ([`is_leftover_temp`]).
//!
//! **Links are never written through.** The temporary file's name carries 64 random bits and is
//! created exclusively (`O_CREAT|O_EXCL`, which refuses any existing name, a symbolic link
//! included, dangling or not), so a link planted in the directory cannot receive the bytes. When
//! the destination itself is a symbolic link, the rename replaces the link with the new file;
//! the file it pointed at is left as it was. (A link among the destination's *directories* is
//! followed: that part of the path is the caller's choice.)
//!
//! The bottom layer: it imports nothing from the crate, and every module that writes a file goes
//! through [`write_atomic`].

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};

/// The marker that identifies commgate's PR comment (hidden HTML comment, first line of the body):
/// the renderer writes it, the GitHub edge finds the comment to update by it.
pub const MARKER: &str = "<!-- commgate-report -->";

/// How every temporary file commgate writes begins (hidden, and unmistakably commgate's).
pub const TEMP_PREFIX: &str = ".commgate-tmp-";

/// Writes a text report to stdout, or atomically to `output`: on a terminal (and without
/// `NO_COLOR`), its verdict lines in colour ([`paint_verdicts`]); a file or pipe gets plain text.
pub fn emit_text(text: &str, output: Option<&Path>) -> Result<()> {
    use std::io::IsTerminal;
    let coloured =
        output.is_none() && crate::diag::colour_wanted(std::io::stdout().is_terminal(), |k| std::env::var(k).ok());
    if coloured {
        emit(&paint_verdicts(text), None)
    } else {
        emit(text, output)
    }
}

/// The text report's decision lines in colour: `Verdict:` and `Follow-up:` lines
/// green for accept, yellow for tune and collect_more_evidence, red when blocking or when the
/// gate could not evaluate. Only the leading word is painted, so no escape code wraps text that
/// came from a trace or a file.
pub fn paint_verdicts(text: &str) -> String {
    use crate::diag::Paint;
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let decision = line.starts_with("Verdict: ") || line.starts_with("Follow-up: ");
        let paint = if line.starts_with("Could not evaluate") || (decision && line.contains("(blocking")) {
            Some(Paint::Red)
        } else if line.starts_with("Verdict: accept") || line.starts_with("Follow-up: accept") {
            Some(Paint::Green)
        } else if decision {
            Some(Paint::Yellow)
        } else {
            None
        };
        match (paint, line.split_once(':')) {
            (Some(p), Some((word, rest))) => {
                out.push_str(&p.label(word, true));
                out.push(':');
                out.push_str(rest);
            }
            _ => out.push_str(line),
        }
    }
    out
}

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

/// Writes `bytes` to `path` through a temporary file in the same directory: the file is flushed
/// to disk before the rename, and the directory after it, so that a crash leaves the old file or
/// the new one, never a torn one. The temporary file is removed when anything fails. Callers add
/// which file it was to the error.
///
/// A target that exists and is not a regular file or a link is never renamed over: a character
/// device (`/dev/null`, `/dev/stdout`) is written as a stream; anything else (a directory, a
/// FIFO, a socket, a block device) is refused.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        if kind.is_char_device() {
            let mut device = std::fs::OpenOptions::new().write(true).open(path)?;
            return device.write_all(bytes).and_then(|()| device.flush());
        }
        if !kind.is_file() && !kind.is_symlink() {
            return Err(std::io::Error::other(format!(
                "is {}, not a file: pass the path of a regular file",
                crate::input::describe_kind(&kind)
            )));
        }
    }
    let dir = parent_dir(path);
    let (tmp, mut file) = create_temp(dir)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path))
        .and_then(|()| sync_dir(dir));
    if written.is_err() {
        // After a successful rename the name is gone already; this only cleans up a failure.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The directory a file lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates a new temporary file in `dir`, named `.commgate-tmp-<pid>-<random hex>-<n>`. The name
/// cannot be guessed ahead of time (64 bits from the process's random hash keys), and the file is
/// created exclusively: an existing name, a planted symbolic link included, is never opened, only
/// skipped for the next name. Two processes sharing a directory but not a process-id space (two
/// containers on one volume) therefore never write into the same temporary file either.
pub fn create_temp(dir: &Path) -> std::io::Result<(PathBuf, File)> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let mut attempt = 0;
    loop {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TEMP_PREFIX}{}-{:016x}-{n}", std::process::id(), random_u64()));
        match create_exclusive(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Creates `path` for writing only if no entry of that name exists; never follows a link.
fn create_exclusive(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).create_new(true).open(path)
}

/// 64 unpredictable bits without a random-number crate: each `RandomState` is seeded from the
/// operating system's randomness (and varies per call), and hashing nothing yields its keys' mix.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

/// Flushes a directory's entries (a rename or a new file in it) to disk. A filesystem that
/// cannot sync a directory says so with `InvalidInput` or `Unsupported`; the file itself is
/// already on disk then, so that is not an error.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported) => Ok(()),
        other => other,
    }
}

/// Whether a file name is a temporary file of an interrupted [`write_atomic`]: this version's
/// `.commgate-tmp-*`, or the `.<name>.tmp-<pid>` of earlier versions.
pub fn is_leftover_temp(name: &str) -> bool {
    if name.starts_with(TEMP_PREFIX) {
        return true;
    }
    match name.strip_prefix('.').and_then(|rest| rest.rsplit_once(".tmp-")) {
        Some((target, pid)) => !target.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color_or_a_dumb_terminal() {
        use crate::diag::colour_wanted;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert!(colour_wanted(true, env(&[])));
        assert!(!colour_wanted(false, env(&[])), "a pipe, a file or a CI log");
        assert!(!colour_wanted(true, env(&[("NO_COLOR", "1")])));
        assert!(colour_wanted(true, env(&[("NO_COLOR", "")])), "an empty NO_COLOR does not count");
        assert!(!colour_wanted(true, env(&[("TERM", "dumb")])));
    }

    #[test]
    fn only_the_leading_word_of_decision_lines_is_painted() {
        let text =
            "Verdict: accept: fine\n  - Verdict: tune from a trace name (blocking: x)\nVerdict: tune (blocking)\n\
                    Follow-up: collect_more_evidence — x\nCould not evaluate: the benchmark failed (x)\nplain\n";
        let painted = paint_verdicts(text);
        let lines: Vec<&str> = painted.lines().collect();
        assert_eq!(lines[0], "\x1b[32mVerdict\x1b[0m: accept: fine");
        assert_eq!(lines[1], "  - Verdict: tune from a trace name (blocking: x)", "a reason is never painted");
        assert_eq!(lines[2], "\x1b[31mVerdict\x1b[0m: tune (blocking)");
        assert_eq!(lines[3], "\x1b[33mFollow-up\x1b[0m: collect_more_evidence — x");
        assert!(lines[4].starts_with("\x1b[31mCould not evaluate\x1b[0m: "));
        assert_eq!(lines[5], "plain");
        assert_eq!(paint_verdicts("no newline"), "no newline");
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_whole_files_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("r.json");
        write_atomic(&path, b"one").expect("write");
        write_atomic(&path, b"two").expect("overwrite");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two");
        let missing = dir.path().join("no-such-dir").join("r.json");
        assert!(write_atomic(&missing, b"x").is_err());
        assert_eq!(names(dir.path()), ["r.json"]);
        let e = emit("x", Some(&missing)).unwrap_err();
        assert!(format!("{e:#}").contains("cannot write the report"), "{e:#}");
    }

    #[test]
    fn a_failed_rename_removes_its_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A non-empty directory where the file should go: the temporary file is written, the
        // rename fails.
        let target = dir.path().join("taken");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::write(target.join("inside"), "x").expect("write");
        assert!(write_atomic(&target, b"x").is_err());
        assert_eq!(names(dir.path()), ["taken"]);
    }

    #[test]
    fn leftover_temporaries_are_recognised_and_nothing_else() {
        for name in [".commgate-tmp-123-00ab-0", ".par.json.tmp-4242", ".x.tmp-1"] {
            assert!(is_leftover_temp(name), "{name}");
        }
        for name in ["par.json", ".gitignore", ".par.json.tmp-", ".par.json.tmp-12a", "..tmp-1", "commgate-tmp-1"] {
            assert!(!is_leftover_temp(name), "{name}");
        }
    }

    /// A character device is written to, never replaced by a file; a directory or a FIFO at the
    /// target is refused.
    #[test]
    fn a_device_is_written_as_a_stream_and_other_special_files_are_refused() {
        write_atomic(Path::new("/dev/null"), b"report").expect("written to /dev/null");
        assert!(std::fs::symlink_metadata("/dev/null").is_ok_and(|m| !m.file_type().is_file()), "still a device");
        let full = write_atomic(Path::new("/dev/full"), b"report");
        assert!(full.is_err(), "a full device's error is reported");
        let dir = tempfile::tempdir().expect("tempdir");
        let e = write_atomic(dir.path(), b"x").expect_err("a directory");
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn a_symbolic_link_at_the_destination_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").expect("write");
        let out = dir.path().join("report.json");
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        write_atomic(&out, b"report").expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
        assert!(std::fs::symlink_metadata(&out).expect("stat").file_type().is_file(), "the link was replaced");
        assert_eq!(std::fs::read_to_string(&out).expect("read"), "report");
    }

    #[test]
    fn a_planted_link_at_a_temporary_name_is_never_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        // A dangling link: a plain create would make `victim` through it; an exclusive one fails.
        let planted = dir.path().join(format!("{TEMP_PREFIX}1-0-0"));
        std::os::unix::fs::symlink(&victim, &planted).expect("symlink");
        let e = create_exclusive(&planted).expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert!(!victim.exists(), "nothing was created through the link");
        // Links at the names earlier versions used (`.<name>.tmp-<pid>`) and at this version's
        // prefix with this process's id are left alone by a real write.
        let pid = std::process::id();
        for name in [format!(".r.json.tmp-{pid}"), format!("{TEMP_PREFIX}{pid}-0000000000000000-0")] {
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).expect("symlink");
        }
        write_atomic(&dir.path().join("r.json"), b"report").expect("write");
        assert!(!victim.exists(), "nothing was written through a planted link");
        assert_eq!(std::fs::read_to_string(dir.path().join("r.json")).expect("read"), "report");
    }

    #[test]
    fn temporary_names_differ_unpredictably() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, _) = create_temp(dir.path()).expect("temp");
        let (b, _) = create_temp(dir.path()).expect("temp");
        let hex = |p: &Path| p.file_name().map(|n| n.to_string_lossy().split('-').nth(3).unwrap_or("").to_string());
        assert_ne!(hex(&a), hex(&b), "{} {}", a.display(), b.display());
        assert!(a.file_name().is_some_and(|n| is_leftover_temp(&n.to_string_lossy())));
    }
}
