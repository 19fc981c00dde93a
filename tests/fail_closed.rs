//! The gate fails closed: every way `check` can fail to judge a change exits 2 after writing the
//! report that says what failed (and, in a pull request, posting it), while evidence that is
//! honestly missing stays `collect_more_evidence` with exit 0; `comment` exits 2 whenever it did
//! not post. Binary tests, with a mock GitHub API on 127.0.0.1 where GitHub is involved.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod common;
use common::{command_in, commgate_in, root};

const STORE_DIR: &str = "tests/fixtures/compare/baselines";
const SAME: &str = "tests/fixtures/compare/current-same.json";
const TOKEN: &str = "ghs_NEVERPRINTME0123456789";
const MARKER: &str = "<!-- commgate-report -->";
/// A small, fast mock benchmark.
const MOCK: [&str; 10] =
    ["--backend", "mock", "--repeats", "100", "--warmup", "1", "--seed", "7", "--quiet", "--timeout"];

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The one `commgate: error:` line on stderr.
fn error_line(out: &Output) -> String {
    let text = stderr(out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("commgate: error: ")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    errors[0].to_string()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("file")).expect("JSON")
}

/// A workspace: an existing (empty) `baselines/` store, the files GitHub Actions hands a step,
/// and a pull-request event.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("baselines")).expect("store");
        let event = json!({"action": "synchronize", "number": 7, "pull_request": {"number": 7}});
        std::fs::write(dir.path().join("event.json"), event.to_string()).expect("event");
        Workspace { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn commgate(&self) -> Command {
        commgate_in(self.dir.path())
    }

    /// `commgate` as a pull-request job of GitHub Actions would run it, against `api` (its event has
    /// no base commit, so `check` runs with `--baselines-from-head`).
    fn in_actions(&self, api: &str) -> Command {
        let mut cmd = self.commgate();
        cmd.env("GITHUB_ACTIONS", "true")
            .env("GITHUB_EVENT_NAME", "pull_request")
            .env("GITHUB_EVENT_PATH", self.file("event.json"))
            .env("GITHUB_REPOSITORY", "acme/train")
            .env("GITHUB_API_URL", api)
            .env("GITHUB_TOKEN", TOKEN)
            .env("GITHUB_STEP_SUMMARY", self.file("summary.md"))
            .env("GITHUB_OUTPUT", self.file("output.txt"));
        cmd
    }

    fn report(&self) -> Value {
        read_json(&self.file("report.json"))
    }
}

fn comment(id: u64) -> Value {
    json!({
        "id": id, "body": MARKER,
        "html_url": format!("https://github.example/acme/train/pull/7#issuecomment-{id}"),
    })
}

/// A pull request with no commgate comment yet, on which a new one can be created.
async fn fresh_pull_request(server: &MockServer) {
    Mock::given(method("GET"))
        .and(path("/repos/acme/train/issues/7/comments"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path("/repos/acme/train/issues/7/comments"))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(42)))
        .mount(server)
        .await;
}

