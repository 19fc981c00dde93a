//! Which phase moved: when a comparison finds a regression, the `comm_only` and `compute_only`
//! medians say whether the collective, the GEMM, both, or neither got slower; "neither, yet the
//! overlapped step did" means the two streams overlap less. One pure function
//! ([`mover`]) decides it from the metric states; [`sentence`] words it for the reasons.

use serde::{Deserialize, Serialize};

use super::{MetricComparison, State};
use commgate_core::units::change;

/// The phase a regression traces to (`comparison.cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepCause {
    /// `comm_only` slower, `compute_only` not.
    Communication,
    /// `compute_only` slower, `comm_only` not.
    Compute,
    /// Both phases slower.
    CommunicationAndCompute,
    /// Both phases unchanged, the overlapped step slower: the streams overlap less.
    Overlap,
    /// A step metric regressed, but neither phase is confirmed slower and not both are
    /// confirmed unchanged (or only `serial` moved): the evidence does not single one out.
    Unclear,
}

impl StepCause {
    pub fn as_str(self) -> &'static str {
        match self {
            StepCause::Communication => "communication",
            StepCause::Compute => "compute",
            StepCause::CommunicationAndCompute => "communication_and_compute",
            StepCause::Overlap => "overlap",
            StepCause::Unclear => "unclear",
        }
    }

    /// What it means and where to look.
    pub fn explanation(self) -> &'static str {
        match self {
            StepCause::Communication => "the collective got slower (NCCL, network, topology)",
            StepCause::Compute => "the GEMM got slower (cuBLAS, clocks, power)",
            StepCause::CommunicationAndCompute => {
                "both the collective (NCCL, network, topology) and the GEMM (cuBLAS, clocks, power) got slower"
            }
            StepCause::Overlap => "the two streams overlap less (scheduling, stream priorities, SM contention)",
            StepCause::Unclear => "neither phase alone is confirmed as the mover; re-run to tell which",
        }
    }
}

/// The states the decision reads: each phase median's (`None` when not judged, as the
/// `comm_only` row of a one-rank run), and whether an overlap-row metric (median, P95, exposed
/// communication) or a serial-row metric regressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moves {
    pub comm: Option<State>,
    pub compute: Option<State>,
    pub overlap_regressed: bool,
    pub serial_regressed: bool,
}

/// THE mover decision; `None` when nothing regressed.
pub fn mover(m: Moves) -> Option<StepCause> {
    let slower = |s: Option<State>| s == Some(State::Regressed);
    let unchanged = |s: Option<State>| s == Some(State::Unchanged);
    match (slower(m.comm), slower(m.compute)) {
        (true, true) => Some(StepCause::CommunicationAndCompute),
        (true, false) => Some(StepCause::Communication),
        (false, true) => Some(StepCause::Compute),
        (false, false) if m.overlap_regressed && unchanged(m.comm) && unchanged(m.compute) => Some(StepCause::Overlap),
        (false, false) if m.overlap_regressed || m.serial_regressed => Some(StepCause::Unclear),
        (false, false) => None,
    }
}

/// The phases' figures then the cause: "comm_only median +8.0 %, busbw −7.4 %,
/// compute_only median unchanged → the collective got slower (NCCL, network, topology)".
pub fn sentence(cause: StepCause, phases: &[&MetricComparison]) -> String {
    let figures: Vec<String> = phases.iter().map(|m| phase(m)).collect();
    if figures.is_empty() {
        return cause.explanation().to_string();
    }
    format!("{} → {}", figures.join(", "), cause.explanation())
}

/// One phase's part of the sentence.
fn phase(m: &MetricComparison) -> String {
    match m.judged.state {
        State::Unchanged => format!("{} unchanged", m.label()),
        State::Inconclusive => format!("{} inconclusive ({})", m.label(), change(m.judged.ratio)),
        State::Regressed | State::Improved => {
            let throughput = m.throughput.as_ref().map(|t| format!(", {} {}", t.kind.label(), change(t.ratio)));
            format!("{} {}{}", m.label(), change(m.judged.ratio), throughput.unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use State::{Improved, Inconclusive, Regressed, Unchanged};

    fn moves(comm: Option<State>, compute: Option<State>, overlap: bool, serial: bool) -> Option<StepCause> {
        mover(Moves { comm, compute, overlap_regressed: overlap, serial_regressed: serial })
    }

    #[test]
    fn the_truth_table() {
        use StepCause::*;
        let rows = [
            (Some(Regressed), Some(Unchanged), false, false, Some(Communication)),
            (Some(Regressed), Some(Unchanged), true, true, Some(Communication)),
            (Some(Regressed), Some(Inconclusive), true, false, Some(Communication)),
            (Some(Regressed), Some(Improved), true, false, Some(Communication)),
            (Some(Unchanged), Some(Regressed), true, true, Some(Compute)),
            (Some(Inconclusive), Some(Regressed), false, false, Some(Compute)),
            (None, Some(Regressed), true, false, Some(Compute)),
            (Some(Regressed), Some(Regressed), true, true, Some(CommunicationAndCompute)),
            (Some(Unchanged), Some(Unchanged), true, false, Some(Overlap)),
            (Some(Unchanged), Some(Unchanged), true, true, Some(Overlap)),
            (Some(Unchanged), Some(Unchanged), false, true, Some(Unclear)),
            (Some(Inconclusive), Some(Unchanged), true, false, Some(Unclear)),
            (None, Some(Unchanged), true, false, Some(Unclear)),
            (Some(Unchanged), Some(Improved), false, false, None),
        ];
        for (comm, compute, overlap, serial, want) in rows {
            assert_eq!(moves(comm, compute, overlap, serial), want, "{comm:?} {compute:?} {overlap} {serial}");
        }
        assert_eq!(moves(Some(Improved), Some(Improved), false, false), None);
        assert_eq!(moves(None, None, false, false), None);
    }

    #[test]
    fn values_are_stable_snake_case() {
        for c in [
            StepCause::Communication,
            StepCause::Compute,
            StepCause::CommunicationAndCompute,
            StepCause::Overlap,
            StepCause::Unclear,
        ] {
            assert_eq!(serde_json::to_value(c).expect("json"), c.as_str());
        }
    }
}
