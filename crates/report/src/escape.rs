//! The escaping functions: one per output context a report writes an untrusted string into
//! (anything read from a result, report, trace, store, file name or environment). Each says what
//! it guarantees; a renderer passes every untrusted string through exactly one of them, at the
//! place it enters the output, with a length limit from the constants below.
//!
//! Shared rules: line breaks and other control characters never survive (a value stays on its
//! line, so it cannot end a table row, open a block or start a workflow command), and bidi and
//! invisible characters (U+202A–U+202E, U+2066–U+2069, U+200B–U+200F, U+FEFF and kin) are shown
//! as U+FFFD (Markdown) or as a `\u{..}` escape (terminal), so what a reviewer reads is what the
//! bytes say. Every function bounds its output: a longer value ends in `…`, cut between escapes,
//! never inside one, so one huge name cannot push the verdict or the reasons out of a comment.

/// Names (collectives, files, labels, hardware and software names, NCCL settings) in a table
/// cell or a line: at most this many characters of output.
pub const NAME: usize = 200;
/// Paths and store names set in code.
pub const PATH: usize = 300;
/// Reasons, failure messages and notes: at most this many characters of output.
pub const TEXT: usize = 2_000;
/// A mermaid chart's axis label.
pub const LABEL: usize = 40;

/// Characters that render as nothing or reorder the text around them: bidi embeddings,
/// overrides and isolates, zero-width spaces and joiners, directional marks, the byte order
/// mark, line and paragraph separators, invisible operators and tag characters.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{E0000}'..='\u{E007F}')
}

/// Collects pieces (each one escape, never split) into at most `max` characters: when the next
/// piece would not fit, the output is cut back to `max - 1` characters' worth of whole pieces
/// and ends in `…`.
struct Bounded {
    out: String,
    chars: usize,
    max: usize,
    /// The byte length of `out` when it last held at most `max - 1` characters.
    room_for_ellipsis: usize,
    full: bool,
}

impl Bounded {
    fn new(max: usize) -> Self {
        Bounded { out: String::new(), chars: 0, max, room_for_ellipsis: 0, full: false }
    }

    /// Appends `piece` whole; returns false (and ends the output with `…`) once it is full.
    fn push(&mut self, piece: &str) -> bool {
        if self.full {
            return false;
        }
        let n = piece.chars().count();
        if self.chars + n > self.max {
            self.out.truncate(self.room_for_ellipsis);
            if self.max > 0 {
                self.out.push('…');
            }
            self.full = true;
            return false;
        }
        self.out.push_str(piece);
        self.chars += n;
        if self.chars < self.max {
            self.room_for_ellipsis = self.out.len();
        }
        true
    }

    fn push_char(&mut self, c: char) -> bool {
        self.push(c.encode_utf8(&mut [0; 4]))
    }
}

