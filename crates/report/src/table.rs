//! The one table writer of the text and Markdown reports. It owns how a table is drawn in each
//! output [`Context`] (alignment, the rule under the heads, cell separators), how a text table
//! is fitted to `TEXT_WIDTH`, and how a string from a file is made safe for a cell there
//! (`Context::escape`: [`plain`] in a terminal, [`md_cell`] in Markdown). A renderer says only
//! which columns and which rows: each column declared once as a `Column` (head, alignment,
//! drop rank, text-only, needs compute) and, where its cells come from one item per row, a
//! `Field` whose cell function the row builders call; nothing picks a column by position.
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

/// A column of a report's table, declared once with its head, its alignment and its named
/// properties; the writer, the fitting and the row builder read them from here, never by
/// position. Written as `Column::right("exposed ms/step").drop_rank(14).needs_compute()`, then
/// given its cell with [`Column::cell`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Column {
    pub(crate) head: &'static str,
    pub(crate) align: Align,
    /// When a text table must fit [`TEXT_WIDTH`], the columns with a rank are left out in rank
    /// order, 1 first, until the rest fit ([`text_fitted`]); a column without one always stays.
    pub(crate) drop_rank: Option<u8>,
    /// Shown in the terminal only: the Markdown table of a PR comment (about 900 px wide) leaves
    /// it out ([`columns`]); `--wide` and the JSON carry it.
    pub(crate) text_only: bool,
    /// A figure only a source with compute can measure (exposed time, overlap): without compute
    /// its cell reads `n/a` ([`measured_row`]), absent, never a zero.
    pub(crate) needs_compute: bool,
}

impl Column {
    /// A left-aligned column (names, words).
    pub(crate) const fn left(head: &'static str) -> Column {
        Column { head, align: Align::Left, drop_rank: None, text_only: false, needs_compute: false }
    }

    /// A right-aligned column (numbers).
    pub(crate) const fn right(head: &'static str) -> Column {
        Column { align: Align::Right, ..Column::left(head) }
    }

    /// The column, left out `rank`th when a text table must fit.
    pub(crate) const fn drop_rank(self, rank: u8) -> Column {
        Column { drop_rank: Some(rank), ..self }
    }

    /// The column, left out of the Markdown table.
    pub(crate) const fn text_only(self) -> Column {
        Column { text_only: true, ..self }
    }

    /// The column, `n/a` unless the source observed compute.
    pub(crate) const fn needs_compute(self) -> Column {
        Column { needs_compute: true, ..self }
    }

    /// The column with its cell: how a row's item (a collective, a metric, a point) is written
    /// in it, a string from a file made safe for the context.
    pub(crate) const fn cell<R>(self, cell: fn(&R, Context) -> String) -> Field<R> {
        Field { column: self, cell }
    }
}

/// A column and the cell it writes for each row's item `R`: what a content module declares,
/// one per column in table order, so the heads and the cells cannot fall out of step.
pub(crate) struct Field<R> {
    pub(crate) column: Column,
    pub(crate) cell: fn(&R, Context) -> String,
}

/// The fields a table in `ctx` shows: every one in text, all but the text-only ones in Markdown.
fn shown<R>(fields: &[Field<R>], ctx: Context) -> impl Iterator<Item = &Field<R>> {
    fields.iter().filter(move |f| ctx == Context::Text || !f.column.text_only)
}

/// The columns a table of `fields` shows in `ctx`.
pub(crate) fn columns<R>(fields: &[Field<R>], ctx: Context) -> Vec<Column> {
    shown(fields, ctx).map(|f| f.column).collect()
}

/// The cells of `item` under [`columns`], for a table none of whose fields needs compute.
pub(crate) fn row<R>(fields: &[Field<R>], item: &R, ctx: Context) -> Vec<String> {
    debug_assert!(fields.iter().all(|f| !f.column.needs_compute), "a figure that needs compute: use measured_row");
    measured_row(fields, item, ctx, true)
}

