//! Keeps `docs/performance.md` regenerated from bench reports rather than hand-copied: after
//! `cargo xtask bench`, every table the run measured replaces its namesake between the doc's
//! `<!-- bench report: start -->` and `<!-- bench report: end -->` markers (new tables are
//! added in name order), each stamped with the date and command of the run that measured it.
//! Tables the run did not measure keep their earlier run's stamp.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// The marker opening the generated part of the doc.
pub(crate) const START: &str = "<!-- bench report: start -->";
/// The marker closing it.
pub(crate) const END: &str = "<!-- bench report: end -->";

/// The `## name` sections of a Markdown text, in order: each heading's name and the lines up
/// to the next heading (trailing blank lines and the report's chart line dropped).
fn sections(md: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in md.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            out.push((name.trim().to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut()
            && !line.starts_with("![")
        {
            body.push_str(line);
            body.push('\n');
        }
    }
    for (_, body) in &mut out {
        let trimmed = body.trim_matches('\n').to_owned();
        *body = trimmed;
    }
    out
}

/// `doc` with the tables of `report` (measured as `stamp` says) merged into its generated part.
pub(crate) fn merge(doc: &str, report: &str, stamp: &str) -> Result<String> {
    let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
        bail!("the doc lacks the markers {START} and {END}");
    };
    if end < start {
        bail!("{END} comes before {START}");
    }
    let inner = &doc[start + START.len()..end];
    let mut merged = sections(inner);
    for (name, body) in sections(report) {
        let body = format!("_Measured {stamp}._\n\n{body}");
        match merged.iter_mut().find(|(n, _)| *n == name) {
            Some(existing) => existing.1 = body,
            None => merged.push((name, body)),
        }
    }
    merged.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::with_capacity(doc.len() + report.len());
    out.push_str(&doc[..start + START.len()]);
    out.push('\n');
    for (name, body) in merged {
        out.push_str(&format!("\n## {name}\n\n{body}\n"));
    }
    out.push('\n');
    out.push_str(&doc[end..]);
    Ok(out)
}

/// Merges the report at `report_path` into the doc at `doc_path`.
pub(crate) fn update(doc_path: &Path, report_path: &Path, stamp: &str) -> Result<()> {
    let doc =
        fs::read_to_string(doc_path).with_context(|| format!("reading {}", doc_path.display()))?;
    let report = fs::read_to_string(report_path)
        .with_context(|| format!("reading {}", report_path.display()))?;
    let merged = merge(&doc, &report, stamp)?;
    fs::write(doc_path, merged).with_context(|| format!("writing {}", doc_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Performance\n\nProse.\n\n<!-- bench report: start -->\n\n## engine/get\n\n_Measured old._\n\n| old |\n\n## index/insert\n\n_Measured old._\n\n| kept |\n\n<!-- bench report: end -->\n\nMore prose.\n";

    #[test]
    fn a_measured_table_replaces_its_namesake_and_the_others_stay() {
        let report = "# tuplekv benchmark report\n\n- date: x\n\n## engine/get\n\n| new |\n\n## codec/encode\n\n| added |\n\n![ratios](ratios.svg)\n";
        let out = merge(DOC, report, "2026-11-26 by `cargo xtask bench`").expect("markers");
        assert!(out.starts_with("# Performance\n\nProse.\n\n<!-- bench report: start -->"));
        assert!(
            out.ends_with("<!-- bench report: end -->\n\nMore prose.\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "## engine/get\n\n_Measured 2026-11-26 by `cargo xtask bench`._\n\n| new |"
            ),
            "{out}"
        );
        assert!(!out.contains("| old |"), "{out}");
        assert!(
            out.contains("## index/insert\n\n_Measured old._\n\n| kept |"),
            "{out}"
        );
        let (codec, engine, index) = (
            out.find("## codec/encode").expect("added"),
            out.find("## engine/get").expect("kept"),
            out.find("## index/insert").expect("kept"),
        );
        assert!(codec < engine && engine < index, "sorted by name");
        assert!(
            !out.contains("ratios.svg"),
            "the chart stays with the report"
        );
    }

    #[test]
    fn merging_the_same_report_twice_changes_nothing() {
        let report = "## engine/get\n\n| new |\n";
        let once = merge(DOC, report, "t").expect("markers");
        assert_eq!(merge(&once, report, "t").expect("markers"), once);
    }

    #[test]
    fn a_doc_without_markers_is_an_error() {
        assert!(merge("# nothing here", "## a\n", "t").is_err());
    }
}
