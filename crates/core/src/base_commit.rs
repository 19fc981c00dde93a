//! The settings and baselines a pull request is judged by: those of its base commit, read with
//! `git`, never those of the PR's own head, which the PR's author controls. A PR that edits
//! `commgate.toml` (say `min_effect = 0.999999`) or its baseline store is still judged by the
//! base's, and the report names every such edit.
//!
//! What it owns and why:
//! - [`base_sha_from_payload`] reads `pull_request.base.sha` from the event payload: the commit
//!   the PR merges into, fixed when the event fired.
//! - [`BaseCommit`] asks `git` for the base's `commgate.toml` and copies the base's baseline tree
//!   into a private temporary directory, so the rest of the gate reads a store by path as
//!   always. A base commit that is not in the clone (a shallow checkout) is an error that says
//!   how to fetch it: judging by the head instead would be exactly the hole this closes.
//! - `git` runs with a cleared environment (`PATH` and `HOME` only): no token reaches it. It is
//!   taken from the system's own directories ([`GIT_DIRS`]), never looked up on `PATH`: a `git`
//!   an earlier CI step planted on `PATH` would run as the job's user, who can read commgate's
//!   whole environment (its token included) in `/proc`, whatever environment git is given.
//! - Reads are bounded: at most [`MAX_FILES`] store files of at most [`MAX_FILE_BYTES`] each.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// At most this many files are read from the base's baseline tree…
pub const MAX_FILES: usize = 2_000;
/// …each at most this large (a store of ten runs × 4 schedules × 1,000 samples is ~1 MiB).
pub const MAX_FILE_BYTES: usize = 64 << 20;

/// Why the base commit's settings and baselines could not be read: the gate cannot judge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseError {
    #[error(
        "the pull request's base commit {sha} is not in this clone, so its baselines and commgate.toml cannot be \
         read: check out with history (actions/checkout `fetch-depth: 0`) or run `git fetch origin {sha}` first; \
         `--baselines-from-head` judges with the PR's own files instead"
    )]
    MissingCommit { sha: String },
    #[error("`{rev}` is not a commit this clone knows; pass a commit SHA, branch or tag (`--base`)")]
    UnknownRevision { rev: String },
    #[error(
        "{dir} is not in a git repository, so `--base {rev}` has no commit to read baselines and commgate.toml \
         from; run the gate inside the repository's clone, or leave out --base to judge with the working tree's files"
    )]
    NotARepository { dir: String, rev: String },
    #[error(
        "{path} is outside the repository, so it cannot be read at the base commit; pass a path inside it, \
         or `--baselines-from-head`"
    )]
    OutsideRepository { path: String },
    #[error("git could not {what}: {message}")]
    Git { what: String, message: String },
    #[error(
        "the base commit's {path} is {size} bytes, more than the {limit} a baseline store may hold; \
         was it committed by mistake?"
    )]
    TooLarge { path: String, size: usize, limit: usize },
    #[error("the base commit's {dir} holds more than {limit} files; keep only baseline stores there")]
    TooManyFiles { dir: String, limit: usize },
    #[error("cannot copy the base commit's baselines into {dir}: {message}")]
    Io { dir: String, message: String },
    #[error(
        "the base commit's {path} is {what}, so its baselines cannot be read: keep the baseline stores as plain \
         files in a directory of the repository, or pass `--baselines-from-head`"
    )]
    Unreadable { path: String, what: String },
}

/// A commit the clone holds, whose files the gate reads instead of the working tree's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseCommit {
    /// Where `git` runs (the working directory paths are relative to).
    cwd: PathBuf,
    /// `cwd` relative to the repository's top level (`git rev-parse --show-prefix`).
    prefix: PathBuf,
    /// The full SHA.
    pub sha: String,
}

impl BaseCommit {
    /// `rev` (a SHA from the event payload, or `--base`) resolved in the repository at `cwd`.
    pub fn resolve(cwd: &Path, rev: &str) -> Result<BaseCommit, BaseError> {
        let sha = resolve(cwd, rev)?;
        let prefix = String::from_utf8_lossy(&git(cwd, ["rev-parse", "--show-prefix"])?).trim().to_string();
        Ok(BaseCommit { cwd: cwd.to_path_buf(), prefix: PathBuf::from(prefix), sha })
    }

