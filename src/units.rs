//! How relative changes read, in one place: the reasons `compare` writes and the tables the
//! renderers draw use the same signed percentages and intervals.

/// `x` (a fraction) as a signed percentage with one decimal: `+9.7 %`, `−3.2 %`, `0.0 %`.
/// The plural ending for `n` things: "" for one, "s" otherwise ("1 run", "3 runs").
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

pub fn signed_pct(x: f64) -> String {
    let v = 100.0 * x;
    if v.abs() < 0.05 {
        return "0.0 %".to_string();
    }
    format!("{}{:.1} %", if v > 0.0 { "+" } else { "−" }, v.abs())
}

/// A ratio's change (`ratio − 1`) as a signed percentage, or `n/a`.
pub fn change(ratio: f64) -> String {
    if ratio.is_finite() {
        signed_pct(ratio - 1.0)
    } else {
        "n/a".to_string()
    }
}

/// A ratio interval as signed percentages sharing one unit: `+7.1…+12.2 %`.
pub fn interval(ci: [f64; 2]) -> String {
    if !ci[0].is_finite() || !ci[1].is_finite() {
        return "n/a".to_string();
    }
    let lo = signed_pct(ci[0] - 1.0);
    format!("{}…{}", lo.trim_end_matches(" %"), signed_pct(ci[1] - 1.0))
}

/// A fraction as a plain percentage: whole when it is (`3 %`), else two significant digits
/// (`0.84 %`, `4.5 %`).
pub fn pct(x: f64) -> String {
    let v = 100.0 * x;
    if (v - v.round()).abs() < 0.005 {
        format!("{v:.0} %")
    } else if v.abs() < 1.0 {
        format!("{v:.2} %")
    } else {
        format!("{v:.1} %")
    }
}

/// A ratio and its interval in words: "8.1 % slower (95 % CI 7.5–8.8 %)" when the whole interval
/// is slower, "6.0 % faster (95 % CI 4.1–7.9 %)" when it is faster, otherwise the signed change
/// and interval, "+0.4 % (95 % CI −0.3…+1.1 %)".
pub fn in_words(ratio: f64, ci: [f64; 2]) -> String {
    let mag = |x: f64| format!("{:.1}", 100.0 * (x - 1.0).abs());
    if !ratio.is_finite() || !ci[0].is_finite() || !ci[1].is_finite() {
        return change(ratio);
    }
    if ci[0] > 1.0 {
        format!("{} % slower (95 % CI {}–{} %)", mag(ratio), mag(ci[0]), mag(ci[1]))
    } else if ci[1] < 1.0 {
        format!("{} % faster (95 % CI {}–{} %)", mag(ratio), mag(ci[1]), mag(ci[0]))
    } else {
        format!("{} (95 % CI {})", change(ratio), interval(ci))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(signed_pct(0.097), "+9.7 %");
        assert_eq!(signed_pct(-0.032), "−3.2 %");
        assert_eq!(signed_pct(0.0001), "0.0 %");
        assert_eq!(change(f64::NAN), "n/a");
        assert_eq!(interval([1.071, 1.122]), "+7.1…+12.2 %");
        assert_eq!(interval([0.98, 1.01]), "−2.0…+1.0 %");
        assert_eq!(pct(0.03), "3 %");
        assert_eq!(pct(0.0084), "0.84 %");
        assert_eq!(pct(0.045), "4.5 %");
        assert_eq!(in_words(1.081, [1.075, 1.088]), "8.1 % slower (95 % CI 7.5–8.8 %)");
        assert_eq!(in_words(0.94, [0.921, 0.959]), "6.0 % faster (95 % CI 4.1–7.9 %)");
        assert_eq!(in_words(1.004, [0.997, 1.011]), "+0.4 % (95 % CI −0.3…+1.1 %)");
    }
}