/// The cells of `item` under [`columns`]; unless `compute_observed`, a field that needs compute
/// reads `n/a`: a figure the source cannot measure is shown absent, never as a zero.
pub(crate) fn measured_row<R>(fields: &[Field<R>], item: &R, ctx: Context, compute_observed: bool) -> Vec<String> {
    shown(fields, ctx)
        .map(|f| if f.column.needs_compute && !compute_observed { "n/a".to_string() } else { (f.cell)(item, ctx) })
        .collect()
}

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

    /// A word this crate owns (a state) as this context sets one: plain in a terminal, in code
    /// in Markdown.
    pub(crate) fn code(self, word: &str) -> String {
        match self {
            Context::Text => word.to_string(),
            Context::Markdown => format!("`{word}`"),
        }
    }

    /// The table of `rows` under `columns` in this context (text with its dashed rule).
    pub(crate) fn table(self, columns: &[Column], rows: &[Vec<String>]) -> String {
        match self {
            Context::Text => text(columns, rows),
            Context::Markdown => markdown(columns, rows),
        }
    }
}

/// An aligned text table: the heads, a dashed rule, then the rows.
pub(crate) fn text(columns: &[Column], rows: &[Vec<String>]) -> String {
    aligned(columns, rows, true)
}

/// How wide a text table may be unless `--wide` asks for every column: a terminal or CI log of
/// 100 characters.
pub(crate) const TEXT_WIDTH: usize = 100;

/// An aligned text table of at most `width` characters: columns are left out in the order of
/// their drop rank (1 first) until the rest fit, a column without one never; a table that fits
/// keeps them all. Returns the table and the heads of the columns left out, in table order.
fn text_fitted(columns: &[Column], rows: &[Vec<String>], width: Option<usize>) -> (String, Vec<String>) {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).fold(c.head.chars().count(), usize::max)
        })
        .collect();
    let mut kept: Vec<bool> = vec![true; columns.len()];
    let total = |kept: &[bool]| {
        let shown: Vec<usize> = widths.iter().zip(kept).filter(|(_, &k)| k).map(|(w, _)| *w).collect();
        shown.iter().sum::<usize>() + 2 * shown.len().saturating_sub(1)
    };
    if let Some(max) = width {
        let mut ranked: Vec<(u8, usize)> =
            columns.iter().enumerate().filter_map(|(i, c)| Some((c.drop_rank?, i))).collect();
        ranked.sort_unstable();
        for (_, i) in ranked {
            if total(&kept) <= max {
                break;
            }
            if let Some(k) = kept.get_mut(i) {
                *k = false;
            }
        }
    }
    let pick =
        |row: &[String]| -> Vec<String> { row.iter().zip(&kept).filter(|(_, &k)| k).map(|(c, _)| c.clone()).collect() };
    let shown_columns: Vec<Column> = columns.iter().zip(&kept).filter(|(_, &k)| k).map(|(c, _)| *c).collect();
    let shown_rows: Vec<Vec<String>> = rows.iter().map(|r| pick(r)).collect();
    let dropped = columns.iter().zip(&kept).filter(|(_, &k)| !k).map(|(c, _)| c.head.to_string()).collect();
    (text(&shown_columns, &shown_rows), dropped)
}

/// [`text_fitted`] at `width`, with the line that names what was left out under it.
pub(crate) fn fitted(columns: &[Column], rows: &[Vec<String>], width: crate::Width) -> String {
    let (table, dropped) = text_fitted(columns, rows, width.limit());
    table + &left_out_line(&dropped)
}

/// The line under a fitted table that names what was left out, or nothing.
fn left_out_line(dropped: &[String]) -> String {
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
pub(crate) fn text_unruled(columns: &[Column], rows: &[Vec<String>]) -> String {
    aligned(columns, rows, false)
}

fn aligned(columns: &[Column], rows: &[Vec<String>], ruled: bool) -> String {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cells = rows.iter().filter_map(|row| row.get(i)).map(|c| c.chars().count());
            cells.fold(c.head.chars().count(), usize::max)
        })
        .collect();
    let heads: Vec<String> = columns.iter().map(|c| c.head.to_string()).collect();
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let lines = [Some(&heads), ruled.then_some(&rule)].into_iter().flatten().chain(rows);
    lines.map(|row| format!("{}\n", aligned_line(columns, &widths, row))).collect()
}