    /// The text of `path` at this commit, `None` when it had no such file.
    pub fn file(&self, path: &Path) -> Result<Option<String>, BaseError> {
        let rel = relative(&self.cwd, &self.prefix, path)?;
        Ok(show(&self.cwd, &self.sha, &rel)?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// The tree under `dir` at this commit, copied into a private temporary directory (empty
    /// when the commit had none), deleted when the returned value drops.
    pub fn tree(&self, dir: &Path) -> Result<tempfile::TempDir, BaseError> {
        let rel = relative(&self.cwd, &self.prefix, dir)?;
        let into = tempfile::Builder::new()
            .prefix("commgate-base-")
            .tempdir()
            .map_err(|e| BaseError::Io { dir: std::env::temp_dir().display().to_string(), message: e.to_string() })?;
        copy_tree(&self.cwd, &self.sha, &rel, into.path())?;
        Ok(into)
    }

    /// Which files under `paths` the working tree changed since this commit (committed or not),
    /// relative to the working directory.
    pub fn changed(&self, paths: &[&Path]) -> Result<Vec<String>, BaseError> {
        let rels = paths.iter().map(|p| relative(&self.cwd, &self.prefix, p)).collect::<Result<Vec<_>, _>>()?;
        changed_paths(&self.cwd, &self.sha, &rels.iter().map(PathBuf::as_path).collect::<Vec<_>>())
    }

    /// The whole commit checked out in a temporary git worktree (detached, hooks off), for a
    /// measurement of the base beside the working tree's. [`Worktree::dir`] is the working
    /// directory's counterpart there; the worktree is removed, and git's record of it pruned,
    /// when the value drops, after a failure too.
    pub fn worktree(&self) -> Result<Worktree, BaseError> {
        let temp = tempfile::Builder::new()
            .prefix("commgate-base-tree-")
            .tempdir()
            .map_err(|e| BaseError::Io { dir: std::env::temp_dir().display().to_string(), message: e.to_string() })?;
        let root = temp.path().join("tree");
        let hooks_off = format!("core.hooksPath={}", if cfg!(windows) { "NUL" } else { "/dev/null" });
        git(
            &self.cwd,
            [
                OsStr::new("-c"),
                OsStr::new(&hooks_off),
                OsStr::new("worktree"),
                OsStr::new("add"),
                OsStr::new("--detach"),
                OsStr::new("--quiet"),
                OsStr::new("--end-of-options"),
                root.as_os_str(),
                OsStr::new(&self.sha),
            ],
        )?;
        let dir = root.join(&self.prefix);
        Ok(Worktree { repo: self.cwd.clone(), root, dir, _temp: temp })
    }

    /// How many directories the working directory is below the repository's top level.
    pub fn depth(&self) -> usize {
        self.prefix.components().count()
    }

    /// The first 12 digits, for messages.
    pub fn short(&self) -> &str {
        &self.sha[..self.sha.len().min(12)]
    }
}

/// A commit checked out in a temporary git worktree ([`BaseCommit::worktree`]); removed on drop.
#[derive(Debug)]
pub struct Worktree {
    /// Where `git` runs for the repository that owns the worktree.
    repo: PathBuf,
    /// The worktree's top level.
    root: PathBuf,
    /// The working directory's counterpart in the worktree.
    dir: PathBuf,
    _temp: tempfile::TempDir,
}

impl Worktree {
    /// The working directory's counterpart in the worktree: run the base's commands here.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        // Best effort: the temporary directory goes with `_temp` whatever git says, and
        // `worktree prune` forgets a worktree whose directory is gone.
        let _ = git(
            &self.repo,
            [OsStr::new("worktree"), OsStr::new("remove"), OsStr::new("--force"), self.root.as_os_str()],
        );
        let _ = git(&self.repo, ["worktree", "prune"]);
    }
}

/// `pull_request.base.sha` of an event payload, when it is a full hexadecimal commit id.
pub fn base_sha_from_payload(payload: &serde_json::Value) -> Option<String> {
    let sha = payload.pointer("/pull_request/base/sha")?.as_str()?;
    is_full_sha(sha).then(|| sha.to_ascii_lowercase())
}

/// 40 (SHA-1) or 64 (SHA-256) hexadecimal digits.
fn is_full_sha(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The full SHA of `rev`; a full SHA the clone lacks is [`BaseError::MissingCommit`].
fn resolve(cwd: &Path, rev: &str) -> Result<String, BaseError> {
    if rev.starts_with('-') || rev.is_empty() {
        return Err(BaseError::UnknownRevision { rev: rev.to_string() });
    }
    // Outside any repository no revision is "unknown to this clone": there is no clone.
    // (A git that cannot run at all says so itself.)
    match git(cwd, ["rev-parse", "--git-dir"]) {
        Ok(_) => {}
        Err(BaseError::Git { what, .. }) if what.starts_with('`') => {
            let dir = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
            return Err(BaseError::NotARepository { dir: dir.display().to_string(), rev: rev.to_string() });
        }
        Err(e) => return Err(e),
    }
    let spec = format!("{rev}^{{commit}}");
    match git(cwd, ["rev-parse", "--verify", "--quiet", "--end-of-options", spec.as_str()]) {
        Ok(out) => Ok(String::from_utf8_lossy(&out).trim().to_string()),
        Err(_) if is_full_sha(rev) => Err(BaseError::MissingCommit { sha: rev.to_string() }),
        Err(_) => Err(BaseError::UnknownRevision { rev: rev.to_string() }),
    }
}

/// The commit checked out at `cwd` (`git rev-parse HEAD`), `None` outside a repository, before
/// the first commit, or without git: what a run records as its commit outside CI.
pub fn head_commit(cwd: &Path) -> Option<String> {
    let out = git(cwd, ["rev-parse", "--verify", "--quiet", "HEAD"]).ok()?;
    let sha = String::from_utf8_lossy(&out).trim().to_string();
    is_full_sha(&sha).then_some(sha)
}

/// `path` (relative to `cwd`, or absolute under it) relative to the repository's top level,
/// `..` resolved by hand: what git's `<rev>:<path>` and `:(top)` pathspecs take. A path that
/// climbs above the top level is outside the repository.
fn relative(cwd: &Path, prefix: &Path, path: &Path) -> Result<PathBuf, BaseError> {
    let outside = || BaseError::OutsideRepository { path: path.display().to_string() };
    let rel = if path.is_absolute() { path.strip_prefix(cwd).map_err(|_| outside())? } else { path };
    let mut parts: Vec<&OsStr> = prefix.iter().collect();
    for c in rel.components() {
        match c {
            Component::Normal(name) => parts.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop().ok_or_else(outside)?;
            }
            Component::Prefix(_) | Component::RootDir => return Err(outside()),
        }
    }
    Ok(parts.iter().collect())
}

/// `git show <sha>:./<path>`, or `None` when the base has no such file.
fn show(cwd: &Path, sha: &str, path: &Path) -> Result<Option<Vec<u8>>, BaseError> {
    let object = format!("{sha}:{}", path.display());
    if git(cwd, ["cat-file", "-e", object.as_str()]).is_err() {
        return Ok(None);
    }
    let size: usize =
        String::from_utf8_lossy(&git(cwd, ["cat-file", "-s", object.as_str()])?).trim().parse().unwrap_or(0);
    if size > MAX_FILE_BYTES {
        return Err(BaseError::TooLarge { path: path.display().to_string(), size, limit: MAX_FILE_BYTES });
    }
    git(cwd, ["cat-file", "blob", object.as_str()]).map(Some)
}

/// One entry of a git tree listing (`ls-tree -z`: `<mode> <type> <object>\t<name>`).
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    mode: String,
    kind: String,
    name: String,
}

