//! The one table writer of the text and Markdown reports. It owns how a table is drawn in each
//! output [`Context`] (alignment, the rule under the heads, cell separators) and how a string
//! from a file is made safe for a cell there (`Context::escape`: [`plain`] in a terminal,
//! [`md_cell`] in Markdown). A renderer says only which columns and which rows.
//!
//! - **Text**: columns padded to their widest cell (counted in characters, so non-ASCII names stay
//!   aligned), two spaces apart, names left and numbers right, no trailing whitespace.
//! - **Markdown**: a GFM table, `---` under a left column and `---:` under a right one; the cells
//!   arrive escaped (through `Context::escape` or, for a cell built of several parts, the
//!   [`super::escape`] function of each part), so a `|` in a name never splits a row.

use super::escape::{md_cell, plain};

/// Column alignment in the text and Markdown tables: names left, numbers right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A column: its head and its alignment.
pub(crate) type Column<'a> = (&'a str, Align);

/// Where a table is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A terminal or a CI log.
    Text,
    /// GitHub-flavoured Markdown (a PR comment, a job summary).
    Markdown,
}

impl Context {
    /// `s`, a string from a trace, a store or a file, safe in a cell of this context and at most
    /// `max` characters long.
    pub(crate) fn escape(self, s: &str, max: usize) -> String {
        match self {
            Context::Text => plain(s, max),
            Context::Markdown => md_cell(s, max),
        }
    }

    /// The table of `rows` under `columns` in this context (text with its dashed rule).
    pub(crate) fn table(self, columns: &[Column<'_>], rows: &[Vec<String>]) -> String {
        match self {
            Context::Text => text(columns, rows),
            Context::Markdown => markdown(columns, rows),
        }
    }
}

/// An aligned text table: the heads, a dashed rule, then the rows.
pub(crate) fn text(columns: &[Column<'_>], rows: &[Vec<String>]) -> String {
    aligned(columns, rows, true)
}

/// How wide a text table may be unless `--wide` asks for every column: a terminal or CI log of
/// 100 characters.
pub(crate) const TEXT_WIDTH: usize = 100;

/// An aligned text table of at most `width` characters: columns are left out in `drop_order`
/// (indices, least important first) until the rest fit, the first column never; a table that
/// fits keeps them all. Returns the table and the heads of the columns left out, in table order.
pub(crate) fn text_fitted(
    columns: &[Column<'_>],
    rows: &[Vec<String>],
    drop_order: &[usize],
    width: Option<usize>,
) -> (String, Vec<String>) {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (head, _))| {
            rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).fold(head.chars().count(), usize::max)
        })
        .collect();
    let mut kept: Vec<bool> = vec![true; columns.len()];
    let total = |kept: &[bool]| {
        let shown: Vec<usize> = widths.iter().zip(kept).filter(|(_, &k)| k).map(|(w, _)| *w).collect();
        shown.iter().sum::<usize>() + 2 * shown.len().saturating_sub(1)
    };
    if let Some(max) = width {
        for &i in drop_order.iter().filter(|&&i| i > 0 && i < columns.len()) {
            if total(&kept) <= max {
                break;
            }
            kept[i] = false;
        }
    }
    let pick =
        |row: &[String]| -> Vec<String> { row.iter().zip(&kept).filter(|(_, &k)| k).map(|(c, _)| c.clone()).collect() };
    let shown_columns: Vec<Column<'_>> = columns.iter().zip(&kept).filter(|(_, &k)| k).map(|(c, _)| *c).collect();
    let shown_rows: Vec<Vec<String>> = rows.iter().map(|r| pick(r)).collect();
    let dropped = columns.iter().zip(&kept).filter(|(_, &k)| !k).map(|((h, _), _)| h.to_string()).collect();
    (text(&shown_columns, &shown_rows), dropped)
}

/// The line under a fitted table that names what was left out, or nothing.
pub(crate) fn left_out_line(dropped: &[String]) -> String {
    if dropped.is_empty() {
        String::new()
    } else {
        let text =
            format!("(left out to fit {TEXT_WIDTH} characters: {}; --wide shows every column)", dropped.join(", "));
        wrap(&text, TEXT_WIDTH)
    }
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word stays whole),
/// each ending in a newline.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// An aligned text table without the dashed rule (the `baseline list` and `show` tables).
pub(crate) fn text_unruled(columns: &[Column<'_>], rows: &[Vec<String>]) -> String {
    aligned(columns, rows, false)
}

fn aligned(columns: &[Column<'_>], rows: &[Vec<String>], ruled: bool) -> String {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (head, _))| {
            let cells = rows.iter().filter_map(|row| row.get(i)).map(|c| c.chars().count());
            cells.fold(head.chars().count(), usize::max)
        })
        .collect();
    let heads: Vec<String> = columns.iter().map(|(head, _)| head.to_string()).collect();
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let lines = [Some(&heads), ruled.then_some(&rule)].into_iter().flatten().chain(rows);
    lines.map(|row| format!("{}\n", aligned_line(columns, &widths, row))).collect()
}

