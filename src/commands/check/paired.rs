//! `commgate check --paired`: the base commit and the working tree measured on this runner in
//! the same job, in rounds (docs/gate.md, "Paired mode").
//!
//! The base commit is checked out in a temporary git worktree; the head is the working tree.
//! Each arm runs `prepare` once in its tree, then every round runs both arms in an order drawn
//! at random, each arm as its own `commgate bench` process (this program) in its own tree, with
//! its own `commgate.toml` `[bench]` and `[bench.env]`, after `capture` when one is set. The
//! gate's settings (δ, what blocks, the commands) are the base's, read before this starts.
//! Whatever fails (the worktree, a step of an arm, two runs that cannot be compared) ends the
//! check with exit 2 and a report naming the round, the arm and the step; nothing falls back
//! to the stored comparison.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::arm::{self, Program, Step};
use crate::cli::CheckArgs;
use crate::config::CheckConfig;
use commgate_bench::launch;
use commgate_core::base_commit::BaseCommit;
use commgate_core::diag;
use commgate_core::result::{self, RunResult};
use commgate_core::units::change;
use commgate_gate::check::paired::{self as gate_paired, Arm, CapturedCollective, PairedSetup};
use commgate_gate::check::CheckReport;
use commgate_gate::compare::paired::PairedMetric;
use commgate_gate::decide::paired::{Plans, ALPHA};
use commgate_gate::decide::{ErrorKind, EvaluationError};
use commgate_trace::attribute::AttributeOptions;
use commgate_trace::load::attribute_paths;

/// The `commgate bench` flags of the check's command line, for both arms alike: what the
/// command line sets wins over each arm's own `commgate.toml`, as it would for `bench`.
pub(super) fn bench_flags(args: &CheckArgs) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            out.push(format!("--{name}").into());
            out.push(v.into());
        }
    };
    let s = &args.bench.settings;
    let name = |v: &dyn Fn() -> Option<clap::builder::PossibleValue>| v().map(|p| p.get_name().to_string());
    flag("backend", s.backend.and_then(|b| name(&|| clap::ValueEnum::to_possible_value(&b))));
    flag("dtype", s.dtype.and_then(|d| name(&|| clap::ValueEnum::to_possible_value(&d))));
    flag("world-size", s.world_size.map(|v| v.to_string()));
    flag("payload-elements", s.payload_elements.map(|v| v.to_string()));
    flag("compute-dim", s.compute_dim.map(|v| v.to_string()));
    flag("warmup", s.warmup.map(|v| v.to_string()));
    flag("repeats", s.repeats.map(|v| v.to_string()));
    flag("timeout", s.timeout.map(|v| v.to_string()));
    flag("run-label", s.run_label.clone());
    flag("environment-profile", s.environment_profile.clone());
    flag("nccl-algo", s.nccl_algo.map(|v| v.to_string()));
    flag("nccl-proto", s.nccl_proto.map(|v| v.to_string()));
    flag("workload", args.workload.clone());
    flag("seed", Some(args.bench.seed.to_string()));
    if args.bench.allow_single_rank {
        out.push("--allow-single-rank".into());
    }
    out.push("--quiet".into());
    out
}

/// What a paired check refuses before anything runs (exit 2, no report): it has no base to
/// measure, or it was asked for something only the stored mode does.
fn refuse(cfg: &CheckConfig, base: Option<&BaseCommit>) -> Result<()> {
    if base.is_none() {
        bail!(
            "--paired measures the base commit beside the working tree, and there is none: pass --base REV \
             (in a pull request it is the event's base commit), without --baselines-from-head"
        );
    }
    if launch::from_env(|k| std::env::var(k).ok())?.is_some() {
        bail!(
            "--paired starts each arm's benchmark itself: run it once per machine, not under torchrun, srun or \
             mpirun (they set RANK and WORLD_SIZE)"
        );
    }
    if cfg.workloads.len() > 1 {
        bail!("--paired judges one workload and {} are declared: pick one with --workload", cfg.workloads.len());
    }
    if !cfg.result.is_empty() || !cfg.options.traces.is_empty() {
        bail!(
            "--paired measures both arms itself: drop --result and --traces ([check] capture has each arm \
             capture its own traces)"
        );
    }
    if cfg.runs > 1 {
        bail!("--paired measures one run per arm in every round: drop --runs (--max-rounds sets how many rounds)");
    }
    Ok(())
}

