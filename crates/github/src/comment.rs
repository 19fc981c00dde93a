//! The sticky pull-request comment, over GitHub's REST API through octocrab.
//!
//! - [`upsert_comment`] keeps exactly one sticky report comment per pull request: it lists the
//!   comments (every page, 100 per page), finds the one carrying [`MARKER`] that the token's own
//!   identity wrote, and PATCHes it, or POSTs a new one. octocrab's `update_comment` sends POST where GitHub documents PATCH, and its comment
//!   model is strict (a schema drift on GitHub's side would fail deserialisation), so this module
//!   sends raw requests through octocrab (`_get`, `_post`, `_patch`: auth, base URI, TLS, timeouts)
//!   and reads only the fields it needs into its own serde structs.
//! - Only a comment written by the token's own identity can be the sticky one: anybody can post
//!   a comment that starts with the marker, and commgate must neither overwrite nor adopt it (nor
//!   edit a comment it does not own with a token that may). [`Author`] is who that is, asked once
//!   per call with `GET /user`: a personal access token answers with its user, whose login must
//!   match. An installation token (the Actions `GITHUB_TOKEN`, a GitHub App's) is refused there
//!   (403), and neither kind of token can name its app's bot account without a signed app JWT;
//!   then the bot login the caller names (`COMMGATE_COMMENT_AUTHOR`; the action passes
//!   `github-actions[bot]` unless told otherwise) must match exactly, and without one any bot
//!   account (`user.type` `Bot`, login ending in `[bot]`) qualifies, which no user and no fork can
//!   write as (another app's bot could, which is what naming the login closes). Among those, the most recent comment whose body starts with the
//!   marker wins (a reply quoting it counts only when there is nothing better). A PATCH refused
//!   with 403/404 (another app's bot) falls back to one POST, which the next run finds as the
//!   most recent.
//! - [`upsert_comment`] returns a [`CommentOutcome`], never an error, and the caller decides what
//!   not posting means: for `check` a warning (the verdict is the exit code and the report is
//!   already in the job summary and `--output`), for `comment` exit 2 (posting is its whole
//!   job). The texts therefore say why and what to do, never what the caller does next. A
//!   read-only token (fork pull requests) gives 401/403/404: one outcome, no retries. 5xx,
//!   transport errors, timeouts and rate limits are retried with exponential backoff, a bounded
//!   number of times, under a per-request timeout and an overall deadline, so neither command
//!   ever hangs on the network.
//! - A retry redoes the whole find-then-write step rather than repeating one request: a POST whose
//!   answer was lost (a 502 from a proxy after GitHub created the comment) is then found by the
//!   next listing and updated, instead of duplicated. octocrab's own retry layer is turned off so
//!   the two do not multiply into a retry storm.
//! - Every message leaving this module is scrubbed of the token, in case an error text ever
//!   echoed it.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use octocrab::service::middleware::retry::RetryConfig;
use octocrab::Octocrab;
use serde::Deserialize;
use tokio::time::Instant;

use super::{GithubEnv, Token, MARKER};

/// The longest `retry-after` (or rate-limit reset) commgate waits for. Longer than this and the
/// comment is given up with a warning: a gate should not sit idle for minutes over a comment.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Pagination stops here (10,000 comments) even if GitHub keeps sending `rel="next"`.
const MAX_PAGES: usize = 100;

/// How much of GitHub's error message a warning quotes.
const MAX_QUOTED_CHARS: usize = 300;

/// What happened to the PR comment. Never an error: see the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommentOutcome {
    Created {
        id: u64,
        url: String,
    },
    Updated {
        id: u64,
        url: String,
    },
    /// Nothing to do here (not a pull request, no token, no repository); the reason says which.
    Skipped(String),
    /// Commenting failed. The text says why and what the user can do.
    Warning(String),
}

impl fmt::Display for CommentOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommentOutcome::Created { url, .. } => write!(f, "created the PR comment {url}"),
            CommentOutcome::Updated { url, .. } => write!(f, "updated the PR comment {url}"),
            CommentOutcome::Skipped(why) => write!(f, "no PR comment: {why}"),
            CommentOutcome::Warning(why) => write!(f, "warning: {why}"),
        }
    }
}

