//! How a number reads in every report, whatever the content: a fixed number of decimals (never
//! a negative zero), milliseconds, p-values, counts, a metric's change, and the one-line
//! hardware summary. Units and their wording (`pct`, `change`, `interval`, `bytes`) are
//! commgate-core's; these are the report's own.

use commgate_core::units::change;
use commgate_gate::compare::{MetricComparison, Statistic};

/// `v` with `decimals` digits; a value that rounds to zero prints without a sign, so a
/// subtraction's `-1e-12` never shows as `-0.000`.
pub(crate) fn fixed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

/// Milliseconds: three decimals (microsecond resolution).
pub(crate) fn ms(v: f64) -> String {
    fixed(v, 3)
}

/// Ratios, per-step call counts and percentages: two decimals.
pub(crate) fn two(v: f64) -> String {
    fixed(v, 2)
}

/// A per-step figure only traces give: milliseconds, or `n/a` without a matched instance.
pub(crate) fn optional_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), ms)
}

/// A p-value: four decimals, `<0.0001` below that.
pub(crate) fn p_value(p: f64) -> String {
    if !p.is_finite() {
        "n/a".to_string()
    } else if p < 1e-4 {
        "<0.0001".to_string()
    } else {
        format!("{p:.4}")
    }
}

/// `1 file`, `2 files`.
pub(crate) fn counted(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// The change cell of a metric (a metric table's row, a sweep's point); exposed communication
/// changes as a share of the step.
pub(crate) fn metric_change(m: &MetricComparison) -> String {
    if m.statistic == Statistic::ExposedCommMs && m.judged.ratio.is_finite() {
        format!("{} of step", change(m.judged.ratio))
    } else {
        change(m.judged.ratio)
    }
}

/// "8 × NVIDIA H200 · 143771 MiB · nvlink · 2 nodes": what is known, unescaped.
pub(crate) fn hardware_line(h: &commgate_core::result::Hardware) -> String {
    let gpus = match (h.gpu_count, h.gpu_name.as_deref()) {
        (0, _) => "no GPU".to_string(),
        (n, Some(name)) => format!("{n} × {name}"),
        (n, None) => format!("{n} GPU{}", if n == 1 { "" } else { "s" }),
    };
    let mut parts = vec![gpus];
    parts.extend(h.gpu_memory_mib.map(|m| format!("{m} MiB")));
    parts.extend(h.topology.clone());
    parts.push(if h.nodes == 1 { "1 node".to_string() } else { format!("{} nodes", h.nodes) });
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::units::bytes;

    #[test]
    fn bytes_picks_the_unit_that_keeps_the_number_below_1024() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(3072), "3.0 KiB");
        assert_eq!(bytes(8 * 1024 * 1024), "8.0 MiB");
        assert_eq!(bytes(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn fixed_never_prints_negative_zero() {
        assert_eq!(fixed(-1e-12, 3), "0.000");
        assert_eq!(fixed(-0.0, 2), "0.00");
        assert_eq!(fixed(-0.004, 2), "0.00");
        assert_eq!(fixed(-0.006, 2), "-0.01");
        assert_eq!(fixed(1.23456, 3), "1.235");
        assert_eq!(ms(20.0), "20.000");
        assert_eq!(two(0.6), "0.60");
    }

    #[test]
    fn p_values_and_counts() {
        assert_eq!(p_value(f64::NAN), "n/a");
        assert_eq!(p_value(0.00001), "<0.0001");
        assert_eq!(p_value(0.023), "0.0230");
        assert_eq!(counted(1, "file", "files"), "1 file");
        assert_eq!(counted(2, "file", "files"), "2 files");
        assert_eq!(optional_ms(None), "n/a");
    }
}
