//! The one renderer of the comparisons' reports: a Markdown document opened by its title and
//! the line saying what ran where and when ([`Doc::new`]), its tables ([`Table`]), sections
//! and closing notes, the cell formats they share ([`rate`], [`latency`]), and where a report
//! goes ([`publish`]: standard output and `target/bench-reports/<group>.md`).

use std::fmt::Write as _;
use std::time::SystemTime;

use anyhow::{Context, Result};
use tuplekv_harness::{benches, cmd};

use super::fleet::Measured;
use super::report;

/// The note every comparison closes with: its processes share the machine.
const SHARED_MACHINE_NOTE: &str = "Client processes and servers share the machine's \
    cores; absolute rates on a shared 2-core machine move ±20–40% between runs. Compare \
    within a table.";

/// A report being written.
#[derive(Debug)]
pub(crate) struct Doc {
    out: String,
}

impl Doc {
    /// A report titled `title`, opened by the line naming the command that reran it, the date
    /// of `started`, the machine, and `setup` (what ran against what).
    pub(crate) fn new(title: &str, command: &str, started: SystemTime, setup: &str) -> Doc {
        let mut out = format!("# {title}\n\n");
        let _ = writeln!(
            out,
            "`{command}`, {}, {}. {setup}\n",
            cmd::utc_date(started),
            report::machine(),
        );
        Doc { out }
    }

    /// Starts a section: its heading, and `intro` when not empty.
    pub(crate) fn section(&mut self, heading: &str, intro: &str) {
        let _ = write!(self.out, "\n## {heading}\n\n");
        if !intro.is_empty() {
            let _ = write!(self.out, "{intro}\n\n");
        }
    }

    /// Appends `table`.
    pub(crate) fn table(&mut self, table: &Table) {
        self.out.push_str(&table.render());
    }

    /// Appends Markdown text as it is.
    pub(crate) fn text(&mut self, text: &str) {
        self.out.push_str(text);
    }

    /// Closes the report with its notes (each a list item), then [`SHARED_MACHINE_NOTE`].
    pub(crate) fn finish(mut self, notes: impl IntoIterator<Item = String>) -> String {
        self.out.push_str("\n## Notes\n\n");
        for note in notes {
            let _ = writeln!(self.out, "- {note}");
        }
        let _ = writeln!(self.out, "- {SHARED_MACHINE_NOTE}");
        self.out
    }
}

/// A Markdown table: a header and rows of cells.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings.
    pub(crate) fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells are left empty (a row that only names itself), and a
    /// row with more cells than columns is a bug of its table (asserted in debug builds,
    /// dropped in release).
    pub(crate) fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        debug_assert!(
            cells.len() <= self.header.len(),
            "a row of {} cells in a table of {} columns",
            cells.len(),
            self.header.len()
        );
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as Markdown.
    pub(crate) fn render(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        let _ = writeln!(out, "|{}", "---|".repeat(self.header.len()));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// `ops_per_sec` for a table cell: `12.85 M`, `1.23 k`, `845`.
pub(crate) fn rate(ops_per_sec: f64) -> String {
    if ops_per_sec >= 1e6 {
        format!("{:.2} M", ops_per_sec / 1e6)
    } else if ops_per_sec >= 1000.0 {
        format!("{:.2} k", ops_per_sec / 1000.0)
    } else {
        format!("{ops_per_sec:.0}")
    }
}

/// The cell of a workload's rate: its ops/s (with its errors, if any), or `— (why)` with the
/// first line of why it was not measured.
pub(crate) fn rate_cell(result: &Result<Measured, String>) -> String {
    match result {
        Ok(m) if m.errors > 0 => format!("{} ({} errors)", rate(m.per_sec), m.errors),
        Ok(m) => rate(m.per_sec),
        Err(why) => format!("— ({})", why.lines().next().unwrap_or("failed")),
    }
}

/// The cell of a ratio to a peer: `1.25x`, or `—` when either side is missing.
pub(crate) fn ratio_cell(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "—".to_owned(), |r| format!("{r:.2}x"))
}

/// A latency of `us` microseconds for a cell: in ms from 1 ms up, else in µs.
pub(crate) fn latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.2} µs")
    }
}

/// Prints `report` and writes it to `target/bench-reports/<name>.md`, saying where and how
/// long the run since `started` took.
pub(crate) fn publish(report: &str, name: &str, started: SystemTime) -> Result<()> {
    println!("{report}");
    let dir = benches::comparison_reports_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.md"));
    std::fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "report: {} ({:.0} s)",
        cmd::relative(&path),
        started.elapsed().map_or(0.0, |d| d.as_secs_f64())
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_pads_short_rows() {
        let mut t = Table::new(["op", "rate"]);
        t.row(["get"]);
        t.row(["set", "1.00 k"]);
        assert_eq!(
            t.render(),
            "| op | rate |\n|---|---|\n| get |  |\n| set | 1.00 k |\n"
        );
    }

    #[test]
    fn a_report_opens_with_its_command_and_closes_with_its_notes() {
        let mut doc = Doc::new("T", "cargo xtask bench x", SystemTime::UNIX_EPOCH, "Setup.");
        doc.section("Part", "");
        let text = doc.finish(["one".to_owned()]);
        assert!(
            text.starts_with(&format!(
                "# T\n\n`cargo xtask bench x`, {}, ",
                cmd::utc_date(SystemTime::UNIX_EPOCH)
            )),
            "{text}"
        );
        assert!(
            text.contains("\n## Part\n\n\n## Notes\n\n- one\n- Client"),
            "{text}"
        );
    }

    #[test]
    fn a_rate_cell_shows_errors_or_why_it_is_missing() {
        let m = Measured {
            per_sec: 2500.0,
            errors: 3,
            ..Measured::default()
        };
        assert_eq!(rate_cell(&Ok(m)), "2.50 k (3 errors)");
        assert_eq!(rate_cell(&Err("no etcd\nmore".into())), "— (no etcd)");
        assert_eq!(ratio_cell(Some(1.234)), "1.23x");
        assert_eq!(ratio_cell(None), "—");
    }

    #[test]
    fn cells_switch_units_at_a_thousand() {
        assert_eq!(rate(999.0), "999");
        assert_eq!(rate(1234.0), "1.23 k");
        assert_eq!(rate(999_999.0), "1000.00 k");
        assert_eq!(rate(12_853_940.0), "12.85 M");
        assert_eq!(latency(999.0), "999.00 µs");
        assert_eq!(latency(1500.0), "1.50 ms");
    }
}