fn entries(listing: &[u8]) -> Vec<Entry> {
    listing
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .filter_map(|e| {
            let text = String::from_utf8_lossy(e);
            let (head, name) = text.split_once('\t')?;
            let mut fields = head.split(' ');
            let (mode, kind) = (fields.next()?.to_string(), fields.next()?.to_string());
            Some(Entry { mode, kind, name: name.to_string() })
        })
        .collect()
}

/// What an entry that is not a plain file or directory is, for [`BaseError::Unreadable`]: a
/// submodule (its files are another repository's, absent from this clone) or a symbolic link
/// (a store behind one could point anywhere, or at itself).
fn unreadable(entry: &Entry) -> Option<&'static str> {
    match (entry.kind.as_str(), entry.mode.as_str()) {
        ("commit", _) => Some("a git submodule"),
        ("blob", "120000") => Some("a symbolic link"),
        _ => None,
    }
}

/// The entry `path` is at `sha`, `None` when the commit has no such path.
fn entry_at(cwd: &Path, sha: &str, path: &Path) -> Result<Option<Entry>, BaseError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Ok(None) };
    let tree = format!("{sha}:{}", parent.display());
    if git(cwd, ["cat-file", "-e", tree.as_str()]).is_err() {
        return Ok(None);
    }
    let listing = git(cwd, ["ls-tree", "-z", "--full-tree", tree.as_str()])?;
    let name = name.to_string_lossy();
    Ok(entries(&listing).into_iter().find(|e| e.name == name))
}

