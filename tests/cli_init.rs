//! `commgate init` through the binary: a fresh directory gets the scaffold (snapshots of the
//! files), a second run refuses and changes nothing, `--force` rewrites, bad values are refused
//! before anything is written, and the day-one flow works in the scaffold: record mock runs,
//! `baseline update`, then `check` gives a verdict.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::commgate_in as commgate;

fn init(dir: &Path, args: &[&str]) -> Output {
    commgate(dir).arg("init").args(args).output().expect("runs")
}

fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("commgate: error: ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_string()
}

/// Every file under `dir` with its contents.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let text = std::fs::read_to_string(&path).expect("text");
                out.insert(path.strip_prefix(dir).expect("inside").to_path_buf(), text);
            }
        }
    }
    out
}

const FILES: [&str; 4] = [
    "commgate.toml",
    "baselines/PAR-H100/README.md",
    ".github/workflows/commgate.yml",
    "benchmarks/results/.gitignore",
];
const FORK_FILES: [&str; 2] =
    [".github/workflows/commgate-fork-measure.yml", ".github/workflows/commgate-fork-comment.yml"];

/// The file's text with this release's version replaced, so a version bump does not churn the
/// snapshots.
fn versionless(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).expect("written").replace(env!("CARGO_PKG_VERSION"), "<version>")
}

#[test]
fn a_fresh_directory_gets_the_scaffold() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = init(tmp.path(), &["--profile", "PAR-H100"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let written = tree(tmp.path());
    let mut expected = FILES.map(PathBuf::from).to_vec();
    expected.sort();
    assert_eq!(written.keys().cloned().collect::<Vec<_>>(), expected);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for file in FILES {
        assert!(stderr.contains(&format!("commgate: wrote {file}\n")), "{stderr}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("commgate baseline update --from run-1.json"), "{stdout}");
    let workflow = versionless(tmp.path(), ".github/workflows/commgate.yml");
    assert!(workflow.contains("uses: commgate/commgate@v<version>\n"), "{workflow}");
    insta::assert_snapshot!("init_commgate_toml", versionless(tmp.path(), FILES[0]));
    insta::assert_snapshot!("init_baselines_readme", versionless(tmp.path(), FILES[1]));
    insta::assert_snapshot!("init_gate_workflow", workflow);
    let ignore = versionless(tmp.path(), FILES[3]);
    assert!(ignore.lines().any(|l| l == "*") && ignore.lines().any(|l| l == "!.gitignore"), "{ignore}");
}

/// The profile `init` names and the backend its workflows run agree, with or without a GPU
/// here: `cuda` by default (the gate's runners), `cpu` when asked.
#[test]
fn the_profile_and_the_workflow_backend_agree() {
    for (args, profile, backend) in [
        (&[][..], "PAR-CUDA-MECHANISM", "cuda"),
        (&["--backend", "cpu"][..], "PAR-CPU-MECHANISM", "cpu"),
        (&["--backend", "cuda", "--fork-prs"][..], "PAR-CUDA-MECHANISM", "cuda"),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = init(tmp.path(), args);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let toml = versionless(tmp.path(), "commgate.toml");
        assert!(toml.contains(&format!("\nenvironment_profile = \"{profile}\"\n")), "{args:?}: {toml}");
        assert!(tmp.path().join("baselines").join(profile).join("README.md").is_file(), "{args:?}");
        for (path, text) in tree(tmp.path()).iter().filter(|(p, _)| p.extension().is_some_and(|e| e == "yml")) {
            for line in text.lines().filter_map(|l| l.trim().strip_prefix("backend: ")) {
                assert!(line.starts_with(&format!("{backend} ")), "{args:?} {}: {line}", path.display());
            }
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("run the {backend} backend and file its runs under {profile}")), "{stdout}");
    }
}

/// Every commented setting `init` writes, uncommented alone, is one `check` accepts (the
/// benchmark on the mock backend, whatever the line says: the flag wins over the file).
#[test]
fn each_commented_setting_uncommented_alone_is_accepted_by_check() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    assert_eq!(init(dir, &["--backend", "cpu"]).status.code(), Some(0));
    let original = std::fs::read_to_string(dir.join("commgate.toml")).expect("read");
    let commented: Vec<(usize, &str)> = original
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            l.strip_prefix("# ").filter(|rest| rest.split_whitespace().nth(1) == Some("=")).map(|r| (i, r))
        })
        .collect();
    assert!(commented.len() >= 25, "{commented:?}");
    for (i, setting) in commented {
        let text: String = original
            .lines()
            .enumerate()
            .map(|(j, l)| if j == i { format!("{setting}\n") } else { format!("{l}\n") })
            .collect();
        std::fs::write(dir.join("commgate.toml"), text).expect("write");
        let out =
            commgate(dir).args(["check", "--backend", "mock", "--repeats", "20", "--quiet"]).output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(2), "`{setting}`: {stderr}");
        assert!(!stderr.contains("commgate.toml"), "`{setting}`: {stderr}");
    }
}

