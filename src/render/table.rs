//! Tables of a report: built as rows of cells, written as Markdown, HTML or CSV.

use std::fmt::Write;

/// The longest cell of a page's table, in characters; a longer one (a name from another
/// board's database, say) ends in `…`.
pub(crate) const MAX_CELL: usize = 200;

/// A cell as a page shows it.
fn shown(cell: &str) -> std::borrow::Cow<'_, str> {
    crate::text::ellipsis(cell, MAX_CELL)
}

/// A table of a summary page: a title, a header and rows of cells.
pub(crate) struct Table {
    pub title: String,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Appends the table to a Markdown page: its title as a heading, then the table.
    pub(crate) fn markdown(&self, s: &mut String) {
        let _ = writeln!(s, "## {}\n", shown(&self.title));
        let _ = writeln!(s, "| {} |", self.header.join(" | "));
        let _ = writeln!(s, "|{}", "---|".repeat(self.header.len()));
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| shown(c).replace('|', "\\|")).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        s.push('\n');
    }

    /// Appends the table to an HTML page: its title as a heading, then the table, a row whose
    /// status is not `ok`, that has flags or a repetition that failed marked `bad`.
    pub(crate) fn html(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "<h2>{}</h2>\n<div class=\"table\"><table>\n<tr>",
            html_escape(&shown(&self.title))
        );
        for h in &self.header {
            let _ = write!(s, "<th>{}</th>", wrappable(h));
        }
        s.push_str("</tr>\n");
        let column = |name: &str| self.header.iter().position(|h| *h == name);
        let (status, flags, runs) = (column("status"), column("flags"), column("runs"));
        for r in &self.rows {
            let bad = status.is_some_and(|i| r[i] != "ok")
                || flags.is_some_and(|i| !r[i].is_empty())
                || runs.is_some_and(|i| r[i].contains(" failed"));
            s.push_str(if bad { "<tr class=\"bad\">" } else { "<tr>" });
            for c in r {
                let _ = write!(s, "<td>{}</td>", wrappable(&shown(c)));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table></div>\n");
    }
}

/// `cells` with, when keys were repeated, the runs cell inserted at `at` (a table's header
/// and each of its rows alike).
pub(crate) fn with_runs_column<T>(
    mut cells: Vec<T>,
    repeated: bool,
    at: usize,
    cell: impl FnOnce() -> T,
) -> Vec<T> {
    if repeated {
        cells.insert(at.min(cells.len()), cell());
    }
    cells
}

/// A cell's text for a table that must fit a narrow page: escaped, a line may break after a
/// `/` (`ms/iteration`, `3 ok / 3 run`) and a `±` stays with the half-width after it.
fn wrappable(cell: &str) -> String {
    html_escape(cell)
        .replace('/', "/<wbr>")
        .replace("± ", "±&nbsp;")
}

/// `s` with HTML's special characters escaped, for text and attribute values.
pub(crate) fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// How a CSV file ends its lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineEnd {
    /// `\n`.
    Lf,
    /// `\r\n`, as Python's `csv` writer ends them.
    CrLf,
}

/// A CSV file's bytes: one line per record, a field quoted only where it must be (it holds a
/// comma, a quote or a line break), as Python's `csv` writer does.
pub(crate) fn csv_bytes<R, F>(
    records: impl IntoIterator<Item = R>,
    end: LineEnd,
) -> anyhow::Result<Vec<u8>>
where
    R: IntoIterator<Item = F>,
    F: AsRef<[u8]>,
{
    let terminator = match end {
        LineEnd::Lf => csv::Terminator::Any(b'\n'),
        LineEnd::CrLf => csv::Terminator::CRLF,
    };
    let mut w = csv::WriterBuilder::new()
        .terminator(terminator)
        .flexible(true)
        .from_writer(Vec::new());
    for r in records {
        w.write_record(r)?;
    }
    Ok(w.into_inner().map_err(|e| e.into_error())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_what_needs_it() {
        let bytes = csv_bytes(
            [
                vec!["#a", "b", "c"],
                vec!["plain", "x,y", "say \"hi\""],
                vec!["", "line\nbreak", "0.5"],
            ],
            LineEnd::CrLf,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "#a,b,c\r\nplain,\"x,y\",\"say \"\"hi\"\"\"\r\n,\"line\nbreak\",0.5\r\n"
        );
    }

    #[test]
    fn a_runs_column_only_when_keys_repeat() {
        assert_eq!(with_runs_column(vec![1, 2], false, 1, || 9), [1, 2]);
        assert_eq!(with_runs_column(vec![1, 2], true, 1, || 9), [1, 9, 2]);
        assert_eq!(with_runs_column(vec![1, 2], true, 5, || 9), [1, 2, 9]);
    }
}
