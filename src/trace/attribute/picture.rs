//! The picture of one replayed step: per rank, the bars a gantt chart draws (compute,
//! communication hidden under compute, exposed communication), the critical path marked, ranks
//! folded past eight and bars merged below a pixel's width so that a step with thousands of
//! kernels and 64 ranks stays a chart a reader can take in (and a PR comment can hold).
//!
//! Pure: bars in, a bounded [`Picture`] out; `report::gantt` draws it.

use serde::{Deserialize, Serialize};

use super::super::model::Ns;

/// One piece of GPU work of one rank in the step, on any of its streams, at aligned times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    pub start: Ns,
    pub end: Ns,
    pub kind: BarKind,
    /// On the step's critical path (for communication: its transfer or the arrival that held it).
    pub critical: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    Compute,
    Comm,
}

/// One rank's bars in the step, in any order.
#[derive(Debug, Clone, PartialEq)]
pub struct RankBars {
    pub rank: u32,
    pub bars: Vec<Bar>,
}

/// What the chart draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Picture {
    /// The step drawn (0-based, in time order), and its span, µs (the first bar's start to the
    /// last bar's end over every rank).
    pub step: u32,
    pub span_us: f64,
    /// Ranks drawn, in rank order.
    pub ranks: Vec<PictureRank>,
    /// Ranks in the step, drawn or folded.
    pub ranks_in_step: u32,
    /// Bars merged into a neighbour because they were narrower than a pixel, or past the cap.
    pub bars_merged: u64,
    /// The most bars drawn per rank.
    pub max_bars_per_rank: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PictureRank {
    pub rank: u32,
    /// Why a rank of a folded picture is drawn: `late`, `fastest` or `median`; `None` when every
    /// rank is drawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub bars: Vec<PictureBar>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PictureBar {
    pub kind: PictureKind,
    /// From the step's start, µs.
    pub start_us: f64,
    pub dur_us: f64,
    pub critical: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PictureKind {
    Compute,
    /// Communication while the rank computes.
    Hidden,
    /// Communication while the rank does not compute.
    Exposed,
}
