//! The bounds a hostile trace cannot push the reader past: how many events one file may hold,
//! how long a kept name may be, and how large a single value is parsed in place before the
//! reader switches to scanning it byte by byte. One place, so that the docs, the error messages
//! and the code agree.

use std::borrow::Cow;

use commgate_core::result::STEP_MS_RANGE;

/// Events one input file may hold unless the user raises the limit: well above real traces
/// (a busy 8-GPU step writes a few hundred thousand), low enough that the kept events fit in
/// memory (a few hundred bytes each at worst).
pub const DEFAULT_MAX_EVENTS: u64 = 50_000_000;

/// The longest line a JSON-lines log (NCCL Inspector) may have: its records are a few hundred
/// bytes, a verbose one with every channel's events a few tens of kilobytes. A longer line is
/// not such a log, and reading it whole would let one line fill memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Kept strings (kernel, step, collective, process-group names) longer than this many bytes
/// are cut to it and end in [`TRUNCATION_MARK`].
pub const MAX_NAME_BYTES: usize = 4096;

/// Distinct collective names one rank may report. Real jobs have a few dozen (the NCCL
/// operations, custom collectives named by `--comm-pattern`); a trace with more is hostile or
/// broken, and a report or comparison over a million rows helps nobody. Past the limit, kernels
/// of further names are counted under [`OTHER_COLLECTIVES`] and the report says so.
pub const MAX_DISTINCT_COLLECTIVES: usize = 10_000;

/// The largest |time| and duration accepted, in nanoseconds: 2^61 ns (73 years), far beyond any
/// real trace, even one stamped in microseconds since 1970, and small enough that `ts + dur` and
/// the difference of any two such ends fit in an `i64`, so attribution never overflows. Every
/// reader (Kineto, Nsight Systems, partial files) holds its times to it.
pub const MAX_ABS_NS: i64 = 1 << 61;

/// The longest stretch of time one rank's input may cover, in nanoseconds: 10^15 ns (10^9 ms,
/// 11.6 days), the longest step a result may hold ([`STEP_MS_RANGE`]). A profiler window covers seconds to hours; an
/// input whose first and last times lie further apart holds a time no profiler wrote, and every
/// figure derived from it (a step, a replayed step, a time per step) would print it.
#[allow(clippy::cast_possible_truncation, reason = "10^15 is exact in both types")]
pub const MAX_SPAN_NS: i64 = (*STEP_MS_RANGE.end() * 1e6) as i64;

/// `Err` naming `what` when `first..last` is longer than [`MAX_SPAN_NS`].
pub fn check_span(what: &str, first: i64, last: i64) -> Result<(), String> {
    let span = i128::from(last) - i128::from(first);
    if span <= i128::from(MAX_SPAN_NS) {
        return Ok(());
    }
    Err(format!(
        "{what} spans {:.1} days from its first time to its last; commgate reads at most {:.1} days, \
         so one of its times is wrong: re-export it",
        span as f64 / 86_400e9,
        MAX_SPAN_NS as f64 / 86_400e9,
    ))
}

/// The collective that names past [`MAX_DISTINCT_COLLECTIVES`] are counted under.
pub const OTHER_COLLECTIVES: &str = "(other collectives)";

/// What a cut name ends with.
pub const TRUNCATION_MARK: &str = "…[truncated]";

/// How the limit was set, for the message that names it.
pub const RAISE_HINT: &str = "raise it with --max-events N or COMMGATE_MAX_EVENTS=N (commgate attribute), \
     or max_events = N under [attribute] in commgate.toml";

/// The per-file limits a read runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Events (of any kind) one file may hold; past it the read stops with an error.
    pub max_events: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits { max_events: DEFAULT_MAX_EVENTS }
    }
}

/// `s` if it fits in [`MAX_NAME_BYTES`], else its longest prefix that does (on a character
/// boundary) followed by [`TRUNCATION_MARK`]; the flag says whether it was cut.
pub fn cap_name(s: &str) -> (Cow<'_, str>, bool) {
    if s.len() <= MAX_NAME_BYTES {
        return (Cow::Borrowed(s), false);
    }
    let mut cut = MAX_NAME_BYTES;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    (Cow::Owned(format!("{}{TRUNCATION_MARK}", &s[..cut])), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_bounded_at_the_longest_step_a_result_may_hold() {
        assert!(check_span("the trace", -5, MAX_SPAN_NS - 5).is_ok());
        let e = check_span("the trace", i64::MIN, i64::MAX).expect_err("wider than any profile");
        assert!(e.starts_with("the trace spans 213504.0 days") && e.contains("at most 11.6 days"), "{e}");
        assert!(check_span("x", 0, MAX_SPAN_NS + 1).is_err());
    }

    #[test]
    fn short_names_are_kept_and_long_ones_cut_on_a_character_boundary() {
        assert_eq!(cap_name("allreduce"), (Cow::Borrowed("allreduce"), false));
        let exact = "a".repeat(MAX_NAME_BYTES);
        assert!(!cap_name(&exact).1);
        let long = format!("{exact}b");
        let (cut, truncated) = cap_name(&long);
        assert!(truncated);
        assert_eq!(cut, format!("{exact}{TRUNCATION_MARK}"));
        // A multi-byte character straddling the limit is dropped whole.
        let straddling = format!("{}é", "a".repeat(MAX_NAME_BYTES - 1));
        let (cut, truncated) = cap_name(&straddling);
        assert!(truncated && cut.starts_with(&"a".repeat(MAX_NAME_BYTES - 1)) && !cut.contains('é'));
    }
}
