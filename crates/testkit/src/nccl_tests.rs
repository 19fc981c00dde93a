//! Synthetic nccl-tests output, for tests and benches: one run of a program over a sweep of
//! sizes, written both as nccl-tests 2.19 writes its JSON (`-J`, file version 3, with `-I 1`
//! per-iteration times of every process) and as the text table the program prints, so that
//! the two forms of one run can be read and compared. The time model is the usual one, a
//! latency plus the bytes over a bus bandwidth, with seeded per-iteration noise; one size can
//! be made slower.

use std::fmt::Write as _;

use super::synth::Rng;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclTestsSpec {
    /// `all_reduce_perf`, `all_gather_perf`, …
    pub program: String,
    /// Bytes per rank, ascending.
    pub sizes: Vec<u64>,
    pub iterations: usize,
    /// One host per process, `node-0`, `node-1`, …
    pub processes: usize,
    pub seed: u64,
    /// Relative per-iteration noise (0.02: ±2 % uniform).
    pub noise: f64,
    /// A size whose times are multiplied by a factor (1.1: 10 % slower).
    pub slower: Option<(u64, f64)>,
}

impl NcclTestsSpec {
    /// An all-reduce sweep of 8 sizes, 1 KiB to 16 MiB by 4×, 20 iterations on 2 processes.
    pub fn sweep(seed: u64) -> Self {
        NcclTestsSpec {
            program: "all_reduce_perf".into(),
            sizes: (0..8).map(|i| 1024u64 << (2 * i)).collect(),
            iterations: 20,
            processes: 2,
            seed,
            noise: 0.02,
            slower: None,
        }
    }
}

/// One size's per-iteration times, µs: each process's, and the slowest per iteration.
struct Timed {
    size: u64,
    per_process: Vec<Vec<f64>>,
    slowest: Vec<f64>,
}

impl Timed {
    fn mean(&self) -> f64 {
        self.slowest.iter().sum::<f64>() / self.slowest.len().max(1) as f64
    }
}

/// Bus bandwidth of the model, GB/s, and its latency, µs.
const BUS_GBPS: f64 = 100.0;
const LATENCY_US: f64 = 10.0;

fn timed(spec: &NcclTestsSpec, placement: u64) -> Vec<Timed> {
    spec.sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let factor = spec.slower.filter(|(s, _)| *s == size).map_or(1.0, |(_, f)| f);
            let base = (LATENCY_US + size as f64 / (BUS_GBPS * 1e3)) * factor;
            let per_process: Vec<Vec<f64>> = (0..spec.processes)
                .map(|p| {
                    let mut rng = Rng::new(spec.seed, placement * 1000 + i as u64, p as u64);
                    (0..spec.iterations).map(|_| base * (1.0 + spec.noise * (2.0 * rng.unit() - 1.0))).collect()
                })
                .collect();
            let slowest = (0..spec.iterations).map(|k| per_process.iter().map(|t| t[k]).fold(0.0, f64::max)).collect();
            Timed { size, per_process, slowest }
        })
        .collect()
}

/// The figures as nccl-tests prints them: µs with two decimals, GB/s with two.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// nccl-tests' bus factor for the program's collective on `n` processes (1 for one it does not
/// define), from the one table attribution uses.
fn bus_factor(program: &str, n: usize) -> f64 {
    commgate_core::result::nccl_tests::collective_of(program)
        .and_then(|c| commgate_trace::attribute::bus_factor(c, n))
        .unwrap_or(1.0)
}

/// The summary of one size at one placement: time (µs), algbw and busbw (GB/s), rounded as the
/// text prints them, so that both forms say the same.
fn summary(spec: &NcclTestsSpec, t: &Timed) -> (f64, f64, f64) {
    let time = round2(t.mean());
    let alg = round2(t.size as f64 / (time * 1e3));
    (time, alg, round2(alg * bus_factor(&spec.program, spec.processes)))
}

fn list(values: &[f64]) -> String {
    values.iter().map(|v| format!("{v}")).collect::<Vec<_>>().join(",")
}

/// The run as nccl-tests writes its JSON.
pub fn json(spec: &NcclTestsSpec) -> String {
    let placements = [timed(spec, 0), timed(spec, 1)];
    let devices: Vec<String> = (0..spec.processes)
        .map(|p| {
            format!(
                r#"{{"rank":{p},"group":0,"pid":{},"hostname":"node-{p}","device":0,"device_hex":"0x1","device_info":"NVIDIA H200"}}"#,
                100 + p
            )
        })
        .collect();
    let mut out = format!(
        r#"{{"version":3,"start_time":"2026-12-01 10:00:00","args":["./build/{}","-b","{}","-e","{}","-f","4","-I","1","-J","run.json"],"env":["NCCL_ALGO=Ring","NCCL_PROTO=Simple","HOME=/root"],"nccl_version":22703,"config":{{"nthreads":1,"ngpus":1,"iterations":{},"per_iter_timing":true,"devices":[{}]}},"results":["#,
        spec.program,
        spec.sizes.first().unwrap_or(&0),
        spec.sizes.last().unwrap_or(&0),
        spec.iterations,
        devices.join(",")
    );
    for (i, size) in spec.sizes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, r#"{{"size":{size},"count":{},"type":"float","redop":"sum","root":"-1""#, size / 4);
        for (name, t) in [("out_of_place", &placements[0][i]), ("in_place", &placements[1][i])] {
            let (time, alg, bus) = summary(spec, t);
            let per_process: Vec<String> = t.per_process.iter().map(|p| format!("[{}]", list(p))).collect();
            let _ = write!(
                out,
                r#","{name}":{{"time":{time},"alg_bw":{alg},"bus_bw":{bus},"nwrong":0}},"{name}_per_iter":{{"skipped_iterations":0,"times_us":[{}],"per_process_max_times_us":[{}]}}"#,
                list(&t.slowest),
                per_process.join(",")
            );
        }
        let _ = write!(out, r#","actual_iterations":{},"experiment_name":""}}"#, spec.iterations);
    }
    out.push_str("],\"end_time\":\"2026-12-01 10:00:01\"}\n");
    out
}

/// The run as the program prints it (with `-I 1`).
pub fn text(spec: &NcclTestsSpec) -> String {
    let placements = [timed(spec, 0), timed(spec, 1)];
    let mut out = format!(
        "# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703\n# Collective test starting: {}\n#\n# Using devices\n",
        spec.program
    );
    for p in 0..spec.processes {
        let _ = writeln!(
            out,
            "#  Rank {p:2} Group  0 Pid {:6} on {:>10} device  0 [0x1] NVIDIA H200",
            100 + p,
            format!("node-{p}")
        );
    }
    out.push_str("#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%\n");
    for (i, size) in spec.sizes.iter().enumerate() {
        let _ = write!(out, "{size:>12}  {:>12}  {:>8}  {:>6}  {:>6}", size / 4, "float", "sum", "-1");
        for t in [&placements[0][i], &placements[1][i]] {
            let (time, alg, bus) = summary(spec, t);
            let min = t.slowest.iter().copied().fold(f64::INFINITY, f64::min);
            let max = t.slowest.iter().copied().fold(0.0, f64::max);
            let _ = write!(
                out,
                "  {time:7.2}  {alg:6.2}  {bus:6.2}  {:6}  {min:7.2}  {max:7.2}  {max:7.2}  {:7.2}",
                0, 1.0
            );
        }
        out.push('\n');
    }
    out.push_str("# Out of bounds values : 0 OK\n#\n");
    let _ = writeln!(out, "# Collective test concluded: {}", spec.program);
    out
}
