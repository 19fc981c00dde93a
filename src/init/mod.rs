//! `commgate init`: scaffolds a repository for the gate — `commgate.toml` (every key with its
//! default), an empty baseline store for one environment profile, and the pull-request workflow
//! (plus, with `--fork-prs`, the measure + comment pair for pull requests from forks).
//!
//! The files are templates under `src/init/templates/`, filled by one pure function
//! ([`fill`]). Every value put into them is checked first ([`validate_profile`], [`validate_action`]): they end up
//! in YAML and in `run:` blocks, so only characters that can mean nothing there are accepted.
//! Nothing is written when any target exists (unless `--force`), and each file is written
//! through a temporary file and a rename, so a scaffold is never half-written.

use std::path::{Path, PathBuf};

use thiserror::Error;

const CONFIG: &str = include_str!("templates/commgate.toml");
const BASELINES_README: &str = include_str!("templates/baselines-README.md");
const GATE: &str = include_str!("templates/gate.yml");
const FORK_MEASURE: &str = include_str!("templates/fork-measure.yml");
const FORK_COMMENT: &str = include_str!("templates/fork-comment.yml");
const RESULTS_GITIGNORE: &str = include_str!("templates/results.gitignore");

/// The longest profile name accepted (it names a directory).
const MAX_PROFILE: usize = 64;
/// The longest `OWNER/REPO@REF` accepted.
const MAX_ACTION: usize = 200;

pub use crate::cli::GateBackend;

/// The profile `bench` files `backend`'s runs under by default (`PAR-CUDA-MECHANISM`,
/// `PAR-CPU-MECHANISM`): `init`'s profile when `--profile` is not given, so that the baselines
/// the workflow records land under a profile that says what they are.
pub fn default_profile(backend: GateBackend) -> String {
    commgate_bench::runner::default_profile(backend.name())
}

/// The workflow's comment on its `backend:` line.
fn backend_note(backend: GateBackend) -> &'static str {
    match backend {
        GateBackend::Cuda => "# fail loudly instead of falling back to cpu on a broken driver",
        GateBackend::Cpu => "# the CPU backend: real timings of the mechanism, no GPU needed",
    }
}

/// What `init` was asked for (resolved from the command line by `commands/init.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct InitRequest {
    pub dir: PathBuf,
    /// `--profile`; `None`: the backend's ([`default_profile`]).
    pub profile: Option<String>,
    /// `--action-ref` (`OWNER/REPO@REF`); `None`: this release's tag.
    pub action: Option<String>,
    pub fork_prs: bool,
    pub force: bool,
}

/// Why nothing was written.
#[derive(Debug, Error, PartialEq)]
pub enum InitError {
    #[error(
        "--profile {0:?}: a profile names a baseline directory: use 1 to {MAX_PROFILE} letters, digits, '-', '_', \
         '.' or '+', starting with a letter or digit"
    )]
    BadProfile(String),
    #[error(
        "--action-ref {0:?}: give OWNER/REPO@REF (a tag or a full commit SHA), in letters, digits, '-', '_', '.' \
         and '/', e.g. commgate/commgate@v{version}",
        version = env!("CARGO_PKG_VERSION")
    )]
    BadAction(String),
    #[error("{0} already exists: nothing was written; move it away or run `commgate init --force` to overwrite")]
    Exists(String),
    #[error("{path}: cannot write: {why}")]
    Write { path: String, why: String },
    #[error(
        "{0} is a symbolic link: init writes only inside the target directory; remove the link, or pass the \
         directory it points to as --dir"
    )]
    Link(String),
    #[error("internal: the template {0} has a placeholder without a value")]
    Template(&'static str),
}

/// One file of the scaffold: where it goes (relative to the target directory) and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub path: PathBuf,
    pub text: String,
}

/// The checked values substituted into the templates.
#[derive(Debug, Clone, PartialEq)]
pub struct Values {
    pub profile: String,
    /// `OWNER/REPO`.
    pub repo: String,
    /// A tag or a 40-hex commit SHA.
    pub git_ref: String,
    /// What the workflows run.
    pub backend: GateBackend,
}

