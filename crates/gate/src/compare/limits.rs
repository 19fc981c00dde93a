//! The limits of the comparison's own settings, beside [`CompareOptions`](super::CompareOptions):
//! each a check of one value alone that says why it is refused. The command line's declarations
//! of `--resamples` and `--min-effect` (and their variables and `[compare]` keys) point here.

use commgate_stats::bootstrap::DEFAULT_RESAMPLES;

/// Bootstrap resamples per interval: below this the 95 % interval's ends rest on a handful of
/// resamples.
pub const MIN_RESAMPLES: usize = 100;
/// Beyond this the interval's ends no longer move; the time grows linearly.
pub const MAX_RESAMPLES: usize = 100_000;

/// `--resamples`.
pub fn resamples(value: &usize) -> Result<(), String> {
    if *value < MIN_RESAMPLES || *value > MAX_RESAMPLES {
        return Err(format!(
            "give {MIN_RESAMPLES} to {MAX_RESAMPLES} bootstrap resamples per interval ({DEFAULT_RESAMPLES} is the \
             default): fewer leave the 95 % interval's ends to a handful of draws, more only cost time"
        ));
    }
    Ok(())
}

/// `--min-effect`: a fraction in [0, 1).
pub fn min_effect(value: &f64) -> Result<(), String> {
    if !(0.0..1.0).contains(value) {
        return Err("give the smallest change worth acting on as a fraction in [0, 1), e.g. 0.03 for 3 %".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resamples_and_min_effect() {
        let e = resamples(&0).unwrap_err();
        assert!(e.starts_with("give 100 to 100000"), "{e}");
        assert!(e.contains("(1000 is the default)"), "{e}");
        assert!(resamples(&MIN_RESAMPLES).is_ok() && resamples(&MAX_RESAMPLES).is_ok());
        assert!(resamples(&(MAX_RESAMPLES + 1)).is_err());
        assert_eq!(min_effect(&0.05), Ok(()));
        for bad in [1.0, -0.1, f64::NAN, f64::INFINITY] {
            assert!(min_effect(&bad).is_err(), "{bad}");
        }
    }
}
