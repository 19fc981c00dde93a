//! Every GitHub call commgate makes, and the GitHub Actions files it writes. This module (its
//! `comment.rs`) is the only place that imports octocrab, so the network, its failure modes and the token live in one place.
//!
//! What it owns and why each choice:
//! - [`GithubEnv::from_env`] reads the variables Actions sets (formats.md, "Commands") through an
//!   injected lookup, so tests never touch the process environment. The pull request number comes
//!   from the event payload; a missing or unreadable payload just means "not a pull request".
//! - [`write_step_summary`] and [`write_outputs`] append to the files Actions names. Multi-line
//!   outputs use GitHub's `name<<DELIMITER` form with a delimiter that does not occur in the value.
//! - [`upsert_comment`] keeps exactly one sticky report comment per pull request, found by its
//!   marker and its author (the token's own identity: a marked comment anybody else wrote is
//!   never edited nor adopted), and returns what happened, never an error: `check` turns not posting into a warning, `comment` into exit 2
//!   (`comment.rs` says how, the binary's `commands/` why).
//! - The token is a [`Token`], whose `Debug` and `Display` print `***`; every message leaving this
//!   module is scrubbed of the token as well, in case an error text ever echoed it.
//! - Callers are synchronous. Each call builds its own current-thread Tokio runtime on a scoped
//!   thread, which works whether or not the caller already runs inside a runtime.

// This crate reads event payloads and API answers: no index or slice that could panic on them,
// no cast that could truncate a size read from them.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::cast_possible_truncation)]

mod actions;
mod comment;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use actions::{write_outputs, write_step_summary, ActionsFileError};
pub use comment::{upsert_comment, upsert_comment_with, CommentOutcome, RetryPolicy};

/// Whether and when `check` comments on the pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CommentPolicy {
    /// Inside GitHub Actions on a pull request.
    Auto,
    Always,
    Never,
}

pub use commgate_core::output::MARKER;

/// Where the REST API lives when `GITHUB_API_URL` is unset (GitHub Enterprise Server sets it to
/// `https://HOST/api/v3`).
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// A GitHub token. `Debug` and `Display` print `***`, so it cannot leak through a log line or an
/// error built with `{:?}`.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(secret: impl Into<String>) -> Token {
        Token(secret.into())
    }

    fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// What GitHub Actions tells a step about where it runs (formats.md, "Commands").
#[derive(Debug, Clone)]
pub struct GithubEnv {
    /// `GITHUB_API_URL`, default <https://api.github.com> (GHES: `https://HOST/api/v3`), no
    /// trailing slash.
    pub api_url: String,
    /// `GITHUB_REPOSITORY` split at its `/`: (owner, name).
    pub repository: Option<(String, String)>,
    /// `GITHUB_TOKEN`, else `GH_TOKEN`.
    pub token: Option<Token>,
    /// From the event payload at `GITHUB_EVENT_PATH`: `pull_request.number` (`pull_request`,
    /// `pull_request_target`), or `issue.number` when `issue.pull_request` is set (`issue_comment`
    /// on a pull request).
    pub pull_request: Option<u64>,
    /// `GITHUB_EVENT_NAME`.
    pub event_name: Option<String>,
    /// `GITHUB_STEP_SUMMARY`.
    pub step_summary: Option<PathBuf>,
    /// `GITHUB_OUTPUT`.
    pub output: Option<PathBuf>,
    /// `COMMGATE_COMMENT_AUTHOR`: the bot login an installation token comments as
    /// (`github-actions[bot]` for Actions' own token, `NAME[bot]` for a GitHub App's). Such a
    /// token cannot ask who it is, so without this any bot's marked comment could be the sticky
    /// one; with it, only that login's.
    pub comment_author: Option<String>,
}

impl GithubEnv {
    /// None when `GITHUB_ACTIONS` is not "true". A missing or unreadable event file is not an error
    /// (`pull_request` is then None). Empty variables count as unset.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<GithubEnv> {
        let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if get("GITHUB_ACTIONS").as_deref() != Some("true") {
            return None;
        }
        let api_url = get("GITHUB_API_URL")
            .map(|url| url.trim_end_matches('/').to_string())
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| DEFAULT_API_URL.to_string());
        let repository = get("GITHUB_REPOSITORY").and_then(|full| {
            let (owner, name) = full.split_once('/')?;
            let valid = !owner.is_empty() && !name.is_empty() && !name.contains('/');
            valid.then(|| (owner.to_string(), name.to_string()))
        });
        let payload = get("GITHUB_EVENT_PATH").and_then(|path| read_payload(Path::new(&path)));
        let pull_request = payload.as_ref().and_then(pull_request_number);
        Some(GithubEnv {
            api_url,
            repository,
            token: get("GITHUB_TOKEN").or_else(|| get("GH_TOKEN")).map(Token),
            pull_request,
            event_name: get("GITHUB_EVENT_NAME"),
            step_summary: get("GITHUB_STEP_SUMMARY").map(PathBuf::from),
            output: get("GITHUB_OUTPUT").map(PathBuf::from),
            comment_author: get(commgate_core::environment::COMMENT_AUTHOR.name),
        })
    }
}