impl Values {
    /// Checks the request's profile and action reference; without a profile, the backend's.
    pub fn new(profile: Option<&str>, action: Option<&str>, backend: GateBackend) -> Result<Values, InitError> {
        let profile = validate_profile(profile.unwrap_or(&default_profile(backend)))?;
        let default = format!("commgate/commgate@v{}", env!("CARGO_PKG_VERSION"));
        let (repo, git_ref) = validate_action(action.unwrap_or(&default))?;
        Ok(Values { profile, repo, git_ref, backend })
    }

    /// `--rev` for a commit SHA, `--tag` otherwise (what `cargo install --git` needs).
    fn ref_flag(&self) -> &'static str {
        if is_sha(&self.git_ref) {
            "--rev"
        } else {
            "--tag"
        }
    }

    fn pairs(&self) -> [(&'static str, String); 8] {
        [
            ("PROFILE", self.profile.clone()),
            ("BACKEND", self.backend.name().to_string()),
            ("BACKEND_NOTE", backend_note(self.backend).to_string()),
            ("ACTION", format!("{}@{}", self.repo, self.git_ref)),
            ("REPO", self.repo.clone()),
            ("REF", self.git_ref.clone()),
            ("REF_FLAG", self.ref_flag().to_string()),
            ("VERSION", env!("CARGO_PKG_VERSION").to_string()),
        ]
    }
}

fn is_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A profile name: what the store layout accepts as a directory, at most `MAX_PROFILE`
/// characters, starting with a letter or digit (never `.`, `..`, a hidden directory or a flag).
pub fn validate_profile(name: &str) -> Result<String, InitError> {
    let ok = (1..=MAX_PROFILE).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && commgate_gate::baseline::store_path_for(Path::new(""), name, "w").is_ok();
    if ok {
        Ok(name.to_string())
    } else {
        Err(InitError::BadProfile(name.to_string()))
    }
}

/// `OWNER/REPO@REF` split in two; each part in a character set that means nothing in YAML or
/// a shell, no `..`, no part starting with `-` or `.`.
pub fn validate_action(action: &str) -> Result<(String, String), InitError> {
    let bad = || InitError::BadAction(action.to_string());
    if action.len() > MAX_ACTION || action.contains("..") {
        return Err(bad());
    }
    let (repo, git_ref) = action.split_once('@').ok_or_else(bad)?;
    let word = |s: &str| {
        !s.is_empty()
            && !s.starts_with(['-', '.'])
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let repo_ok = matches!(repo.split('/').collect::<Vec<_>>().as_slice(), [owner, name] if word(owner) && word(name));
    let ref_ok = git_ref.split('/').all(word);
    if repo_ok && ref_ok {
        Ok((repo.to_string(), git_ref.to_string()))
    } else {
        Err(bad())
    }
}

/// Replaces every `@@KEY@@` in `template` by its value; a placeholder left without a value is
/// an error (a template and its values out of step), never written out.
pub fn fill(template: &str, values: &[(&str, String)]) -> Option<String> {
    let mut out = template.to_string();
    for (key, value) in values {
        out = out.replace(&format!("@@{key}@@"), value);
    }
    (!out.contains("@@")).then_some(out)
}

/// The files of the scaffold, in the order they are written.
pub fn plan(values: &Values, fork_prs: bool) -> Result<Vec<Planned>, InitError> {
    let pairs = values.pairs();
    let profile_dir = crate::config::default_store_dir().join(&values.profile);
    let workflows = Path::new(".github/workflows");
    let mut files = vec![
        ("commgate.toml", PathBuf::from("commgate.toml"), CONFIG),
        ("baselines README", profile_dir.join("README.md"), BASELINES_README),
        ("gate workflow", workflows.join("commgate.yml"), GATE),
    ];
    if fork_prs {
        files.push(("fork measure workflow", workflows.join("commgate-fork-measure.yml"), FORK_MEASURE));
        files.push(("fork comment workflow", workflows.join("commgate-fork-comment.yml"), FORK_COMMENT));
    }
    files.push(("results .gitignore", results_dir().join(".gitignore"), RESULTS_GITIGNORE));
    files
        .into_iter()
        .map(|(name, path, template)| {
            fill(template, &pairs).map(|text| Planned { path, text }).ok_or(InitError::Template(name))
        })
        .collect()
}

/// Where `bench` and `check` write result files by default (`bench.results_dir`): every run
/// leaves one, and they are not meant for the repository (the store keeps what counts).
fn results_dir() -> PathBuf {
    crate::config::default_results_dir()
}

/// Writes the scaffold under `dir`, all of it or nothing: first checks that no target exists
/// (unless `force`) and that no directory on the way under `dir` is a symbolic link (which would
/// put the files elsewhere, whatever `force` says); then writes every file to a temporary file
/// beside its target (creating the directories it needs), and only when all are written renames
/// them into place. A failure before the renames (a full disk) removes the temporaries and the
/// directories it created. Returns the paths written.
pub fn write(dir: &Path, files: &[Planned], force: bool) -> Result<Vec<PathBuf>, InitError> {
    for f in files {
        if let Some(link) = linked_directory(dir, &f.path) {
            return Err(InitError::Link(link.display().to_string()));
        }
    }
    if !force {
        if let Some(existing) = files.iter().map(|f| target(dir, &f.path)).find(|p| p.symlink_metadata().is_ok()) {
            return Err(InitError::Exists(existing.display().to_string()));
        }
    }
    let mut staged = Staged::default();
    for f in files {
        let path = target(dir, &f.path);
        if let Err(e) = staged.stage(&path, f.text.as_bytes()) {
            staged.undo();
            return Err(InitError::Write {
                path: path.display().to_string(),
                why: format!("{e}; nothing was written"),
            });
        }
    }
    staged.commit()
}

/// The first directory on the way from `dir` to `rel`'s file that is a symbolic link.
fn linked_directory(dir: &Path, rel: &Path) -> Option<PathBuf> {
    let mut at = dir.to_path_buf();
    let parent = rel.parent()?;
    for component in parent.components() {
        at.push(component);
        if at.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(target(dir, at.strip_prefix(dir).unwrap_or(&at)));
        }
    }
    None
}

