//! `commgate_github` against a real HTTP server on 127.0.0.1 (wiremock): the sticky comment's
//! find-update-create logic, pagination, GitHub Enterprise's `/api/v3` prefix, failures and retries,
//! the sticky comment's author (only the token's own identity's comment is ever edited),
//! the token never showing, and the Actions files (`GITHUB_STEP_SUMMARY`, `GITHUB_OUTPUT`).
//!
//! `upsert_comment_with` is synchronous and runs its own runtime on its own thread; wiremock's server
//! runs on a thread of its own too, so the async tests may call it directly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use commgate_github::{
    upsert_comment_with, write_outputs, write_step_summary, CommentOutcome, GithubEnv, RetryPolicy, Token, MARKER,
};
use serde_json::{json, Value};
use wiremock::matchers::{body_partial_json, header, method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Recognisable, so a leak would be obvious in any text.
const TOKEN: &str = "ghs_TESTTOKEN_do_not_leak_4242";
const COMMENTS: &str = "/repos/octo/gpu/issues/7/comments";

fn env_at(api_url: String) -> GithubEnv {
    GithubEnv {
        api_url,
        repository: Some(("octo".into(), "gpu".into())),
        token: Some(Token::new(TOKEN)),
        pull_request: Some(7),
        event_name: Some("pull_request".into()),
        step_summary: None,
        output: None,
        comment_author: None,
    }
}

/// Fast enough that the whole file runs in a couple of seconds.
fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 4,
        base_delay: Duration::from_millis(10),
        request_timeout: Duration::from_secs(2),
        deadline: Duration::from_secs(10),
    }
}

fn comment(id: u64, body: &str) -> Value {
    json!({
        "id": id,
        "body": body,
        "html_url": format!("https://github.com/octo/gpu/pull/7#issuecomment-{id}"),
        "user": {"login": "github-actions[bot]", "type": "Bot"},
    })
}

/// A comment by `login` of GitHub account type `kind` (`User`, `Bot`).
fn comment_by(id: u64, body: &str, login: &str, kind: &str) -> Value {
    let mut c = comment(id, body);
    c["user"] = json!({"login": login, "type": kind});
    c
}

/// `GET /user` answered as for an installation token (Actions' `GITHUB_TOKEN`, a GitHub App's).
fn installation_token() -> Mock {
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(
            ResponseTemplate::new(403).set_body_json(json!({"message": "Resource not accessible by integration"})),
        )
        .with_priority(1)
}

/// `GET /user` answered as for a personal access token of `login`.
fn personal_token(login: &str) -> Mock {
    Mock::given(method("GET"))
        .and(path("/user"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"login": login, "id": 1, "type": "User"})))
        .with_priority(1)
}

/// No PATCH at all may reach the server.
fn never_patched() -> Mock {
    Mock::given(method("PATCH")).respond_with(ResponseTemplate::new(200)).expect(0)
}

fn report() -> String {
    format!("{MARKER}\n## commgate: accept\n")
}

fn url_of(id: u64) -> String {
    format!("https://github.com/octo/gpu/pull/7#issuecomment-{id}")
}

/// The sticky comment's upsert of [`report`] against `server`, with the [`fast`] policy.
fn upsert(server: &MockServer) -> CommentOutcome {
    upsert_comment_with(&env_at(server.uri()), &report(), &fast())
}

/// The comment listing (GET, one page) answered with `comments`.
fn listing(comments: Value) -> Mock {
    answer_listing(ResponseTemplate::new(200).set_body_json(comments))
}

/// The comment listing (GET) answered with `response`.
fn answer_listing(response: ResponseTemplate) -> Mock {
    Mock::given(method("GET")).and(path(COMMENTS)).respond_with(response)
}

/// The comment listing's first answer only, ahead of any other listing mock (a failure the
/// retry gets past, or a page that changes by the next request).
fn first_listing(response: ResponseTemplate) -> Mock {
    answer_listing(response).up_to_n_times(1).with_priority(1)
}

/// Exactly one new comment (POST to the pull request's comments), created as [`report`] with `id`.
fn created(id: u64) -> Mock {
    Mock::given(method("POST"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(id, &report())))
        .expect(1)
}