/// How hard [`upsert_comment_with`] tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included), each one a full find-then-write.
    pub attempts: u32,
    /// Wait before the second attempt; doubled before each later one (250 ms, 500 ms, 1 s).
    pub base_delay: Duration,
    /// Limit on one HTTP request, connection and body included.
    pub request_timeout: Duration,
    /// Limit on the whole call, waits included.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_millis(250),
            request_timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(60),
        }
    }
}

/// [`upsert_comment_with`] under [`RetryPolicy::default`].
pub fn upsert_comment(env: &GithubEnv, body: &str) -> CommentOutcome {
    upsert_comment_with(env, body, &RetryPolicy::default())
}

/// Finds this tool's previous comment on the pull request by [`MARKER`] and by its author, the
/// token's own identity (every page, 100 per page), updates it (PATCH), or creates one (POST). Never returns an error: no token, no pull request or
/// no repository → `Skipped`; a read-only token (401/403/404) → one `Warning` without retries; 5xx,
/// transport errors, timeouts and rate limits → up to `policy.attempts` attempts with exponential
/// backoff (honouring `retry-after` up to 10 s), then `Warning`. No text in the outcome contains
/// the token.
pub fn upsert_comment_with(env: &GithubEnv, body: &str, policy: &RetryPolicy) -> CommentOutcome {
    let Some(number) = env.pull_request else {
        let event = env.event_name.as_deref().unwrap_or("unknown");
        return CommentOutcome::Skipped(format!(
            "not a pull request (event `{event}`), so there is nothing to comment on"
        ));
    };
    let Some((owner, repo)) = &env.repository else {
        return CommentOutcome::Skipped("GITHUB_REPOSITORY is not set to OWNER/NAME".to_string());
    };
    let Some(token) = &env.token else {
        return CommentOutcome::Skipped(
            "no GITHUB_TOKEN (or GH_TOKEN) in the environment: set it for this step (the action's `github-token` input does)".to_string(),
        );
    };
    // octocrab turns the token into a header value and panics on one HTTP forbids (a stray line
    // break from a copied secret, say), so check it here and say so instead.
    if !token.secret().bytes().all(|b| b.is_ascii_graphic()) {
        return CommentOutcome::Warning(
            "cannot comment: the token contains spaces, line breaks or non-ASCII characters; check the secret"
                .to_string(),
        );
    }
    let body = if body.trim_start().starts_with(MARKER) { body.to_string() } else { format!("{MARKER}\n{body}") };
    let target = Target {
        api_url: &env.api_url,
        owner,
        repo,
        number,
        token,
        body: &body,
        bot_login: env.comment_author.as_deref(),
    };
    let outcome = std::thread::scope(|scope| {
        // A scoped thread, so `block_on` works even when the caller sits inside a Tokio runtime.
        scope.spawn(|| run_on_own_runtime(&target, policy)).join().unwrap_or_else(|_| {
            CommentOutcome::Warning("cannot comment: the GitHub client stopped unexpectedly".to_string())
        })
    });
    scrub_outcome(outcome, token.secret())
}

struct Target<'a> {
    api_url: &'a str,
    owner: &'a str,
    repo: &'a str,
    number: u64,
    token: &'a Token,
    body: &'a str,
    /// The bot login an installation token comments as, when the caller names it.
    bot_login: Option<&'a str>,
}

fn run_on_own_runtime(target: &Target<'_>, policy: &RetryPolicy) -> CommentOutcome {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build() {
        Ok(runtime) => runtime,
        Err(e) => return CommentOutcome::Warning(format!("cannot comment: cannot start the async runtime: {e}")),
    };
    runtime.block_on(async {
        let deadline = Instant::now() + policy.deadline;
        match tokio::time::timeout_at(deadline, upsert(target, policy, deadline)).await {
            Ok(outcome) => outcome,
            Err(_) => CommentOutcome::Warning(format!(
                "cannot comment: GitHub did not finish within the {} s deadline; {TRY_LATER}",
                policy.deadline.as_secs_f64(),
            )),
        }
    })
}

