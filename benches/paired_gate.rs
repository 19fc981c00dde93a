//! Paired rounds, measured (`harness = false`): base and head in one job, judged sequentially
//! with `commgate_stats::paired`, side by side with today's stored-baseline comparison, on a
//! simulated shared machine whose state moves in wall time and is shared by runs close in time.
//!
//! The rule measured is the production one, `commgate_gate::decide::paired::standing` at the
//! family α `decide::paired::ALPHA` with its split over the seven metrics; every metric of a
//! simulated round moves by the same ratio (the machine scales every step of a run alike).
//!
//! `cargo bench --bench paired_gate`. It prints, it does not assert: PASS/FAIL compares the point
//! estimate with the target, and the Wilson 95 % interval says how sure that is at this many
//! trials. The measured figures and what they mean: `docs/performance.md`, "Paired rounds
//! (base and head in one job)".
//!
//! **The machine.** Time is wall time in seconds. A step takes `10 ms · machine(t) · exp(N(0,
//! 2 %))` (the quiet step noise), where `machine(t)` is the product of the family's components,
//! each a function of time drawn once per machine (one machine per job, so both arms of every
//! round share it):
//! - `level_shifts`: a level `U(−5 %, +5 %)` that is redrawn at the events of a Poisson process
//!   with a mean gap of 3 minutes (a clock state, a neighbour's steady load, thermal state);
//! - `slow_episodes`: episodes arriving with a mean gap of 3 minutes, each lasting `U(10, 60)` s
//!   at `× U(1.2, 1.5)` (a checkpoint of another job, a throttled link): ≈ 19 % of the time;
//! - `drift`: `exp(U(±3 %) + slope · t)`, slope `U(±1 %)` per minute;
//! - `nccl_modes`: each arm's process picks its mode when it starts, the slow one (+8 %) with
//!   probability 0.3: the mode persists for the whole run and is not shared by the next run (it is
//!   drawn per process, as NCCL's algorithm choice is, and not recorded here);
//! - `second_tenant`: a neighbour that comes and goes (present for `Exp(60 s)`, away for
//!   `Exp(120 s)`), and while present each step is × `1 + 0.1 · (U^(−1/2) − 1)` (a Pareto of shape 2:
//!   median +4 %, mean +10 %, heavy-tailed);
//! - `shared_machine`: all five at once; `quiet`: none (the step noise alone), for reference.
//!
//! **A run** (one arm once) starts its process (`U(4, 8)` s of launch and warm-up, not measured)
//! and then measures 200 steps (≈ 2 s); its metric is the median step time. **A round** runs both
//! arms one after the other in random order (≈ 15–25 s). The effect multiplies every step of the
//! head arm: 0 %, +5 %, +10 %.
//!
//! **Paired mode.** After every round from `MIN_ROUNDS` (3) on, the per-round log ratios
//! `ln(head median / base median)` go to `paired::look` under a `Plan` of at most 10 rounds (and
//! of 5 rounds in the +10 % budget cell), family α = 0.05 (each look's interval at its spent
//! level; the intervals hold over all looks together at 95 %). The state is the gate's own
//! four-state rule (`decide::metric_state::four_states`) on the look's interval and one-sided
//! p-values at `α_k / 2`, against δ = 3 %; `paired::next` stops on any state but inconclusive.
//! "Blocked" is regressed; "accept" is unchanged (or improved: the merge goes through);
//! "undecided" is still inconclusive when the budget is spent, with the MDE reached and
//! `paired::further_rounds`' projection.
//!
//! **Stored-baseline mode**, under the same noise: the head run judged against 5 stored runs,
//! each recorded on a machine of its own (hours apart: independent machine states), the head run
//! on yet another. It stands in for the production `compare`'s run-level contrast with one
//! current run and a baseline of runs from other times, as simply as possible: the Student-t
//! prediction interval (`interval::prediction_interval`, level 0.95) of the log of the head's
//! median against the stored runs' log medians, the one-sided p-values against ratio 1 at
//! α = 0.01 (the production defaults), and the same four-state rule and δ. It does not record
//! NCCL's mode (production can compare like with like where the mode is recorded).
//!
//! Every trial's machines and noise come from seeds fixed by the family and the trial number, and
//! the same in every effect's cell (so the 0 %, +5 % and +10 % cells of a family see the same
//! machines). Environment: `COMMGATE_PAIRED_TRIALS` (trials per cell, default 1000),
//! `COMMGATE_PAIRED_THREADS` (default 2), `COMMGATE_PAIRED_ONLY` (comma-separated family names:
//! only those run; seeds do not depend on it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a benchmark stops by panicking")]

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use commgate_gate::compare::paired::{PairedMetric, Round};
use commgate_gate::compare::State;
use commgate_gate::decide::metric_state::four_states;
use commgate_gate::decide::paired::{standing, Budget, Plans};
use commgate_stats::interval::{prediction_interval, t_sf};
use commgate_stats::paired::{further_rounds, Next};
use commgate_stats::quantile::median;
use commgate_stats::rng::Rng;

