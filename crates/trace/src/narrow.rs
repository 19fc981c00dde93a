//! Narrowing conversions in one place, so that none of them wraps or panics: a count or index
//! kept as a `u32`, a `u64` length used as a `usize`, a computed float (nanoseconds, bytes)
//! turned into an integer. Each saturates at the target's bounds, and says so.

/// `n` as a `u32`, or `u32::MAX` past it. For counts and indexes (interned names, threads,
/// kernels) bounded by the events one file may hold ([`crate::limits::ReadLimits`]): more than
/// 2^32 of them do not fit in memory before the limit stops the read, so the saturation is
/// never reached in practice, and where it were, an index would repeat rather than wrap to 0.
pub(crate) fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `n` as a `usize`, or `usize::MAX` past it (on 32-bit targets only).
pub(crate) fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `x` as an `i64` as Rust's `as` converts it: toward zero, saturating at the bounds, NaN as 0.
/// Callers round first where they mean to round.
#[expect(
    clippy::cast_possible_truncation,
    reason = "`as` from a float saturates and maps NaN to 0: defined, and what a computed time wants"
)]
pub(crate) fn float_to_i64(x: f64) -> i64 {
    x as i64
}

/// `x` as a `u64` as Rust's `as` converts it: toward zero, saturating at 0 and `u64::MAX`, NaN
/// as 0. Callers round first where they mean to round.
#[expect(
    clippy::cast_possible_truncation,
    reason = "`as` from a float saturates and maps NaN to 0: defined, and what a computed size wants"
)]
pub(crate) fn float_to_u64(x: f64) -> u64 {
    x as u64
}

/// `x` as a `usize` as Rust's `as` converts it: toward zero, saturating at 0 and `usize::MAX`,
/// NaN as 0. Callers round first where they mean to round.
#[expect(
    clippy::cast_possible_truncation,
    reason = "`as` from a float saturates and maps NaN to 0: defined, and what a computed position wants"
)]
pub(crate) fn float_to_usize(x: f64) -> usize {
    x as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        assert_eq!(saturating_u32(7), 7);
        assert_eq!(saturating_u32(usize::MAX), u32::MAX);
        assert_eq!(saturating_usize(7), 7);
        assert_eq!(float_to_i64(-2.7), -2);
        assert_eq!(float_to_i64(1e300), i64::MAX);
        assert_eq!(float_to_i64(f64::NAN), 0);
        assert_eq!(float_to_u64(-1.0), 0);
        assert_eq!(float_to_u64(2.5f64.round()), 3);
        assert_eq!(float_to_usize(f64::INFINITY), usize::MAX);
    }
}