/// One line of cells, each padded to its column's width on its alignment's side, the line's
/// trailing spaces dropped. A missing cell is blank.
fn aligned_line(columns: &[Column<'_>], widths: &[usize], row: &[String]) -> String {
    let cells: Vec<String> = columns
        .iter()
        .zip(widths)
        .enumerate()
        .map(|(i, ((_, align), &width))| {
            let cell = row.get(i).map_or("", String::as_str);
            match align {
                Align::Left => format!("{cell:<width$}"),
                Align::Right => format!("{cell:>width$}"),
            }
        })
        .collect();
    cells.join("  ").trim_end().to_string()
}

/// A GFM table; the cells must already be escaped.
pub(crate) fn markdown(columns: &[Column<'_>], rows: &[Vec<String>]) -> String {
    let heads: Vec<&str> = columns.iter().map(|(head, _)| *head).collect();
    let rule: Vec<&str> = columns
        .iter()
        .map(|(_, align)| match align {
            Align::Left => "---",
            Align::Right => "---:",
        })
        .collect();
    let mut out = format!("{}\n|{}|\n", markdown_line(&heads), rule.join("|"));
    for row in rows {
        out.push_str(&markdown_line(row));
        out.push('\n');
    }
    out
}

/// A GFM table of label–value pairs under blank heads (GFM requires a head row), both columns
/// left; the cells must already be escaped.
pub(crate) fn markdown_pairs(rows: &[[String; 2]]) -> String {
    let mut out = String::from("| | |\n|---|---|\n");
    for row in rows {
        out.push_str(&markdown_line(row));
        out.push('\n');
    }
    out
}

fn markdown_line<S: AsRef<str>>(cells: &[S]) -> String {
    let cells: Vec<&str> = cells.iter().map(AsRef::as_ref).collect();
    format!("| {} |", cells.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_table_leaves_out_columns_in_order_until_it_fits_and_names_them() {
        let heads: Vec<String> = (0..12).map(|i| format!("column {i:02}")).collect();
        let columns: Vec<Column<'_>> = heads.iter().map(|h| (h.as_str(), Align::Right)).collect();
        let rows = vec![(0..12).map(|i| format!("{i}")).collect::<Vec<String>>()];
        let order: Vec<usize> = (0..12).rev().collect();
        let (fitted, dropped) = text_fitted(&columns, &rows, &order, Some(TEXT_WIDTH));
        assert!(fitted.lines().all(|l| l.chars().count() <= TEXT_WIDTH), "{fitted}");
        assert!(fitted.starts_with("column 00  column 01"), "the first columns stay: {fitted}");
        assert_eq!(dropped, ["column 09", "column 10", "column 11"]);
        let (all, none) = text_fitted(&columns, &rows, &order, None);
        assert!(none.is_empty() && all.lines().next().is_some_and(|l| l.ends_with("column 11")));
        let note = left_out_line(&dropped);
        assert!(note.lines().all(|l| l.chars().count() <= TEXT_WIDTH) && note.contains("--wide"), "{note}");
        assert_eq!(left_out_line(&[]), "");
    }

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec!["a".to_string(), "1.5".to_string(), "x".to_string()],
            vec!["longer".to_string(), "10.25".to_string(), "".to_string()],
        ]
    }

    const COLUMNS: [Column<'static>; 3] = [("name", Align::Left), ("ms", Align::Right), ("note", Align::Left)];

    #[test]
    fn text_aligns_names_left_and_numbers_right_without_trailing_spaces() {
        assert_eq!(
            text(&COLUMNS, &rows()),
            "name       ms  note\n------  -----  ----\na         1.5  x\nlonger  10.25\n"
        );
        assert_eq!(text_unruled(&COLUMNS, &rows()), "name       ms  note\na         1.5  x\nlonger  10.25\n");
    }

    #[test]
    fn text_widths_count_characters() {
        let rows = vec![vec!["≥ 1.0 KiB".to_string(), "1".to_string()]];
        let columns = [("size", Align::Right), ("n", Align::Right)];
        assert_eq!(text(&columns, &rows), "     size  n\n---------  -\n≥ 1.0 KiB  1\n");
    }

    #[test]
    fn markdown_rules_say_the_alignment_and_keep_blank_cells() {
        assert_eq!(
            markdown(&COLUMNS, &rows()),
            "| name | ms | note |\n|---|---:|---|\n| a | 1.5 | x |\n| longer | 10.25 |  |\n"
        );
        let pairs = [["backend".to_string(), "mock".to_string()]];
        assert_eq!(markdown_pairs(&pairs), "| | |\n|---|---|\n| backend | mock |\n");
    }

    #[test]
    fn each_context_escapes_its_own_way() {
        let hostile = "a|b_\u{1b}[2J";
        assert_eq!(Context::Text.escape(hostile, 200), "a|b_\\u{1b}[2J");
        assert_eq!(Context::Markdown.escape(hostile, 200), "a\\|b\\_ \\[2J");
        assert_eq!(Context::Text.table(&COLUMNS, &rows()), text(&COLUMNS, &rows()));
        assert_eq!(Context::Markdown.table(&COLUMNS, &rows()), markdown(&COLUMNS, &rows()));
    }
}