/// Markdown inline text (a paragraph, a list item, a heading's tail), rendered on GitHub as the
/// literal characters of `s`, in at most `max` characters. Guarantees:
/// - one line: line breaks and control characters become spaces; leading and trailing
///   whitespace is dropped (four leading spaces would open a code block);
/// - no HTML: `<`, `>` and `&` become entities;
/// - no Markdown: `\` `` ` `` `*` `_` `{` `}` `[` `]` `(` `)` `#` `|` `~` `$` get a backslash
///   (CommonMark's escape for ASCII punctuation; `\|` is also GFM's pipe escape, so the text is
///   safe in a table cell); `+ - . ! = :` get one at the start, and `.` after leading digits,
///   where they could open a list, a heading underline or a workflow command (`::warning::`);
/// - no pings, references or links: `@`, `#` before a digit, `GH-` before a digit, `://` and
///   `www.` are set in code (`` `@` ``), which GitHub never turns into a mention, an issue
///   reference or an autolink; the characters stay visible and copyable;
/// - bidi and invisible characters ([`is_invisible`]) show as U+FFFD.
pub fn md_text(s: &str, max: usize) -> String {
    // Every input character yields at least one output character, so a few past `max` decide
    // whether it fits; the rest is never read (a 200,000-character name costs nothing more).
    // Control characters become spaces below, so they are trimmed with the whitespace: a value
    // that starts with `\u{1}` and spaces must not open an indented code block either.
    let blank = |c: char| c.is_whitespace() || c.is_control();
    let chars: Vec<char> = s.trim_matches(blank).chars().take(max.saturating_add(8)).collect();
    let mut out = Bounded::new(max);
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let next = |k: usize| chars.get(i + k).copied().unwrap_or('\0');
        let starts = |word: &str| {
            word.chars().enumerate().all(|(k, w)| chars.get(i + k).is_some_and(|c| c.eq_ignore_ascii_case(&w)))
        };
        let leading_digits = i > 0 && chars.iter().take(i).all(char::is_ascii_digit);
        let (piece, used): (String, usize) = match c {
            '@' => ("`@`".into(), 1),
            '#' if next(1).is_ascii_digit() => ("`#`".into(), 1),
            'g' | 'G' if starts("gh-") && next(3).is_ascii_digit() => {
                (format!("`{}`", chars.iter().skip(i).take(3).collect::<String>()), 3)
            }
            'w' | 'W' if starts("www.") => (format!("`{}`", chars.iter().skip(i).take(4).collect::<String>()), 4),
            ':' if starts("://") => ("`://`".into(), 3),
            '<' => ("&lt;".into(), 1),
            '>' => ("&gt;".into(), 1),
            '&' => ("&amp;".into(), 1),
            '\\' | '`' | '*' | '_' | '{' | '}' | '[' | ']' | '(' | ')' | '#' | '|' | '~' | '$' => (format!("\\{c}"), 1),
            '+' | '-' | '.' | '!' | '=' | ':' if i == 0 => (format!("\\{c}"), 1),
            '.' if leading_digits => ("\\.".into(), 1),
            c if c.is_control() => (" ".into(), 1),
            c if is_invisible(c) => ("\u{FFFD}".into(), 1),
            c => (c.to_string(), 1),
        };
        if !out.push(&piece) {
            break;
        }
        i += used;
    }
    let mut text = out.out;
    // A control character at the end became a space: trailing spaces could make a hard break.
    let keep = text.trim_end().len();
    text.truncate(keep);
    text
}

/// A GFM table cell: [`md_text`]'s guarantees (its `|` is escaped as `\|`, GFM's pipe escape,
/// and it never writes a code span holding a pipe), so the row keeps its cells.
pub fn md_cell(s: &str, max: usize) -> String {
    md_text(s, max)
}

/// A code span for inline text: the characters of `s` (at most `max` of them, then `…`) shown
/// literally in code, where GitHub renders no Markdown, no HTML, no mention and no link. The
/// fence is one backtick longer than the longest backtick run inside, padded with a space when
/// the content starts or ends with a backtick or a space; control characters become spaces and
/// invisible ones U+FFFD. A value holding `<` or `>` is written as [`md_text`] instead, so the
/// comment's source never holds a raw `<!--`. Not for a table cell (a `|` would split it): use
/// [`code_cell`].
pub fn code_span(s: &str, max: usize) -> String {
    code(s, max, false)
}

/// A code span inside a GFM table cell: [`code_span`], with `|` written as `\|` (GFM unescapes
/// it inside the cell, code spans included), so the row keeps its cells.
pub fn code_cell(s: &str, max: usize) -> String {
    code(s, max, true)
}

fn code(s: &str, max: usize, in_table: bool) -> String {
    // A code span shows `<!--` raw in the comment's source, where the sticky comment is found
    // by its marker: such a value is written as escaped text instead, just as literal.
    if s.contains(['<', '>']) {
        return md_text(s, max);
    }
    let taken: Vec<char> = s.chars().take(max.saturating_add(1)).collect();
    let cut = taken.len() > max;
    let kept = if cut { max.saturating_sub(1) } else { taken.len() };
    let mut inner = String::new();
    for &c in taken.iter().take(kept) {
        match c {
            '|' if in_table => inner.push_str("\\|"),
            c if c.is_control() => inner.push(' '),
            c if is_invisible(c) => inner.push('\u{FFFD}'),
            c => inner.push(c),
        }
    }
    if cut {
        inner.push('…');
    }
    let longest = inner.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if inner.is_empty() {
        return "` `".to_string();
    }
    let pad = if inner.starts_with(['`', ' ']) || inner.ends_with(['`', ' ']) { " " } else { "" };
    format!("{fence}{pad}{inner}{pad}{fence}")
}

