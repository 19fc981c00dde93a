//! Writes simulated benchmark results and a baseline store, for trying `commgate compare` and
//! `commgate baseline update` without a GPU:
//!
//! `cargo run --release --example gen_results -- --out DIR [--runs 10] [--samples 200] [--shift 0.05] [--model quiet]`
//!
//! DIR/baselines/<profile>/<workload>.json holds `--runs` runs of the noise model; DIR/current.json
//! is one more run with the overlap and serial medians moved by `--shift`.

use std::path::PathBuf;

use commgate_gate::baseline::{write_store, BaselineFile};
use commgate_testkit::simulate::{synthetic_run, Effect, NoiseModel};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut out = None;
    let (mut runs, mut samples, mut shift, mut model) = (10usize, 200usize, 0.05f64, NoiseModel::QuietLogNormal);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => out = Some(PathBuf::from(value()?)),
            "--runs" => runs = value()?.parse()?,
            "--samples" => samples = value()?.parse()?,
            "--shift" => shift = value()?.parse()?,
            "--model" => {
                let name = value()?;
                model = NoiseModel::ALL
                    .into_iter()
                    .find(|m| m.name() == name)
                    .ok_or_else(|| format!("unknown model {name}; one of {:?}", NoiseModel::ALL.map(|m| m.name())))?;
            }
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let out = out.ok_or("usage: gen_results --out DIR [--runs N] [--samples N] [--shift F] [--model NAME]")?;
    let history: Vec<_> = (0..runs).map(|i| synthetic_run(model, samples, &Effect::NONE, 1000 + i as u64)).collect();
    let first = history.first().ok_or("--runs must be at least 1")?;
    let store = BaselineFile {
        schema_version: commgate_core::result::SCHEMA_VERSION,
        environment_profile: first.environment_profile.clone(),
        workload_id: first.workload.id.clone(),
        runs: history.clone(),
        history: Vec::new(),
        traces: Default::default(),
        ceilings: Vec::new(),
    };
    let path = out.join("baselines").join(&first.environment_profile).join(format!("{}.json", first.workload.id));
    write_store(&path, &store)?;
    let effect = Effect { median_shift: shift, ..Effect::NONE };
    let current = synthetic_run(model, samples, &effect, 7);
    std::fs::write(out.join("current.json"), serde_json::to_string_pretty(&current)? + "\n")?;
    std::fs::write(out.join("previous.json"), serde_json::to_string_pretty(&history[runs - 1])? + "\n")?;
    println!(
        "wrote {} ({runs} runs × {samples} samples, {}), {}/current.json (shift {shift:+}), {}/previous.json",
        path.display(),
        model.name(),
        out.display(),
        out.display()
    );
    Ok(())
}
