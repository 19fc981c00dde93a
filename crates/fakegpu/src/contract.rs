//! The contract checker's voice: a call that breaks the libraries' contract is a [`Fail::Violation`],
//! reported as one line naming the call and then the process aborts, as a sanitizer does; the
//! ledger (`COMMGATE_FAKEGPU_LEDGER`) gets every handle made and destroyed, so a test reads what a
//! run left alive even when the process ended with `_exit`.

use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Every stderr line of the checker starts with this; the test suite asserts none appears.
pub const VIOLATION: &str = "commgate-fakegpu: contract violation";

/// Why a call did not succeed.
#[derive(Debug, Clone, PartialEq)]
pub enum Fail<S> {
    /// What the real library answers (an error status): the caller is expected to handle it.
    Status(S),
    /// A broken contract: undefined behaviour on a real GPU. Reported, then the process aborts.
    Violation(String),
}

/// A library's status codes: what success answers, and what a null out-pointer does.
pub trait Status: Sized {
    const SUCCESS: Self;
    const INVALID: Self;
}

/// A failure with the library's status `code`.
pub fn status<S>(code: S) -> Fail<S> {
    Fail::Status(code)
}

/// Runs one entry point: success, the status it failed with, or the violation reported and the
/// process aborted.
pub fn answer<S: Status>(name: &str, body: impl FnOnce() -> Result<(), Fail<S>>) -> S {
    match body() {
        Ok(()) => S::SUCCESS,
        Err(Fail::Status(code)) => code,
        Err(Fail::Violation(what)) => report(name, &what),
    }
}

/// Writes `value` through an out-pointer the caller passed (the library's invalid-value status
/// when null).
pub(crate) fn put<T, S: Status>(out: *mut T, value: T) -> Result<(), Fail<S>> {
    if out.is_null() {
        return Err(Fail::Status(S::INVALID));
    }
    // SAFETY: a non-null out-pointer of the entry point's type, which the caller provides.
    unsafe { out.write(value) };
    Ok(())
}

/// A violation of the contract, as [`Fail::Violation`].
pub fn violation<S>(what: impl Display) -> Fail<S> {
    Fail::Violation(what.to_string())
}

/// Reports a violation of `call` and aborts the process.
pub fn report(call: &str, what: &str) -> ! {
    let line = format!("{VIOLATION} in {call}: {what}");
    ledger(&format!("! {call}: {what}"));
    eprintln!("{line}");
    std::process::abort()
}

/// The ledger's file, opened once (appending; created when missing).
fn ledger_file() -> &'static Option<Mutex<File>> {
    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = crate::config::get().ledger.clone()?;
        OpenOptions::new().create(true).append(true).open(path).ok().map(Mutex::new)
    })
}

/// Appends one line to the ledger, when there is one.
pub fn ledger(line: &str) {
    if let Some(file) = ledger_file() {
        let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(file, "{line}");
    }
}

/// A handle of `kind` was made (`+`) or destroyed (`-`).
pub fn made(kind: &str, id: u64) {
    ledger(&format!("+ {kind} {id:#x}"));
}

pub fn destroyed(kind: &str, id: u64) {
    ledger(&format!("- {kind} {id:#x}"));
}

/// What a ledger says: the handles still alive (kind and id, in the order they were made) and
/// the violations reported. For tests, which read the file after the process ended.
pub fn read_ledger(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    // Every handle made, in order (`None` once destroyed), and where each live one of a kind and
    // id sits: one pass, however long the run.
    let mut made: Vec<Option<(String, String)>> = Vec::new();
    let mut live: std::collections::HashMap<(String, String), Vec<usize>> = std::collections::HashMap::new();
    let mut violations = Vec::new();
    for line in text.lines() {
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("+"), Some(kind), Some(id)) => {
                let key = (kind.to_string(), id.to_string());
                live.entry(key.clone()).or_default().push(made.len());
                made.push(Some(key));
            }
            (Some("-"), Some(kind), Some(id)) => {
                let at = live.get_mut(&(kind.to_string(), id.to_string())).and_then(Vec::pop);
                if let Some(slot) = at.and_then(|at| made.get_mut(at)) {
                    *slot = None;
                }
            }
            (Some("!"), _, _) => violations.push(line[2..].to_string()),
            _ => {}
        }
    }
    (made.into_iter().flatten().collect(), violations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_tells_what_is_left_and_what_was_broken() {
        let text = "+ stream 0x10\n+ event 0x20\n- stream 0x10\n+ stream 0x10\n! cuEventQuery: never recorded\n";
        let (alive, violations) = read_ledger(text);
        assert_eq!(alive, [("event".to_string(), "0x20".to_string()), ("stream".to_string(), "0x10".to_string())]);
        assert_eq!(violations, ["cuEventQuery: never recorded"]);
    }
}