/// Exactly one update (PATCH) of comment `id`, answered as [`report`].
fn patched(id: u64) -> Mock {
    Mock::given(method("PATCH"))
        .and(path(format!("/repos/octo/gpu/issues/comments/{id}")))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(id, &report())))
        .expect(1)
}

async fn requests(server: &MockServer, verb: &str) -> Vec<Request> {
    let all = server.received_requests().await.unwrap_or_default();
    all.into_iter().filter(|r| r.method.as_str() == verb).collect()
}

#[tokio::test]
async fn marker_on_page_two_of_two_is_found_through_the_link_header_and_patched() {
    let server = MockServer::start().await;
    let page_two = format!("{}/repositories/99/issues/7/comments?per_page=100&page=2", server.uri());
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .and(query_param("per_page", "100"))
        .and(query_param_is_missing("page"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("link", format!(r#"<{page_two}>; rel="next", <{page_two}>; rel="last""#).as_str())
                .set_body_json(json!([comment(1, "LGTM"), comment(2, "nice")])),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repositories/99/issues/7/comments"))
        .and(query_param("page", "2"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([comment(555, &report()), comment(556, "ok")])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/octo/gpu/issues/comments/555"))
        .and(body_partial_json(json!({"body": report()})))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(555, &report())))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(201)).expect(0).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 555, url: url_of(555) });
}

#[tokio::test]
async fn existing_marker_comment_is_updated_once_and_never_duplicated() {
    let server = MockServer::start().await;
    let older = format!("{MARKER}\nold report");
    let newer = format!("{MARKER}\nnewer report");
    listing(json!([
        comment(10, &older),
        comment(15, "please look at the all_reduce"),
        comment(20, &newer),
        comment(25, &format!("> quoting {MARKER}")),
    ]))
    .mount(&server)
    .await;
    patched(20).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 20, url: url_of(20) });
    assert_eq!(requests(&server, "PATCH").await.len(), 1);
    assert!(requests(&server, "POST").await.is_empty(), "an update must not also create a comment");
}

#[tokio::test]
async fn absent_marker_creates_exactly_one_comment_starting_with_the_marker() {
    let server = MockServer::start().await;
    listing(json!([comment(3, "first!")])).mount(&server).await;
    created(77).mount(&server).await;

    // The body lacks the marker: the module adds it, so the next run can find the comment.
    let outcome = upsert_comment_with(&env_at(server.uri()), "## commgate: accept", &fast());
    assert_eq!(outcome, CommentOutcome::Created { id: 77, url: url_of(77) });
    let posted: Value = serde_json::from_slice(&requests(&server, "POST").await[0].body).unwrap();
    assert_eq!(posted["body"], format!("{MARKER}\n## commgate: accept"));
    assert!(requests(&server, "PATCH").await.is_empty());
}

#[tokio::test]
async fn forbidden_is_one_warning_without_a_retry_storm() {
    let server = MockServer::start().await;
    listing(json!([])).expect(1).mount(&server).await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(403).set_body_json(json!({"message": "Resource not accessible by integration"})),
        )
        .expect(1)
        .mount(&server)
        .await;

    let CommentOutcome::Warning(why) = upsert(&server) else {
        panic!("a 403 must be a warning");
    };
    assert!(why.contains("HTTP 403"), "{why}");
    assert!(why.contains("read-only"), "{why}");
    assert!(why.contains("permissions: pull-requests: write"), "says what to do: {why}");
    assert!(!why.contains("job summary"), "what the caller does next is the caller's to say: {why}");
    assert!(why.contains("Resource not accessible by integration"), "{why}");
    // Who the token is (unanswered here), the listing, the refused POST.
    assert_eq!(server.received_requests().await.unwrap_or_default().len(), 3);
}

#[tokio::test]
async fn forbidden_patch_of_someone_elses_comment_falls_back_to_a_new_comment() {
    let server = MockServer::start().await;
    listing(json!([comment(40, &report())])).mount(&server).await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(403).set_body_json(json!({"message": "Forbidden"})))
        .expect(1)
        .mount(&server)
        .await;
    created(41).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Created { id: 41, url: url_of(41) });
}