/// Copies every blob under `<sha>:./<dir>` into `into`, keeping relative paths. The base having
/// no `dir` means no baselines yet; a `dir` that is a submodule, a symbolic link or a file, or
/// holds a submodule or a symbolic link, is [`BaseError::Unreadable`]: reading it as "no
/// baseline yet" would let the head's own store judge.
fn copy_tree(cwd: &Path, sha: &str, dir: &Path, into: &Path) -> Result<(), BaseError> {
    let shown = || dir.display().to_string();
    match entry_at(cwd, sha, dir)? {
        None => return Ok(()), // The base has no baselines yet: every workload is new.
        Some(entry) => {
            if let Some(what) = unreadable(&entry) {
                return Err(BaseError::Unreadable { path: shown(), what: what.to_string() });
            }
            if entry.kind != "tree" {
                return Err(BaseError::Unreadable { path: shown(), what: "a file, not a directory".to_string() });
            }
        }
    }
    let tree = format!("{sha}:{}", dir.display());
    let listing = git(cwd, ["ls-tree", "-r", "-z", "--full-tree", tree.as_str()])?;
    let listed = entries(&listing);
    if listed.len() > MAX_FILES {
        return Err(BaseError::TooManyFiles { dir: shown(), limit: MAX_FILES });
    }
    let mut total = 0usize;
    for entry in listed {
        if let Some(what) = unreadable(&entry) {
            return Err(BaseError::Unreadable {
                path: dir.join(&entry.name).display().to_string(),
                what: what.to_string(),
            });
        }
        let rel = Path::new(entry.name.as_str());
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            continue; // git never lists such names; never write outside `into` if it did.
        }
        let Some(bytes) = show(cwd, sha, &dir.join(rel))? else { continue };
        total = total.saturating_add(bytes.len());
        if total > MAX_TREE_BYTES {
            return Err(BaseError::TooLarge { path: shown(), size: total, limit: MAX_TREE_BYTES });
        }
        let target = into.join(rel);
        let io = |e: std::io::Error| BaseError::Io { dir: into.display().to_string(), message: e.to_string() };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&target, bytes).map_err(io)?;
    }
    Ok(())
}

/// Paths among `paths` that differ between `sha` and the working tree (committed or not).
fn changed_paths(cwd: &Path, sha: &str, paths: &[&Path]) -> Result<Vec<String>, BaseError> {
    let specs: Vec<String> = paths.iter().map(|p| format!(":(top){}", p.display())).collect();
    let names = |head: &[&str]| -> Result<Vec<String>, BaseError> {
        let mut args: Vec<&OsStr> = head.iter().map(OsStr::new).collect();
        args.extend(specs.iter().map(OsStr::new));
        let out = git(cwd, args)?;
        Ok(out.split(|b| *b == 0).filter(|n| !n.is_empty()).map(|n| String::from_utf8_lossy(n).into_owned()).collect())
    };
    // Tracked files that differ from the base, then files not yet added (not ignored).
    let mut changed = names(&["diff", "--name-only", "-z", sha, "--"])?;
    changed.extend(names(&["ls-files", "--others", "--exclude-standard", "--full-name", "-z", "--"])?);
    changed.sort();
    changed.dedup();
    Ok(changed)
}

/// The most a single git call may print: a store file at its limit, and its listing's slack.
const MAX_GIT_OUTPUT: usize = MAX_FILE_BYTES + (1 << 20);

