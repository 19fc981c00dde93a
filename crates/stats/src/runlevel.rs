//! The run-level contrast: how far the current runs' value lies from the baseline runs', and
//! how sure that is, with runs grouped by the runner that measured them.
//!
//! Steps of one run share its clocks, NCCL's algorithm choice and its placement, so the unit of
//! evidence is the run. Runs of one runner also share that machine: a baseline recorded on one
//! runner only sees that runner's spread, and a current run on another runner differs by the
//! runner as well as by the change. The model is the one-way random-effects model of a run's
//! value, `x = μ + b_runner + e_run` (Searle, Casella & McCulloch, *Variance Components*, Wiley
//! 1992, ch. 3), and the contrast is estimated one of two ways:
//!
//! - **Same runner** (the current runs come from a runner that also measured baseline runs):
//!   like with like, `d = x̄_current − x̄_that runner`, with the within-runner variance `σ_w²`
//!   pooled over every runner's runs (and the current runs'): `se² = σ_w² (1/m + 1/K)`,
//!   `df = Σ (m_g − 1) + (K − 1)`. When every run comes from one machine (a local baseline) this is
//!   the plain two-sample contrast of all runs.
//! - **Another or an unknown runner**: `d = x̄_current − μ̂`, `μ̂` the mean of the runner means. A
//!   new runner's value varies by `σ_b² + σ_w²/K`, and the runner means' sample variance `s_m²`
//!   estimates `σ_b² + σ_w²·mean(1/m_g)`, so `se² = s_m²/r + max(s_m² − σ_w²·mean(1/m_g) + σ_w²/K,
//!   σ_w²/K)`, `df = r − 1` (the runner means are the units). With every baseline run on a runner
//!   of its own and one current run this is exactly the Student-t prediction interval for one new
//!   run (Hahn & Meeker, *Statistical Intervals*, §4): `se² = s² (1 + 1/k)`, `df = k − 1`. With
//!   fewer than two runners there is no runner-to-runner spread to judge against: no contrast.
//!
//! Runs without a recorded runner count as one runner (nothing says they differ); the K current
//! runs, measured by one job, share one runner.

use super::interval::mean_sd;

/// The contrast of the current runs with the baseline runs, on the values' own scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contrast {
    /// The baseline centre the current value is compared with.
    pub center: f64,
    /// `x̄_current − center`.
    pub d: f64,
    /// Standard error of `d`.
    pub se: f64,
    /// Degrees of freedom of `se`.
    pub df: f64,
    /// Whether the current runs were judged against their own runner's baseline runs.
    pub same_runner: bool,
}

/// Why no contrast exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoContrast {
    /// Every baseline run comes from one runner and the current runs from another.
    OneRunner,
    /// Too few runs for a spread: one baseline run and one current run.
    TooFewRuns,
    /// A value is not finite.
    NotFinite,
}

/// Baseline run values, each with its runner's group id, and the current runs' values with
/// their runner's group id when that runner also measured baseline runs.
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    pub baseline: &'a [f64],
    pub groups: &'a [usize],
    pub current: &'a [f64],
    pub current_group: Option<usize>,
}

/// The contrast of `runs` (see the module documentation).
pub fn contrast(runs: Runs<'_>) -> Result<Contrast, NoContrast> {
    let Runs { baseline, groups, current, current_group } = runs;
    if baseline.iter().chain(current).any(|v| !v.is_finite()) || baseline.is_empty() || current.is_empty() {
        return Err(NoContrast::NotFinite);
    }
    let k = current.len() as f64;
    let (cur_mean, _) = mean_sd(current);
    let by_group = group(baseline, groups);
    let mut ss_within: f64 = current.iter().map(|y| (y - cur_mean).powi(2)).sum();
    let mut df_within = current.len() - 1;
    for g in &by_group {
        let (m, _) = mean_sd(g);
        ss_within += g.iter().map(|x| (x - m).powi(2)).sum::<f64>();
        df_within += g.len() - 1;
    }
    let var_within = (df_within > 0).then(|| ss_within / df_within as f64);
    if let (Some(g), Some(var_w)) = (current_group.and_then(|g| by_group.get(g)), var_within) {
        let (center, _) = mean_sd(g);
        let se = (var_w * (1.0 / g.len() as f64 + 1.0 / k)).sqrt();
        return Ok(Contrast { center, d: cur_mean - center, se, df: df_within as f64, same_runner: true });
    }
    let r = by_group.len();
    if r < 2 {
        let one_runner = current_group.is_none() && baseline.len() > 1 && groups.iter().all(|g| *g == groups[0]);
        return Err(if one_runner { NoContrast::OneRunner } else { NoContrast::TooFewRuns });
    }
    let means: Vec<f64> = by_group.iter().map(|g| mean_sd(g).0).collect();
    let (center, s_m) = mean_sd(&means);
    let var_m = s_m * s_m;
    let var_w = var_within.unwrap_or(0.0);
    let harmonic = by_group.iter().map(|g| 1.0 / g.len() as f64).sum::<f64>() / r as f64;
    let new_runner = (var_m - var_w * harmonic + var_w / k).max(var_w / k);
    let se = (var_m / r as f64 + new_runner).sqrt();
    Ok(Contrast { center, d: cur_mean - center, se, df: (r - 1) as f64, same_runner: false })
}