#[test]
fn fork_prs_adds_the_two_workflow_pair() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let action = format!("acme/commgate@{sha}");
    let out = init(tmp.path(), &["--profile", "PAR-H100", "--fork-prs", "--action-ref", &action]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tree(tmp.path()).len(), 6);
    for file in [FILES[2], FORK_FILES[0]] {
        let text = versionless(tmp.path(), file);
        assert!(text.contains(&format!("uses: {action}\n")), "{file}: {text}");
    }
    insta::assert_snapshot!("init_fork_measure_workflow", versionless(tmp.path(), FORK_FILES[0]));
    insta::assert_snapshot!("init_fork_comment_workflow", versionless(tmp.path(), FORK_FILES[1]));
}

#[test]
fn a_second_run_refuses_and_changes_nothing_until_forced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    assert_eq!(init(tmp.path(), &["--profile", "PAR-H100"]).status.code(), Some(0));
    let workflow = tmp.path().join(FILES[2]);
    std::fs::write(&workflow, "edited by hand\n").expect("edit");
    let before = tree(tmp.path());

    // With --fork-prs two of the five targets are new: still nothing is written.
    let out = init(tmp.path(), &["--profile", "PAR-H100", "--fork-prs"]);
    assert_eq!(out.status.code(), Some(2));
    let line = one_error_line(&out);
    assert!(line.starts_with("commgate: error: commgate.toml already exists: nothing was written"), "{line}");
    assert!(line.contains("--force"), "{line}");
    assert_eq!(tree(tmp.path()), before, "nothing changed");

    let out = init(tmp.path(), &["--profile", "PAR-H100", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&workflow).expect("read").starts_with("# commgate merge gate"));
}

#[test]
fn an_existing_invalid_settings_file_is_named_not_parsed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("commgate.toml"), "[bench\n").expect("write");
    let out = init(tmp.path(), &["--profile", "PAR-H100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&out).contains("commgate.toml already exists"), "{out:?}");
    assert_eq!(tree(tmp.path()).len(), 1);
}

#[test]
fn bad_values_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (args, expected) in [
        (vec!["--profile", "team/a"], "commgate: error: --profile \"team/a\": a profile names a baseline directory"),
        (vec!["--profile", "x\"\nrun: id"], "commgate: error: --profile \"x\\\"\\nrun: id\": "),
        (vec!["--profile", ".."], "commgate: error: --profile \"..\": "),
        (
            vec!["--action-ref", "commgate/commgate@v1 # x"],
            "commgate: error: --action-ref \"commgate/commgate@v1 # x\": ",
        ),
        (vec!["--action-ref", "${{ github.token }}"], "commgate: error: --action-ref \"${{ github.token }}\": "),
    ] {
        let out = init(tmp.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let line = one_error_line(&out);
        assert!(line.starts_with(expected), "{line}");
        assert!(tree(tmp.path()).is_empty(), "{args:?} wrote something");
    }
}

#[test]
fn the_day_one_flow_works_in_the_scaffold() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("repo");
    let out = commgate(tmp.path()).args(["init", "--profile", "DAY-ONE", "--dir"]).arg(&dir).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Before any run is recorded: honestly missing evidence, exit 0.
    let out = commgate(&dir).args(["check", "--backend", "mock", "--repeats", "40"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Verdict: collect_more_evidence"));
    for seed in 2..5 {
        let run = format!("run-{seed}.json");
        let seed = seed.to_string();
        let args = ["bench", "--backend", "mock", "--repeats", "40", "--seed", &seed, "-o", &run];
        commgate(&dir).args(args).assert().success();
        commgate(&dir).args(["baseline", "update", "--from", &run]).assert().success();
    }
    assert!(dir.join("baselines/DAY-ONE/par-overlap-allreduce-matmul.json").is_file());
    let out = commgate(&dir).args(["check", "--backend", "mock", "--repeats", "40"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("Verdict: accept: overlap step "), "{stdout}");
    assert!(stdout.lines().next().is_some_and(|l| l.ends_with(", within ±3 %")), "{stdout}");
    assert!(stdout.contains("no regression against 3 baseline run(s)"), "{stdout}");
}