/// What to do about GitHub or the network failing: nothing in the job's hands but time.
const TRY_LATER: &str = "re-run the job when GitHub answers again";

async fn upsert(target: &Target<'_>, policy: &RetryPolicy, deadline: Instant) -> CommentOutcome {
    let crab = match build_client(target, policy) {
        Ok(crab) => crab,
        Err(why) => return CommentOutcome::Warning(why),
    };
    let client = Client { crab, request_timeout: policy.request_timeout };
    let attempts = policy.attempts.max(1);
    let mut attempt = 1;
    // Asked once; a retry asks again only if the first answer never came.
    let mut author = None;
    loop {
        let failure = match find_and_write(&client, target, &mut author).await {
            Ok(outcome) => return outcome,
            Err(failure) => failure,
        };
        let (why, asked_wait) = match failure {
            Failure::Fatal { why, .. } => return CommentOutcome::Warning(why),
            Failure::Transient { why, retry_after } => (why, retry_after),
        };
        if attempt >= attempts {
            return CommentOutcome::Warning(format!(
                "cannot comment: {why} (gave up after {attempts} attempts); {TRY_LATER}"
            ));
        }
        let wait = match asked_wait {
            Some(wait) if wait > MAX_RETRY_AFTER => {
                return CommentOutcome::Warning(format!(
                    "cannot comment: {why}, and GitHub asks to wait {} s, longer than commgate waits ({} s); \
                     {TRY_LATER}",
                    wait.as_secs(),
                    MAX_RETRY_AFTER.as_secs()
                ));
            }
            Some(wait) => wait,
            None => backoff(policy.base_delay, attempt),
        };
        if Instant::now() + wait >= deadline {
            return CommentOutcome::Warning(format!(
                "cannot comment: {why}, and the next try would pass the {} s deadline; {TRY_LATER}",
                policy.deadline.as_secs_f64()
            ));
        }
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// `base × 2^(attempt − 1)`: 250 ms, 500 ms, 1 s with the default base.
fn backoff(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.saturating_sub(1).min(16))
}

fn build_client(target: &Target<'_>, policy: &RetryPolicy) -> Result<Octocrab, String> {
    let timeout = Some(policy.request_timeout);
    Octocrab::builder()
        .base_uri(target.api_url)
        .map_err(|_| format!("cannot comment: GITHUB_API_URL {:?} is not a valid URL", target.api_url))?
        .personal_token(target.token.secret().to_string())
        // Retries are this module's job (whole-step, with backoff); octocrab's default would
        // retry each 5xx at once, three times, under ours.
        .add_retry_config(RetryConfig::None)
        .set_connect_timeout(timeout)
        .set_read_timeout(timeout)
        .set_write_timeout(timeout)
        .build()
        .map_err(|e| format!("cannot comment: cannot set up the GitHub client: {}", error_chain(&e)))
}

/// Why one attempt failed, and whether another could succeed.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// Retrying cannot help (read-only token, bad request): warn once. `status` is GitHub's
    /// answer, when there was one.
    Fatal { why: String, status: Option<u16> },
    /// A 5xx, a timeout, a dropped connection or a rate limit; `retry_after` is GitHub's own wait.
    Transient { why: String, retry_after: Option<Duration> },
}

/// Whose comment may be the sticky one: the identity of the token (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Author {
    /// `GET /user` answered (a personal access token): its user's login.
    Login(String),
    /// `GET /user` was refused (an installation token: Actions' `GITHUB_TOKEN` or a GitHub App's)
    /// or answered something unreadable: a bot account, `type` `Bot` and a login ending in `[bot]`.
    AppBot,
}