#[path = "support/targets.rs"]
mod targets;
use targets::{env_number, print_grid, print_table, rate, run_trials, Line, Target};

/// δ, the production default `min_effect`.
const DELTA: f64 = 0.03;
/// The paired mode's family α over all metrics and looks (the production constant).
const PAIRED_ALPHA: f64 = commgate_gate::decide::paired::ALPHA;
/// Steps measured per run, and a step's nominal time.
const STEPS: usize = 200;
const STEP_MS: f64 = 10.0;
const STEP_SIGMA: f64 = 0.02;
/// Stored runs in the stored-baseline mode, and its level and α (the production defaults).
const STORED_RUNS: usize = 5;
const STORED_LEVEL: f64 = 0.95;
const STORED_ALPHA: f64 = 0.01;
/// How far the machine's events are drawn (s): well past the longest job (10 rounds ≈ 250 s,
/// started up to 300 s into the timeline).
const HORIZON_S: f64 = 1500.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Quiet,
    LevelShifts,
    SlowEpisodes,
    Drift,
    NcclModes,
    SecondTenant,
    SharedMachine,
}

impl Family {
    const ALL: [Family; 7] = [
        Family::Quiet,
        Family::LevelShifts,
        Family::SlowEpisodes,
        Family::Drift,
        Family::NcclModes,
        Family::SecondTenant,
        Family::SharedMachine,
    ];

    fn name(self) -> &'static str {
        match self {
            Family::Quiet => "quiet",
            Family::LevelShifts => "level_shifts",
            Family::SlowEpisodes => "slow_episodes",
            Family::Drift => "drift",
            Family::NcclModes => "nccl_modes",
            Family::SecondTenant => "second_tenant",
            Family::SharedMachine => "shared_machine",
        }
    }

    fn has(self, component: Family) -> bool {
        self == component || (self == Family::SharedMachine && component != Family::Quiet)
    }
}

/// Exponential waiting time with the given mean.
fn exp_time(rng: &mut Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.next_f64()).ln()
}

fn uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.next_f64()
}

/// One machine's state over time (see the module documentation).
#[derive(Debug, Clone)]
struct Machine {
    family: Family,
    /// `(from, log level)`, in time order, the first from −∞.
    shifts: Vec<(f64, f64)>,
    /// `(start, end, factor)`.
    episodes: Vec<(f64, f64, f64)>,
    /// `(log offset, log slope per second)`.
    drift: (f64, f64),
    /// `(start, end)` of the neighbour's visits.
    tenant: Vec<(f64, f64)>,
}

