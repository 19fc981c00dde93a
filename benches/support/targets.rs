//! Rates against targets, for the gate-quality benches: each measured rate is printed with its
//! Wilson 95 % interval next to its target and PASS/FAIL, or as information.

// Each bench compiles this module on its own and uses only part of it.
#![allow(dead_code)]
// A trial thread that panicked is the bench failing, with its message.
#![allow(clippy::expect_used)]

/// 95 % Wilson interval of `k` successes in `n` trials, as fractions.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z) = (k as f64, n as f64, 1.959_964);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// `k` of `n` as a percentage with its interval; `(skipped)` for a cell that did not run.
pub fn rate(k: usize, n: usize) -> String {
    if n == 0 {
        return "(skipped)".to_string();
    }
    let (lo, hi) = wilson(k, n);
    format!("{:.2} % ({k}/{n}; CI {:.2}–{:.2} %)", 100.0 * k as f64 / n as f64, 100.0 * lo, 100.0 * hi)
}

/// A target on a rate: at most or at least `pct` percent.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    pub fn text(self) -> String {
        match self {
            Target::AtMost(p) => format!("≤ {p} %"),
            Target::AtLeast(p) => format!("≥ {p} %"),
        }
    }

    /// PASS or FAIL for `k` of `n`, `-` for a cell that did not run.
    pub fn verdict(self, k: usize, n: usize) -> &'static str {
        if n == 0 {
            return "-";
        }
        let r = 100.0 * k as f64 / n.max(1) as f64;
        let ok = match self {
            Target::AtMost(p) => r <= p,
            Target::AtLeast(p) => r >= p,
        };
        if ok {
            "PASS"
        } else {
            "FAIL"
        }
    }
}

pub struct Line {
    property: String,
    target: String,
    measured: String,
    verdict: String,
    /// Further figures of the same cell (verdict shares, the MDE), printed after PASS/FAIL.
    note: String,
}

impl Line {
    pub fn rate(property: impl Into<String>, target: Target, k: usize, n: usize) -> Line {
        Line {
            property: property.into(),
            target: target.text(),
            measured: rate(k, n),
            verdict: target.verdict(k, n).into(),
            note: String::new(),
        }
    }

    pub fn info(property: impl Into<String>, k: usize, n: usize) -> Line {
        Line {
            property: property.into(),
            target: "(info)".into(),
            measured: rate(k, n),
            verdict: "-".into(),
            note: String::new(),
        }
    }

    /// The line with `note` after its verdict (a table with no notes prints as it always did).
    pub fn note(self, note: impl Into<String>) -> Line {
        Line { note: note.into(), ..self }
    }
}

pub fn print_table(lines: &[Line]) {
    let w0 = lines.iter().map(|l| l.property.chars().count()).max().unwrap_or(0).max(8);
    let w1 = lines.iter().map(|l| l.target.chars().count()).max().unwrap_or(0).max(6);
    let w2 = lines.iter().map(|l| l.measured.chars().count()).max().unwrap_or(0).max(8);
    let notes = lines.iter().any(|l| !l.note.is_empty());
    let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
    let tail = |s: &str| if notes { format!(" | {s}") } else { String::new() };
    println!("{} | {} | {} | PASS/FAIL{}", pad("property", w0), pad("target", w1), pad("measured", w2), tail("also"));
    println!(
        "{}-|-{}-|-{}-|-{}{}",
        "-".repeat(w0),
        "-".repeat(w1),
        "-".repeat(w2),
        "-".repeat(9),
        if notes { "-|-----" } else { "" }
    );
    for l in lines {
        println!(
            "{} | {} | {} | {}{}",
            pad(&l.property, w0),
            pad(&l.target, w1),
            pad(&l.measured, w2),
            if notes { pad(&l.verdict, 9) } else { l.verdict.clone() },
            tail(&l.note)
        );
    }
}

/// A plain table: `header` and then `rows`, each column padded to its widest cell.
pub fn print_grid(header: &[String], rows: &[Vec<String>]) {
    let columns = header.len();
    let width = |c: usize| {
        rows.iter().filter_map(|r| r.get(c)).chain(header.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns).map(width).collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count()))))
            .collect();
        println!("{}", padded.join(" | ").trim_end());
    };
    line(header);
    println!("{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("-|-"));
    for r in rows {
        line(r);
    }
}

/// The bench's setting `name` from the environment (`COMMGATE_GATE_TRIALS=200`), else `default`;
/// a value that does not parse is an error naming it.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> Result<T, Box<dyn std::error::Error>> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|_| format!("{name}={v:?} is not a positive whole number").into()),
        Err(_) => Ok(default),
    }
}

/// Trials `0..trials` of `one`, split over `threads` scoped threads and summed with `add`.
pub fn run_trials<T: Default + Send>(
    trials: usize,
    threads: usize,
    one: impl Fn(u64) -> T + Sync,
    add: fn(&mut T, T),
) -> T {
    let mut total = T::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let one = &one;
                s.spawn(move || {
                    let mut tally = T::default();
                    for i in (t..trials).step_by(threads) {
                        add(&mut tally, one(i as u64));
                    }
                    tally
                })
            })
            .collect();
        for h in handles {
            add(&mut total, h.join().expect("a trial thread panicked"));
        }
    });
    total
}
