//! commgate's vocabulary and edges: the bottom layer every other crate may use, and which uses no
//! other crate of the workspace.
//!
//! | module | owns |
//! |---|---|
//! | [`units`] | units and their wording (bytes, durations, rates) |
//! | [`diag`] | the one-line stderr contract (`commgate: …`, workflow-command safe) |
//! | [`input`] | bounded reads of untrusted files |
//! | [`output`] | atomic writes, stdout, the PR comment's marker |
//! | [`base_commit`] | the base and head commits, and the base commit's tree |
//! | [`environment`] | the settings read only from the environment, declared together |
//! | [`vocab`] | the gate's words: decisions, verdicts, outcomes, evaluation errors, `--fail-on`, mitigations (no rules) |
//! | [`result`] | the result file's typed, versioned schema |

// This crate reads untrusted files: no index or slice that could panic on their contents
// (`get`, iterators and patterns instead; tests are exempt through clippy.toml), and no cast that
// could silently truncate a size or count read from them.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::cast_possible_truncation)]

pub mod base_commit;
pub mod diag;
pub mod environment;
pub mod input;
pub mod output;
pub mod result;
pub mod units;
pub mod vocab;