impl Machine {
    fn new(family: Family, rng: &mut Rng) -> Machine {
        let mut m = Machine { family, shifts: Vec::new(), episodes: Vec::new(), drift: (0.0, 0.0), tenant: Vec::new() };
        if family.has(Family::LevelShifts) {
            let mut t = f64::NEG_INFINITY;
            loop {
                m.shifts.push((t, uniform(rng, -0.05, 0.05).ln_1p()));
                t = t.max(0.0) + exp_time(rng, 180.0);
                if t > HORIZON_S {
                    break;
                }
            }
        }
        if family.has(Family::SlowEpisodes) {
            let mut t = -60.0;
            loop {
                t += exp_time(rng, 180.0);
                if t > HORIZON_S {
                    break;
                }
                let end = t + uniform(rng, 10.0, 60.0);
                m.episodes.push((t, end, uniform(rng, 1.2, 1.5)));
            }
        }
        if family.has(Family::Drift) {
            m.drift = (uniform(rng, -0.03, 0.03), uniform(rng, -0.01, 0.01) / 60.0);
        }
        if family.has(Family::SecondTenant) {
            let (on, off) = (60.0, 120.0);
            let mut present = rng.next_f64() < on / (on + off);
            let mut t = -60.0;
            while t < HORIZON_S {
                let until = t + exp_time(rng, if present { on } else { off });
                if present {
                    m.tenant.push((t, until));
                }
                t = until;
                present = !present;
            }
        }
        m
    }

    /// The machine's factor at time `t` (s), and whether the neighbour is there.
    fn at(&self, t: f64) -> (f64, bool) {
        let mut log = self.drift.0 + self.drift.1 * t;
        if let Some((_, level)) = self.shifts.iter().rev().find(|(from, _)| *from <= t) {
            log += level;
        }
        let mut factor = log.exp();
        if let Some((_, _, f)) = self.episodes.iter().find(|(s, e, _)| *s <= t && t < *e) {
            factor *= f;
        }
        let tenant = self.tenant.iter().any(|(s, e)| *s <= t && t < *e);
        (factor, tenant)
    }

    /// One run of one arm from time `start`: its median step (ms) and the time it ends.
    fn run(&self, start: f64, effect: f64, rng: &mut Rng) -> (f64, f64) {
        let mode = if self.family.has(Family::NcclModes) && rng.next_f64() < 0.3 { 1.08 } else { 1.0 };
        let mut t = start + uniform(rng, 4.0, 8.0);
        let mut steps = Vec::with_capacity(STEPS);
        for _ in 0..STEPS {
            let (factor, tenant) = self.at(t);
            let mut ms = STEP_MS * factor * mode * (1.0 + effect) * (STEP_SIGMA * rng.normal()).exp();
            if tenant {
                ms *= 1.0 + 0.1 * ((1.0 - rng.next_f64()).powf(-0.5) - 1.0);
            }
            steps.push(ms);
            t += ms / 1000.0;
        }
        steps.sort_unstable_by(f64::total_cmp);
        (median(&steps), t)
    }
}

/// A cell: one family, one effect on the head arm, and the paired mode's round budget.
#[derive(Debug, Clone, Copy)]
struct Cell {
    family: Family,
    effect: f64,
    max_rounds: usize,
}