impl Author {
    /// Whether `user` (a comment's author; `None` for a deleted account) is this identity.
    fn wrote(&self, user: Option<&WireUser>) -> bool {
        let Some(user) = user else { return false };
        match self {
            // Logins are case-insensitive on GitHub.
            Author::Login(login) => user.login.eq_ignore_ascii_case(login),
            Author::AppBot => user.kind == Some(AccountKind::Bot) && user.login.ends_with("[bot]"),
        }
    }
}

/// Who the token belongs to, from `GET /user`. Any refusal or unreadable answer means an
/// installation token: the bot login the caller named (`bot_login`), else [`Author::AppBot`], a
/// fallback that no user-written comment matches, so an unexpected answer can cost a duplicate
/// comment, never a hijacked one. Only what a retry could fix (5xx, rate limits, the network) is
/// an error.
async fn whoami(client: &Client, bot_login: Option<&str>) -> Result<Author, Failure> {
    let installation = || bot_login.map_or(Author::AppBot, |login| Author::Login(login.to_string()));
    match client.send(Method::Get, "/user", None).await {
        Ok(reply) => Ok(reply
            .json::<WireUser>("asking who the token is")
            .map_or_else(|_| installation(), |user| Author::Login(user.login))),
        Err(Failure::Fatal { .. }) => Ok(installation()),
        Err(transient) => Err(transient),
    }
}

/// One find-then-write: learn the token's identity (once per call: `author` keeps it), list
/// every page, PATCH the marked comment that identity wrote if there is one, else POST.
async fn find_and_write(
    client: &Client,
    target: &Target<'_>,
    author: &mut Option<Author>,
) -> Result<CommentOutcome, Failure> {
    let Target { owner, repo, number, .. } = target;
    let me = match author {
        Some(known) => known.clone(),
        None => author.insert(whoami(client, target.bot_login).await?).clone(),
    };
    let mut next = Some(format!("/repos/{owner}/{repo}/issues/{number}/comments?per_page=100"));
    let mut best: Option<WireComment> = None;
    let mut pages = 0;
    while let Some(route) = next.take() {
        pages += 1;
        if pages > MAX_PAGES {
            break;
        }
        let reply = client.send(Method::Get, &route, None).await?;
        let comments: Vec<WireComment> = reply.json("listing the pull request's comments")?;
        // A marked comment by anybody else is somebody else's text: never edited, never adopted.
        for comment in comments.into_iter().filter(|c| c.has_marker() && me.wrote(c.user.as_ref())) {
            if best.as_ref().is_none_or(|b| comment.rank() > b.rank()) {
                best = Some(comment);
            }
        }
        next = reply.next_link().map(|link| Client::relative(&link));
    }
    let payload = serde_json::json!({ "body": target.body });
    if let Some(existing) = best {
        let route = format!("/repos/{owner}/{repo}/issues/comments/{}", existing.id);
        match client.send(Method::Patch, &route, Some(&payload)).await {
            Ok(reply) => {
                let written: WireComment = reply.json("updating the comment")?;
                return Ok(CommentOutcome::Updated { id: written.id, url: written.html_url.unwrap_or_default() });
            }
            // Not ours to edit (written under another identity, say): fall through and post a new
            // one, which the next run then finds as the most recent. A read-only token fails the
            // POST too, with the same warning, so this costs at most one extra request.
            Err(Failure::Fatal { status: Some(403 | 404), .. }) => {}
            Err(failure) => return Err(failure),
        }
    }
    let route = format!("/repos/{owner}/{repo}/issues/{number}/comments");
    let reply = client.send(Method::Post, &route, Some(&payload)).await?;
    let written: WireComment = reply.json("creating the comment")?;
    Ok(CommentOutcome::Created { id: written.id, url: written.html_url.unwrap_or_default() })
}

/// The few fields of GitHub's issue comment this module reads; the rest of the (large, changing)
/// object is ignored.
#[derive(Debug, Deserialize)]
struct WireComment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
    /// `null` for a deleted account.
    #[serde(default)]
    user: Option<WireUser>,
}