#[tokio::test]
async fn bad_gateway_then_ok_succeeds_after_one_retry() {
    let server = MockServer::start().await;
    first_listing(ResponseTemplate::new(502).set_body_string("<html>Bad Gateway</html>")).mount(&server).await;
    listing(json!([])).mount(&server).await;
    created(88).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Created { id: 88, url: url_of(88) });
    let listings = requests(&server, "GET").await.into_iter().filter(|r| r.url.path() == COMMENTS).count();
    assert_eq!(listings, 2);
}

#[tokio::test]
async fn lost_post_answer_is_found_on_retry_and_updated_not_duplicated() {
    // GitHub created the comment but a proxy answered 502: the retry lists again, finds it, PATCHes.
    let server = MockServer::start().await;
    first_listing(ResponseTemplate::new(200).set_body_json(json!([]))).mount(&server).await;
    listing(json!([comment(90, &report())])).mount(&server).await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(502)).expect(1).mount(&server).await;
    patched(90).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 90, url: url_of(90) });
}

#[tokio::test]
async fn too_many_requests_with_retry_after_waits_and_retries() {
    let server = MockServer::start().await;
    first_listing(
        ResponseTemplate::new(429)
            .insert_header("retry-after", "1")
            .set_body_json(json!({"message": "You have exceeded a secondary rate limit."})),
    )
    .mount(&server)
    .await;
    listing(json!([])).mount(&server).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(5, &report())))
        .expect(1)
        .mount(&server)
        .await;

    let started = Instant::now();
    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Created { id: 5, url: url_of(5) });
    // The 10 ms base delay would retry at once; only retry-after explains a wait of about a second.
    assert!(started.elapsed() >= Duration::from_millis(950), "waited only {:?}", started.elapsed());
}

#[tokio::test]
async fn retry_after_longer_than_ten_seconds_gives_up_at_once() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(403).insert_header("retry-after", "120").insert_header("x-ratelimit-remaining", "0"),
        )
        .expect(1)
        .mount(&server)
        .await;

    let CommentOutcome::Warning(why) = upsert(&server) else {
        panic!("expected a warning");
    };
    assert!(why.contains("rate limited") && why.contains("120 s"), "{why}");
}

#[tokio::test]
async fn enterprise_server_api_v3_prefix_is_kept_for_every_request() {
    let server = MockServer::start().await;
    let api = format!("{}/api/v3", server.uri());
    let page_two = format!("{api}/repositories/99/issues/7/comments?per_page=100&page=2");
    Mock::given(method("GET"))
        .and(path(format!("/api/v3{COMMENTS}")))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("link", format!(r#"<{page_two}>; rel="next""#).as_str())
                .set_body_json(json!([comment(1, "hi")])),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v3/repositories/99/issues/7/comments"))
        .and(query_param("page", "2"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([comment(321, &report())])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/api/v3/repos/octo/gpu/issues/comments/321"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(321, &report())))
        .expect(1)
        .mount(&server)
        .await;

    let outcome = upsert_comment_with(&env_at(api), &report(), &fast());
    assert_eq!(outcome, CommentOutcome::Updated { id: 321, url: url_of(321) });
    let paths: Vec<String> =
        server.received_requests().await.unwrap_or_default().iter().map(|r| r.url.path().to_string()).collect();
    assert!(paths.iter().all(|p| p.starts_with("/api/v3/")), "{paths:?}");
}

#[tokio::test]
async fn token_never_appears_in_any_outcome_text() {
    let echo = format!("Bad credentials: token {TOKEN} is not valid");
    let mut outcomes = Vec::new();
    for status in [401, 403, 404, 422, 500] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(status).set_body_json(json!({"message": echo})))
            .mount(&server)
            .await;
        outcomes.push(upsert(&server));
    }
    // A server that echoes the token in the comment URL, and one whose answer is not JSON.
    let server = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200).set_body_json(json!([]))).mount(&server).await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(201).set_body_json(json!({"id": 1, "html_url": format!("https://x/{TOKEN}")})),
        )
        .mount(&server)
        .await;
    outcomes.push(upsert(&server));
    let server = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200).set_body_string(TOKEN)).mount(&server).await;
    outcomes.push(upsert(&server));

    for outcome in &outcomes {
        let texts = format!("{outcome:?} {outcome}");
        assert!(!texts.contains(TOKEN), "token leaked: {texts}");
        assert!(!texts.contains("TESTTOKEN"), "token leaked: {texts}");
    }
    assert!(matches!(&outcomes[0], CommentOutcome::Warning(w) if w.contains("HTTP 401")), "{:?}", outcomes[0]);
    assert!(matches!(&outcomes[4], CommentOutcome::Warning(w) if w.contains("gave up after 4 attempts")));
    assert!(matches!(&outcomes[5], CommentOutcome::Created { .. }));
    assert_eq!(format!("{:?}", Token::new(TOKEN)), "***");
    assert!(!format!("{:?}", env_at(server.uri())).contains(TOKEN));
}