/// Files written to temporaries beside their targets, and the directories made for them.
#[derive(Default)]
struct Staged {
    /// (temporary, target)
    files: Vec<(PathBuf, PathBuf)>,
    /// Made by this `init`, outermost first.
    made: Vec<PathBuf>,
}

impl Staged {
    fn stage(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut missing: Vec<PathBuf> = parent
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .map(Path::to_path_buf)
            .collect();
        missing.reverse();
        for d in missing {
            std::fs::create_dir(&d)?;
            self.made.push(d);
        }
        let (tmp, mut file) = commgate_core::output::create_temp(&parent)?;
        self.files.push((tmp.clone(), path.to_path_buf()));
        file.write_all(bytes)?;
        file.sync_all()
    }

    /// Removes the temporaries and the directories made (those left empty).
    fn undo(&self) {
        for (tmp, _) in &self.files {
            let _ = std::fs::remove_file(tmp);
        }
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }

    /// Renames every temporary into place; a rename that fails removes the temporaries left.
    fn commit(self) -> Result<Vec<PathBuf>, InitError> {
        let mut written = Vec::new();
        for (i, (tmp, path)) in self.files.iter().enumerate() {
            if let Err(e) = std::fs::rename(tmp, path) {
                for (left, _) in &self.files[i..] {
                    let _ = std::fs::remove_file(left);
                }
                return Err(InitError::Write {
                    path: path.display().to_string(),
                    why: format!("{e}; the files before it in the scaffold were written"),
                });
            }
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                let _ = commgate_core::output::sync_dir(parent);
            }
            written.push(path.clone());
        }
        Ok(written)
    }
}

/// Where `rel` goes under `dir`, as messages show it (`commgate.toml`, not `./commgate.toml`).
fn target(dir: &Path, rel: &Path) -> PathBuf {
    if dir == Path::new(".") {
        rel.to_path_buf()
    } else {
        dir.join(rel)
    }
}