/// One arm's tree and where its settings file is.
struct Tree {
    arm: Arm,
    dir: PathBuf,
    config: Option<PathBuf>,
}

/// The check, to its report: every failure after the refusals is in the report (exit 2).
pub(super) fn run(
    cfg: &CheckConfig,
    base: Option<&BaseCommit>,
    bench_flags: &[OsString],
    config_path: &Path,
    config_given: bool,
) -> Result<CheckReport> {
    refuse(cfg, base)?;
    let Some(base) = base else { bail!("no base commit") };
    let started = Instant::now();
    let delta = cfg.options.compare.min_effect;
    let p = &cfg.paired;
    let plans = Plans::new(p.max_rounds, ALPHA).context("the paired plan")?;
    let setup = PairedSetup {
        base: base.sha.clone(),
        alpha: ALPHA,
        delta,
        max_rounds: p.max_rounds,
        budget_minutes: p.budget_minutes,
        seed: cfg.options.compare.seed,
        prepare: p.prepare.clone(),
        capture: p.capture.clone(),
    };
    let budget = Duration::from_secs_f64(p.budget_minutes * 60.0);
    // A step alone longer than the whole budget has hung (never less than five minutes: a
    // short budget ends the rounds, not the step under way).
    let step_timeout = budget.max(Duration::from_secs(300));
    let fail = |message: String, setup: PairedSetup| {
        gate_paired::failed_with(
            EvaluationError::new(ErrorKind::ArmFailed, message),
            &[],
            setup,
            started.elapsed().as_secs_f64(),
            &cfg.options,
        )
    };
    let worktree = match base.worktree() {
        Ok(w) => w,
        Err(e) => return Ok(fail(format!("the base arm: the base commit could not be checked out: {e}"), setup)),
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let work = tempfile::Builder::new().prefix("commgate-paired-").tempdir().context("a directory for the rounds")?;
    let trees = [Arm::Base, Arm::Head].map(|arm| {
        let dir = if arm == Arm::Base { worktree.dir().to_path_buf() } else { cwd.clone() };
        let config = arm_config(&dir, &cwd, config_path, config_given);
        Tree { arm, dir, config }
    });
    diag::info(format_args!(
        "paired check: base {} in {}, head in the working tree; up to {} rounds or {} minutes",
        base.short(),
        worktree.dir().display(),
        p.max_rounds,
        p.budget_minutes
    ));
    if let Some(line) = &p.prepare {
        for tree in &trees {
            let step = Step {
                what: format!("the {} arm's prepare (`{}`)", tree.arm.as_str(), short(line)),
                program: Program::Shell(line),
                dir: &tree.dir,
                env: arm_env(&tree.dir),
                log: work.path().join(format!("prepare-{}.log", tree.arm.as_str())),
                timeout: step_timeout,
            };
            if let Err(e) = arm::run(&step) {
                let _ = work.keep();
                return Ok(fail(e, setup));
            }
        }
    }
    let exe = std::env::current_exe().context("cannot find this program to run the arms")?;
    let mut last_head: Option<RunResult> = None;
    let mut captured: Vec<Captured> = Vec::new();
    let measured = gate_paired::measure_rounds(
        plans,
        delta,
        setup.seed,
        || started.elapsed() >= budget,
        |arm, round| {
            let Some(tree) = trees.iter().find(|t| t.arm == arm) else { return Err("no tree".to_string()) };
            let mut exposed = Vec::new();
            if let Some(line) = p.capture.as_deref() {
                exposed = capture(tree, round, line, work.path(), &cfg.options.attribute, step_timeout)?;
                captured.push((round, arm, exposed.clone()));
            }
            let result = measure(tree, round, &exe, bench_flags, work.path(), step_timeout)?;
            if arm == Arm::Head {
                last_head = Some(result.clone());
            }
            Ok(gate_paired::ArmRun { result, captured: exposed })
        },
    );
    let elapsed = started.elapsed().as_secs_f64();
    Ok(match measured {
        Ok(evidence) => {
            if let Some(last) = evidence.rounds.last() {
                progress(evidence.rounds.len(), &last.round);
            }
            let mut report = gate_paired::report(evidence, setup, elapsed, last_head, &cfg.options);
            if let Some(paired) = report.paired.as_mut() {
                for r in &mut paired.rounds {
                    r.capture = captured_round(&captured, r.round);
                }
            }
            report
        }
        Err(e) => {
            // The failed step's log is named in the error: it stays.
            let kept = work.keep();
            diag::info(format_args!("the rounds' results and logs are kept in {}", kept.display()));
            gate_paired::failed(&e, setup, elapsed, &cfg.options)
        }
    })
}

/// One arm's captures of one round: the round, the arm, each collective's exposed time (ms).
type Captured = (usize, Arm, Vec<(String, f64)>);

/// One arm's `capture` in one round, its traces attributed: each collective's exposed time.
fn capture(
    tree: &Tree,
    round: usize,
    line: &str,
    work: &Path,
    attribute: &AttributeOptions,
    timeout: Duration,
) -> Result<Vec<(String, f64)>, String> {
    let stem = format!("round-{round}-{}", tree.arm.as_str());
    let out = work.join(format!("{stem}-traces"));
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let command = line.replace("{out}", &shell_quote(&out.to_string_lossy()));
    arm::run(&Step {
        what: format!("capture (`{}`)", short(line)),
        program: Program::Shell(&command),
        dir: &tree.dir,
        env: arm_env(&tree.dir),
        log: work.join(format!("{stem}-capture.log")),
        timeout,
    })?;
    let found = std::fs::read_dir(&out).map(|mut d| d.next().is_some()).unwrap_or(false);
    if !found {
        return Err(format!(
            "capture (`{}`) wrote no trace into {{out}} ({}): have it write its profiler traces there",
            short(line),
            out.display()
        ));
    }
    let a = attribute_paths(&[out], attribute).map_err(|e| format!("capture's traces cannot be attributed: {e}"))?;
    Ok(a.by_collective.values().map(|h| (h.collective.clone(), h.exposed_comm_ms)).collect())
}

/// Round `round`'s captures side by side, by collective.
fn captured_round(captured: &[Captured], round: usize) -> Vec<CapturedCollective> {
    let of = |arm: Arm| captured.iter().find(|(r, a, _)| *r == round && *a == arm).map(|(_, _, v)| v.as_slice());
    let (base, head) = (of(Arm::Base).unwrap_or_default(), of(Arm::Head).unwrap_or_default());
    let mut names: Vec<&String> = base.iter().chain(head).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    let find = |list: &[(String, f64)], n: &str| list.iter().find(|(x, _)| x == n).map(|(_, v)| *v);
    names
        .into_iter()
        .map(|n| CapturedCollective {
            collective: n.clone(),
            base_exposed_ms: find(base, n),
            head_exposed_ms: find(head, n),
        })
        .collect()
}

/// One arm's benchmark, measured once in its tree.
fn measure(
    tree: &Tree,
    round: usize,
    exe: &Path,
    bench_flags: &[OsString],
    work: &Path,
    timeout: Duration,
) -> Result<RunResult, String> {
    let stem = format!("round-{round}-{}", tree.arm.as_str());
    let output = work.join(format!("{stem}.json"));
    let mut args: Vec<OsString> = Vec::new();
    if let Some(c) = &tree.config {
        args.push("--config".into());
        args.push(c.clone().into_os_string());
    }
    args.push("bench".into());
    args.extend(bench_flags.iter().cloned());
    args.push("--output".into());
    args.push(output.clone().into_os_string());
    arm::run(&Step {
        what: "the benchmark".to_string(),
        program: Program::Exec { program: exe, args: &args },
        dir: &tree.dir,
        env: arm_env(&tree.dir),
        log: work.join(format!("{stem}.log")),
        timeout,
    })?;
    let run = result::load_result(&output).map_err(|e| format!("the benchmark's result cannot be read: {e}"))?;
    if let Some(f) = &run.failure {
        return Err(format!("the benchmark failed ({}: {})", f.kind, f.message));
    }
    Ok(run)
}

/// The settings file an arm's benchmark reads: the same path in the arm's tree (a relative
/// `--config`, or the default), when the arm has one; an absolute `--config` outside the
/// working directory is the job's, the same for both arms.
fn arm_config(dir: &Path, cwd: &Path, config_path: &Path, given: bool) -> Option<PathBuf> {
    let rel = if config_path.is_absolute() {
        match config_path.strip_prefix(cwd) {
            Ok(rel) => rel.to_path_buf(),
            Err(_) => return Some(config_path.to_path_buf()),
        }
    } else {
        config_path.to_path_buf()
    };
    let there = dir.join(rel);
    // The default file missing means the defaults; a given one missing is the arm's error.
    (given || there.is_file()).then_some(there)
}

/// Variables an arm's steps get: its own Python environment first, so that its NCCL and cuBLAS
/// (installed by its `prepare`, e.g. `uv sync`) are the ones its benchmark loads.
fn arm_env(dir: &Path) -> Vec<(OsString, OsString)> {
    let venv = dir.join(".venv");
    if !venv.is_dir() {
        return Vec::new();
    }
    let mut env = vec![(OsString::from("VIRTUAL_ENV"), venv.clone().into_os_string())];
    let libs = arm_library_dirs(&venv);
    if !libs.is_empty() {
        let mut paths = libs;
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            env.push(("LD_LIBRARY_PATH".into(), joined));
        }
    }
    env
}

