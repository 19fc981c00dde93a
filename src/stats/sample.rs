//! [`Sample`]: the validated input of every estimator, sorted once.
//!
//! Invariant (after criterion's `Sample`, "at least 2 data points, no NaNs"; one point suffices
//! here because a single repeat still has a median): **at least one value, every value finite,
//! stored in ascending order.** Estimators that take a `&Sample` therefore never see NaN, an empty
//! slice or unsorted data, and need no error path of their own.

/// Why a slice of measurements cannot become a [`Sample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    /// No values at all.
    #[error("the sample is empty: at least one measurement is needed")]
    Empty,
    /// The value at `index` (in the caller's order) is NaN or infinite.
    #[error("measurement #{index} is not a finite number (NaN or infinite)")]
    NonFinite { index: usize },
    /// The value at `index` is negative where only durations (≥ 0) make sense.
    #[error("measurement #{index} is negative, but times cannot be negative")]
    Negative { index: usize },
}

/// A non-empty, finite, sorted sample. See the module documentation for the invariant.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    sorted: Vec<f64>,
}

impl Sample {
    /// Validates and sorts `values`. Errors name the first offending index in the caller's order.
    pub fn new(values: &[f64]) -> Result<Sample, SampleError> {
        if values.is_empty() {
            return Err(SampleError::Empty);
        }
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            return Err(SampleError::NonFinite { index });
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable_by(f64::total_cmp);
        Ok(Sample { sorted })
    }

    /// Like [`Sample::new`], and also rejects negative values (durations, sizes).
    /// `-0.0` is accepted.
    pub fn new_nonnegative(values: &[f64]) -> Result<Sample, SampleError> {
        let sample = Sample::new(values)?;
        if let Some(index) = values.iter().position(|v| *v < 0.0) {
            return Err(SampleError::Negative { index });
        }
        Ok(sample)
    }

    /// The values in ascending order (never empty, all finite).
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    /// Number of values (at least 1).
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Always `false`: a `Sample` holds at least one value. Present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The smallest value.
    pub fn min(&self) -> f64 {
        self.sorted[0]
    }

    /// The largest value.
    pub fn max(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_and_keeps_everything() {
        let s = Sample::new(&[3.0, 1.0, 2.0, 1.0]).unwrap();
        assert_eq!(s.sorted(), &[1.0, 1.0, 2.0, 3.0]);
        assert_eq!(s.len(), 4);
        assert!(!s.is_empty());
        assert_eq!((s.min(), s.max()), (1.0, 3.0));
    }

    #[test]
    fn rejects_bad_input_naming_the_index() {
        assert_eq!(Sample::new(&[]), Err(SampleError::Empty));
        assert_eq!(Sample::new(&[1.0, f64::NAN]), Err(SampleError::NonFinite { index: 1 }));
        assert_eq!(Sample::new(&[f64::INFINITY]), Err(SampleError::NonFinite { index: 0 }));
        assert_eq!(Sample::new_nonnegative(&[1.0, 2.0, -0.5]), Err(SampleError::Negative { index: 2 }));
        assert!(Sample::new_nonnegative(&[0.0, -0.0, 4.0]).is_ok());
        assert!(Sample::new(&[-1.0]).is_ok());
        assert!(SampleError::NonFinite { index: 3 }.to_string().contains("#3"));
    }
}
