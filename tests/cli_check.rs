//! `commgate check` end to end in the environment GitHub Actions sets (event payload file,
//! `GITHUB_*` variables), against a mock GitHub API on 127.0.0.1: a regression (exit 1, comment
//! created), then a clean run (exit 0, the same comment updated), then a read-only token (403:
//! exit by verdict, summary still written). Plus the gate's exit codes outside Actions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::PathBuf;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod common;
use common::{commgate, root};

const STORE_DIR: &str = "tests/fixtures/compare/baselines";
const SAME: &str = "tests/fixtures/compare/current-same.json";
const SLOWER: &str = "tests/fixtures/compare/current-slower.json";
const TOKEN: &str = "ghs_NEVERPRINTME0123456789";

struct Actions {
    dir: tempfile::TempDir,
    api: String,
}

impl Actions {
    fn new(api: String) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let event = json!({"action": "synchronize", "number": 7, "pull_request": {"number": 7}});
        std::fs::write(dir.path().join("event.json"), event.to_string()).expect("event");
        Actions { dir, api }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn check(&self, current: &str) -> std::process::Output {
        commgate()
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_EVENT_NAME", "pull_request")
            .env("GITHUB_EVENT_PATH", self.file("event.json"))
            .env("GITHUB_REPOSITORY", "acme/train")
            .env("GITHUB_API_URL", &self.api)
            .env("GITHUB_TOKEN", TOKEN)
            .env("GITHUB_STEP_SUMMARY", self.file("summary.md"))
            .env("GITHUB_OUTPUT", self.file("output.txt"))
            // The event has no base commit: the head's store judges, as the flag says.
            .args(["check", "--baselines-from-head", "--result", current, "--baselines", STORE_DIR, "--output"])
            .arg(self.file("report.json"))
            .output()
            .expect("runs")
    }
}

fn comment(id: u64, body: &str) -> Value {
    json!({
        "id": id, "node_id": "IC_x", "url": format!("https://api.example/repos/acme/train/issues/comments/{id}"),
        "html_url": format!("https://github.example/acme/train/pull/7#issuecomment-{id}"),
        "body": body, "user": {"login": "github-actions[bot]", "id": 41898282, "type": "Bot"},
        "created_at": "2026-11-30T10:00:00Z", "updated_at": "2026-11-30T10:00:00Z",
        "issue_url": "https://api.example/repos/acme/train/issues/7", "author_association": "NONE"
    })
}

/// The comments of pull request `pr`.
fn comments_path(pr: u64) -> String {
    format!("/repos/acme/train/issues/{pr}/comments")
}

/// The comment listing of pull request `pr` (GET) answered with `response`.
fn listing(pr: u64, response: ResponseTemplate) -> Mock {
    Mock::given(method("GET")).and(path(comments_path(pr))).respond_with(response)
}

/// The comment listing of pull request `pr` answered with `comments` (one page).
fn listing_of(pr: u64, comments: Value) -> Mock {
    listing(pr, ResponseTemplate::new(200).set_body_json(comments))
}

/// A new comment on pull request `pr` (POST), answered as created with `id`.
fn created(pr: u64, id: u64) -> Mock {
    Mock::given(method("POST"))
        .and(path(comments_path(pr)))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(id, "<!-- commgate-report -->")))
}

fn requests_of(received: &[wiremock::Request], verb: &str) -> Vec<String> {
    received
        .iter()
        .filter(|r| r.method.as_str() == verb)
        .map(|r| String::from_utf8_lossy(&r.body).to_string())
        .collect()
}