/// A mermaid `xychart-beta` string literal, quotes included: ASCII letters and digits, space
/// and `_ . , : / + - ( )` kept, every other character (quotes, backticks, line breaks, `#`
/// entities, `%%` comments, `;`, brackets, anything non-ASCII) written as `_`, at most `max`
/// characters inside the quotes (then `...`). It can end neither the string, nor the chart,
/// nor the code block around it.
pub fn mermaid_label(s: &str, max: usize) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || " _.,:/+-()".contains(c);
    let mut inner: String = s.chars().take(max.saturating_add(1)).map(|c| if safe(c) { c } else { '_' }).collect();
    if inner.chars().count() > max {
        inner = inner.chars().take(max.saturating_sub(3)).collect();
        inner.push_str("...");
    }
    format!("\"{inner}\"")
}

/// The content of an HTML comment (`<!-- {here} -->`), at most `max` characters: `<`, `>` and
/// `&` become entities, so it can neither close the comment (`-->`, `--!>`) nor open another
/// one, not even a second report marker; control characters become spaces and invisible ones
/// U+FFFD.
pub fn html_comment(s: &str, max: usize) -> String {
    let mut out = Bounded::new(max);
    for c in s.chars() {
        let fits = match c {
            '<' => out.push("&lt;"),
            '>' => out.push("&gt;"),
            '&' => out.push("&amp;"),
            c if c.is_control() => out.push_char(' '),
            c if is_invisible(c) => out.push_char('\u{FFFD}'),
            c => out.push_char(c),
        };
        if !fits {
            break;
        }
    }
    out.out
}

