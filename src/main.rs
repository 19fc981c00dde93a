//! The switchboard: parse, run, map the outcome to an exit code (0 passed, 1 blocked, 2 could
//! not evaluate), print an error once, on one line.

use std::process::ExitCode;

use commgate::config::{parse_args, ArgsError};

fn main() -> ExitCode {
    let cli = match parse_args(std::env::args_os(), |k| std::env::var(k).ok()) {
        Ok(cli) => cli,
        Err(ArgsError::Clap(e)) => e.exit(),
        Err(ArgsError::Value(line)) => {
            eprintln!("commgate: error: {line}");
            return ExitCode::from(2);
        }
    };
    match commgate::run(cli) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e) => {
            eprintln!("commgate: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