#[test]
fn unreachable_api_warns_after_a_bounded_number_of_attempts() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let CommentOutcome::Warning(why) =
        upsert_comment_with(&env_at(format!("http://127.0.0.1:{port}")), &report(), &fast())
    else {
        panic!("a refused connection must be a warning");
    };
    assert!(why.contains("gave up after 4 attempts"), "{why}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn slow_api_is_cut_off_by_the_request_timeout() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])).set_delay(Duration::from_secs(3)))
        .mount(&server)
        .await;
    let policy = RetryPolicy { attempts: 2, request_timeout: Duration::from_millis(200), ..fast() };
    let started = Instant::now();
    let CommentOutcome::Warning(why) = upsert_comment_with(&env_at(server.uri()), &report(), &policy) else {
        panic!("a server that never answers must be a warning");
    };
    assert!(why.contains("no answer within"), "{why}");
    assert!(started.elapsed() < Duration::from_millis(1500), "took {:?}", started.elapsed());
}

#[test]
fn missing_pull_request_repository_or_token_is_skipped_without_a_request() {
    let base = env_at("http://127.0.0.1:9".into());
    let no_pr = GithubEnv { pull_request: None, event_name: Some("push".into()), ..base.clone() };
    let no_repo = GithubEnv { repository: None, ..base.clone() };
    let no_token = GithubEnv { token: None, ..base.clone() };
    for (env, needle) in [(no_pr, "not a pull request"), (no_repo, "GITHUB_REPOSITORY"), (no_token, "GITHUB_TOKEN")] {
        match upsert_comment_with(&env, &report(), &fast()) {
            CommentOutcome::Skipped(why) => assert!(why.contains(needle), "{why}"),
            other => panic!("expected Skipped, got {other:?}"),
        }
    }
}

/// Reads a `GITHUB_OUTPUT` file the way the Actions runner does: `name=value` lines, and
/// `name<<DELIMITER` blocks ending at a line equal to the delimiter.
fn parse_github_output(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut lines = text.split('\n');
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let heredoc = line.find("<<");
        let equals = line.find('=');
        match (heredoc, equals) {
            (Some(h), e) if e.is_none_or(|e| h < e) => {
                let (name, delimiter) = (&line[..h], &line[h + 2..]);
                let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
                out.insert(name.to_string(), value.join("\n"));
            }
            (_, Some(e)) => {
                out.insert(line[..e].to_string(), line[e + 1..].to_string());
            }
            _ => panic!("unparseable GITHUB_OUTPUT line {line:?}"),
        }
    }
    out
}

#[test]
fn step_summary_and_outputs_are_appended_and_multi_line_values_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    let output = dir.path().join("output");
    std::fs::write(&output, "earlier=step\n").unwrap();
    let env = GithubEnv { step_summary: Some(summary.clone()), output: Some(output.clone()), ..env_at(String::new()) };

    write_step_summary(&env, "# first").unwrap();
    write_step_summary(&env, "# second\n").unwrap();
    assert_eq!(std::fs::read_to_string(&summary).unwrap(), "# first\n# second\n");

    let report = "{\n  \"verdict\": \"tune\",\n  \"text\": \"a=b<<EOF\\nghadelimiter_\"\n}\n\nlast line";
    write_outputs(&env, &[("verdict", "tune"), ("blocking", "true"), ("report", report)]).unwrap();
    let parsed = parse_github_output(&std::fs::read_to_string(&output).unwrap());
    assert_eq!(parsed["earlier"], "step");
    assert_eq!(parsed["verdict"], "tune");
    assert_eq!(parsed["blocking"], "true");
    assert_eq!(parsed["report"], report);

    assert!(write_outputs(&env, &[("bad=name", "x")]).unwrap_err().to_string().contains("output"));
    let unset = env_at(String::new());
    assert!(write_step_summary(&unset, "ignored").is_ok());
    assert!(write_outputs(&unset, &[("verdict", "accept")]).is_ok());
}

