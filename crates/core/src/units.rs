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

/// Bytes in binary units with one decimal (`512 B`, `8.0 MiB`), as nccl-tests sizes read.
pub fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    for (i, unit) in UNITS.iter().enumerate() {
        // Move up a unit when one decimal would round to 1024 (1048575 B is "1.0 MiB").
        if value < 1023.95 || i == UNITS.len() - 1 {
            return format!("{value:.1} {unit}");
        }
        value /= 1024.0;
    }
    format!("{bytes} B")
}

/// Now, as `2026-11-30T09:12:58Z`.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the Unix epoch as RFC 3339 UTC (Howard Hinnant's `civil_from_days`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
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
