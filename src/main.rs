//! The switchboard: parse, run, map the outcome to an exit code (0 passed, 1 blocked, 2 could
//! not evaluate), print an error once, on one line (through [`commgate_core::diag`], so that nothing
//! quoted in it can start a line of its own). A panic, which is always a bug, keeps that contract
//! too: exit 2 and one `commgate: internal error: …` line that says where to report it.

use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::Mutex;

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
    panic::set_hook(Box::new(remember_panic));
    let code = match panic::catch_unwind(AssertUnwindSafe(|| run(cli))) {
        Ok(Ok(outcome)) => outcome.exit_code(),
        Ok(Err(e)) => {
            diag::error(format_args!("{e:#}"));
            2
        }
        Err(_) => {
            diag::line_labelled("internal error", internal_error(last_panic().as_deref()));
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

/// The command, with the hidden trigger the binary tests use to check the panic contract
/// (`COMMGATE_TEST_PANIC=1`): no input can reach a panic on purpose, so a test needs one.
fn run(cli: commgate::cli::Cli) -> anyhow::Result<commgate::Outcome> {
    #[expect(clippy::panic, reason = "the hidden trigger of the panic contract's test")]
    if std::env::var_os("COMMGATE_TEST_PANIC").is_some_and(|v| v == "1") {
        panic!("the test trigger COMMGATE_TEST_PANIC=1\nsecond line");
    }
    commgate::run(cli)
}

/// What the last panic said and where, kept by the hook instead of the default multi-line
/// message; a panic that a backend catches on purpose (a CPU rank, a CUDA probe) prints nothing.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn remember_panic(info: &panic::PanicHookInfo<'_>) {
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
    if let Ok(mut last) = LAST_PANIC.lock() {
        // A scoped thread's panic is re-raised by its scope with a generic message: keep the first.
        if last.is_none() || !message.starts_with("a scoped thread panicked") {
            *last = Some(format!("{message}{at}"));
        }
    }
}

fn last_panic() -> Option<String> {
    LAST_PANIC.lock().ok().and_then(|mut l| l.take())
}

/// The one line a panic ends with: what it said, where, and what to do.
fn internal_error(panic: Option<&str>) -> String {
    format!(
        "{} (a bug in commgate, not in your input: please report it at \
         https://github.com/commgate/commgate/issues with the command you ran)",
        panic.unwrap_or("a panic without a message")
    )
}