/// A comment's author, or the token's own user (`GET /user`).
#[derive(Debug, Deserialize)]
struct WireUser {
    login: String,
    #[serde(default, rename = "type")]
    kind: Option<AccountKind>,
}

/// A GitHub account's `type`; one GitHub may add later reads as `Other`, never as a `Bot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum AccountKind {
    User,
    Bot,
    Organization,
    #[serde(other)]
    Other,
}

impl WireComment {
    fn has_marker(&self) -> bool {
        self.body.as_deref().is_some_and(|b| b.contains(MARKER))
    }

    /// Which marked comment to update: one whose body starts with the marker (the report itself,
    /// not a reply quoting it) beats one that merely contains it; then the most recent (ids grow).
    fn rank(&self) -> (bool, u64) {
        (self.body.as_deref().is_some_and(|b| b.trim_start().starts_with(MARKER)), self.id)
    }
}

#[derive(Debug, Deserialize)]
struct WireError {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Clone, Copy)]
enum Method {
    Get,
    Post,
    Patch,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
        }
    }
}

struct Client {
    crab: Octocrab,
    request_timeout: Duration,
}

/// A 2xx answer, read whole.
struct Reply {
    headers: Vec<(String, String)>,
    body: String,
}

impl Client {
    /// One request under the per-request timeout. Non-2xx answers become a [`Failure`].
    async fn send(&self, method: Method, route: &str, body: Option<&serde_json::Value>) -> Result<Reply, Failure> {
        let what = format!("{} {route}", method.as_str());
        let request = async {
            let response = match method {
                Method::Get => self.crab._get(route).await,
                Method::Post => self.crab._post(route, body).await,
                Method::Patch => self.crab._patch(route, body).await,
            }?;
            let status = response.status().as_u16();
            let headers: Vec<(String, String)> = response
                .headers()
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_ascii_lowercase(), v.to_str().ok()?.to_string())))
                .collect();
            let text = self.crab.body_to_string(response).await?;
            Ok::<_, octocrab::Error>((status, headers, text))
        };
        let (status, headers, text) = match tokio::time::timeout(self.request_timeout, request).await {
            Err(_) => {
                return Err(Failure::Transient {
                    why: format!("{what} got no answer within {} s", self.request_timeout.as_secs_f64()),
                    retry_after: None,
                })
            }
            Ok(Err(e)) => {
                return Err(Failure::Transient {
                    why: format!("{what} failed: {}", error_chain(&e)),
                    retry_after: None,
                })
            }
            Ok(Ok(answer)) => answer,
        };
        if (200..300).contains(&status) {
            return Ok(Reply { headers, body: text });
        }
        let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim().to_string());
        let limits = RateLimitHeaders {
            retry_after: header("retry-after").and_then(|v| v.parse().ok()),
            remaining: header("x-ratelimit-remaining").and_then(|v| v.parse().ok()),
            reset: header("x-ratelimit-reset").and_then(|v| v.parse().ok()),
        };
        let message = serde_json::from_str::<WireError>(&text).ok().and_then(|e| e.message).unwrap_or(text);
        let quoted = quote(&message);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Err(classify(status, &limits, now, &what, &quoted))
    }

    /// A pagination link as a route on the configured API server: its path and query only. The
    /// requests of one call therefore all go to `GITHUB_API_URL`, whatever host a link names (a
    /// TLS-terminating proxy may rewrite the scheme, say), and the token goes nowhere else.
    fn relative(link: &str) -> String {
        let after_scheme = link.find("://").map_or(0, |i| i + 3);
        match link[after_scheme..].find('/') {
            Some(i) if after_scheme > 0 => link[after_scheme + i..].to_string(),
            Some(_) => link.to_string(),
            None => "/".to_string(),
        }
    }
}

impl Reply {
    fn json<T: serde::de::DeserializeOwned>(&self, doing: &str) -> Result<T, Failure> {
        serde_json::from_str(&self.body).map_err(|e| Failure::Fatal {
            why: format!("cannot comment: GitHub's answer when {doing} is not what commgate expects: {e}"),
            status: None,
        })
    }

