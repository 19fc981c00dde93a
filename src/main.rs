//! The switchboard: parse, run, map the outcome to an exit code (0 passed, 1 blocked, 2 could
//! not evaluate), print an error once, on one line (through [`commgate_core::diag`], so that nothing
//! quoted in it can start a line of its own).

use std::process::ExitCode;

use commgate::config::{parse_args, ArgsError};
use commgate_core::diag;

fn main() -> ExitCode {
    let cli = match parse_args(std::env::args_os(), |k| std::env::var(k).ok()) {
        Ok(cli) => cli,
        // `--help` and `--version` go to stdout as clap writes them.
        Err(ArgsError::Clap(e)) if !e.use_stderr() => e.exit(),
        Err(ArgsError::Clap(e)) => {
            diag::usage_error(&e.render().to_string());
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(ArgsError::Value(line)) => {
            diag::error(line);
            return ExitCode::from(2);
        }
    };
    let code = match commgate::run(cli) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            diag::error(format_args!("{e:#}"));
            2
        }
    };
    if commgate_bench::runner::benchmark_thread_abandoned() {
        // A benchmark thread is still running, perhaps inside the driver: nothing may run at
        // exit (CUDA's and NCCL's static destructors would meet it there).
        commgate_bench::cuda::exit_without_destructors(code);
    }
    ExitCode::from(code)
}
