//! Paired rounds, judged sequentially: base and head measured in one job, round after round,
//! and a look after every round whose interval holds over all the looks together.
//!
//! **Why rounds.** A run measured today and runs stored on other days differ by everything
//! that moved in between (clocks, a noisy neighbour, a slow episode), and one current run
//! cannot tell that from the change. Measuring both arms in the same job, in *rounds* (each
//! round runs base and head once, in random order), lets the machine's state of the moment
//! cancel in the round's ratio (A. Abedi & T. Brecht, "Conducting repeatable experiments in
//! highly variable cloud computing environments", ICPE 2017: randomized multiple interleaved
//! trials; C. Laaber, J. Scheuner & P. Leitner, "Software microbenchmarking in the cloud. How bad
//! is it really?", Empirical Software Engineering 24, 2019; tango-bench's paired benchmarking).
//! The unit of evidence is the round: the input here is one metric's per-round log ratio
//! `ln(head / base)` (of each arm's median), finite values that the caller has validated.
//!
//! **Each look.** After `n ≥` [`MIN_ROUNDS`] rounds, the 20 % trimmed mean of the log ratios
//! `d̄_t` (the `g = ⌊0.2 n⌋` smallest and largest dropped, `h = n − 2g` kept) and its standard
//! error `s_w · √n / h` (`s_w` the standard deviation of the winsorized ratios: each dropped one
//! replaced by the nearest kept one) give the interval `d̄_t ± t_{h−1, 1−α_k/2} · s_w · √n / h`,
//! reported as a ratio (`exp` of both ends), at the level `1 − α_k` that this look may spend: the
//! trimmed t of J. W. Tukey & D. H. McLaughlin ("Less vulnerable confidence and significance
//! procedures for location based on a single sample: trimming/winsorization 1", Sankhyā A 25(3),
//! 1963), as R. R. Wilcox computes it (*Introduction to Robust Estimation and Hypothesis
//! Testing*, 4th ed., Academic Press 2017, §4.4.3, with `1 − 2γ` taken as `h / n`). Why trimmed:
//! a round whose two arms straddle a change of the machine's state (a slow episode that starts
//! between them, a run that lands in a slow mode for its whole length) is off by 20–90 % while
//! the others agree within 1 %, and one such round in ten moves a plain mean and inflates its
//! standard deviation enough to keep every interval wider than ±δ. Under four rounds nothing is
//! trimmed (the plain Student-t interval); from five on, one round at each end, from ten two.
//! Under normal ratios the trimmed mean's efficiency is about 94 % of the mean's.
//!
//! **Optional stopping.** Looking after every round and stopping at the first answer would make
//! a fixed-level interval miss far more often than its level says (Armitage, McPherson & Rowe,
//! JRSS A 132(2), 1969). So the family's α is spent over the planned looks by the Pocock-type
//! alpha-spending function of K. K. G. Lan & D. L. DeMets ("Discrete sequential boundaries for
//! clinical trials", Biometrika 70(3), 659–663, 1983), `α(t) = α · ln(1 + (e − 1)·t)`, with the
//! information fraction `t = n / max_rounds`: the first look spends `α(MIN_ROUNDS / max_rounds)`,
//! look `n` after it `α(n / N) − α((n − 1) / N)`, and the looks' levels sum to `α` exactly. The
//! looks' intervals are combined by the union bound (Bonferroni): `P(any look's interval misses)
//! ≤ Σ α_k = α`, so the interval of whichever look the sequence stops at covers with probability
//! at least `1 − α`, however the stopping rule uses the data.
//!
//! **Why this method, and what it costs.** The union bound holds for *any* dependence between
//! the looks, so it needs no model of how successive looks' t statistics correlate — the
//! classical group-sequential boundaries need that model (known variance, or the
//! multivariate-t's), and with 3 to 30 rounds and an unknown variance their normal
//! approximations are not to be trusted. Each look's interval is exact under normal per-round
//! log ratios, at any `n ≥ 2`, with the variance estimated. The price is conservatism: the looks
//! are strongly positively correlated (they share rounds), so the true miss rate is well below
//! `α` and the intervals are wider than an exact boundary's (C. Jennison & B. W. Turnbull,
//! *Group Sequential Methods with Applications to Clinical Trials*, Chapman & Hall 2000, §2.1
//! and ch. 7). Pocock-type spending (rather than O'Brien–Fleming-type, which spends almost
//! nothing early) spends nearly evenly, so a large change can stop the sequence at the first
//! looks. Confidence sequences that are valid at every `n` (S. R. Howard, A. Ramdas,
//! J. McAuliffe & J. Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence sequences",
//! Ann. Statist. 49(2), 2021) were considered: their sub-Gaussian or bounded forms need a known
//! scale, and the unknown-variance forms are wider than this at 3 to 30 rounds.
//!
//! **What a look gives** ([`look`]): the ratio's interval at `1 − α_k`, the one-sided p-values for
//! "head slower" and "head faster" (the four-state rule reads them at `α_k / 2`, the interval's
//! one-sided level: see [`Look::one_sided_alpha`]), the MDE (the interval's half-width as a
//! relative change) and, through [`further_rounds`], a *projection* of how many more rounds would
//! let the interval clear both edges of `±δ`, assuming the mean and spread stay as they are.
//! The state itself comes from the gate's four-state rule; [`next`] says whether to stop.
//!
//! Conventions as in the crate: looks are after every round from [`MIN_ROUNDS`] to
//! `max_rounds` (a caller that skips looks loses the α they would have spent, which stays
//! valid); `None` where no look exists.