    /// The `rel="next"` target of the `Link` header, if any.
    fn next_link(&self) -> Option<String> {
        let link = self.headers.iter().find(|(k, _)| k == "link").map(|(_, v)| v.as_str())?;
        next_link(link)
    }
}

/// Parses `<url>; rel="next", <url>; rel="last"` (RFC 8288 as GitHub writes it).
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        let url = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let is_next = params.split(';').any(|p| {
            let p = p.trim();
            p.strip_prefix("rel=").is_some_and(|rel| rel.trim_matches('"').split_whitespace().any(|r| r == "next"))
        });
        is_next.then(|| url.to_string())
    })
}

#[derive(Debug, Default)]
struct RateLimitHeaders {
    retry_after: Option<u64>,
    remaining: Option<u64>,
    reset: Option<u64>,
}

/// The rule for a non-2xx answer, kept pure so it can be tested alone.
///
/// GitHub signals rate limits with 403 or 429 plus `retry-after` or `x-ratelimit-remaining: 0`
/// (docs: "Rate limits for the REST API"); a 403 without them is a permission problem, which no
/// retry fixes. A 429 is always a rate limit.
fn classify(status: u16, limits: &RateLimitHeaders, now_epoch_s: u64, what: &str, message: &str) -> Failure {
    let rate_limited = limits.retry_after.is_some() || limits.remaining == Some(0);
    if status == 429 || (status == 403 && rate_limited) {
        let retry_after = limits
            .retry_after
            .or_else(|| limits.reset.map(|reset| reset.saturating_sub(now_epoch_s).max(1)))
            .map(Duration::from_secs);
        return Failure::Transient { why: format!("{what} was rate limited (HTTP {status}): {message}"), retry_after };
    }
    if status >= 500 {
        return Failure::Transient {
            why: format!("{what} failed on GitHub's side (HTTP {status}): {message}"),
            retry_after: None,
        };
    }
    let hint = match status {
        401 => "the token was rejected (expired or revoked?): pass a valid token",
        403 | 404 => {
            "the token is read-only or lacks `pull-requests: write` (a fork pull request?): give the job \
             `permissions: pull-requests: write`, or post from a trusted `workflow_run` job"
        }
        _ => "GitHub refused the request",
    };
    Failure::Fatal {
        why: format!("cannot comment (HTTP {status}): {hint}. GitHub said: {message}"),
        status: Some(status),
    }
}

/// GitHub's message, on one line and short.
fn quote(message: &str) -> String {
    let one_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > MAX_QUOTED_CHARS {
        format!("{}…", one_line.chars().take(MAX_QUOTED_CHARS).collect::<String>())
    } else {
        one_line
    }
}

/// An error and its causes on one line: octocrab's own Display can be as short as "GitHub".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    quote(&text)
}

fn scrub(text: String, secret: &str) -> String {
    if secret.is_empty() || !text.contains(secret) {
        text
    } else {
        text.replace(secret, "***")
    }
}