/// Plain text for a terminal or a CI log, at most `max` characters: control characters (escape
/// sequences, line breaks, carriage returns) and invisible ones are written as Rust escapes
/// (`\u{1b}`, `\n`, `\u{202e}`) instead of acting, and a value that starts with `::` gets a
/// backslash first, so it cannot issue a GitHub Actions workflow command (`::warning::`,
/// `::add-mask::`) from the start of a line.
pub fn plain(s: &str, max: usize) -> String {
    let mut out = Bounded::new(max);
    if s.trim_start().starts_with("::") {
        out.push_char('\\');
    }
    for c in s.chars() {
        let fits = if c.is_control() || is_invisible(c) {
            out.push(&c.escape_default().to_string())
        } else {
            out.push_char(c)
        };
        if !fits {
            break;
        }
    }
    out.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md_text_escapes_markdown_and_html() {
        assert_eq!(md_text("all_reduce", TEXT), "all\\_reduce");
        assert_eq!(md_text("\\`*_{}[]()#|~$", TEXT), "\\\\\\`\\*\\_\\{\\}\\[\\]\\(\\)\\#\\|\\~\\$");
        assert_eq!(md_text("- 1.5 ms +2 !", TEXT), "\\- 1.5 ms +2 !");
        assert_eq!(md_text("+x", TEXT), "\\+x");
        assert_eq!(md_text("12. x", TEXT), "12\\. x");
        assert_eq!(md_text("a<b>&c", TEXT), "a&lt;b&gt;&amp;c");
        assert_eq!(md_text("one\ntwo\r\nthree", TEXT), "one two  three");
        assert_eq!(md_text("    indented\n", TEXT), "indented");
        assert_eq!(md_text("plain text 42", TEXT), "plain text 42");
        assert_eq!(md_text("ünïcode", TEXT), "ünïcode");
        assert_eq!(md_text("::warning::x", TEXT), "\\::warning::x");
    }

    #[test]
    fn md_text_defuses_mentions_references_and_links() {
        assert_eq!(md_text("@org/team", TEXT), "`@`org/team");
        assert_eq!(md_text("see #12 and GH-3, not #x", TEXT), "see `#`12 and `GH-`3, not \\#x");
        assert_eq!(md_text("https://evil.example/x", TEXT), "https`://`evil.example/x");
        assert_eq!(md_text("WWW.evil.example", TEXT), "`WWW.`evil.example");
        assert_eq!(md_text("a@b.c", TEXT), "a`@`b.c");
    }

    #[test]
    fn md_text_shows_bidi_and_invisible_characters() {
        assert_eq!(md_text("a\u{202E}b\u{2066}c\u{200B}d\u{FEFF}", TEXT), "a\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}");
        assert_eq!(md_text("⚠️ ok", TEXT), "⚠️ ok", "emoji variation selectors stay");
    }

    #[test]
    fn long_values_end_in_an_ellipsis_between_escapes() {
        let out = md_text(&"x".repeat(200_000), NAME);
        assert_eq!(out.chars().count(), NAME);
        assert!(out.ends_with("x…"));
        let out = md_text(&"<".repeat(100), 10);
        assert_eq!(out, "&lt;&lt;…", "never half an entity");
        assert_eq!(md_text("exactly", 7), "exactly");
        assert_eq!(md_text("exactly!", 7), "exactl…");
        assert_eq!(plain(&"\n".repeat(50), 9), "\\n\\n\\n\\n…");
        assert_eq!(html_comment(&"a".repeat(50), 5), "aaaa…");
        assert_eq!(mermaid_label(&"a".repeat(50), 10), "\"aaaaaaa...\"");
        assert_eq!(code_span(&"a".repeat(50), 5), "`aaaa…`");
        assert_eq!(code_span("abcde", 5), "`abcde`");
    }

    #[test]
    fn code_spans_use_a_longer_fence_and_keep_tables_whole() {
        assert_eq!(code_span("a``b", PATH), "```a``b```");
        assert_eq!(code_span("`x", PATH), "`` `x ``");
        assert_eq!(code_span("", PATH), "` `");
        assert_eq!(code_span("a\nb\u{202E}", PATH), "`a b\u{FFFD}`");
        assert_eq!(code_span("a|b", PATH), "`a|b`");
        assert_eq!(code_cell("a|b", PATH), "`a\\|b`");
        assert_eq!(code_span("<!-- commgate-report -->", PATH), "&lt;!-- commgate-report --&gt;");
    }

    #[test]
    fn mermaid_labels_keep_only_safe_characters() {
        assert_eq!(mermaid_label("overlap median", LABEL), "\"overlap median\"");
        assert_eq!(mermaid_label("a\"]\n```\n# ✅ accept", LABEL), "\"a________ _ accept\"");
        assert_eq!(mermaid_label("%%{init}%%;#quot;", LABEL), "\"___init_____quot_\"");
    }

    #[test]
    fn html_comments_cannot_be_closed() {
        assert_eq!(html_comment("x --> <!-- commgate-report -->", TEXT), "x --&gt; &lt;!-- commgate-report --&gt;");
        assert_eq!(html_comment("a\nb", TEXT), "a b");
    }

    #[test]
    fn plain_defuses_control_characters_and_workflow_commands() {
        assert_eq!(plain("all_reduce", TEXT), "all_reduce");
        assert_eq!(plain("a\u{1b}[31mb\nc", TEXT), "a\\u{1b}[31mb\\nc");
        assert_eq!(plain("a\u{202E}b", TEXT), "a\\u{202e}b");
        assert_eq!(plain("élan", TEXT), "élan");
        assert_eq!(plain("::add-mask::x", TEXT), "\\::add-mask::x");
        assert_eq!(plain("  ::warning::x", TEXT), "\\  ::warning::x");
        assert_eq!(plain("a::b", TEXT), "a::b");
    }

    #[test]
    fn leading_control_characters_cannot_indent_a_code_block() {
        let text = md_text("\u{1}\u{7f}    code?", TEXT);
        assert!(!text.starts_with(' '), "{text:?}");
        assert_eq!(text, "code?");
    }
}