#[tokio::test]
async fn regression_then_clean_run_then_read_only_token() {
    let server = MockServer::start().await;
    let actions = Actions::new(server.uri());

    // 1. A regression: no comment yet, so one is created; exit 1.
    listing_of(7, json!([comment(1, "an unrelated comment")])).mount(&server).await;
    created(7, 42).mount(&server).await;
    let out = actions.check(SLOWER);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let received = server.received_requests().await.expect("recording");
    let posts = requests_of(&received, "POST");
    assert_eq!(posts.len(), 1, "{stderr}");
    assert!(posts[0].contains("<!-- commgate-report -->") && posts[0].contains("tune"), "{}", posts[0]);
    assert!(std::fs::read_to_string(actions.file("summary.md")).expect("summary").contains("commgate"));
    let outputs = std::fs::read_to_string(actions.file("output.txt")).expect("outputs");
    assert!(outputs.contains("verdict=tune") && outputs.contains("blocking=true"), "{outputs}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(actions.file("report.json")).expect("report"))
        .expect("JSON report");
    assert_eq!(report["verdict"], "tune");
    assert!(!stderr.contains(TOKEN) && !String::from_utf8_lossy(&out.stdout).contains(TOKEN));

    // 2. A clean run: the marked comment exists, so it is updated, not duplicated; exit 0.
    server.reset().await;
    listing_of(7, json!([comment(1, "an unrelated comment"), comment(42, "<!-- commgate-report -->\nold report")]))
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/acme/train/issues/comments/42"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(42, "<!-- commgate-report -->")))
        .mount(&server)
        .await;
    let out = actions.check(SAME);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let received = server.received_requests().await.expect("recording");
    assert_eq!(requests_of(&received, "POST").len(), 0, "update, not duplicate: {stderr}");
    let patches = requests_of(&received, "PATCH");
    assert_eq!(patches.len(), 1, "{stderr}");
    assert!(patches[0].contains("accept"), "{}", patches[0]);

    // 3. A read-only token (fork PR): 403 is a warning; the exit code follows the verdict and
    //    the job summary is still written.
    server.reset().await;
    listing(7, ResponseTemplate::new(403).set_body_json(json!({"message": "Resource not accessible by integration"})))
        .mount(&server)
        .await;
    std::fs::remove_file(actions.file("summary.md")).expect("fresh summary");
    let out = actions.check(SLOWER);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "the verdict decides: {stderr}");
    assert!(stderr.contains("warning"), "{stderr}");
    assert!(!stderr.contains(TOKEN));
    assert!(std::fs::read_to_string(actions.file("summary.md")).expect("summary").contains("tune"));
}

fn check_locally(args: &[&str]) -> std::process::Output {
    commgate().arg("check").args(args).output().expect("runs")
}