/// One line of cells, each padded to its column's width on its alignment's side, the line's
/// trailing spaces dropped. A missing cell is blank.
fn aligned_line(columns: &[Column], widths: &[usize], row: &[String]) -> String {
    let cells: Vec<String> = columns
        .iter()
        .zip(widths)
        .enumerate()
        .map(|(i, (c, &width))| {
            let cell = row.get(i).map_or("", String::as_str);
            match c.align {
                Align::Left => format!("{cell:<width$}"),
                Align::Right => format!("{cell:>width$}"),
            }
        })
        .collect();
    cells.join("  ").trim_end().to_string()
}

/// A GFM table; the cells must already be escaped.
pub(crate) fn markdown(columns: &[Column], rows: &[Vec<String>]) -> String {
    let heads: Vec<&str> = columns.iter().map(|c| c.head).collect();
    let rule: Vec<&str> = columns
        .iter()
        .map(|c| match c.align {
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
    fn a_wide_table_leaves_out_columns_by_rank_until_it_fits_and_names_them() {
        const HEADS: [&str; 12] = [
            "column 00",
            "column 01",
            "column 02",
            "column 03",
            "column 04",
            "column 05",
            "column 06",
            "column 07",
            "column 08",
            "column 09",
            "column 10",
            "column 11",
        ];
        // The last column goes first, the first never.
        let columns: Vec<Column> = HEADS
            .iter()
            .zip(0u8..)
            .map(|(h, i)| if i == 0 { Column::right(h) } else { Column::right(h).drop_rank(12 - i) })
            .collect();
        let rows = vec![(0..12).map(|i| format!("{i}")).collect::<Vec<String>>()];
        let (fitted, dropped) = text_fitted(&columns, &rows, Some(TEXT_WIDTH));
        assert!(fitted.lines().all(|l| l.chars().count() <= TEXT_WIDTH), "{fitted}");
        assert!(fitted.starts_with("column 00  column 01"), "the first columns stay: {fitted}");
        assert_eq!(dropped, ["column 09", "column 10", "column 11"]);
        let (all, none) = text_fitted(&columns, &rows, None);
        assert!(none.is_empty() && all.lines().next().is_some_and(|l| l.ends_with("column 11")));
        let note = left_out_line(&dropped);
        assert!(note.lines().all(|l| l.chars().count() <= TEXT_WIDTH) && note.contains("--wide"), "{note}");
        assert_eq!(left_out_line(&[]), "");
        let unranked: Vec<Column> = HEADS.iter().map(|h| Column::right(h)).collect();
        assert!(text_fitted(&unranked, &rows, Some(TEXT_WIDTH)).1.is_empty(), "a column without a rank stays");
    }

    struct Item {
        name: &'static str,
        ms: f64,
    }

    const FIELDS: [Field<Item>; 3] = [
        Column::left("name").cell(|i, ctx| ctx.escape(i.name, 200)),
        Column::right("ms").needs_compute().cell(|i, _| format!("{:.1}", i.ms)),
        Column::left("state").text_only().cell(|_, ctx| ctx.code("unchanged")),
    ];

    #[test]
    fn fields_give_each_context_its_columns_and_cells() {
        let item = Item { name: "a|b", ms: 1.5 };
        let heads = |ctx| columns(&FIELDS, ctx).iter().map(|c| c.head).collect::<Vec<_>>();
        assert_eq!(heads(Context::Text), ["name", "ms", "state"]);
        assert_eq!(heads(Context::Markdown), ["name", "ms"], "text-only columns stay out of Markdown");
        assert_eq!(measured_row(&FIELDS, &item, Context::Text, true), ["a|b", "1.5", "unchanged"]);
        assert_eq!(measured_row(&FIELDS, &item, Context::Markdown, true), ["a\\|b", "1.5"]);
        assert_eq!(measured_row(&FIELDS, &item, Context::Text, false), ["a|b", "n/a", "unchanged"]);
    }

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec!["a".to_string(), "1.5".to_string(), "x".to_string()],
            vec!["longer".to_string(), "10.25".to_string(), "".to_string()],
        ]
    }

    const COLUMNS: [Column; 3] = [Column::left("name"), Column::right("ms"), Column::left("note")];

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
        let columns = [Column::right("size"), Column::right("n")];
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
