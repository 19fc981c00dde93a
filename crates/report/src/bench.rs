//! What `commgate bench` says about the runs it wrote: each run's schedules (median and P95 of
//! the slowest rank's step) with its bus bandwidth, matmul rate and overlap figure, and for a
//! payload sweep one nccl-tests-style line per size. Plain text for stderr (stdout keeps the
//! result files' paths, one per line, for scripts).

use super::cells::{ms, two};
use super::table::{self, Column};
use commgate_core::result::{RunComparison, RunResult, Schedule};

/// The order the schedules are listed in: what a reader compares first.
const ORDER: [Schedule; 4] = [Schedule::Overlap, Schedule::Serial, Schedule::CommOnly, Schedule::ComputeOnly];

/// One run: its schedules' median and P95 (ms), then its figures on one line.
pub fn run_summary(r: &RunResult) -> String {
    let rows: Vec<Vec<String>> = ORDER
        .iter()
        .filter_map(|s| r.rows.iter().find(|row| row.schedule == *s))
        .map(|row| vec![row.schedule.as_str().to_string(), ms(row.median_max_rank_ms), ms(row.p95_max_rank_ms)])
        .collect();
    let columns = [Column::left("schedule"), Column::right("median ms"), Column::right("P95 ms")];
    let mut out = table::text(&columns, &rows);
    let figures: Vec<String> = run_figures(r, None).iter().map(|(l, v)| format!("{l} {v}")).collect();
    out.push_str(&figures.join(" · "));
    out.push('\n');
    out
}

/// A payload sweep as nccl-tests prints one: per size (bytes per rank), the communication's
/// median time, algorithm bandwidth (bytes / time) and bus bandwidth, ascending by size.
/// `None` for fewer than two runs.
pub fn sweep_table(runs: &[&RunResult]) -> Option<String> {
    if runs.len() < 2 {
        return None;
    }
    let mut rows: Vec<(u64, Vec<String>)> = runs
        .iter()
        .filter_map(|r| {
            let comm = r.rows.iter().find(|row| row.schedule == Schedule::CommOnly)?;
            let bytes = comm.payload_bytes_per_rank;
            let secs = comm.median_max_rank_ms / 1e3;
            let algbw = (secs > 0.0).then(|| bytes as f64 / secs / 1e9);
            let dash = || "-".to_string();
            Some((
                bytes,
                vec![
                    bytes.to_string(),
                    comm.collective.clone(),
                    two(comm.median_max_rank_ms * 1e3),
                    algbw.map_or_else(dash, two),
                    r.metrics.busbw_gbps.map_or_else(dash, two),
                ],
            ))
        })
        .collect();
    rows.sort_by_key(|(bytes, _)| *bytes);
    let columns = [
        Column::right("size (B)"),
        Column::left("collective"),
        Column::right("time (us)"),
        Column::right("algbw (GB/s)"),
        Column::right("busbw (GB/s)"),
    ];
    Some(table::text(&columns, &rows.into_iter().map(|(_, r)| r).collect::<Vec<_>>()))
}

/// The benchmark run's own figures as (label, value), the same in the terminal and the PR
/// comment. An undefined figure reads `-`; with one rank, bus bandwidth does not apply.
pub(crate) fn run_figures(
    b: &RunResult,
    ceiling: Option<&commgate_gate::baseline::ceiling::BenchCeiling>,
) -> [(&'static str, String); 3] {
    // Held against this runner's nccl-tests ceiling at the same size, when a sweep set one.
    let of_peak = |v: f64| {
        ceiling.map_or_else(String::new, |c| {
            format!(
                " ({:.0} % of this runner's nccl-tests peak at {}, {:.0} % of its plateau)",
                100.0 * v / c.ceiling_gbps,
                commgate_core::units::bytes(c.size),
                100.0 * v / c.plateau_gbps
            )
        })
    };
    let busbw = match b.metrics.busbw_gbps {
        Some(v) => format!("{} GB/s{}", two(v), of_peak(v)),
        None if b.workload.world_size == 1 => "not applicable (one rank communicates nothing)".to_string(),
        None => "-".to_string(),
    };
    let matmul = b.metrics.matmul_tflops.map_or_else(|| "-".to_string(), flops);
    [("busbw", busbw), ("matmul", matmul), ("overlap", overlap_against_serial(&b.comparison))]
}

/// A matmul rate in the unit that shows its digits: TFLOPS from 1 up, GFLOPS below (a CPU run's
/// 0.02 TFLOPS reads as 20 GFLOPS).
fn flops(tflops: f64) -> String {
    if tflops >= 1.0 || tflops == 0.0 || !tflops.is_finite() {
        format!("{} TFLOPS", two(tflops))
    } else {
        format!("{} GFLOPS", two(tflops * 1e3))
    }
}

/// A saving, or a penalty when overlapping is slower than running serially.
fn overlap_against_serial(c: &RunComparison) -> String {
    match (c.penalty(), c.saved_ms) {
        (Some(penalty), _) => format!("{} ms slower than serial per step", ms(penalty)),
        (None, Some(saved)) => format!(
            "saves {} ms per step{}",
            ms(saved),
            c.overlap_gain_ratio.map(|g| format!(" ({:.1} % of serial)", 100.0 * g)).unwrap_or_default()
        ),
        (None, None) => "-".to_string(),
    }
}