#[test]
fn outside_actions_exit_codes_follow_fail_on() {
    let slower = ["--result", SLOWER, "--baselines", STORE_DIR];
    assert_eq!(check_locally(&slower).status.code(), Some(1));
    let mut never = slower.to_vec();
    never.extend(["--fail-on", "never"]);
    assert_eq!(check_locally(&never).status.code(), Some(0));
    assert_eq!(check_locally(&["--result", SAME, "--baselines", STORE_DIR]).status.code(), Some(0));
    // No baseline: collect_more_evidence, which blocks only under --fail-on collect_more_evidence.
    let tmp = tempfile::tempdir().expect("tempdir");
    let empty = tmp.path().to_str().expect("utf-8");
    let out = check_locally(&["--result", SAME, "--baselines", empty]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("commgate baseline update --from RESULT"));
    let out = check_locally(&["--result", SAME, "--baselines", empty, "--fail-on", "collect_more_evidence"]);
    assert_eq!(out.status.code(), Some(1));
    // Bad input: exit 2.
    let out = check_locally(&["--result", "does-not-exist.json", "--baselines", STORE_DIR]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_few_steps_that_look_regressed_ask_for_more_evidence() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("baselines");
    let copy = store.join("SIM-MOCK");
    std::fs::create_dir_all(&copy).expect("dir");
    std::fs::copy(
        root().join(STORE_DIR).join("SIM-MOCK/par-overlap-allreduce-matmul.json"),
        copy.join("par-overlap-allreduce-matmul.json"),
    )
    .expect("copy");
    // Store the hand-checked traces' summary, then check against a scaled-up copy of them.
    commgate()
        .args([
            "baseline",
            "update",
            "--traces",
            "tests/fixtures/hand_checked",
            "--environment-profile",
            "SIM-MOCK",
            "--baselines",
        ])
        .arg(&store)
        .assert()
        .success();
    let grown = tmp.path().join("grown");
    std::fs::create_dir_all(&grown).expect("dir");
    for r in 0..2 {
        let text =
            std::fs::read_to_string(root().join(format!("tests/fixtures/hand_checked/rank-{r}.json"))).expect("trace");
        let mut v: Value = serde_json::from_str(&text).expect("json");
        for e in v["traceEvents"].as_array_mut().expect("events") {
            if e["cat"] == "kernel" && e["name"].as_str().is_some_and(|n| n.starts_with("nccl")) {
                let dur = e["dur"].as_f64().unwrap_or(0.0);
                e["dur"] = json!(dur * 8.0);
            }
        }
        std::fs::write(grown.join(format!("rank-{r}.json")), v.to_string()).expect("write");
    }
    let out = commgate()
        .args(["check", "--result", SAME, "--format", "json", "--baselines"])
        .arg(&store)
        .arg("--traces")
        .arg(&grown)
        .output()
        .expect("runs");
    // Two steps per rank against one stored trace run of two: eight times slower collectives
    // cannot be confirmed (the step tests need more samples), and they are not accepted either.
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!((v["verdict"].as_str(), v["blocking"].as_bool()), (Some("collect_more_evidence"), Some(false)));
    let reasons: Vec<&str> = v["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect();
    assert!(
        reasons.iter().any(|r| r.contains("looks regressed, but 2 current and 2 stored steps are not enough")),
        "{reasons:#?}"
    );
    assert_eq!(v["trace_comparison"]["method"], "pooled");
    // Without traces while the baseline expects them: collect_more_evidence.
    let out = commgate()
        .args(["check", "--result", SAME, "--format", "json", "--baselines"])
        .arg(&store)
        .output()
        .expect("runs");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["verdict"], "collect_more_evidence");
}

fn check_stdout(format: &str) -> String {
    let out = check_locally(&[
        "--result",
        SLOWER,
        "--baselines",
        STORE_DIR,
        "--traces",
        "tests/fixtures/hand_checked",
        "--format",
        format,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn check_report_snapshots() {
    let markdown = check_stdout("markdown");
    assert!(
        markdown.starts_with(
            "<!-- commgate-report -->\n### 🔴 commgate `tune`: overlap step 8.1 % slower \\(95 % CI 7.4–8.9 %\\) — blocking"
        ),
        "{markdown}"
    );
    assert!(markdown.contains("```mermaid\n%%{init: ") && markdown.contains("\nxychart-beta\n"), "{markdown}");
    assert!(markdown.chars().count() <= 65_536);
    insta::assert_snapshot!("check_markdown", markdown);
    insta::assert_snapshot!("check_text", check_stdout("text"));
    let mut json: Value = serde_json::from_str(&check_stdout("json")).expect("JSON");
    for key in ["schema_version", "verdict", "blocking", "reasons", "bench", "comparison", "attribution", "baseline"] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    // The embedded result holds every sample; the snapshot keeps the decision-bearing parts.
    json["bench"] = json!("<the result file, redacted>");
    json["comparison"]["metrics"] = json!("<redacted: see the compare snapshots>");
    insta::assert_snapshot!("check_json", serde_json::to_string_pretty(&json).expect("pretty"));
}

#[tokio::test]
async fn comment_posts_a_saved_report_to_the_named_pull_request() {
    let server = MockServer::start().await;
    let actions = Actions::new(server.uri());
    // The report comes from an untrusted run: check writes it, comment re-renders it.
    let report = actions.file("report.json");
    commgate()
        .args(["check", "--result", SAME, "--baselines", STORE_DIR, "--fail-on", "never", "--output"])
        .arg(&report)
        .assert()
        .success();
    listing_of(9, json!([])).mount(&server).await;
    created(9, 77).mount(&server).await;
    let out = commgate()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_EVENT_NAME", "workflow_run")
        .env("GITHUB_REPOSITORY", "acme/train")
        .env("GITHUB_API_URL", server.uri())
        .env("GITHUB_TOKEN", TOKEN)
        .args(["comment", "--pr", "9", "--report"])
        .arg(&report)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let received = server.received_requests().await.expect("recording");
    let posts = requests_of(&received, "POST");
    assert_eq!(posts.len(), 1);
    assert!(posts[0].contains("accept"), "{}", posts[0]);
    // Outside Actions, comment is a usage error.
    commgate().args(["comment", "--report"]).arg(&report).assert().code(2);
}

/// The report comes from the untrusted job: one whose verdict was edited to `accept` while its
/// own comparison confirms a regression is refused by `comment` (exit 2), never posted.
#[test]
fn comment_refuses_a_report_that_contradicts_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("report.json");
    let out = commgate()
        .args(["check", "--result", SLOWER, "--baselines", STORE_DIR, "--format", "json", "--output"])
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let post = |path: &std::path::Path| {
        commgate().args(["comment", "--dry-run", "--pr", "7", "--report"]).arg(path).output().expect("runs")
    };
    assert_eq!(post(&report).status.code(), Some(0), "the genuine report renders");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).expect("read")).expect("json");
    v["verdict"] = "accept".into();
    v["blocking"] = false.into();
    let forged = dir.path().join("forged.json");
    std::fs::write(&forged, v.to_string()).expect("write");
    let out = post(&forged);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("contradicts itself") && stderr.contains("regression"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing rendered");
}
