//! `tuplekv stats --url URL`: reads a server's `GET /metrics` (Prometheus text, behind the
//! access token) and prints a summary per database: keys and bytes stored, requests, commits,
//! traffic, what is open, and what its recovery did.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::data::out_line;

/// Where the server answers.
const METRICS_PATH: &str = "/metrics";

/// One series: its name, labels and value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Runs `tuplekv stats --url URL`.
pub(crate) fn run(url: &str, token: Option<&str>, as_json: bool) -> Result<(), String> {
    let env_token = std::env::var("DENO_KV_ACCESS_TOKEN").ok();
    let token = token.or(env_token.as_deref()).ok_or(
        "--url needs an access token: pass --access-token or set TUPLEKV_ACCESS_TOKEN (or \
         DENO_KV_ACCESS_TOKEN)",
    )?;
    let (status, text) = crate::http::request("GET", url, METRICS_PATH, token)?;
    if !(200..300).contains(&status) {
        return Err(format!(
            "{url} answered {METRICS_PATH} with {status}: {}",
            text.trim()
        ));
    }
    let samples = parse(&text);
    let summary = summarize(&samples);
    if as_json {
        out_line(Value::Object(summary))
    } else {
        for line in render(url, &summary) {
            out_line(line)?;
        }
        Ok(())
    }
}

/// The samples of Prometheus text (comments skipped, lines it cannot read ignored).
fn parse(text: &str) -> Vec<Sample> {
    tuplekv_server::metrics::parse_text(text)
        .into_iter()
        .filter_map(|(series, value)| {
            let (name, labels) = match series.split_once('{') {
                None => (series.clone(), BTreeMap::new()),
                Some((name, rest)) => (name.to_owned(), labels_of(rest.strip_suffix('}')?)?),
            };
            Some(Sample {
                name,
                labels,
                value,
            })
        })
        .collect()
}

/// `a="x",b="y"` as a map; label values may hold `\"`, `\\` and `\n`.
fn labels_of(text: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.insert(key.trim().to_owned(), value);
        rest = after.get(end + 1..)?.trim_start_matches(',');
    }
    Some(out)
}

/// The summary: server-wide counts, and one object per database.
fn summarize(samples: &[Sample]) -> Map<String, Value> {
    let server = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name && s.labels.is_empty())
            .map(|s| json!(s.value as u64))
            .unwrap_or(Value::Null)
    };
    let mut databases: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for s in samples {
        let Some(db) = s.labels.get("database") else {
            continue;
        };
        let entry = databases.entry(db.clone()).or_default();
        let short = s.name.strip_prefix("tuplekv_").unwrap_or(&s.name);
        match short {
            "requests_total" => {
                let endpoint = s.labels.get("endpoint").cloned().unwrap_or_default();
                let ok = s.labels.get("status").is_some_and(|st| st.starts_with('2'));
                let requests = entry
                    .entry("requests")
                    .or_insert_with(|| json!({}))
                    .as_object_mut();
                if let Some(requests) = requests {
                    let by = requests
                        .entry(endpoint)
                        .or_insert_with(|| json!({"ok": 0, "errors": 0}));
                    let field = if ok { "ok" } else { "errors" };
                    by[field] = json!(by[field].as_u64().unwrap_or(0) + s.value as u64);
                }
            }
            "recovery_duration_seconds" => {
                entry.insert("recovery_seconds".into(), json!(s.value));
            }
            "keys"
            | "stored_bytes"
            | "versions"
            | "commits_total"
            | "commit_conflicts_total"
            | "request_bytes_total"
            | "response_bytes_total"
            | "open_watch_streams"
            | "held_snapshots"
            | "log_syncs_total"
            | "recovery_records_replayed"
            | "recovery_bytes_read" => {
                let key = short.strip_suffix("_total").unwrap_or(short);
                entry.insert(key.into(), json!(s.value as u64));
            }
            _ => {}
        }
    }
    let mut out = Map::new();
    out.insert(
        "open_connections".into(),
        server("tuplekv_open_connections"),
    );
    out.insert(
        "connections_accepted".into(),
        server("tuplekv_connections_accepted_total"),
    );
    out.insert(
        "connections_refused".into(),
        server("tuplekv_connections_refused_total"),
    );
    out.insert(
        "databases".into(),
        Value::Object(
            databases
                .into_iter()
                .map(|(k, v)| (k, Value::Object(v)))
                .collect(),
        ),
    );
    out
}