/// The most the base commit's baseline tree may hold in all: a store of 2,000 files of 64 MiB
/// each is no store.
pub const MAX_TREE_BYTES: usize = 256 << 20;

/// Runs `cmd` and collects its output, at most `limit` bytes of stdout (and 64 KiB of stderr);
/// `Ok(None)` when it printed more (the child is killed then), so that a `git` that prints
/// gigabytes cannot fill memory.
fn bounded_output(cmd: &mut Command, limit: usize) -> std::io::Result<Option<std::process::Output>> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut stderr_pipe = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(pipe) = stderr_pipe.as_mut() {
            let _ = pipe.take(64 << 10).read_to_end(&mut buf);
        }
        buf
    });
    let mut stdout = Vec::new();
    if let Some(pipe) = child.stdout.take() {
        pipe.take(limit as u64 + 1).read_to_end(&mut stdout)?;
    }
    if stdout.len() > limit {
        let _ = child.kill();
        let _ = child.wait();
        return Ok(None);
    }
    let status = child.wait()?;
    let stderr = stderr_reader.join().unwrap_or_default();
    Ok(Some(std::process::Output { status, stdout, stderr }))
}

/// The directories `git` is taken from, first found first: the system's own, which only root
/// can write. Never `PATH`: a directory on it may be one that an earlier step of the CI job added
/// (`$GITHUB_PATH`), and a `git` there runs as the job's user, who can read this process's whole
/// environment, its token included, in `/proc/PID/environ`, whatever environment it is given.
/// (`/run/current-system/sw/bin`: NixOS's system profile.)
#[cfg(unix)]
pub const GIT_DIRS: [&str; 4] = ["/usr/local/bin", "/usr/bin", "/bin", "/run/current-system/sw/bin"];

/// The `git` to run: the first in [`GIT_DIRS`] that only root can replace; `Err` says what was
/// found and why none was taken. (Elsewhere than on Unix: `git` from `PATH`.)
fn git_program() -> Result<PathBuf, String> {
    #[cfg(unix)]
    {
        find_git(&GIT_DIRS.map(Path::new))
    }
    #[cfg(not(unix))]
    {
        Ok(PathBuf::from("git"))
    }
}

/// The first `dir/git` among `dirs` that is a file only root can replace ([`replaceable_by`]).
#[cfg(unix)]
fn find_git(dirs: &[&Path]) -> Result<PathBuf, String> {
    let mut refused = Vec::new();
    for dir in dirs {
        let git = dir.join("git");
        if !std::fs::metadata(&git).is_ok_and(|m| m.is_file()) {
            continue;
        }
        // The directory it is found in, and (past any link) the file and every directory above it.
        let real = std::fs::canonicalize(&git).map_err(|e| format!("{}: {e}", git.display()));
        match real.and_then(|real| replaceable_by(&[dir, real.as_path()]).map_or(Ok(()), Err)) {
            Ok(()) => return Ok(git),
            Err(why) => refused.push(format!("{} ({why})", git.display())),
        }
    }
    let searched = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
    Err(if refused.is_empty() {
        format!("there is no git in {searched}; commgate runs git only from these system directories, never from PATH")
    } else {
        format!(
            "no git in {searched} that only root can replace: {}; commgate runs git only from these system \
             directories, installed by root, never from PATH",
            refused.join("; ")
        )
    })
}

/// Why a user other than root could replace one of `paths` (or a directory above one), if one
/// could: an owner other than root, or write permission for the group or everyone (a sticky
/// directory, such as `/tmp`, only for what sits above: there no one renames root's entries).
#[cfg(unix)]
fn replaceable_by(paths: &[&Path]) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    for path in paths {
        for (i, p) in path.ancestors().enumerate() {
            let meta = match std::fs::metadata(p) {
                Ok(meta) => meta,
                Err(e) => return Some(format!("{}: {e}", p.display())),
            };
            if meta.uid() != 0 {
                return Some(format!("{} is owned by uid {}, not root", p.display(), meta.uid()));
            }
            let sticky_above = i > 0 && meta.mode() & 0o1000 != 0;
            if meta.mode() & 0o022 != 0 && !sticky_above {
                return Some(format!("{} is writable by its group or by everyone", p.display()));
            }
        }
    }
    None
}