fn scrub_outcome(outcome: CommentOutcome, secret: &str) -> CommentOutcome {
    match outcome {
        CommentOutcome::Created { id, url } => CommentOutcome::Created { id, url: scrub(url, secret) },
        CommentOutcome::Updated { id, url } => CommentOutcome::Updated { id, url: scrub(url, secret) },
        CommentOutcome::Skipped(why) => CommentOutcome::Skipped(scrub(why, secret)),
        CommentOutcome::Warning(why) => CommentOutcome::Warning(scrub(why, secret)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_link_finds_next_among_several_relations() {
        let header = r#"<https://api.github.com/repositories/1/issues/7/comments?per_page=100&page=3>; rel="next", <https://api.github.com/repositories/1/issues/7/comments?per_page=100&page=5>; rel="last""#;
        assert_eq!(
            next_link(header).as_deref(),
            Some("https://api.github.com/repositories/1/issues/7/comments?per_page=100&page=3")
        );
        assert_eq!(next_link(r#"<https://x/a?page=1>; rel="prev", <https://x/a?page=1>; rel="first""#), None);
    }

    #[test]
    fn rate_limits_are_transient_and_plain_403_is_fatal() {
        let none = RateLimitHeaders::default();
        assert!(matches!(classify(403, &none, 0, "GET /x", "m"), Failure::Fatal { .. }));
        assert!(matches!(classify(404, &none, 0, "GET /x", "m"), Failure::Fatal { .. }));
        assert!(matches!(classify(422, &none, 0, "GET /x", "m"), Failure::Fatal { .. }));
        assert_eq!(
            classify(502, &none, 0, "GET /x", "m"),
            Failure::Transient { why: "GET /x failed on GitHub's side (HTTP 502): m".into(), retry_after: None }
        );
        let exhausted = RateLimitHeaders { retry_after: None, remaining: Some(0), reset: Some(1_005) };
        assert!(matches!(
            classify(403, &exhausted, 1_000, "GET /x", "m"),
            Failure::Transient { retry_after: Some(d), .. } if d == Duration::from_secs(5)
        ));
        let asked = RateLimitHeaders { retry_after: Some(2), remaining: None, reset: None };
        assert!(matches!(
            classify(429, &asked, 0, "GET /x", "m"),
            Failure::Transient { retry_after: Some(d), .. } if d == Duration::from_secs(2)
        ));
        assert!(matches!(classify(429, &none, 0, "GET /x", "m"), Failure::Transient { retry_after: None, .. }));
    }

    #[test]
    fn backoff_doubles_from_the_base() {
        let base = Duration::from_millis(250);
        let waits: Vec<_> = (1..=3).map(|a| backoff(base, a)).collect();
        assert_eq!(waits, [Duration::from_millis(250), Duration::from_millis(500), Duration::from_secs(1)]);
    }

    #[test]
    fn pagination_links_become_routes_on_the_configured_server() {
        assert_eq!(
            Client::relative("https://ghe.example.com/api/v3/repositories/1/issues/7/comments?page=2"),
            "/api/v3/repositories/1/issues/7/comments?page=2"
        );
        assert_eq!(Client::relative("http://127.0.0.1:4000/repositories/1?page=2"), "/repositories/1?page=2");
        assert_eq!(Client::relative("/repositories/1?page=2"), "/repositories/1?page=2");
    }

    #[test]
    fn a_marked_report_beats_a_quoting_reply_and_newer_beats_older() {
        let c = |id, body: &str| WireComment { id, body: Some(body.to_string()), html_url: None, user: None };
        let report = c(5, &format!("{MARKER}\nreport"));
        let reply = c(9, &format!("> quoting {MARKER}"));
        let newer_report = c(12, &format!("{MARKER}\nreport"));
        assert!(report.rank() > reply.rank());
        assert!(newer_report.rank() > report.rank());
    }

    #[test]
    fn only_the_tokens_own_identity_wrote_the_sticky_comment() {
        let user = |login: &str, kind: &str| -> WireUser {
            serde_json::from_value(serde_json::json!({ "login": login, "type": kind })).expect("a user")
        };
        let bot = Author::AppBot;
        assert!(bot.wrote(Some(&user("github-actions[bot]", "Bot"))));
        assert!(bot.wrote(Some(&user("my-gate-app[bot]", "Bot"))));
        assert!(!bot.wrote(Some(&user("github-actions[bot]", "User"))), "a user cannot be a bot");
        assert!(!bot.wrote(Some(&user("github-actions[bot]", "Mannequin"))), "an unknown type is no bot");
        assert!(!bot.wrote(Some(&user("mallory", "User"))));
        assert!(!bot.wrote(Some(&user("botty", "Bot"))));
        assert!(!bot.wrote(None), "a deleted account is nobody");
        let alice = Author::Login("Alice".to_string());
        assert!(alice.wrote(Some(&user("alice", "User"))));
        assert!(!alice.wrote(Some(&user("alice2", "User"))));
        assert!(!alice.wrote(Some(&user("github-actions[bot]", "Bot"))));
    }
}
