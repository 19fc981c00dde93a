//! Every line commgate writes to stderr: errors, warnings, notes and progress lines, each one
//! line that starts with `commgate: `.
//!
//! Messages quote untrusted text (file names, settings values, names read from a fork's traces
//! or results), and the GitHub Actions runner treats any log line that starts with `::` (or the
//! older `##[`) as a workflow command: a raw line break inside a quoted name could start a line
//! such as `::error title=…::` or `::add-mask::` in a trusted job's log. So [`one_line`] escapes
//! line breaks, every other control character (ANSI escapes included) and the bidirectional
//! controls that reorder what a reader sees, and [`error`], [`warn`], [`note`] and [`info`] put
//! `commgate: ` first: no line commgate writes can begin a workflow command. clap's own usage
//! errors, which are several lines by design, go through [`usage_error`].
//!
//! Writing never fails loudly: a closed stderr loses the line, it does not panic (`eprintln!`
//! would).

use std::fmt::{Display, Write as _};
use std::io::Write as _;

/// `s` on one line: `\n`, `\r` and `\t` as those two-character escapes, every other control
/// character (C0, DEL, C1) and the Unicode line and paragraph separators and bidirectional
/// controls as `\u{…}`. Everything else, backslashes included, is kept as written, so ordinary
/// messages read the same.
pub fn one_line(s: &str) -> String {
    if !s.chars().any(needs_escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Control characters, the Unicode line/paragraph separators, and the bidirectional controls
/// (the "Trojan Source" set: ALM, LRM, RLM, the embeddings, overrides and isolates).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The line [`info`] writes, without its line break: `commgate: ` and the message on one line.
pub fn line(message: impl Display) -> String {
    format!("commgate: {}", one_line(&message.to_string()))
}

/// `commgate: error: …`: why the command could not do its job (`error` in red on a terminal).
pub fn error(message: impl Display) {
    labelled(Paint::Red, "error", message);
}

/// `commgate: warning: …`: something went wrong that does not change the exit code (`warning`
/// in yellow on a terminal).
pub fn warn(message: impl Display) {
    labelled(Paint::Yellow, "warning", message);
}

/// `commgate: LABEL: …` in red on a terminal, for an error of another kind than the user's
/// (`internal error`: a panic, which `main` turns into exit 2).
pub fn line_labelled(label: &str, message: impl Display) {
    labelled(Paint::Red, label, message);
}

/// `commgate: LABEL: message`, the label painted on a terminal, the message on one line.
fn labelled(paint: Paint, label: &str, message: impl Display) {
    let label = paint.label(label, stderr_coloured());
    write_stderr(&format!("commgate: {label}: {}\n", one_line(&message.to_string())));
}

/// Whether output to a stream is coloured: only on a terminal, never when `NO_COLOR` is set to
/// anything (<https://no-color.org>) or `TERM` is `dumb`. Logs, pipes and files get plain text.
pub fn colour_wanted(is_terminal: bool, var: impl Fn(&str) -> Option<String>) -> bool {
    is_terminal && var("NO_COLOR").is_none_or(|v| v.is_empty()) && var("TERM").as_deref() != Some("dumb")
}

fn stderr_coloured() -> bool {
    use std::io::IsTerminal;
    colour_wanted(std::io::stderr().is_terminal(), |k| std::env::var(k).ok())
}

/// The few colours commgate uses, as ANSI SGR codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    Red,
    Yellow,
    Green,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::Red => "31",
            Paint::Yellow => "33",
            Paint::Green => "32",
        }
    }

    /// `text` in this colour when `on`, else as it is. Only commgate's own words are painted:
    /// the escape codes never wrap untrusted text.
    pub fn label(self, text: &str, on: bool) -> String {
        if on {
            format!("\x1b[{}m{text}\x1b[0m", self.code())
        } else {
            text.to_string()
        }
    }
}

/// `commgate: note: …`: something the reader of the exit code should know.
pub fn note(message: impl Display) {
    info(format_args!("note: {message}"));
}

/// `commgate: …`: progress and results (a file written, a comment posted).
pub fn info(message: impl Display) {
    write_stderr(&format!("{}\n", line(message)));
}

/// clap's usage error (error, usage and tip lines), its lines kept but each made safe: a
/// value quoted from the command line or the environment may carry a line break, so a line
/// that would begin a workflow command gets `commgate: ` in front, and other control
/// characters are escaped.
pub fn usage_error(rendered: &str) {
    write_stderr(&usage_lines(rendered));
}

fn usage_lines(rendered: &str) -> String {
    let mut out = String::with_capacity(rendered.len() + 16);
    for raw in rendered.lines() {
        let text = one_line(raw);
        let trimmed = text.trim_start();
        if trimmed.starts_with("::") || trimmed.starts_with("##[") {
            out.push_str("commgate: ");
        }
        out.push_str(&text);
        out.push('\n');
    }
    out
}

/// One write, so that lines from two threads never interleave mid-line; a closed stderr is
/// ignored.
fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_and_controls_are_escaped_and_plain_text_is_kept() {
        assert_eq!(one_line("a.json: bad value"), "a.json: bad value");
        assert_eq!(one_line(r"C:\dir \n stays"), r"C:\dir \n stays");
        assert_eq!(one_line("x\n::error title=x::pwned"), r"x\n::error title=x::pwned");
        assert_eq!(one_line("a\r\nb\tc"), r"a\r\nb\tc");
        assert_eq!(one_line("\u{1b}[2Kgone\u{7}"), r"\u{1b}[2Kgone\u{7}");
        assert_eq!(one_line("nel\u{85}del\u{7f}"), r"nel\u{85}del\u{7f}");
        assert_eq!(one_line("ls\u{2028}ps\u{2029}"), r"ls\u{2028}ps\u{2029}");
        assert_eq!(one_line("\u{202e}evil\u{2066}\u{200f}"), r"\u{202e}evil\u{2066}\u{200f}");
        assert_eq!(one_line("naïve — ∆ 名前"), "naïve — ∆ 名前");
    }

    #[test]
    fn no_message_can_start_a_line_with_a_workflow_command() {
        for hostile in
            ["::error title=x::pwned", "\n::error::x", "ok\r::warning::y", "a\u{2028}::notice::z", "\n##[error]x"]
        {
            let written = format!("{}\n", line(format_args!("error: {hostile}")));
            assert_eq!(written.lines().count(), 1, "{written:?}");
            assert!(written.starts_with("commgate: error: "), "{written:?}");
        }
    }

    #[test]
    fn usage_errors_keep_their_lines_but_none_begins_a_command() {
        let rendered =
            "error: unexpected argument 'x\n::error title=x::pwned' found\n\n  ##[group]y\n\nUsage: commgate check\n";
        let safe = usage_lines(rendered);
        assert_eq!(
            safe,
            "error: unexpected argument 'x\ncommgate: ::error title=x::pwned' found\n\ncommgate:   ##[group]y\n\nUsage: commgate check\n"
        );
        assert!(safe.lines().all(|l| !l.trim_start().starts_with("::") && !l.trim_start().starts_with("##[")));
    }
}