use super::interval::{mean_sd, t_quantile, t_sf};

/// The first round after which the sequence looks (a spread needs two rounds; three keep the
/// first look's t quantile, with 2 degrees of freedom, finite and usable).
pub const MIN_ROUNDS: usize = 3;

/// Rounds the projection of [`further_rounds`] searches up to; beyond it the answer is `None`.
pub const PROJECTION_CAP: usize = 10_000;

/// The sequential plan: the most rounds the job may run and the family's two-sided α over all
/// its looks. Invariants (checked by [`Plan::new`]): `max_rounds ≥ MIN_ROUNDS`, `0 < alpha < 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    max_rounds: usize,
    alpha: f64,
}

impl Plan {
    /// `None` for `max_rounds < MIN_ROUNDS` or `alpha` outside `(0, 1)`.
    pub fn new(max_rounds: usize, alpha: f64) -> Option<Plan> {
        (max_rounds >= MIN_ROUNDS && alpha > 0.0 && alpha < 1.0).then_some(Plan { max_rounds, alpha })
    }

    pub fn max_rounds(self) -> usize {
        self.max_rounds
    }

    pub fn alpha(self) -> f64 {
        self.alpha
    }

    /// The planned number of looks, `K = max_rounds − MIN_ROUNDS + 1`.
    pub fn looks(self) -> usize {
        self.max_rounds - MIN_ROUNDS + 1
    }

    /// The Pocock-type spending function, `α(t) = α · ln(1 + (e − 1)·t)`, at `t = rounds /
    /// max_rounds` clamped to `[0, 1]`: the α spent by the looks up to `rounds`.
    pub fn cumulative(self, rounds: usize) -> f64 {
        let t = (rounds as f64 / self.max_rounds as f64).clamp(0.0, 1.0);
        self.alpha * (1.0 + (std::f64::consts::E - 1.0) * t).ln()
    }

    /// `α_k`, the two-sided level the look after `rounds` rounds spends; `None` before
    /// [`MIN_ROUNDS`] or after `max_rounds`. The first look spends all of `α(MIN_ROUNDS / N)`.
    pub fn spent(self, rounds: usize) -> Option<f64> {
        if !(MIN_ROUNDS..=self.max_rounds).contains(&rounds) {
            return None;
        }
        let before = if rounds == MIN_ROUNDS { 0.0 } else { self.cumulative(rounds - 1) };
        Some(self.cumulative(rounds) - before)
    }
}