/// Runs git (from [`GIT_DIRS`], never from `PATH`) in `cwd` with nothing of our environment but
/// `PATH` and `HOME`: no token, no `GIT_*` override from the job, no pager, no prompt.
fn git<I, S>(cwd: &Path, args: I) -> Result<Vec<u8>, BaseError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<S> = args.into_iter().collect();
    let what = args.first().map_or_else(String::new, |a| a.as_ref().to_string_lossy().into_owned());
    let program = git_program().map_err(|message| BaseError::Git { what: format!("run `git {what}`"), message })?;
    let mut cmd = Command::new(&program);
    cmd.current_dir(cwd).env_clear().env("GIT_TERMINAL_PROMPT", "0").env("GIT_PAGER", "cat");
    for keep in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    cmd.arg("--no-pager").args(&args);
    let out = bounded_output(&mut cmd, MAX_GIT_OUTPUT).map_err(|e| BaseError::Git {
        what: format!("run (`git {what}`)"),
        message: format!("{e} ({})", program.display()),
    })?;
    let Some(out) = out else {
        return Err(BaseError::Git {
            what: format!("`git {what}`"),
            message: format!(
                "it printed more than {} MiB, more than any file the gate reads (is {} the real git?)",
                MAX_GIT_OUTPUT >> 20,
                program.display()
            ),
        });
    };
    if out.status.success() {
        Ok(out.stdout)
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message").trim();
        Err(BaseError::Git { what: format!("`git {what}`"), message: first.chars().take(300).collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `git ARGS` in `dir` as a test user, its trimmed stdout; a failure fails the test.
    fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A repository with a base commit (settings + one store) and a head that edits both.
    fn repo() -> (tempfile::TempDir, String) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        let run = |args: &[&str]| git_in(d, args);
        run(&["init", "-q"]);
        std::fs::create_dir_all(d.join("baselines/P")).expect("dir");
        std::fs::write(d.join("commgate.toml"), "min_effect = 0.03\n").expect("toml");
        std::fs::write(d.join("baselines/P/w.json"), "{\"base\": true}\n").expect("store");
        run(&["add", "-A"]);
        run(&["commit", "-qm", "base"]);
        let sha = run(&["rev-parse", "HEAD"]);
        std::fs::write(d.join("commgate.toml"), "min_effect = 0.999999\n").expect("toml");
        std::fs::write(d.join("baselines/P/w.json"), "{\"forged\": true}\n").expect("store");
        run(&["commit", "-qam", "head edits the gate"]);
        (tmp, sha)
    }

    #[test]
    fn the_base_is_checked_out_beside_the_working_tree_and_removed_after() {
        let (tmp, sha) = repo();
        let base = BaseCommit::resolve(tmp.path(), &sha).expect("resolves");
        let tree = base.worktree().expect("checks out");
        let dir = tree.dir().to_path_buf();
        assert_eq!(std::fs::read_to_string(dir.join("commgate.toml")).expect("base file"), "min_effect = 0.03\n");
        assert_ne!(
            std::fs::read_to_string(tmp.path().join("commgate.toml")).expect("head file"),
            "min_effect = 0.03\n",
            "the working tree keeps the head's"
        );
        let listed = git_in(tmp.path(), &["worktree", "list", "--porcelain"]);
        assert!(listed.contains("detached"), "{listed}");
        drop(tree);
        assert!(!dir.exists(), "removed");
        assert_eq!(git_in(tmp.path(), &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
        // From a subdirectory, the base's counterpart of it.
        let sub = BaseCommit::resolve(&tmp.path().join("baselines"), &sha).expect("resolves");
        let tree = sub.worktree().expect("checks out");
        assert!(tree.dir().ends_with("tree/baselines"), "{}", tree.dir().display());
        assert!(tree.dir().join("P").is_dir());
    }

    /// `git` is never taken from a directory that a user other than root could write, whatever
    /// comes first (an earlier CI step can put such a directory first on `PATH`); past it, the
    /// system's own git is found.
    #[cfg(unix)]
    #[test]
    fn git_is_taken_only_from_a_directory_only_root_can_write() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().expect("tempdir");
        let planted = tmp.path().join("bin");
        std::fs::create_dir(&planted).expect("dir");
        std::fs::write(planted.join("git"), "#!/bin/sh\nexit 0\n").expect("fake");
        std::fs::set_permissions(planted.join("git"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // Writable by everyone: refused whoever runs the test, root included.
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = find_git(&[&planted]).expect_err("refused");
        assert!(err.contains("writable by its group or by everyone") && err.contains("never from PATH"), "{err}");
        let dirs: Vec<&Path> = std::iter::once(planted.as_path()).chain(GIT_DIRS.map(Path::new)).collect();
        let found = find_git(&dirs).expect("the system's git");
        assert!(GIT_DIRS.iter().any(|d| found.parent() == Some(Path::new(d))), "{}", found.display());
        // Owned by a user other than root: refused too, though no one else can write it (only a
        // test run by such a user can make one).
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        if std::fs::metadata(&planted).expect("meta").uid() != 0 {
            let err = find_git(&[&planted]).expect_err("refused");
            assert!(err.contains("not root"), "{err}");
        }
        // A link from a trusted directory to a file in an untrusted one: refused (checked past
        // the link).
        let linked = tmp.path().join("linked");
        std::fs::create_dir(&linked).expect("dir");
        std::os::unix::fs::symlink(planted.join("git"), linked.join("git")).expect("link");
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = find_git(&[&linked]).expect_err("refused");
        let root = std::fs::metadata(&linked).expect("meta").uid() == 0;
        let why = if root { format!("{} is writable", planted.display()) } else { "not root".to_string() };
        assert!(err.contains(&why), "{err}");
        // No git at all: where it looked.
        let err = find_git(&[&tmp.path().join("none")]).expect_err("none");
        assert!(err.starts_with("there is no git in ") && err.contains("none"), "{err}");
    }

    /// A program that prints without end is stopped at the limit, not read into memory.
    #[test]
    fn output_past_the_limit_is_refused_and_the_program_stopped() {
        let endless = bounded_output(Command::new("yes").arg("x".repeat(1000)), 1 << 20).expect("runs");
        assert!(endless.is_none(), "stopped at 1 MiB");
        let short = bounded_output(Command::new("printf").arg("abc"), 1 << 20).expect("runs").expect("within");
        assert_eq!((short.stdout.as_slice(), short.status.success()), (b"abc".as_slice(), true));
    }

    /// A base whose baseline directory (or a store in it) git cannot give as files: each is an
    /// error, never "no baseline yet".
    #[test]
    fn a_base_tree_the_gate_cannot_read_is_an_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        let run = |args: &[&str]| git_in(d, args);
        run(&["init", "-q"]);
        std::fs::write(d.join("README"), "x").expect("write");
        run(&["add", "-A"]);
        run(&["commit", "-qm", "first"]);
        let first = run(&["rev-parse", "HEAD"]);
        // A submodule entry (gitlink) named baselines, a file named stores, a link named links,
        // and a directory holding a link.
        run(&["update-index", "--add", "--cacheinfo", &format!("160000,{first},baselines")]);
        std::fs::write(d.join("stores"), "not a directory").expect("write");
        std::os::unix::fs::symlink("links", d.join("links")).expect("symlink");
        std::fs::create_dir_all(d.join("mixed/P")).expect("dir");
        std::os::unix::fs::symlink("/etc/passwd", d.join("mixed/P/w.json")).expect("symlink");
        run(&["add", "stores", "links", "mixed"]);
        run(&["commit", "-qm", "odd trees"]);
        let base = BaseCommit::resolve(d, "HEAD").expect("resolves");
        for (dir, what) in [
            ("baselines", "a git submodule"),
            ("stores", "a file, not a directory"),
            ("links", "a symbolic link"),
            ("mixed", "a symbolic link"),
        ] {
            let err = base.tree(Path::new(dir)).expect_err(dir);
            assert!(matches!(&err, BaseError::Unreadable { what: w, .. } if w == what), "{dir}: {err}");
            assert!(err.to_string().contains("--baselines-from-head"), "{err}");
        }
        // Absent is still "no baselines yet".
        let empty = base.tree(Path::new("nothing-here")).expect("no baselines");
        assert!(std::fs::read_dir(empty.path()).expect("dir").next().is_none());
    }

    #[test]
    fn the_base_commit_decides_and_edits_are_listed() {
        let (tmp, sha) = repo();
        let base = BaseCommit::resolve(tmp.path(), &sha).expect("resolves");
        assert_eq!(base.sha, sha);
        assert_eq!(base.file(Path::new("commgate.toml")).expect("reads").as_deref(), Some("min_effect = 0.03\n"));
        let tree = base.tree(Path::new("./baselines")).expect("copies");
        let store = std::fs::read_to_string(tree.path().join("P/w.json")).expect("copied");
        assert_eq!(store, "{\"base\": true}\n");
        let changed = base.changed(&[Path::new("commgate.toml"), Path::new("baselines")]).expect("diff");
        assert_eq!(changed, ["baselines/P/w.json", "commgate.toml"]);
        // Absolute paths inside the clone, and revisions by name, work the same.
        let named = BaseCommit::resolve(tmp.path(), "HEAD~1").expect("resolves");
        assert_eq!(named.sha, sha);
        assert!(named.file(&tmp.path().join("commgate.toml")).expect("reads").is_some());
    }

    #[test]
    fn paths_from_a_subdirectory_and_untracked_edits_count() {
        let (tmp, sha) = repo();
        let sub = tmp.path().join("train");
        std::fs::create_dir_all(&sub).expect("dir");
        std::fs::write(sub.join("new.toml"), "x = 1\n").expect("untracked");
        let base = BaseCommit::resolve(&sub, &sha).expect("resolves from a subdirectory");
        assert_eq!(base.file(Path::new("../commgate.toml")).expect("reads").as_deref(), Some("min_effect = 0.03\n"));
        let tree = base.tree(Path::new("../baselines")).expect("copies");
        assert!(tree.path().join("P/w.json").exists());
        let changed = base.changed(&[Path::new("new.toml"), Path::new("../commgate.toml")]).expect("diff");
        assert_eq!(changed, ["commgate.toml", "train/new.toml"]);
        assert!(matches!(base.file(Path::new("../../x")).unwrap_err(), BaseError::OutsideRepository { .. }));
    }

    #[test]
    fn a_base_without_settings_or_baselines_is_empty_not_an_error() {
        let (tmp, sha) = repo();
        let base = BaseCommit::resolve(tmp.path(), &sha).expect("resolves");
        assert_eq!(base.file(Path::new("other.toml")).expect("reads"), None);
        let tree = base.tree(Path::new("stores")).expect("copies");
        assert_eq!(std::fs::read_dir(tree.path()).expect("dir").count(), 0);
    }

    #[test]
    fn missing_commits_and_escapes_are_refused() {
        let (tmp, _) = repo();
        let absent = "0123456789abcdef0123456789abcdef01234567";
        let e = BaseCommit::resolve(tmp.path(), absent).unwrap_err();
        assert_eq!(e, BaseError::MissingCommit { sha: absent.to_string() });
        assert!(e.to_string().contains("fetch-depth: 0"), "{e}");
        let e = BaseCommit::resolve(tmp.path(), "--output=x").unwrap_err();
        assert!(matches!(e, BaseError::UnknownRevision { .. }), "{e}");
        let base = BaseCommit::resolve(tmp.path(), "HEAD").expect("resolves");
        assert!(matches!(base.tree(Path::new("../elsewhere")).unwrap_err(), BaseError::OutsideRepository { .. }));
        assert!(matches!(base.file(Path::new("/etc/passwd")).unwrap_err(), BaseError::OutsideRepository { .. }));
    }

    #[test]
    fn the_base_sha_comes_from_the_pull_request_payload() {
        let sha = "A".repeat(40);
        let payload = serde_json::json!({"pull_request": {"number": 3, "base": {"sha": sha, "ref": "main"}}});
        assert_eq!(base_sha_from_payload(&payload), Some("a".repeat(40)));
        let bad = serde_json::json!({"pull_request": {"base": {"sha": "main; rm -rf /"}}});
        assert_eq!(base_sha_from_payload(&bad), None);
        assert_eq!(base_sha_from_payload(&serde_json::json!({"ref": "refs/heads/main"})), None);
    }
}
