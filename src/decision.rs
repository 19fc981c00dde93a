//! The gate's vocabulary: the three decisions and the [`Verdict`] every decide function returns
//! (a run's own verdict, a comparison's, the trace follow-up's and the gate's). One type, so that
//! a decision made in one place reads the same wherever it is displayed or combined.

use serde::{Deserialize, Serialize};

/// What to do about the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Accept,
    Tune,
    CollectMoreEvidence,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Accept => "accept",
            Decision::Tune => "tune",
            Decision::CollectMoreEvidence => "collect_more_evidence",
        }
    }
}

/// A decision, whether it blocks a merge, and why (most important reason first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    pub blocking: bool,
    pub reasons: Vec<String>,
}

impl Verdict {
    /// A decision that does not block.
    pub fn new(decision: Decision, reasons: Vec<String>) -> Self {
        Verdict { decision, blocking: false, reasons }
    }

    /// A confirmed regression: `tune`, blocking.
    pub fn regression(reasons: Vec<String>) -> Self {
        Verdict { decision: Decision::Tune, blocking: true, reasons }
    }

    /// A decision with one reason, not blocking.
    pub fn because(decision: Decision, reason: String) -> Self {
        Verdict::new(decision, vec![reason])
    }
}
