//! The files GitHub Actions hands a step: the job summary (`GITHUB_STEP_SUMMARY`) and the step
//! outputs (`GITHUB_OUTPUT`). Both are appended to in one write, so a failure cannot leave half a
//! multi-line output behind; errors name the file and the variable.

use std::fs::OpenOptions;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::GithubEnv;

/// A job summary or output that could not be written (never fatal to the gate: `run` warns).
#[derive(Debug, thiserror::Error)]
pub enum ActionsFileError {
    #[error("cannot write the job summary to {} (GITHUB_STEP_SUMMARY): {source}", path.display())]
    Summary { path: PathBuf, source: std::io::Error },
    #[error("cannot write outputs to {} (GITHUB_OUTPUT): {source}", path.display())]
    Outputs { path: PathBuf, source: std::io::Error },
    #[error(
        "cannot write output {name:?} to {} (GITHUB_OUTPUT): an output name must be non-empty \
         and contain no '=', '<<' or line break",
        path.display()
    )]
    BadName { name: String, path: PathBuf },
}

/// Appends the Markdown to `GITHUB_STEP_SUMMARY` (no-op when unset). Errors name the file.
pub fn write_step_summary(env: &GithubEnv, markdown: &str) -> Result<(), ActionsFileError> {
    let Some(path) = &env.step_summary else { return Ok(()) };
    let mut text = markdown.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    append(path, &text).map_err(|source| ActionsFileError::Summary { path: path.clone(), source })
}

/// Appends `name=value` lines to `GITHUB_OUTPUT` (no-op when unset). A value with a line break uses
/// the `name<<DELIMITER` form GitHub documents, with a random delimiter that does not occur in the
/// value. Errors name the file (and the output, for a name GitHub could not parse).
pub fn write_outputs(env: &GithubEnv, outputs: &[(&str, &str)]) -> Result<(), ActionsFileError> {
    let Some(path) = &env.output else { return Ok(()) };
    let mut text = String::new();
    for (name, value) in outputs {
        if name.is_empty() || name.contains(['=', '\n', '\r']) || name.contains("<<") {
            return Err(ActionsFileError::BadName { name: name.to_string(), path: path.clone() });
        }
        if value.contains(['\n', '\r']) {
            let delimiter = delimiter_for(value);
            text.push_str(&format!("{name}<<{delimiter}\n{value}\n{delimiter}\n"));
        } else {
            text.push_str(&format!("{name}={value}\n"));
        }
    }
    // One write for all outputs, so a failure cannot leave half a heredoc behind.
    append(path, &text).map_err(|source| ActionsFileError::Outputs { path: path.clone(), source })
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(text.as_bytes())
}

/// `ghadelimiter_<16 hex digits>` (the prefix the Actions toolkit uses), redrawn until the value
/// does not contain it. The randomness is std's per-process hash seed: no RNG dependency needed.
fn delimiter_for(value: &str) -> String {
    let mut salt: u64 = 0;
    loop {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(salt);
        hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
        let delimiter = format!("ghadelimiter_{:016x}", hasher.finish());
        if !value.contains(&delimiter) {
            return delimiter;
        }
        salt += 1;
    }
}