/// The summary for people, a line each.
fn render(url: &str, summary: &Map<String, Value>) -> Vec<String> {
    let n = |v: Option<&Value>| {
        v.and_then(Value::as_u64)
            .map_or("-".to_owned(), |n| n.to_string())
    };
    let mut lines = vec![
        format!("server          {url}"),
        format!(
            "connections     {} open, {} accepted, {} refused",
            n(summary.get("open_connections")),
            n(summary.get("connections_accepted")),
            n(summary.get("connections_refused"))
        ),
    ];
    let empty = Map::new();
    let databases = summary
        .get("databases")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, db) in databases {
        lines.push(format!("database {name}"));
        lines.push(format!("  keys          {}", n(db.get("keys"))));
        lines.push(format!("  stored bytes  {}", n(db.get("stored_bytes"))));
        let requests = db
            .get("requests")
            .and_then(Value::as_object)
            .map(|r| {
                r.iter()
                    .map(|(endpoint, c)| {
                        format!(
                            "{endpoint} {} ({} errors)",
                            n(c.get("ok")),
                            n(c.get("errors"))
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "none".to_owned());
        lines.push(format!("  requests      {requests}"));
        lines.push(format!(
            "  commits       {} ({} conflicts)",
            n(db.get("commits")),
            n(db.get("commit_conflicts"))
        ));
        lines.push(format!(
            "  bytes         {} in, {} out",
            n(db.get("request_bytes")),
            n(db.get("response_bytes"))
        ));
        lines.push(format!(
            "  open          {} watch streams, {} held snapshots",
            n(db.get("open_watch_streams")),
            n(db.get("held_snapshots"))
        ));
        if db.get("log_syncs").is_some() {
            lines.push(format!("  log syncs     {}", n(db.get("log_syncs"))));
        }
        if let Some(secs) = db.get("recovery_seconds").and_then(Value::as_f64) {
            lines.push(format!(
                "  recovery      {:.3} ms, {} commit records replayed, {} bytes read",
                secs * 1000.0,
                n(db.get("recovery_records_replayed")),
                n(db.get("recovery_bytes_read"))
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_with_escapes_are_read() {
        let labels = labels_of(r#"database="a\"b",endpoint="watch""#).expect("labels");
        assert_eq!(labels.get("database").map(String::as_str), Some("a\"b"));
        assert_eq!(labels.get("endpoint").map(String::as_str), Some("watch"));
        assert_eq!(labels_of(r#"database="open"#), None, "an unclosed value");
    }

    #[test]
    fn the_summary_adds_statuses_up_per_endpoint() {
        let text = "tuplekv_requests_total{database=\"default\",endpoint=\"atomic_write\",status=\"200\"} 3\n\
                    tuplekv_requests_total{database=\"default\",endpoint=\"atomic_write\",status=\"400\"} 1\n\
                    tuplekv_requests_total{database=\"default\",endpoint=\"atomic_write\",status=\"401\"} 1\n\
                    tuplekv_commits_total{database=\"default\"} 3\n\
                    tuplekv_open_connections 2\n";
        let summary = summarize(&parse(text));
        assert_eq!(summary["open_connections"], json!(2));
        let db = &summary["databases"]["default"];
        assert_eq!(
            db["requests"]["atomic_write"],
            json!({"ok": 3, "errors": 2})
        );
        assert_eq!(db["commits"], json!(3));
        let lines = render("http://x", &summary);
        assert!(
            lines.contains(&"  requests      atomic_write 3 (2 errors)".to_owned()),
            "{lines:?}"
        );
    }
}