/// The bodies of the comments posted to `server`.
async fn posted(server: &MockServer) -> Vec<String> {
    let received = server.received_requests().await.expect("recording");
    received
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| serde_json::from_slice::<Value>(&r.body).expect("JSON")["body"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn a_dead_rank_and_a_hang_in_check_exit_2_after_the_report_and_the_comment_say_so() {
    let server = MockServer::start().await;
    fresh_pull_request(&server).await;
    let ws = Workspace::new();

    // A rank dies.
    let out = ws
        .in_actions(&server.uri())
        .env("COMMGATE_MOCK_FAULT", "die:1")
        .args(["check", "--baselines-from-head"])
        .args(MOCK)
        .args(["30", "--baselines", "baselines", "--output", "report.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("could not evaluate: the benchmark failed (rank_died on rank 1"),
        "{}",
        stderr(&out)
    );
    let report = ws.report();
    assert_eq!(report["error"]["kind"], "bench_failed");
    assert!(report["error"]["message"].as_str().expect("message").starts_with("rank_died on rank 1: "), "{report}");
    assert_eq!(report["verdict"], "collect_more_evidence");
    assert!(
        stdout(&out).starts_with("Could not evaluate: the benchmark failed (rank_died on rank 1"),
        "{}",
        stdout(&out)
    );
    let bodies = posted(&server).await;
    assert_eq!(bodies.len(), 1, "{}", stderr(&out));
    assert!(bodies[0].starts_with(&format!("{MARKER}\n### ⛔ commgate: could not evaluate")), "{}", bodies[0]);
    assert!(bodies[0].contains("**Could not evaluate: the benchmark failed** (rank\\_died on rank 1"), "{}", bodies[0]);
    assert!(std::fs::read_to_string(ws.file("summary.md")).expect("summary").contains("could not evaluate"));
    let outputs = std::fs::read_to_string(ws.file("output.txt")).expect("outputs");
    assert!(
        outputs.contains("error=bench_failed\n") && outputs.contains("verdict=collect_more_evidence\n"),
        "{outputs}"
    );

    // A collective hangs: --timeout ends it.
    server.reset().await;
    fresh_pull_request(&server).await;
    let started = std::time::Instant::now();
    let out = ws
        .in_actions(&server.uri())
        .env("COMMGATE_MOCK_FAULT", "hang")
        .args(["check", "--baselines-from-head"])
        .args(MOCK)
        .args(["1", "--baselines", "baselines", "--output", "report.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(started.elapsed().as_secs() < 30);
    assert!(error_line(&out).contains("could not evaluate: the benchmark failed (timeout: no repeat finished for 1 s"));
    assert_eq!(ws.report()["error"]["kind"], "bench_failed");
    let bodies = posted(&server).await;
    assert_eq!(bodies.len(), 1, "{}", stderr(&out));
    assert!(bodies[0].contains("the benchmark failed** (timeout: no repeat finished for 1 s"), "{}", bodies[0]);
    assert!(!stderr(&out).contains(TOKEN) && !bodies[0].contains(TOKEN));
}

#[tokio::test]
async fn a_read_only_token_does_not_change_a_could_not_evaluate_exit() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(403).set_body_json(json!({"message": "Resource not accessible"})))
        .mount(&server)
        .await;
    let ws = Workspace::new();
    let out = ws
        .in_actions(&server.uri())
        .env("COMMGATE_MOCK_FAULT", "die:0")
        .args(["check", "--baselines-from-head"])
        .args(MOCK)
        .args(["30", "--baselines", "baselines", "--output", "report.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains("commgate: warning: cannot comment (HTTP 403)"), "{text}");
    assert!(text.contains("the report is in the job summary"), "{text}");
    assert!(std::fs::read_to_string(ws.file("summary.md")).expect("summary").contains("could not evaluate"));
}

#[test]
fn could_not_evaluate_report_snapshots() {
    let ws = Workspace::new();
    let run = |format: &str| {
        let out = ws
            .commgate()
            .env("COMMGATE_MOCK_FAULT", "die:1")
            .arg("check")
            .args(MOCK)
            .args(["30", "--baselines", "baselines", "--format", format])
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        stdout(&out)
    };
    insta::assert_snapshot!("could_not_evaluate_text", run("text"));
    // The benchmark's own details (hardware, fingerprint) are the result file's business.
    let markdown = run("markdown");
    let (head, details) = markdown.split_once("<details><summary>Benchmark run</summary>").expect("details");
    assert!(details.contains("rank\\_died"), "{details}");
    insta::assert_snapshot!("could_not_evaluate_markdown", head);
    let text = run("json");
    assert!(text.starts_with("{\n  \"schema_version\": 2,\n  \"error\": {"), "the JSON leads with the error: {text}");
    let mut json: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["bench"]["failure"]["kind"], "rank_died");
    json["bench"] = json!("<the failed result file, redacted>");
    insta::assert_snapshot!("could_not_evaluate_json", serde_json::to_string_pretty(&json).expect("pretty"));
}

/// `check --result SAME` outside Actions, with `args`, writing `report.json` in `ws`.
fn check_result(ws: &Workspace, args: &[&str]) -> Output {
    ws.commgate()
        .args(["check", "--result"])
        .arg(root().join(SAME))
        .args(["--output", "report.json"])
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn a_misspelled_baselines_directory_exits_2() {
    let ws = Workspace::new();
    let out = check_result(&ws, &["--baselines", "baselnes"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let line = error_line(&out);
    assert!(
        line.contains("the baselines directory does not exist (baselnes does not exist: check --baselines"),
        "{line}"
    );
    assert_eq!(ws.report()["error"]["kind"], "baselines_missing");
    assert!(!ws.file("baselnes").exists(), "nothing is created");
}

#[test]
fn a_corrupt_baseline_file_exits_2() {
    let ws = Workspace::new();
    let store = ws.file("baselines/SIM-MOCK");
    std::fs::create_dir_all(&store).expect("dir");
    std::fs::write(store.join("par-overlap-allreduce-matmul.json"), "{\"schema_version\": 1, \"runs\": [}")
        .expect("corrupt");
    let out = check_result(&ws, &["--baselines", "baselines"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(error_line(&out)
        .contains("the baseline file cannot be used (baselines/SIM-MOCK/par-overlap-allreduce-matmul.json: "));
    assert_eq!(ws.report()["error"]["kind"], "baseline_invalid");
}

#[test]
fn unreadable_traces_exit_2_even_next_to_a_usable_baseline() {
    let ws = Workspace::new();
    let out = check_result(&ws, &["--baselines", &root().join(STORE_DIR).display().to_string(), "--traces", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(error_line(&out).contains("the traces could not be read (nope"), "{}", stderr(&out));
    let report = ws.report();
    assert_eq!(report["error"]["kind"], "traces_unreadable");
    assert!(report["comparison"].is_object(), "the comparison is still shown");
}

#[test]
fn no_baseline_yet_is_collect_more_evidence_with_exit_0_and_the_command_to_record_one() {
    let ws = Workspace::new();
    let out = check_result(&ws, &["--baselines", "baselines"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = ws.report();
    assert_eq!(report["verdict"], "collect_more_evidence");
    assert_eq!(report["error"], Value::Null);
    assert!(
        report["reasons"][0]
            .as_str()
            .expect("reason")
            .contains("`commgate baseline update --from RESULT --baselines baselines`"),
        "{report}"
    );
    assert!(stdout(&out).contains("commgate baseline update --from RESULT --baselines baselines"));
    assert!(!stderr(&out).contains("error"), "{}", stderr(&out));
}

#[test]
fn fail_on_never_exits_0_on_a_failed_benchmark_but_says_so() {
    let ws = Workspace::new();
    let out = ws
        .commgate()
        .env("COMMGATE_MOCK_FAULT", "die:1")
        .arg("check")
        .args(MOCK)
        .args(["30", "--baselines", "baselines", "--fail-on", "never", "--output", "report.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("commgate: warning: could not evaluate: the benchmark failed"), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("Could not evaluate: the benchmark failed"), "{}", stdout(&out));
    assert!(stdout(&out).contains("exits 0 only because of --fail-on never"), "{}", stdout(&out));
    assert_eq!(ws.report()["error"]["kind"], "bench_failed");
    // Usage errors are still exit 2.
    let out = check_result(&ws, &["--fail-on", "never", "--baselines"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A two-process `check` (mock backend, rank 1 dies) with `extra` flags: (rank 0, rank 1).
fn two_ranks_with_a_dead_rank_1(ws: &Workspace, extra: &[&str]) -> (Output, Output) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let spawn = |rank: u32| {
        let mut cmd = command_in(ws.dir.path());
        cmd.arg("check")
            .args(MOCK)
            .args(["5", "--baselines", "baselines", "--output", "report.json"])
            .args(extra)
            .env("COMMGATE_MOCK_FAULT", "die:1")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string());
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        cmd.spawn().expect("spawns")
    };
    let (r0, r1) = (spawn(0), spawn(1));
    (r0.wait_with_output().expect("rank 0"), r1.wait_with_output().expect("rank 1"))
}

#[test]
fn a_rank_whose_own_part_failed_exits_2_and_rank_0_reports_the_run() {
    let ws = Workspace::new();
    let (o0, o1) = two_ranks_with_a_dead_rank_1(&ws, &[]);
    assert_eq!(o1.status.code(), Some(2), "rank 1: {}", stderr(&o1));
    let line = error_line(&o1);
    assert!(line.contains("the benchmark failed (rank 1's part: rank_died on rank 1"), "{line}");
    assert!(line.ends_with("; rank 0 reports the run"), "{line}");
    assert_eq!(o0.status.code(), Some(2), "rank 0: {}", stderr(&o0));
    assert_eq!(ws.report()["error"]["kind"], "bench_failed");

    // --fail-on never: both ranks exit 0, both say what failed.
    std::fs::remove_file(ws.file("report.json")).expect("fresh report");
    let (o0, o1) = two_ranks_with_a_dead_rank_1(&ws, &["--fail-on", "never"]);
    assert_eq!((o0.status.code(), o1.status.code()), (Some(0), Some(0)), "{}\n{}", stderr(&o0), stderr(&o1));
    assert!(stderr(&o1).contains("commgate: warning: could not evaluate: the benchmark failed"), "{}", stderr(&o1));
    assert!(stderr(&o0).contains("commgate: warning: could not evaluate: the benchmark failed"), "{}", stderr(&o0));
    assert_eq!(ws.report()["error"]["kind"], "bench_failed");
}

// ---- `commgate comment` ----

/// A report `check` wrote (no baseline yet: `collect_more_evidence`), in `ws`.
fn saved_report(ws: &Workspace) -> PathBuf {
    let out = check_result(ws, &["--baselines", "baselines"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    ws.file("report.json")
}

#[test]
fn comment_dry_run_prints_the_body_anywhere() {
    let ws = Workspace::new();
    let report = saved_report(&ws);
    let out = ws.commgate().args(["comment", "--dry-run", "--report"]).arg(&report).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let body = stdout(&out);
    assert!(body.starts_with(&format!("{MARKER}\n### 🟡 commgate: `collect_more_evidence`")), "{body}");
    assert!(body.contains("commgate baseline update"), "{body}");
    // Inside Actions too, and with no network: nothing is contacted.
    let out = ws
        .in_actions("http://127.0.0.1:9")
        .args(["comment", "--dry-run", "--report"])
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), body));
}

#[test]
fn comment_that_cannot_post_exits_2_with_the_reason() {
    let ws = Workspace::new();
    let report = saved_report(&ws);
    // Outside Actions.
    let out = ws.commgate().args(["comment", "--report"]).arg(&report).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let line = error_line(&out);
    assert!(line.contains("not GitHub Actions") && line.contains("--dry-run"), "{line}");
    // In Actions, but on a push and without --pr.
    let out = ws
        .in_actions("http://127.0.0.1:9")
        .env("GITHUB_EVENT_NAME", "push")
        .env_remove("GITHUB_EVENT_PATH")
        .args(["comment", "--report"])
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(error_line(&out).contains("the event `push` is not a pull request; pass --pr N"), "{}", stderr(&out));
    // No token.
    let out = ws
        .in_actions("http://127.0.0.1:9")
        .env_remove("GITHUB_TOKEN")
        .args(["comment", "--report"])
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(error_line(&out).contains("no GITHUB_TOKEN"), "{}", stderr(&out));
}

#[tokio::test]
async fn comment_exits_2_when_github_refuses_or_fails() {
    let ws = Workspace::new();
    let report = saved_report(&ws);
    let server = MockServer::start().await;
    for (status, needle) in [(403, "HTTP 403"), (404, "HTTP 404"), (500, "HTTP 500")] {
        server.reset().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(status).set_body_json(json!({"message": "nope"})))
            .mount(&server)
            .await;
        let out = ws.in_actions(&server.uri()).args(["comment", "--report"]).arg(&report).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{status}: {}", stderr(&out));
        let line = error_line(&out);
        assert!(line.starts_with("commgate: error: nothing was posted: cannot comment"), "{line}");
        assert!(line.contains(needle), "{line}");
        assert!(!line.contains(TOKEN) && !line.contains("job summary"), "{line}");
    }
    // A network error: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let out = ws
        .in_actions(&format!("http://127.0.0.1:{port}"))
        .args(["comment", "--report"])
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(error_line(&out).contains("re-run the job"), "{}", stderr(&out));
    // And a report that could not be evaluated is posted as such.
    server.reset().await;
    fresh_pull_request(&server).await;
    let failed = ws.file("failed.json");
    let out = ws
        .commgate()
        .env("COMMGATE_MOCK_FAULT", "die:1")
        .arg("check")
        .args(MOCK)
        .args(["30", "--baselines", "baselines", "--output"])
        .arg(&failed)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = ws.in_actions(&server.uri()).args(["comment", "--report"]).arg(&failed).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bodies = posted(&server).await;
    assert!(bodies.len() == 1 && bodies[0].contains("could not evaluate"), "{bodies:?}");
}