/// Counts over a cell's trials.
#[derive(Debug, Clone, Default)]
struct Tally {
    trials: usize,
    blocked: usize,
    /// Unchanged.
    accept: usize,
    improved: usize,
    undecided: usize,
    /// Rounds at the stopping look, of the trials that decided.
    rounds: Vec<usize>,
    /// Over the undecided trials: the sum of the MDE reached, and the projected further rounds
    /// (`None`: more than the projection's cap).
    mde_sum: f64,
    further: Vec<Option<usize>>,
    /// Sum of the per-round log ratios' sd at the last look (paired), for the mean.
    sd_sum: f64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.trials += o.trials;
        self.blocked += o.blocked;
        self.accept += o.accept;
        self.improved += o.improved;
        self.undecided += o.undecided;
        self.rounds.extend(o.rounds);
        self.mde_sum += o.mde_sum;
        self.further.extend(o.further);
        self.sd_sum += o.sd_sum;
    }

    fn count(&mut self, state: State) {
        self.trials += 1;
        match state {
            State::Regressed => self.blocked += 1,
            State::Unchanged => self.accept += 1,
            State::Improved => self.improved += 1,
            State::Inconclusive => self.undecided += 1,
        }
    }

    /// The median rounds to a decision with its distribution-free 95 % interval (the order
    /// statistics at ranks `m/2 ∓ 1.96·√m/2`, from the binomial(m, ½) of the ranks).
    fn median_rounds(&self) -> String {
        let mut r = self.rounds.clone();
        if r.is_empty() {
            return "—".into();
        }
        r.sort_unstable();
        let m = r.len() as f64;
        let half = 0.98 * m.sqrt();
        let lo = ((m / 2.0 - half).floor().max(1.0) as usize).min(r.len()) - 1;
        let hi = ((m / 2.0 + half).ceil() as usize).clamp(1, r.len()) - 1;
        format!("{} (CI {}–{})", r[(r.len() - 1) / 2], r[lo], r[hi])
    }

    fn note(&self) -> String {
        if self.trials == 0 {
            return String::new();
        }
        let share = |k: usize| 100.0 * k as f64 / self.trials as f64;
        let mut note = format!(
            "accept {:.1} %, improved {:.1} %, undecided {:.1} %, median rounds to a decision {}, \
             mean per-round sd {:.2} %",
            share(self.accept),
            share(self.improved),
            share(self.undecided),
            self.median_rounds(),
            100.0 * self.sd_sum / self.trials as f64
        );
        if self.undecided > 0 {
            let mut known: Vec<usize> = self.further.iter().flatten().copied().collect();
            known.sort_unstable();
            let projected = known.get(known.len().saturating_sub(1) / 2).map_or("—".into(), |m| m.to_string());
            note.push_str(&format!(
                "; undecided: mean MDE {:.1} %, projected further rounds median {projected} ({} beyond the cap)",
                100.0 * self.mde_sum / self.undecided as f64,
                self.further.len() - known.len()
            ));
        }
        note
    }
}

/// The machine's seed and the trial's noise seed: by family and trial alone, so every effect's
/// cell of a family sees the same machines.
fn seeds(family: Family, trial: u64, stream: u64) -> Rng {
    let f = Family::ALL.iter().position(|&x| x == family).unwrap_or(0) as u64;
    Rng::new((f << 40) ^ (stream << 32) ^ trial ^ 0x9A1E_D000_0000_0000)
}

/// One paired job: rounds until the production rule stops them or the budget ends.
fn paired_trial(cell: &Cell, trial: u64) -> Tally {
    let plans = Plans::new(cell.max_rounds, PAIRED_ALPHA).expect("a valid plan");
    let machine = Machine::new(cell.family, &mut seeds(cell.family, trial, 1));
    let mut rng = seeds(cell.family, trial, 2);
    let mut t = uniform(&mut rng, 0.0, 300.0);
    let mut rounds: Vec<Round> = Vec::with_capacity(cell.max_rounds);
    let mut tally = Tally::default();
    for round in 1..=cell.max_rounds {
        let head_first = rng.next_f64() < 0.5;
        let (first, t1) = machine.run(t, if head_first { cell.effect } else { 0.0 }, &mut rng);
        let (second, t2) = machine.run(t1, if head_first { 0.0 } else { cell.effect }, &mut rng);
        t = t2;
        let (head, base) = if head_first { (first, second) } else { (second, first) };
        let d = (head / base).ln();
        rounds.push(Round {
            log_ratios: PairedMetric::ALL.iter().map(|&m| (m, Some(d))).collect(),
            medians: Vec::new(),
            captured: Vec::new(),
        });
        let now = standing(&rounds, plans, DELTA, Budget::Left);
        let Some(primary) = now.metrics.first() else { continue };
        let Some(l) = primary.look else { continue };
        match now.next {
            Next::AnotherRound => continue,
            Next::Stop => tally.rounds.push(round),
            Next::BudgetSpent => {
                tally.mde_sum += l.mde;
                tally.further.push(further_rounds(&l, plans.primary(), DELTA));
            }
        }
        tally.sd_sum += l.sd_log;
        let blocked = now.metrics.iter().any(|m| m.state == State::Regressed);
        tally.count(if blocked { State::Regressed } else { primary.state });
        break;
    }
    tally
}