/// One look at the rounds so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Look {
    /// Rounds judged, `n`.
    pub rounds: usize,
    /// The look's index, 1-based (`rounds − MIN_ROUNDS + 1`).
    pub index: usize,
    /// The 20 % trimmed mean of the per-round log ratios, `d̄_t`.
    pub mean_log: f64,
    /// The standard deviation (n − 1) of the winsorized per-round log ratios, `s_w`.
    pub sd_log: f64,
    /// The rounds the trimmed mean keeps, `h = n − 2⌊0.2 n⌋`.
    pub kept: usize,
    /// The point estimate of the ratio head / base, `exp(d̄)`.
    pub ratio: f64,
    /// The ratio's interval at level `1 − spent`: `exp(d̄_t ∓ t · s_w · √n / h)`.
    pub ci: [f64; 2],
    /// `α_k`, the two-sided level spent by this look.
    pub spent: f64,
    /// `t_{h−1, 1 − α_k/2}`.
    pub t: f64,
    /// One-sided p-value for "head slower" (`H₀: ratio ≤ 1`), `P(T_{h−1} > d̄_t / se)`.
    pub p_slower: f64,
    /// One-sided p-value for "head faster" (`H₀: ratio ≥ 1`), `P(T_{h−1} < d̄_t / se)`.
    pub p_faster: f64,
    /// The minimum detectable effect at this look: the interval's half-width as a relative
    /// change, `exp(t · s_w · √n / h) − 1`.
    pub mde: f64,
}

impl Look {
    /// The level the four-state rule reads the p-values at: `α_k / 2`, the one-sided level of
    /// the two-sided interval (an interval wholly above 1 + δ implies `p_slower ≤ α_k / 2`).
    pub fn one_sided_alpha(&self) -> f64 {
        self.spent / 2.0
    }

    /// The interval's half-width on the log scale, `t · s_w · √n / h`.
    pub fn half_width_log(&self) -> f64 {
        self.t * self.sd_log * scale(self.rounds)
    }
}

/// The look after `log_ratios.len()` rounds under `plan`. `None` before [`MIN_ROUNDS`], after
/// `plan.max_rounds()`, or for a non-finite value. Identical rounds give a zero-width interval
/// and p-values of 0 or 1 (1 for both when every ratio is exactly 1).
pub fn look(log_ratios: &[f64], plan: Plan) -> Option<Look> {
    let n = log_ratios.len();
    let spent = plan.spent(n)?;
    if log_ratios.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let (mean_log, sd_log) = trimmed_mean_sd(log_ratios);
    let kept = kept(n);
    let df = (kept - 1) as f64;
    let t = t_quantile(df, 1.0 - spent / 2.0);
    if !t.is_finite() {
        return None;
    }
    let se = sd_log * scale(n);
    let half = t * se;
    let (p_slower, p_faster) = if se > 0.0 {
        let stat = mean_log / se;
        (t_sf(df, stat), t_sf(df, -stat))
    } else {
        (if mean_log > 0.0 { 0.0 } else { 1.0 }, if mean_log < 0.0 { 0.0 } else { 1.0 })
    };
    Some(Look {
        rounds: n,
        index: n - MIN_ROUNDS + 1,
        mean_log,
        sd_log,
        kept,
        ratio: mean_log.exp(),
        ci: [(mean_log - half).exp(), (mean_log + half).exp()],
        spent,
        t,
        p_slower,
        p_faster,
        mde: half.exp_m1(),
    })
}

/// The share of rounds trimmed from each end (Wilcox's default).
pub const TRIM: f64 = 0.2;

/// `g = ⌊TRIM · n⌋`, the rounds dropped at each end.
fn trimmed_each_end(n: usize) -> usize {
    (TRIM * n as f64).floor() as usize
}

/// `h = n − 2g`, the rounds the trimmed mean keeps (at least 1 for n ≥ 1).
fn kept(n: usize) -> usize {
    n - 2 * trimmed_each_end(n)
}

/// The standard error's factor on `s_w`: `√n / h`.
fn scale(n: usize) -> f64 {
    (n as f64).sqrt() / kept(n) as f64
}