/// The largest event payload read (GitHub's are a few hundred KiB).
const MAX_PAYLOAD_BYTES: u64 = 16 << 20;

/// The event payload as JSON, `None` when it cannot be read ([`read_event_payload`]).
fn read_payload(path: &Path) -> Option<serde_json::Value> {
    read_event_payload(path).ok()
}

/// The event payload at `path`: a regular file (a FIFO or a device is refused without
/// blocking), at most [`MAX_PAYLOAD_BYTES`], one JSON value nested at most 128 deep
/// (serde_json's limit). `Err` says which of these failed.
fn read_event_payload(path: &Path) -> Result<serde_json::Value, String> {
    let text =
        commgate_core::input::read_text(path, MAX_PAYLOAD_BYTES).map_err(|e| format!("{} {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        format!("{} is not JSON ({})", path.display(), commgate_core::input::plain_message(&e.to_string()))
    })
}

/// The events that are about a pull request and carry its base commit in `pull_request.base`.
const PULL_REQUEST_EVENTS: [&str; 4] =
    ["pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment"];

/// What to do when a pull request's base commit cannot be had.
const BASE_FIX: &str = "pass `--base <sha>` (the pull request's base commit), or `--baselines-from-head` to judge \
                        with the head's own baselines and settings";

/// The base commit of the pull request the running Actions event is about: `Ok(None)` outside
/// Actions and for events that are not about a pull request (a push, a schedule, a comment on an
/// issue); `Err` naming what is missing when the event is (or may be) about a pull request and no
/// usable base commit comes with it. Judging by the head's own baselines then would let the pull
/// request choose what it is judged by, so the gate cannot evaluate (exit 2).
pub fn pull_request_base(var: impl Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if get("GITHUB_ACTIONS").as_deref() != Some("true") {
        return Ok(None);
    }
    let event = get("GITHUB_EVENT_NAME").unwrap_or_default();
    let pr_event = PULL_REQUEST_EVENTS.contains(&event.as_str());
    let may_be_pr = pr_event || event == "issue_comment";
    let payload = match get("GITHUB_EVENT_PATH") {
        None => Err("GITHUB_EVENT_PATH is not set".to_string()),
        Some(path) => read_event_payload(Path::new(&path)),
    };
    let payload = match payload {
        Ok(payload) => payload,
        Err(why) if may_be_pr => {
            return Err(format!("the {event} event's payload cannot be read ({why}), so the pull request's base commit is unknown: {BASE_FIX}"));
        }
        Err(_) => return Ok(None),
    };
    let has = |pointer: &str| payload.pointer(pointer).is_some_and(|v| !v.is_null());
    if pr_event || has("/pull_request") {
        return commgate_core::base_commit::base_sha_from_payload(&payload).map(Some).ok_or_else(|| {
            format!(
                "the {} event's payload has no usable pull_request.base.sha (a 40- or 64-digit hexadecimal commit id): \
                 {BASE_FIX}",
                if event.is_empty() { "pull request" } else { event.as_str() }
            )
        });
    }
    if has("/issue/pull_request") {
        let number = payload.pointer("/issue/number").and_then(serde_json::Value::as_u64).unwrap_or(0);
        return Err(format!(
            "an issue_comment event on pull request #{number} carries no base commit in its payload: {BASE_FIX}"
        ));
    }
    Ok(None)
}

/// The largest pull request number commented on: GitHub's numbers are 32-bit signed integers.
pub const MAX_PULL_REQUEST: u64 = (1 << 31) - 1;

