//! Clients of the event endpoints for the CLI: `hale events tail` and
//! `hale dlq list|replay` (DESIGN §10).
//!
//! They talk HTTP to a running `hale serve` (the process that holds the data
//! directory), so they never race it for the store. Each command has a `_to`
//! variant writing to any `io::Write`, which the tests read.

use std::io::Write;

use futures::StreamExt;
use hale_core::event::Event;

use crate::relay::ReplayReport;
use crate::sse::{DlqEntry, ReplayRequest};

fn client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .build()
        .map_err(|e| anyhow::anyhow!("building the HTTP client: {e}"))
}

fn authed(req: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

async fn check(resp: reqwest::Response, what: &str) -> anyhow::Result<reqwest::Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    let msg = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or(body);
    anyhow::bail!("{what}: {status}: {msg}")
}

/// `hale events tail`: prints one line per event (time kind agent turn payload).
pub async fn events_tail(
    url: &str,
    token: Option<&str>,
    follow: bool,
    kind: Option<&str>,
    after: Option<&str>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    events_tail_to(url, token, follow, kind, after, &mut out).await
}

/// [`events_tail`] writing to `out`.
pub async fn events_tail_to(
    url: &str,
    token: Option<&str>,
    follow: bool,
    kind: Option<&str>,
    after: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut query: Vec<(&str, &str)> = vec![("follow", if follow { "true" } else { "false" })];
    if let Some(k) = kind {
        query.push(("kind", k));
    }
    if let Some(a) = after {
        query.push(("after", a));
    }
    let qs: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    let req = client()?
        .get(format!(
            "{}/events?{}",
            url.trim_end_matches('/'),
            qs.join("&")
        ))
        .header(reqwest::header::ACCEPT, "text/event-stream");
    let resp = authed(req, token)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("GET {url}/events: {e}"))?;
    let resp = check(resp, "GET /events").await?;
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| anyhow::anyhow!("reading /events: {e}"))?;
        for data in parser.push(&chunk) {
            match serde_json::from_str::<Event>(&data) {
                Ok(ev) => writeln!(out, "{}", format_event(&ev))?,
                Err(e) => writeln!(out, "(undecodable event: {e}) {data}")?,
            }
            out.flush()?;
        }
    }
    Ok(())
}

/// Percent-encodes a query value (everything but RFC 3986 unreserved characters).
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One line: `time kind agent turn payload` (`-` for a missing field).
pub fn format_event(ev: &Event) -> String {
    format!(
        "{} {} {} {} {}",
        rfc3339_ms(ev.time_ms),
        ev.kind,
        ev.agent.as_deref().unwrap_or("-"),
        ev.turn.as_deref().unwrap_or("-"),
        ev.payload
    )
}

/// `2026-11-22T18:50:43.123Z` from milliseconds since the epoch (UTC).
pub fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// A minimal SSE parser: returns the `data` of each complete event.
#[derive(Default)]
struct SseParser {
    line: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                if !self.data.is_empty() {
                    done.push(std::mem::take(&mut self.data).join("\n"));
                }
                continue;
            }
            let text = String::from_utf8_lossy(&line);
            if let Some(v) = text.strip_prefix("data:") {
                self.data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
            }
        }
        done
    }
}

/// `hale dlq list`.
pub async fn dlq_list(url: &str, token: Option<&str>) -> anyhow::Result<()> {
    dlq_list_to(url, token, &mut std::io::stdout())
        .await
        .map(|_| ())
}

/// [`dlq_list`] writing to `out`; returns the entries too.
pub async fn dlq_list_to(
    url: &str,
    token: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<Vec<DlqEntry>> {
    let req = client()?.get(format!("{}/dlq", url.trim_end_matches('/')));
    let resp = authed(req, token)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("GET {url}/dlq: {e}"))?;
    let list: Vec<DlqEntry> = check(resp, "GET /dlq").await?.json().await?;
    if list.is_empty() {
        writeln!(out, "no dead letters")?;
    }
    for d in &list {
        writeln!(
            out,
            "{} seq={} sink={} attempts={} kind={} failed={} error={}",
            d.id,
            d.seq,
            d.sink,
            d.attempts,
            d.event.kind,
            rfc3339_ms(d.failed_ms),
            d.error
        )?;
    }
    Ok(list)
}

/// `hale dlq replay [ID..|--all]`: fails when any event was not delivered.
pub async fn dlq_replay(
    url: &str,
    token: Option<&str>,
    ids: Vec<String>,
    all: bool,
) -> anyhow::Result<()> {
    let report = dlq_replay_to(url, token, ids, all, &mut std::io::stdout()).await?;
    if !report.failed.is_empty() {
        anyhow::bail!(
            "{} dead letter(s) not delivered; they stay in the DLQ",
            report.failed.len()
        );
    }
    Ok(())
}

/// [`dlq_replay`] writing to `out`; returns the report.
pub async fn dlq_replay_to(
    url: &str,
    token: Option<&str>,
    ids: Vec<String>,
    all: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ReplayReport> {
    let body = ReplayRequest {
        ids,
        all,
        sink: None,
    };
    let req = client()?
        .post(format!("{}/dlq/replay", url.trim_end_matches('/')))
        .json(&body);
    let resp = authed(req, token)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("POST {url}/dlq/replay: {e}"))?;
    let report: ReplayReport = check(resp, "POST /dlq/replay").await?.json().await?;
    for d in &report.delivered {
        writeln!(out, "delivered {} seq={} sink={}", d.id, d.seq, d.sink)?;
    }
    for f in &report.failed {
        writeln!(
            out,
            "failed {} seq={} sink={}: {}",
            f.id,
            f.seq,
            f.sink,
            f.error.as_deref().unwrap_or("")
        )?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_700_000_000_000), "2023-11-14T22:13:20.000Z");
    }

    #[test]
    fn sse_parser_joins_chunks_and_data_lines() {
        let mut p = SseParser::default();
        assert!(p.push(b"id: 1\nevent: a\nda").is_empty());
        assert_eq!(
            p.push(b"ta: x\r\ndata: y\n\n: keep\n\ndata:z\n\n"),
            vec!["x\ny", "z"]
        );
    }
}
