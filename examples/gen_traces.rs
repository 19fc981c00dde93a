//! Writes synthetic multi-rank Kineto traces (see `commgate_testkit::synth`) for benchmarks,
//! demos and by-hand checks of `commgate attribute`.
//!
//! ```text
//! cargo run --release --example gen_traces -- --out DIR [--ranks N] [--mb-per-rank X]
//!     [--gzip] [--seed S] [--imbalance F] [--straggler R] [--dense-kernels K] [--dense-steps S]
//! ```
//! With `--dense-kernels K` it writes kernel-dense ranks instead (`commgate_testkit::dense`):
//! K kernels each over 10 steps, 100 distinct names.
//! Without `--mb-per-rank` it writes the small spec (a few hundred KB per rank).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use commgate_testkit::dense::{write_dense, DenseSpec};
use commgate_testkit::synth::{write_all_ranks, SynthSpec};

const USAGE: &str = "usage: gen_traces --out DIR [--ranks N] [--mb-per-rank X] [--gzip] \
                     [--seed S] [--imbalance F] [--straggler R] [--dense-kernels K] [--dense-steps S]";

struct Opts {
    out: PathBuf,
    gzip: bool,
    spec: SynthSpec,
    dense_kernels: Option<u64>,
    /// Steps the dense kernels are spread over (default 10; 1: the whole capture one step).
    dense_steps: u64,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse(&args) {
        Ok(opts) => opts,
        Err(msg) => {
            eprintln!("gen_traces: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match generate(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_traces: writing {}: {e}", opts.out.display());
            ExitCode::FAILURE
        }
    }
}

fn generate(opts: &Opts) -> std::io::Result<()> {
    if let Some(kernels) = opts.dense_kernels {
        return generate_dense(opts, kernels);
    }
    let start = Instant::now();
    let paths = write_all_ranks(&opts.spec, &opts.out, opts.gzip)?;
    let secs = start.elapsed().as_secs_f64();
    let mut total = 0u64;
    for path in &paths {
        let len = std::fs::metadata(path)?.len();
        total += len;
        println!("{:>12} bytes  {}", len, path.display());
    }
    let s = &opts.spec;
    println!(
        "{} ranks, {} steps (+1 cut short) x {} layers, seed {}, imbalance {}, straggler {}, \
         all_to_all {}: {:.1} MB in {:.2} s ({:.0} MB/s written)",
        s.world_size,
        s.steps,
        s.layers,
        s.seed,
        s.imbalance,
        s.straggler_rank,
        s.all_to_all,
        total as f64 / 1e6,
        secs,
        total as f64 / 1e6 / secs.max(1e-9),
    );
    Ok(())
}

fn generate_dense(opts: &Opts, kernels: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(&opts.out)?;
    let world_size = opts.spec.world_size;
    for rank in 0..world_size {
        let spec = DenseSpec { kernels, steps: opts.dense_steps, distinct_names: 100, rank, world_size };
        let ext = if opts.gzip { "json.gz" } else { "json" };
        let path = opts.out.join(format!("rank-{rank}.{ext}"));
        let file = std::fs::File::create(&path)?;
        if opts.gzip {
            let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            write_dense(&spec, &mut gz)?;
            gz.finish()?;
        } else {
            write_dense(&spec, file)?;
        }
        println!("{:>12} bytes  {}", std::fs::metadata(&path)?.len(), path.display());
    }
    Ok(())
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut out = None;
    let mut gzip = false;
    let mut ranks = None;
    let mut mb = None;
    let mut seed = None;
    let mut imbalance = None;
    let mut straggler = None;
    let mut dense_kernels = None;
    let mut dense_steps = 10;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => out = Some(PathBuf::from(value()?)),
            "--gzip" => gzip = true,
            "--ranks" => ranks = Some(number::<u32>(flag, &value()?)?),
            "--mb-per-rank" => mb = Some(number::<f64>(flag, &value()?)?),
            "--seed" => seed = Some(number::<u64>(flag, &value()?)?),
            "--imbalance" => imbalance = Some(number::<f64>(flag, &value()?)?),
            "--straggler" => straggler = Some(number::<u32>(flag, &value()?)?),
            "--dense-kernels" => dense_kernels = Some(number::<u64>(flag, &value()?)?),
            "--dense-steps" => dense_steps = number::<u64>(flag, &value()?)?.max(1),
            "-h" | "--help" => return Err("help requested".into()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    let out = out.ok_or("--out DIR is required")?;
    let mut spec = match mb {
        Some(mb) if mb > 0.0 => SynthSpec::with_target_bytes((mb * 1e6) as u64),
        Some(mb) => return Err(format!("--mb-per-rank must be positive, got {mb}")),
        None => SynthSpec::small(),
    };
    if let Some(ranks) = ranks {
        if ranks == 0 {
            return Err("--ranks must be at least 1".into());
        }
        spec.world_size = ranks;
    }
    spec.seed = seed.unwrap_or(spec.seed);
    spec.imbalance = imbalance.unwrap_or(spec.imbalance);
    // Without --straggler, keep the spec's default straggler inside a smaller world.
    spec.straggler_rank = straggler.unwrap_or(spec.straggler_rank % spec.world_size);
    if spec.straggler_rank >= spec.world_size {
        return Err(format!("--straggler {} is not a rank of {} ranks", spec.straggler_rank, spec.world_size));
    }
    Ok(Opts { out, gzip, spec, dense_kernels, dense_steps })
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("{flag} expects a number, got '{text}'"))
}