/// What to do after `init`, for the terminal.
pub fn next_steps(values: &Values, fork_prs: bool) -> String {
    let fork = if fork_prs {
        "\n  - make \"commgate measure (fork PRs) / measure\" a required check too, and keep fork-PR approval on"
    } else {
        ""
    };
    let (profile, backend) = (&values.profile, values.backend.name());
    format!(
        "Next steps:\n\
         \x20 1. on the runner the gate uses, record ten runs: `commgate bench --backend {backend} -o run-1.json` (each run's own \
         verdict on overlap is information, not the gate's)\n\
         \x20 2. add each to the store: `commgate baseline update --from run-1.json` (writes baselines/{profile}/)\n\
         \x20 3. try the gate: `commgate check --backend {backend}` (for unchanged code: accept, or collect_more_evidence \
         with the step that would decide it)\n\
         \x20 4. commit commgate.toml, baselines/, benchmarks/results/.gitignore and .github/workflows/, and make `commgate gate` a required check{fork}\n\
         The workflows run the {backend} backend and file its runs under {profile}: record the baselines on that backend.\n\
         See docs/init.md in the commgate repository for the whole first day.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        Values::new(Some("PAR-H100"), None, GateBackend::Cuda).expect("valid")
    }

    /// `.github` or `baselines` as a link would put the scaffold outside the target directory:
    /// refused, even with --force, and nothing is written.
    #[test]
    fn linked_directories_are_refused_and_nothing_is_written() {
        let files = plan(&values(), false).expect("plan");
        for linked in [".github", "baselines"] {
            let dir = tempfile::tempdir().expect("tempdir");
            let outside = tempfile::tempdir().expect("tempdir");
            std::os::unix::fs::symlink(outside.path(), dir.path().join(linked)).expect("symlink");
            for force in [false, true] {
                let e = write(dir.path(), &files, force).expect_err(linked);
                assert!(matches!(&e, InitError::Link(p) if p.ends_with(linked)), "{linked}: {e}");
            }
            assert!(std::fs::read_dir(outside.path()).expect("dir").next().is_none(), "nothing outside");
            assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1, "only the link");
        }
    }

    /// A file that cannot be written stops the scaffold before anything is in place: no file,
    /// no temporary and no directory of it is left.
    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let files = plan(&values(), false).expect("plan");
        let dir = tempfile::tempdir().expect("tempdir");
        // The last file's directory cannot be made: a file stands where it goes.
        let last = files.last().expect("files").path.clone();
        let blocker = last.components().next().expect("a first component").as_os_str().to_owned();
        let before: Vec<_> = files.iter().take_while(|f| !f.path.starts_with(&blocker)).collect();
        assert!(!before.is_empty(), "some files come before the blocked one");
        std::fs::write(dir.path().join(&blocker), "in the way").expect("write");
        let e = write(dir.path(), &files, true).expect_err("blocked");
        assert!(e.to_string().contains("nothing was written"), "{e}");
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into())
            .collect();
        assert_eq!(left, [blocker.to_string_lossy().to_string()], "only the blocker: {left:?}");
    }

    #[test]
    fn fill_substitutes_every_placeholder_and_refuses_leftovers() {
        let pairs = [("A", "1".to_string()), ("B", "x y".to_string())];
        assert_eq!(fill("@@A@@-@@B@@-@@A@@ ${{ github.x }}", &pairs).as_deref(), Some("1-x y-1 ${{ github.x }}"));
        assert_eq!(fill("@@A@@ @@C@@", &pairs), None);
        assert_eq!(fill("no placeholders", &[]).as_deref(), Some("no placeholders"));
    }

    #[test]
    fn every_template_is_filled_completely() {
        for fork in [false, true] {
            let files = plan(&values(), fork).expect("fills");
            assert_eq!(files.len(), if fork { 6 } else { 4 });
            for f in &files {
                assert!(!f.text.contains("@@"), "{}", f.path.display());
            }
        }
    }

    #[test]
    fn the_config_template_parses_with_every_key_uncommented() {
        let files = plan(&values(), false).expect("fills");
        let text = &files[0].text;
        let file = crate::config::parse_file(text).expect("as written");
        assert_eq!(file.bench.environment_profile.as_deref(), Some("PAR-H100"));
        // Each `# key = value` line is a key the settings file accepts, with a valid value.
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.split_whitespace().nth(1) == Some("=") => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(uncommented.matches(" = ").count() >= 30, "{uncommented}");
        let file = crate::config::parse_file(&uncommented).expect("every key accepted");
        assert_eq!(file.baseline.keep, Some(commgate_gate::baseline::DEFAULT_KEEP));
        assert_eq!(file.compare.seed, Some(commgate_gate::compare::CompareOptions::default().seed));
    }

    #[test]
    fn profiles_are_checked() {
        for good in ["PAR-MOCK", "a", "h100.x8_ib+v2", &"x".repeat(64)] {
            assert_eq!(validate_profile(good).as_deref(), Ok(good), "{good}");
        }
        for bad in ["", ".", "..", ".hidden", "-x", "a/b", "a b", "a\"b", "a\nb", "é", "$(id)", &"x".repeat(65)] {
            assert_eq!(validate_profile(bad), Err(InitError::BadProfile(bad.to_string())), "{bad:?}");
        }
    }

    #[test]
    fn action_refs_are_checked() {
        assert_eq!(validate_action("commgate/commgate@v0.1.0"), Ok(("commgate/commgate".into(), "v0.1.0".into())));
        assert!(validate_action("acme/commgate@release/v1").is_ok());
        for bad in [
            "commgate",
            "commgate@v1",
            "a/b/c@v1",
            "a/b@",
            "a/b@-x",
            "a/b@../x",
            "a/b@v1 # x",
            "a/b@v1\nrun: id",
            "a/b@${{ github.token }}",
            "a/b@v1\"",
        ] {
            assert!(matches!(validate_action(bad), Err(InitError::BadAction(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_sha_is_installed_by_rev_and_a_tag_by_tag() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let by_sha = Values::new(Some("p"), Some(&format!("acme/commgate@{sha}")), GateBackend::Cuda).expect("valid");
        let files = plan(&by_sha, true).expect("fills");
        assert!(files[4].text.contains(&format!("COMMGATE_REF: \"{sha}\"")));
        assert!(files[4].text.contains("--git \"$COMMGATE_REPO\" --rev \"$COMMGATE_REF\""));
        assert!(files[2].text.contains(&format!("uses: acme/commgate@{sha}\n")));
        let files = plan(&values(), true).expect("fills");
        assert!(files[4].text.contains("--tag \"$COMMGATE_REF\""));
        assert!(files[2].text.contains(&format!("uses: commgate/commgate@v{}\n", env!("CARGO_PKG_VERSION"))));
    }

    #[test]
    fn nothing_is_written_when_one_target_exists() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let files = plan(&values(), true).expect("fills");
        let last = tmp.path().join(&files[4].path);
        std::fs::create_dir_all(last.parent().expect("dir")).expect("mkdir");
        std::fs::write(&last, "mine").expect("write");
        assert_eq!(write(tmp.path(), &files, false), Err(InitError::Exists(last.display().to_string())));
        assert!(!tmp.path().join("commgate.toml").exists());
        assert_eq!(std::fs::read_to_string(&last).expect("read"), "mine");
        let written = write(tmp.path(), &files, true).expect("forced");
        assert_eq!(written.len(), 6);
        assert_eq!(std::fs::read_to_string(&last).expect("read"), files[4].text);
    }

    #[test]
    fn the_default_profile_is_the_one_bench_uses_for_the_workflow_backend() {
        assert_eq!(default_profile(GateBackend::Cuda), "PAR-CUDA-MECHANISM");
        assert_eq!(default_profile(GateBackend::Cpu), "PAR-CPU-MECHANISM");
        for backend in [GateBackend::Cuda, GateBackend::Cpu] {
            let values = Values::new(None, None, backend).expect("valid");
            let files = plan(&values, true).expect("fills");
            let toml = &files[0].text;
            assert!(toml.contains(&format!("environment_profile = \"{}\"", default_profile(backend))), "{toml}");
            // The backend the profile is measured on is set, not left to `auto`.
            assert!(toml.contains(&format!("\nbackend = \"{}\"\n", backend.name())), "{toml}");
            for f in files.iter().filter(|f| f.path.extension().is_some_and(|e| e == "yml")) {
                let backends: Vec<&str> = f.text.lines().filter_map(|l| l.trim().strip_prefix("backend: ")).collect();
                assert!(backends.iter().all(|b| b.starts_with(backend.name())), "{}: {backends:?}", f.path.display());
            }
        }
    }
}