#[test]
fn write_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("summary.md");
    let env = GithubEnv { step_summary: Some(missing.clone()), output: Some(missing.clone()), ..env_at(String::new()) };
    let error = write_step_summary(&env, "x").unwrap_err().to_string();
    assert!(error.contains(&missing.display().to_string()) && error.contains("GITHUB_STEP_SUMMARY"), "{error}");
    let error = write_outputs(&env, &[("verdict", "accept")]).unwrap_err().to_string();
    assert!(error.contains(&missing.display().to_string()) && error.contains("GITHUB_OUTPUT"), "{error}");
}

fn actions_vars(event_path: &std::path::Path, event_name: &str) -> HashMap<&'static str, String> {
    HashMap::from([
        ("GITHUB_ACTIONS", "true".to_string()),
        ("GITHUB_EVENT_PATH", event_path.display().to_string()),
        ("GITHUB_EVENT_NAME", event_name.to_string()),
        ("GITHUB_REPOSITORY", "octo/gpu".to_string()),
        ("GITHUB_TOKEN", TOKEN.to_string()),
        ("GITHUB_STEP_SUMMARY", "/tmp/summary".to_string()),
        ("GITHUB_OUTPUT", "/tmp/output".to_string()),
    ])
}

#[test]
fn from_env_reads_the_pull_request_number_from_the_event_payload() {
    let dir = tempfile::tempdir().unwrap();
    let event = dir.path().join("event.json");
    let payload = json!({"action": "synchronize", "number": 7, "pull_request": {"number": 7, "head": {"sha": "abc"}}});
    std::fs::write(&event, payload.to_string()).unwrap();
    let mut vars = actions_vars(&event, "pull_request");
    vars.insert("GITHUB_API_URL", "https://ghe.example.com/api/v3/".to_string());

    let env = GithubEnv::from_env(|name| vars.get(name).cloned()).expect("inside Actions");
    assert_eq!(env.pull_request, Some(7));
    assert_eq!(env.api_url, "https://ghe.example.com/api/v3");
    assert_eq!(env.repository, Some(("octo".to_string(), "gpu".to_string())));
    assert_eq!(env.event_name.as_deref(), Some("pull_request"));
    assert_eq!(env.step_summary.as_deref(), Some(std::path::Path::new("/tmp/summary")));
    assert_eq!(env.output.as_deref(), Some(std::path::Path::new("/tmp/output")));
    assert!(env.token.is_some());
    assert!(!format!("{env:?}").contains(TOKEN));
}

#[test]
fn from_env_on_a_push_event_has_no_pull_request() {
    let dir = tempfile::tempdir().unwrap();
    let event = dir.path().join("event.json");
    std::fs::write(&event, json!({"ref": "refs/heads/main", "after": "abc"}).to_string()).unwrap();
    let vars = actions_vars(&event, "push");

    let env = GithubEnv::from_env(|name| vars.get(name).cloned()).expect("inside Actions");
    assert_eq!(env.pull_request, None);
    assert_eq!(env.api_url, "https://api.github.com");
    assert_eq!(
        upsert_comment_with(&env, &report(), &fast()),
        CommentOutcome::Skipped("not a pull request (event `push`), so there is nothing to comment on".into())
    );
}

#[test]
fn from_env_tolerates_a_missing_event_file_and_is_none_outside_actions() {
    let dir = tempfile::tempdir().unwrap();
    let mut vars = actions_vars(&dir.path().join("absent.json"), "pull_request");
    vars.remove("GITHUB_TOKEN");
    vars.insert("GH_TOKEN", "from-gh".to_string());
    let env = GithubEnv::from_env(|name| vars.get(name).cloned()).expect("inside Actions");
    assert_eq!(env.pull_request, None);
    assert!(env.token.is_some(), "GH_TOKEN is the fallback");

    vars.insert("GITHUB_ACTIONS", "false".to_string());
    assert!(GithubEnv::from_env(|name| vars.get(name).cloned()).is_none());
    assert!(GithubEnv::from_env(|_| None).is_none());
}