/// The trimmed mean and the winsorized standard deviation (n − 1) of finite `values`.
fn trimmed_mean_sd(values: &[f64]) -> (f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let g = trimmed_each_end(n);
    let (mean, _) = mean_sd(&sorted[g..n - g]);
    let (low, high) = (sorted[g], sorted[n - g - 1]);
    for v in &mut sorted[..g] {
        *v = low;
    }
    for v in &mut sorted[n - g..] {
        *v = high;
    }
    let (_, sd) = mean_sd(&sorted);
    (mean, sd)
}

/// A **projection**, not a promise: how many rounds after `look` the interval would clear both
/// edges of `±δ` (contain neither `1 − δ` nor `1 + δ`, so the four-state rule reads it as
/// unchanged, regressed or improved), if the mean and the spread of the log ratios stayed as they
/// are now. Rounds within the plan spend the plan's `α_m`; rounds beyond `max_rounds` (a longer
/// job than planned) are projected at the last look's level. `Some(0)` when this look already
/// clears them; `None` when it would take more than [`PROJECTION_CAP`] rounds in all (the mean
/// sits on an edge) or `delta` is not in `(0, 1)`. The spread stays the winsorized one; each
/// projected round count trims as [`look`] would.
pub fn further_rounds(look: &Look, plan: Plan, delta: f64) -> Option<usize> {
    if !(delta > 0.0 && delta < 1.0) {
        return None;
    }
    let (up, down) = ((1.0 + delta).ln(), (1.0 - delta).ln());
    let clears = |half: f64| {
        let straddles = |edge: f64| (look.mean_log - half..=look.mean_log + half).contains(&edge);
        !straddles(up) && !straddles(down)
    };
    if clears(look.half_width_log()) {
        return Some(0);
    }
    let last = plan.spent(plan.max_rounds())?;
    let half_at = |m: usize| {
        let spent = plan.spent(m).unwrap_or(last);
        t_quantile((kept(m) - 1) as f64, 1.0 - spent / 2.0) * look.sd_log * scale(m)
    };
    // Trimming makes the half-width a sawtooth in the rounds (each round that trims one more at
    // each end loses two degrees of freedom), so the first rounds are searched one by one; beyond
    // them the teeth are too small to matter to a projection and the search bisects.
    const SCANNED: usize = 200;
    if let Some(m) = (look.rounds + 1..=SCANNED).find(|&m| clears(half_at(m))) {
        return Some(m - look.rounds);
    }
    let (mut lo, mut hi) = (SCANNED.max(look.rounds), PROJECTION_CAP);
    if !clears(half_at(hi)) {
        return None;
    }
    // Invariant: `lo` does not clear, `hi` does.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if clears(half_at(mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi - look.rounds)
}

/// What the sequence does after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The look settled the question: stop and report its state.
    Stop,
    /// Not settled and rounds are left: run another round.
    AnotherRound,
    /// Not settled and the plan's last round is done: report it undecided, with the MDE reached
    /// and the projection of [`further_rounds`].
    BudgetSpent,
}