/// The pull request an event payload is about, if any (a number in `1..=MAX_PULL_REQUEST`).
fn pull_request_number(payload: &serde_json::Value) -> Option<u64> {
    let valid = |n: u64| (1..=MAX_PULL_REQUEST).contains(&n).then_some(n);
    if let Some(number) = payload.pointer("/pull_request/number").and_then(serde_json::Value::as_u64) {
        return valid(number);
    }
    let issue = payload.get("issue")?;
    let on_pull_request = issue.get("pull_request").is_some_and(|pr| !pr.is_null());
    if on_pull_request {
        issue.get("number")?.as_u64().and_then(valid)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_prints_as_stars() {
        let token = Token::new("ghp_secret");
        assert_eq!(format!("{token} {token:?}"), "*** ***");
    }

    /// A pull request's base comes from its payload; any payload that cannot give one, on an
    /// event that is or may be about a pull request, is an error naming what is missing.
    #[test]
    fn a_pull_request_without_a_usable_base_cannot_be_judged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path.display().to_string()
        };
        let sha = "a".repeat(40);
        let good = write("good.json", &format!(r#"{{"pull_request": {{"number": 3, "base": {{"sha": "{sha}"}}}}}}"#));
        let no_base = write("no-base.json", r#"{"pull_request": {"number": 3}}"#);
        let short = write("short.json", r#"{"pull_request": {"base": {"sha": "abc123"}}}"#);
        let numeric = write("numeric.json", r#"{"pull_request": {"base": {"sha": 12345}}}"#);
        let invalid = write("invalid.json", "{not json");
        let deep = write("deep.json", &format!("{}{}", "[".repeat(200), "]".repeat(200)));
        let comment = write("comment.json", r#"{"issue": {"number": 9, "pull_request": {"url": "u"}}}"#);
        let on_issue = write("issue.json", r#"{"issue": {"number": 9}}"#);
        let push = write("push.json", r#"{"ref": "refs/heads/main"}"#);
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; usize::try_from(MAX_PAYLOAD_BYTES + 1).expect("fits")]).expect("write");
        let big = big.display().to_string();
        let missing = dir.path().join("missing.json").display().to_string();
        let base = |event: &str, path: Option<&str>| {
            let vars =
                [("GITHUB_ACTIONS", Some("true")), ("GITHUB_EVENT_NAME", Some(event)), ("GITHUB_EVENT_PATH", path)];
            pull_request_base(|k| vars.iter().find(|(n, _)| *n == k).and_then(|(_, v)| v.map(str::to_string)))
        };
        assert_eq!(base("pull_request", Some(&good)), Ok(Some(sha)));
        for (event, path, says) in [
            ("pull_request", Some(no_base.as_str()), "no usable pull_request.base.sha"),
            ("pull_request_target", Some(short.as_str()), "no usable pull_request.base.sha"),
            ("pull_request", Some(numeric.as_str()), "no usable pull_request.base.sha"),
            ("pull_request", Some(invalid.as_str()), "is not JSON"),
            ("pull_request", Some(deep.as_str()), "is not JSON"),
            ("pull_request", Some(big.as_str()), "holds more than 16 MiB"),
            ("pull_request", Some(missing.as_str()), "does not exist"),
            ("pull_request", None, "GITHUB_EVENT_PATH is not set"),
            ("pull_request", Some("/dev/zero"), "cannot be read"),
            ("issue_comment", Some(comment.as_str()), "issue_comment event on pull request #9"),
            ("issue_comment", Some(invalid.as_str()), "cannot be read"),
            // Named otherwise, but the payload says it is a pull request.
            ("workflow_run", Some(no_base.as_str()), "no usable pull_request.base.sha"),
        ] {
            let err = base(event, path).expect_err(says);
            assert!(err.contains(says) && err.contains("--base <sha>"), "{event} {path:?}: {err}");
        }
        // Not about a pull request: judged as ever, by the working tree's baselines.
        assert_eq!(base("push", Some(&push)), Ok(None));
        assert_eq!(base("push", Some(&invalid)), Ok(None));
        assert_eq!(base("issue_comment", Some(&on_issue)), Ok(None));
        assert_eq!(pull_request_base(|_| None), Ok(None));
    }

    #[test]
    fn pull_request_number_from_payloads() {
        let pr: serde_json::Value = serde_json::json!({"action": "opened", "pull_request": {"number": 42}});
        assert_eq!(pull_request_number(&pr), Some(42));
        let comment = serde_json::json!({"issue": {"number": 7, "pull_request": {"url": "u"}}});
        assert_eq!(pull_request_number(&comment), Some(7));
        let issue = serde_json::json!({"issue": {"number": 7}});
        assert_eq!(pull_request_number(&issue), None);
        assert_eq!(pull_request_number(&serde_json::json!({"ref": "refs/heads/main"})), None);
        for bad in [0, MAX_PULL_REQUEST + 1, u64::MAX] {
            assert_eq!(pull_request_number(&serde_json::json!({"pull_request": {"number": bad}})), None, "{bad}");
        }
    }
}