/// One stored-baseline comparison: 5 stored runs and the head run, each on a machine of its own.
fn stored_trial(cell: &Cell, trial: u64) -> Tally {
    let mut rng = seeds(cell.family, trial, 3);
    let mut one = |effect: f64| {
        let machine = Machine::new(cell.family, &mut rng);
        let start = uniform(&mut rng, 0.0, 300.0);
        machine.run(start, effect, &mut rng).0.ln()
    };
    let stored: Vec<f64> = (0..STORED_RUNS).map(|_| one(0.0)).collect();
    let head = one(cell.effect);
    let mut tally = Tally::default();
    let Some(pi) = prediction_interval(&stored, STORED_LEVEL) else {
        tally.count(State::Inconclusive);
        return tally;
    };
    let d = head - pi.center;
    let (p_reg, p_imp) = if pi.se > 0.0 { (t_sf(pi.df, d / pi.se), t_sf(pi.df, -d / pi.se)) } else { (1.0, 1.0) };
    let ci = [(d - pi.half_width).exp(), (d + pi.half_width).exp()];
    tally.count(four_states(p_reg, p_imp, ci, DELTA, STORED_ALPHA));
    tally
}

fn main() -> ExitCode {
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paired_gate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The figures of one family.
struct FamilyResult {
    family: Family,
    aa: Tally,
    shift5: Tally,
    shift10: Tally,
    shift10_in5: Tally,
    stored_aa: Tally,
    stored5: Tally,
    stored10: Tally,
}

fn bench() -> Result<(), Box<dyn Error>> {
    let trials: usize = env_number("COMMGATE_PAIRED_TRIALS", 1000)?;
    let threads: usize = env_number("COMMGATE_PAIRED_THREADS", 2)?;
    if trials == 0 || threads == 0 {
        return Err("COMMGATE_PAIRED_TRIALS and COMMGATE_PAIRED_THREADS must be ≥ 1".into());
    }
    let only: Vec<String> = std::env::var("COMMGATE_PAIRED_ONLY")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default();
    println!(
        "paired gate: {trials} trials per cell, {threads} threads; δ = {} %; paired: α = {PAIRED_ALPHA} over the \
         looks (Pocock-type spending, union bound), looks after every round from 3; stored: {STORED_RUNS} runs, \
         level {STORED_LEVEL}, α = {STORED_ALPHA}; {STEPS} steps of {STEP_MS} ms per run\n",
        100.0 * DELTA
    );
    let started = Instant::now();
    let mut results = Vec::new();
    for family in Family::ALL {
        if !only.is_empty() && !only.iter().any(|o| family.name().contains(o.as_str())) {
            continue;
        }
        let section = Instant::now();
        let paired = |effect: f64, max_rounds: usize| {
            let cell = Cell { family, effect, max_rounds };
            run_trials(trials, threads, |i| paired_trial(&cell, i), Tally::add)
        };
        let stored = |effect: f64| {
            let cell = Cell { family, effect, max_rounds: 1 };
            run_trials(trials, threads, |i| stored_trial(&cell, i), Tally::add)
        };
        let r = FamilyResult {
            family,
            aa: paired(0.0, 10),
            shift5: paired(0.05, 10),
            shift10: paired(0.10, 10),
            shift10_in5: paired(0.10, 5),
            stored_aa: stored(0.0),
            stored5: stored(0.05),
            stored10: stored(0.10),
        };
        println!("{} ({:.1} s)", family.name(), section.elapsed().as_secs_f64());
        print_table(&family_lines(&r));
        println!();
        results.push(r);
    }
    summary(&results);
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn family_lines(r: &FamilyResult) -> Vec<Line> {
    let accepted = |t: &Tally| t.accept + t.improved;
    vec![
        Line::rate("paired A/A, ≤ 10 rounds: blocked", Target::AtMost(1.0), r.aa.blocked, r.aa.trials),
        Line::rate("paired A/A, ≤ 10 rounds: accept", Target::AtLeast(90.0), accepted(&r.aa), r.aa.trials)
            .note(r.aa.note()),
        Line::info("paired A/A, ≤ 10 rounds: undecided", r.aa.undecided, r.aa.trials),
        Line::rate("paired +5 %, ≤ 10 rounds: blocked", Target::AtLeast(95.0), r.shift5.blocked, r.shift5.trials)
            .note(r.shift5.note()),
        Line::info("paired +5 %, ≤ 10 rounds: accept (a miss let through)", accepted(&r.shift5), r.shift5.trials),
        Line::rate(
            "paired +10 %, ≤ 5 rounds: blocked",
            Target::AtLeast(95.0),
            r.shift10_in5.blocked,
            r.shift10_in5.trials,
        )
        .note(r.shift10_in5.note()),
        Line::info("paired +10 %, ≤ 10 rounds: blocked", r.shift10.blocked, r.shift10.trials).note(r.shift10.note()),
        Line::rate("stored 5 runs, A/A: blocked", Target::AtMost(1.0), r.stored_aa.blocked, r.stored_aa.trials),
        Line::info("stored 5 runs, A/A: accept", accepted(&r.stored_aa), r.stored_aa.trials)
            .note(format!("undecided {}", rate(r.stored_aa.undecided, r.stored_aa.trials))),
        Line::rate("stored 5 runs, +5 %: blocked", Target::AtLeast(95.0), r.stored5.blocked, r.stored5.trials),
        Line::info("stored 5 runs, +10 %: blocked", r.stored10.blocked, r.stored10.trials),
    ]
}

/// A row per family with each cell's point figures.
fn summary(results: &[FamilyResult]) {
    let pct = |k: usize, n: usize| if n == 0 { "-".into() } else { format!("{:.1} %", 100.0 * k as f64 / n as f64) };
    let mark = |k: usize, n: usize, target: Target| format!("{} {}", pct(k, n), target.verdict(k, n));
    let median = |t: &Tally| {
        let mut r = t.rounds.clone();
        r.sort_unstable();
        r.get(r.len().saturating_sub(1) / 2).map_or("—".into(), |m| m.to_string())
    };
    let header: Vec<String> = [
        "family",
        "A/A blocked (≤ 1 %)",
        "A/A accept ≤ 10 rounds (≥ 90 %)",
        "+5 % blocked ≤ 10 (≥ 95 %)",
        "+10 % blocked ≤ 5 (≥ 95 %)",
        "median rounds A/A / +5 % / +10 %",
        "per-round sd",
        "stored A/A blocked / accept",
        "stored +5 % / +10 % blocked",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.family.name().to_string(),
                mark(r.aa.blocked, r.aa.trials, Target::AtMost(1.0)),
                mark(r.aa.accept + r.aa.improved, r.aa.trials, Target::AtLeast(90.0)),
                mark(r.shift5.blocked, r.shift5.trials, Target::AtLeast(95.0)),
                mark(r.shift10_in5.blocked, r.shift10_in5.trials, Target::AtLeast(95.0)),
                format!("{} / {} / {}", median(&r.aa), median(&r.shift5), median(&r.shift10_in5)),
                format!("{:.2} %", 100.0 * r.aa.sd_sum / r.aa.trials.max(1) as f64),
                format!(
                    "{} / {}",
                    pct(r.stored_aa.blocked, r.stored_aa.trials),
                    pct(r.stored_aa.accept + r.stored_aa.improved, r.stored_aa.trials)
                ),
                format!(
                    "{} / {}",
                    pct(r.stored5.blocked, r.stored5.trials),
                    pct(r.stored10.blocked, r.stored10.trials)
                ),
            ]
        })
        .collect();
    println!("summary (point estimates; the per-family tables above have the intervals)");
    print_grid(&header, &rows);
}