/// The baseline values by group, in the order of the groups' first appearance (ids are dense
/// from 0 in that order: [`group_ids`]).
fn group(values: &[f64], groups: &[usize]) -> Vec<Vec<f64>> {
    let mut out: Vec<Vec<f64>> = Vec::new();
    for (&v, &g) in values.iter().zip(groups) {
        if out.len() <= g {
            out.resize_with(g + 1, Vec::new);
        }
        out[g].push(v);
    }
    out.retain(|g| !g.is_empty());
    out
}

/// Dense group ids, from 0 in order of first appearance, for runs labelled by `names`, and the
/// id of `current` when a baseline run shares it. Runs without a recorded runner form one group,
/// the current runs' too when theirs is unrecorded: with nothing recorded, runs are taken as
/// exchangeable, as they always were.
pub fn group_ids(names: &[Option<&str>], current: Option<&str>) -> (Vec<usize>, Option<usize>) {
    let mut groups: Vec<Option<&str>> = Vec::new();
    let ids = names
        .iter()
        .map(|n| match groups.iter().position(|g| g == n) {
            Some(id) => id,
            None => {
                groups.push(*n);
                groups.len() - 1
            }
        })
        .collect();
    let current = groups.iter().position(|g| *g == current);
    (ids, current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interval::prediction_interval;
    use approx::assert_relative_eq;

    #[test]
    fn distinct_runners_and_one_current_run_is_the_prediction_interval() {
        let h = [10.2, 9.8, 10.5, 10.1, 9.9, 10.4];
        let groups: Vec<usize> = (0..6).collect();
        let c = contrast(Runs { baseline: &h, groups: &groups, current: &[11.0], current_group: None }).unwrap();
        let pi = prediction_interval(&h, 0.95).unwrap();
        assert_relative_eq!(c.center, pi.center, max_relative = 1e-14);
        assert_relative_eq!(c.se, pi.se, max_relative = 1e-12);
        assert_eq!(c.df, pi.df);
        assert_relative_eq!(c.d, 11.0 - 10.15, max_relative = 1e-12);
        assert!(!c.same_runner);
    }

    #[test]
    fn one_machine_is_the_two_sample_contrast() {
        // numpy: x = [1.0, 1.2, 0.9, 1.1]; y = [1.5, 1.3]
        // sp2 = (sum((x - x.mean())**2) + sum((y - y.mean())**2)) / (4 + 2 - 2) = 0.0175
        // se = sqrt(sp2 * (1/4 + 1/2)) = 0.11456439237389601
        let x = [1.0, 1.2, 0.9, 1.1];
        let c = contrast(Runs { baseline: &x, groups: &[0; 4], current: &[1.5, 1.3], current_group: Some(0) }).unwrap();
        assert_relative_eq!(c.se, 0.11456439237389601, max_relative = 1e-12);
        assert_eq!(c.df, 4.0);
        assert_relative_eq!(c.d, 1.4 - 1.05, max_relative = 1e-12);
        assert!(c.same_runner);
    }

    #[test]
    fn another_runner_is_judged_by_the_runner_to_runner_spread() {
        // Three runners, tight within, far apart between: a new runner's run must be judged by
        // the spread of the runner means, not by the tight within-runner spread.
        let x = [1.00, 1.01, 1.10, 1.11, 0.95, 0.96];
        let groups = [0, 0, 1, 1, 2, 2];
        let c = contrast(Runs { baseline: &x, groups: &groups, current: &[1.12], current_group: None }).unwrap();
        assert_eq!(c.df, 2.0);
        assert!(c.se > 0.06, "{c:?}");
        let same = contrast(Runs { baseline: &x, groups: &groups, current: &[1.12], current_group: Some(1) }).unwrap();
        assert!(same.se < 0.01 && same.same_runner, "{same:?}");
        // One runner only, the current run elsewhere: nothing to judge by.
        assert_eq!(
            contrast(Runs { baseline: &x[..2], groups: &[0, 0], current: &[1.3], current_group: None }),
            Err(NoContrast::OneRunner)
        );
        assert_eq!(
            contrast(Runs { baseline: &[1.0], groups: &[0], current: &[1.3], current_group: None }),
            Err(NoContrast::TooFewRuns)
        );
    }

    #[test]
    fn group_ids_are_dense_and_unrecorded_runs_are_one_runner() {
        let (ids, cur) = group_ids(&[Some("a"), None, Some("b"), Some("a"), None], Some("b"));
        assert_eq!(ids, vec![0, 1, 2, 0, 1]);
        assert_eq!(cur, Some(2));
        assert_eq!(group_ids(&[Some("a")], Some("z")).1, None);
        assert_eq!(group_ids(&[None, None], None), (vec![0, 0], Some(0)));
    }
}