/// The paired mode's stopping rule, for `decide` to call once it has the look's state from the
/// four-state rule (`commgate_gate::decide::metric_state::four_states` on [`Look::ci`],
/// [`Look::p_slower`], [`Look::p_faster`] at [`Look::one_sided_alpha`]). `settled` is that state
/// being anything but inconclusive: unchanged (accept), regressed (a confirmed regression) or
/// improved (also an answer; stopping then is as valid as at any look, since the coverage holds
/// over all looks). Stop when settled; else another round until `max_rounds`.
pub fn next(settled: bool, rounds: usize, plan: Plan) -> Next {
    if settled {
        Next::Stop
    } else if rounds < plan.max_rounds() {
        Next::AnotherRound
    } else {
        Next::BudgetSpent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use approx::assert_relative_eq;

    fn plan10() -> Plan {
        Plan::new(10, 0.05).unwrap()
    }

    // import numpy as np; from scipy import stats
    // a = 0.05; N = 10; f = lambda t: a * np.log(1 + (np.e - 1) * t)
    // spent = lambda n: f(n / N) if n == 3 else f(n / N) - f((n - 1) / N)
    // [repr(float(spent(n))) for n in range(3, 11)]; sum(...) -> 0.05
    #[test]
    fn spending_matches_numpy_and_sums_to_alpha() {
        let expected = [
            0.020786761092181433,
            0.005370097088397842,
            0.004848867167334601,
            0.004419927995201876,
            0.004060748835765821,
            0.0037555840792779446,
            0.003493096941898796,
            0.003264916799941689,
        ];
        let plan = plan10();
        assert_eq!(plan.looks(), 8);
        for (n, e) in (3..=10).zip(expected) {
            assert_relative_eq!(plan.spent(n).unwrap(), e, max_relative = 1e-12);
        }
        let total: f64 = (MIN_ROUNDS..=10).filter_map(|n| plan.spent(n)).sum();
        assert_relative_eq!(total, 0.05, max_relative = 1e-12);
        assert_eq!(plan.spent(2), None);
        assert_eq!(plan.spent(11), None);
        for max in [3, 5, 10, 30] {
            let p = Plan::new(max, 0.01).unwrap();
            let total: f64 = (MIN_ROUNDS..=max).filter_map(|n| p.spent(n)).sum();
            assert_relative_eq!(total, 0.01, max_relative = 1e-12);
        }
        assert_eq!(Plan::new(2, 0.05), None);
        assert_eq!(Plan::new(10, 0.0), None);
        assert_eq!(Plan::new(10, 1.0), None);
    }

    // x = np.sort(np.array(X)); n = len(x); g = int(0.2 * n); h = n - 2 * g; ak = spent(n)
    // m = x[g:n - g].mean()  (== scipy.stats.trim_mean(x, 0.2)); w = x.copy(); w[:g] = x[g]
    // w[n - g:] = x[n - g - 1]; se = w.std(ddof=1) * np.sqrt(n) / h; t = stats.t.ppf(1 - ak / 2, h - 1)
    // lo, hi = np.exp(m - t * se), np.exp(m + t * se); ps = stats.t.sf(m / se, h - 1)
    // pf = stats.t.cdf(m / se, h - 1); mde = np.expm1(t * se)   (scipy 1.17)
    // X = [0.012, -0.004, 0.021, 0.008, 0.015]  (look 3 of 8, one round trimmed at each end)
    //   -> t 14.308562225456411, lo 0.9745915310967778, hi 1.05029404892966,
    //      ps 0.0233571281350121, pf 0.9766428718649879, mde 0.03811181954133044
    // X = [0.06, 0.11, 0.09]  (the first look, nothing trimmed: the plain t)
    //   -> t 6.827356305399619, lo 0.9875456843711573, hi 1.2042607027324246,
    //      ps 0.013487227432672165, pf 0.9865127725673278, mde 0.10428623743595725
    // X = [0.01, -0.02, 0.005, 0.0, -0.01, 0.015, -0.005, 0.02, -0.015, 0.01]  (the last look, two)
    //   -> t 5.272548427936876, lo 0.9767434908083881, hi 1.0272286475505217,
    //      ps 0.3707436874293248, pf 0.6292563125706752, mde 0.02551802571877444
    #[test]
    fn looks_match_scipy() {
        let cases: [(&[f64], [f64; 6]); 3] = [
            (
                &[0.012, -0.004, 0.021, 0.008, 0.015],
                [
                    14.308562225456411,
                    0.9745915310967778,
                    1.05029404892966,
                    0.0233571281350121,
                    0.9766428718649879,
                    0.03811181954133044,
                ],
            ),
            (
                &[0.06, 0.11, 0.09],
                [
                    6.827356305399619,
                    0.9875456843711573,
                    1.2042607027324246,
                    0.013487227432672165,
                    0.9865127725673278,
                    0.10428623743595725,
                ],
            ),
            (
                &[0.01, -0.02, 0.005, 0.0, -0.01, 0.015, -0.005, 0.02, -0.015, 0.01],
                [
                    5.272548427936876,
                    0.9767434908083881,
                    1.0272286475505217,
                    0.3707436874293248,
                    0.6292563125706752,
                    0.02551802571877444,
                ],
            ),
        ];
        for (x, [t, lo, hi, ps, pf, mde]) in cases {
            let l = look(x, plan10()).unwrap();
            assert_eq!(l.rounds, x.len());
            assert_eq!(l.index, x.len() - 2);
            assert_relative_eq!(l.t, t, max_relative = 1e-9);
            assert_relative_eq!(l.ci[0], lo, max_relative = 1e-9);
            assert_relative_eq!(l.ci[1], hi, max_relative = 1e-9);
            assert_relative_eq!(l.p_slower, ps, max_relative = 1e-9);
            assert_relative_eq!(l.p_faster, pf, max_relative = 1e-9);
            assert_relative_eq!(l.mde, mde, max_relative = 1e-9);
            assert_relative_eq!(l.one_sided_alpha(), l.spent / 2.0);
        }
    }

    #[test]
    fn no_look_outside_the_plan_or_on_bad_input() {
        assert_eq!(look(&[0.01, 0.02], plan10()), None);
        assert_eq!(look(&[0.01; 11], plan10()), None);
        assert_eq!(look(&[0.01, f64::NAN, 0.0], plan10()), None);
        let same = look(&[0.02; 4], plan10()).unwrap();
        assert_eq!((same.ci, same.p_slower, same.p_faster), ([0.02f64.exp(); 2], 0.0, 1.0));
        let zero = look(&[0.0; 3], plan10()).unwrap();
        assert_eq!((zero.p_slower, zero.p_faster, zero.mde), (1.0, 1.0, 0.0));
    }

    #[test]
    fn interval_contains_the_mean_and_narrows_with_rounds() {
        let mut rng = Rng::new(7);
        let d: Vec<f64> = (0..30).map(|_| 0.01 + 0.02 * rng.normal()).collect();
        let plan = Plan::new(30, 0.05).unwrap();
        let mut widths = Vec::new();
        for n in MIN_ROUNDS..=30 {
            let l = look(&d[..n], plan).unwrap();
            assert!(l.ci[0] <= l.ratio && l.ratio <= l.ci[1]);
            assert!(l.p_slower + l.p_faster > 0.999_999 && l.p_slower + l.p_faster < 1.000_001);
            assert_eq!(l.kept, kept(n));
            widths.push((n, l.half_width_log() / l.sd_log));
        }
        // With the spread held fixed (divided out), each look's interval is narrower than the
        // last one that trimmed as many rounds; a round that trims one more at each end costs two
        // degrees of freedom and widens it (a sawtooth), and the teeth shrink.
        for w in widths.windows(2) {
            let ((a, wa), (b, wb)) = (w[0], w[1]);
            if trimmed_each_end(a) == trimmed_each_end(b) {
                assert!(wb < wa, "{widths:?}");
            }
        }
        assert!(widths[widths.len() - 1].1 < widths[0].1 / 3.0, "{widths:?}");
        assert_eq!((kept(3), kept(4), kept(5), kept(9), kept(10), kept(30)), (3, 4, 3, 7, 6, 18));
    }

    #[test]
    fn one_round_that_straddles_a_change_of_the_machine_does_not_swamp_the_rest() {
        // Nine rounds within ±0.3 % and one whose head ran in a slow mode (+85 %).
        let mut d = vec![0.002, -0.001, 0.003, 0.0, -0.002, 0.001, -0.003, 0.002, -0.001];
        d.insert(3, 0.85f64.ln_1p());
        let l = look(&d, plan10()).unwrap();
        assert!(l.ci[0] > 0.99 && l.ci[1] < 1.01, "{l:?}");
        // The plain mean would sit at +6 % with an interval of about ±20 %.
        let (m, s) = mean_sd(&d);
        assert!(m > 0.06 && s > 0.19, "{m} {s}");
    }

    /// Rounds that are normal but for one in ten that is off by ±50 % (a slow episode or mode
    /// that only one arm saw), under H₀: looking after every round from 3 to 10 still misses at
    /// most α of the time.
    #[test]
    fn contaminated_rounds_keep_the_miss_rate_below_alpha() {
        let plan = plan10();
        let mut rng = Rng::new(0x5EC0_0003);
        let mut missed = 0;
        for _ in 0..600 {
            let d: Vec<f64> = (0..10)
                .map(|_| {
                    let jump = if rng.next_f64() < 0.1 {
                        if rng.next_f64() < 0.5 {
                            0.5
                        } else {
                            -0.5
                        }
                    } else {
                        0.0
                    };
                    0.01 * rng.normal() + jump
                })
                .collect();
            let miss = (MIN_ROUNDS..=10).any(|n| {
                let l = look(&d[..n], plan).unwrap();
                l.ci[0] > 1.0 || l.ci[1] < 1.0
            });
            missed += usize::from(miss);
        }
        assert!(missed <= 30, "{missed} of 600");
    }

    #[test]
    fn projection_and_stopping() {
        let plan = plan10();
        // Settled already.
        let tight = look(&[0.001, -0.001, 0.0, 0.002, -0.002], plan).unwrap();
        assert_eq!(further_rounds(&tight, plan, 0.03), Some(0));
        // Centred but wide: more rounds would fit it within ±3 %; re-looking there agrees.
        let wide = look(&[0.02, -0.02, 0.01, -0.01], plan).unwrap();
        let more = further_rounds(&wide, plan, 0.03).unwrap();
        assert!(more > 0);
        let half_at = |m: usize| {
            let spent = plan.spent(m).unwrap_or(plan.spent(10).unwrap());
            t_quantile((kept(m) - 1) as f64, 1.0 - spent / 2.0) * wide.sd_log * (m as f64).sqrt() / kept(m) as f64
        };
        let m = wide.rounds + more;
        assert!(wide.mean_log.abs() + half_at(m) < 0.03f64.ln_1p());
        // The first such round: none between this look and it would.
        assert!((wide.rounds + 1..m).all(|k| wide.mean_log.abs() + half_at(k) >= 0.03f64.ln_1p()));
        // A mean exactly on the edge never clears it.
        let edge = 0.03f64.ln_1p();
        let on_edge = look(&[edge - 0.01, edge + 0.01, edge], plan).unwrap();
        assert_eq!(further_rounds(&on_edge, plan, 0.03), None);
        assert_eq!(further_rounds(&wide, plan, 0.0), None);
        assert_eq!(next(true, 3, plan), Next::Stop);
        assert_eq!(next(false, 9, plan), Next::AnotherRound);
        assert_eq!(next(false, 10, plan), Next::BudgetSpent);
    }

    /// Under H₀ (ratio 1), looking after every round from 3 to 10 and stopping at the first
    /// interval that excludes 1 must miss at most α of the time. Normal log ratios, 4,000 seeded
    /// sequences. The union bound makes the true rate lower than α: numpy puts it at 3.2 % for
    /// α = 5 % (200,000 sequences of N(0, 1): `miss |= |m| > t_crit(n) · s / √n` for n = 3…10).
    #[test]
    fn optional_stopping_keeps_the_miss_rate_below_alpha() {
        let plan = plan10();
        let crit: Vec<f64> =
            (MIN_ROUNDS..=10).map(|n| t_quantile((n - 1) as f64, 1.0 - plan.spent(n).unwrap() / 2.0)).collect();
        let mut rng = Rng::new(0x5EC0_0001);
        let trials = 4000;
        let mut missed = 0;
        for _ in 0..trials {
            let d: Vec<f64> = (0..10).map(|_| 0.03 * rng.normal()).collect();
            let miss = (MIN_ROUNDS..=10).any(|n| {
                let (m, s) = mean_sd(&d[..n]);
                m.abs() > crit[n - MIN_ROUNDS] * s / (n as f64).sqrt()
            });
            missed += usize::from(miss);
        }
        let rate = missed as f64 / trials as f64;
        assert!(rate <= 0.05, "miss rate {rate}");
        // The same through `look`, on a few hundred sequences.
        let mut rng = Rng::new(0x5EC0_0002);
        let mut missed = 0;
        for _ in 0..300 {
            let d: Vec<f64> = (0..10).map(|_| 0.03 * rng.normal()).collect();
            let miss = (MIN_ROUNDS..=10).any(|n| {
                let l = look(&d[..n], plan).unwrap();
                l.ci[0] > 1.0 || l.ci[1] < 1.0
            });
            missed += usize::from(miss);
        }
        assert!(missed <= 15, "{missed} of 300");
    }
}