/// `lib/python*/site-packages/nvidia/*/lib` under a virtual environment: where pip and uv put
/// NCCL and cuBLAS.
fn arm_library_dirs(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(pythons) = std::fs::read_dir(venv.join("lib")) else { return out };
    for python in pythons.filter_map(|e| e.ok()) {
        if !python.file_name().to_string_lossy().starts_with("python") {
            continue;
        }
        let Ok(packages) = std::fs::read_dir(python.path().join("site-packages").join("nvidia")) else { continue };
        let mut dirs: Vec<PathBuf> =
            packages.filter_map(|e| e.ok()).map(|e| e.path().join("lib")).filter(|p| p.is_dir()).collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

/// A path as one shell word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A command line for messages: its first 80 characters.
fn short(line: &str) -> String {
    let one: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 80 {
        format!("{}…", one.chars().take(79).collect::<String>())
    } else {
        one
    }
}

/// The last round, on stderr.
fn progress(rounds: usize, round: &commgate_gate::compare::paired::Round) {
    let primary = PairedMetric::ALL[0];
    if let Some(v) = round.of(primary) {
        diag::info(format_args!(
            "paired check: {rounds} rounds; the last round's {} head/base {}",
            primary.label(),
            change(v.exp())
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arms_settings_file_is_the_same_path_in_its_tree() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (base, head) = (tmp.path().join("base"), tmp.path().join("head"));
        for d in [&base, &head] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(head.join("commgate.toml"), "").expect("write");
        let default = Path::new("commgate.toml");
        assert_eq!(arm_config(&head, &head, default, false), Some(head.join("commgate.toml")));
        assert_eq!(arm_config(&base, &head, default, false), None, "no file: the defaults");
        assert_eq!(arm_config(&base, &head, default, true), Some(base.join("commgate.toml")), "given: its error");
        let absolute = head.join("commgate.toml");
        assert_eq!(arm_config(&base, &head, &absolute, true), Some(base.join("commgate.toml")));
        assert_eq!(arm_config(&base, &head, Path::new("/etc/x.toml"), true), Some(PathBuf::from("/etc/x.toml")));
    }

    #[test]
    fn an_arms_own_nccl_and_cublas_come_first() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(arm_env(tmp.path()).is_empty(), "no virtual environment: the job's");
        let lib = tmp.path().join(".venv/lib/python3.12/site-packages/nvidia");
        for pkg in ["nccl", "cublas"] {
            std::fs::create_dir_all(lib.join(pkg).join("lib")).expect("dir");
        }
        let env = arm_env(tmp.path());
        let path = env.iter().find(|(k, _)| k == "LD_LIBRARY_PATH").map(|(_, v)| v.clone()).expect("set");
        let first: Vec<PathBuf> = std::env::split_paths(&path).take(2).collect();
        assert_eq!(first, vec![lib.join("cublas/lib"), lib.join("nccl/lib")]);
        assert!(env.iter().any(|(k, v)| k == "VIRTUAL_ENV" && Path::new(v).ends_with(".venv")));
    }

    #[test]
    fn commands_are_quoted_and_shortened_for_messages() {
        assert_eq!(shell_quote("/tmp/it's"), r"'/tmp/it'\''s'");
        assert_eq!(short("uv   sync\n --frozen"), "uv sync --frozen");
        assert_eq!(short(&"x".repeat(100)).chars().count(), 80);
    }
}
