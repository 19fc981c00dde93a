//! `commgate comment`: a report posted as the pull request's comment (posting is the whole job:
//! not posting exits 2 with the reason).

use commgate_gate::check;

use anyhow::Result;

use commgate_core::diag;
use commgate_core::output::emit;
use commgate_gate::decide::Outcome;
use commgate_github::{self as github, CommentOutcome, GithubEnv};
use commgate_report as report;
use commgate_report::Format;

/// `commgate comment`.
pub(super) fn run(args: crate::cli::CommentArgs) -> Result<Outcome> {
    let mut report = check::load_report(&args.report)?;
    // The report may be a fork's: its job link is shown only when it points into this
    // repository's runs.
    let var = |k: &str| std::env::var(k).ok();
    let prefix = var("GITHUB_SERVER_URL").zip(var("GITHUB_REPOSITORY")).and_then(|(s, r)| check::runs_prefix(&s, &r));
    report.job = report.job.as_ref().and_then(|j| j.vetted(prefix.as_deref()));
    let markdown = report::render_check(&report, Format::Markdown);
    if args.dry_run {
        emit(&markdown, None)?;
        return Ok(Outcome::Passed);
    }
    let Some(mut gh) = GithubEnv::from_env(|k| std::env::var(k).ok()) else {
        anyhow::bail!(
            "nothing was posted: this is not GitHub Actions (GITHUB_ACTIONS is not true); \
             run it in a workflow job, or preview the comment with `commgate comment --dry-run --report {}`",
            args.report.display()
        );
    };
    if args.pr.is_some() {
        gh.pull_request = args.pr;
    }
    if gh.pull_request.is_none() {
        anyhow::bail!(
            "nothing was posted: the event `{}` is not a pull request; pass --pr N (or COMMGATE_PR)",
            gh.event_name.as_deref().unwrap_or("unknown")
        );
    }
    match github::upsert_comment(&gh, &markdown) {
        CommentOutcome::Created { url, .. } => diag::info(format_args!("commented on the pull request: {url}")),
        CommentOutcome::Updated { url, .. } => diag::info(format_args!("updated the pull-request comment: {url}")),
        CommentOutcome::Skipped(why) | CommentOutcome::Warning(why) => {
            anyhow::bail!("nothing was posted: {why}")
        }
    }
    Ok(Outcome::Passed)
}
