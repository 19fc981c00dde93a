//! The switchboard: parse, run, map the outcome to an exit code (0 passed, 1 blocked, 2 could
//! not evaluate), print an error once, on one line.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = commgate::cli::Cli::parse();
    match commgate::run(cli) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e) => {
            eprintln!("commgate: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