#[tokio::test]
async fn persistent_server_errors_stop_after_exactly_four_requests() {
    // Four attempts in all: octocrab's own retry layer must not multiply them.
    let server = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(503)).expect(4).mount(&server).await;

    let CommentOutcome::Warning(why) = upsert(&server) else {
        panic!("expected a warning");
    };
    assert!(why.contains("HTTP 503") && why.contains("gave up after 4 attempts"), "{why}");
    assert!(why.contains("re-run the job"), "{why}");
}

#[tokio::test]
async fn a_marker_comment_planted_by_a_user_is_never_edited_and_a_new_one_is_created() {
    let server = MockServer::start().await;
    installation_token().mount(&server).await;
    let mut deleted_account = comment(32, &report());
    deleted_account["user"] = Value::Null;
    listing(json!([
        comment_by(30, &report(), "mallory", "User"),
        // A user cannot become a bot by choosing a login that looks like one.
        comment_by(31, &report(), "github-actions[bot]", "User"),
        deleted_account,
    ]))
    .mount(&server)
    .await;
    never_patched().mount(&server).await;
    created(41).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Created { id: 41, url: url_of(41) });
}

#[tokio::test]
async fn the_bots_own_comment_is_updated_even_when_a_user_planted_a_newer_one() {
    let server = MockServer::start().await;
    installation_token().mount(&server).await;
    listing(json!([
        comment(20, &report()),
        comment_by(25, &report(), "mallory", "User"),
        comment_by(26, &format!("{MARKER}\nplanted"), "mallory", "User"),
    ]))
    .mount(&server)
    .await;
    patched(20).mount(&server).await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(201)).expect(0).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 20, url: url_of(20) });
}

#[tokio::test]
async fn a_named_bot_login_ignores_another_apps_bot() {
    let server = MockServer::start().await;
    installation_token().mount(&server).await;
    listing(json!([
        comment(20, &report()),
        comment_by(25, &format!("{MARKER}\nplanted by another app"), "other-app[bot]", "Bot"),
    ]))
    .mount(&server)
    .await;
    patched(20).mount(&server).await;
    let env = GithubEnv { comment_author: Some("github-actions[bot]".into()), ..env_at(server.uri()) };
    let outcome = upsert_comment_with(&env, &report(), &fast());
    // Without the login, the newer marked comment of any bot (25) would have been the sticky one.
    assert_eq!(outcome, CommentOutcome::Updated { id: 20, url: url_of(20) });
}

#[tokio::test]
async fn a_personal_token_updates_only_its_own_users_comment() {
    let server = MockServer::start().await;
    personal_token("alice").mount(&server).await;
    listing(json!([
        comment_by(10, &report(), "Alice", "User"),
        comment(11, &report()),
        comment_by(12, &report(), "mallory", "User"),
    ]))
    .mount(&server)
    .await;
    patched(10).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 10, url: url_of(10) });
}

#[tokio::test]
async fn a_personal_token_does_not_adopt_a_bots_comment() {
    let server = MockServer::start().await;
    personal_token("alice").mount(&server).await;
    listing(json!([comment(11, &report())])).mount(&server).await;
    never_patched().mount(&server).await;
    created(12).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Created { id: 12, url: url_of(12) });
}

#[tokio::test]
async fn the_identity_is_asked_once_per_run_across_retries() {
    let server = MockServer::start().await;
    installation_token().mount(&server).await;
    first_listing(ResponseTemplate::new(502)).mount(&server).await;
    listing(json!([comment(7, &report())])).mount(&server).await;
    patched(7).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 7, url: url_of(7) });
    let asked = requests(&server, "GET").await.into_iter().filter(|r| r.url.path() == "/user").count();
    assert_eq!(asked, 1);
}

#[tokio::test]
async fn a_server_error_on_the_identity_question_is_retried_not_guessed() {
    // Guessing "a bot" on a 5xx would cost nothing in safety, but the answer may well come.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(ResponseTemplate::new(502))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    personal_token("alice").mount(&server).await;
    listing(json!([comment_by(3, &report(), "alice", "User")])).mount(&server).await;
    patched(3).mount(&server).await;

    let outcome = upsert(&server);
    assert_eq!(outcome, CommentOutcome::Updated { id: 3, url: url_of(3) });
}
