//! Clients of the event endpoints for the CLI: `hale events tail` and
//! `hale dlq list|replay`, and the HTTP helpers every `hale`
//! client command shares: one way to build the client, and one clear line
//! for each way a call can fail (unreachable, token refused, refused).
//!
//! They talk HTTP to a running `hale serve` (the process that holds the data
//! directory), so they never race it for the store. Each command has a `_to`
//! variant writing to any `io::Write`, which the tests read. The TLS crypto
//! provider is installed by the binary's `main` before any of these run.

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use hale_core::event::Event;

use crate::relay::ReplayReport;
use crate::sse::{DlqEntry, ReplayRequest};

/// How long a CLI command waits for a TCP connection to the gateway.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a CLI command waits for a whole (non-streaming) answer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The HTTP client of a CLI command: a bounded connect, and a bounded whole
/// call unless `streaming` (a followed event stream has no end).
pub fn http_client(streaming: bool) -> anyhow::Result<reqwest::Client> {
    let b = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
    let b = if streaming {
        b
    } else {
        b.timeout(CALL_TIMEOUT)
    };
    b.build()
        .map_err(|e| anyhow::anyhow!("building the HTTP client: {e}"))
}

/// The deepest cause of a transport error ("Connection refused (os error
/// 111)"), which is what a person needs, not reqwest's wrapper chain.
fn root_cause(e: &reqwest::Error) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    if e.is_timeout() {
        return "timed out".to_owned();
    }
    cur.to_string()
}

/// One line for a call that never got an answer.
pub fn unreachable(base: &str, e: &reqwest::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot reach the gateway at {}: {} (is `hale serve` running there? pass its address with --url)",
        base.trim_end_matches('/'),
        root_cause(e)
    )
}

/// The `error.message` and `error.type` of an answer in the OpenAI error
/// shape; the raw text (or the reason phrase) otherwise.
pub fn error_parts(status: reqwest::StatusCode, body: &str) -> (String, Option<String>) {
    let v = serde_json::from_str::<serde_json::Value>(body).ok();
    let msg = v
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            let t = body.trim();
            if t.is_empty() {
                status.canonical_reason().unwrap_or("no detail").to_owned()
            } else {
                t.chars().take(300).collect()
            }
        });
    let kind = v.and_then(|v| v["error"]["type"].as_str().map(str::to_owned));
    (msg, kind)
}

/// One line for a call the gateway refused: `what` names the call
/// (`GET /dlq`). A refused token says how to pass one.
pub fn refused(what: &str, status: reqwest::StatusCode, body: &str) -> anyhow::Error {
    let (msg, _) = error_parts(status, body);
    match status.as_u16() {
        401 => anyhow::anyhow!(
            "{what}: the gateway refused the token ({status}): {msg}; pass an admin key with --token or $HALE_TOKEN"
        ),
        403 => anyhow::anyhow!("{what}: not allowed ({status}): {msg}"),
        _ => anyhow::anyhow!("{what}: {status}: {msg}"),
    }
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
    Err(refused(what, status, &body))
}

/// Decodes a JSON answer, with a clear line when it is not what was expected.
async fn json_of<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
    what: &str,
) -> anyhow::Result<T> {
    resp.json()
        .await
        .map_err(|e| anyhow::anyhow!("{what}: the gateway's answer could not be read: {e}"))
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
    let req = http_client(follow)?
        .get(format!(
            "{}/events?{}",
            url.trim_end_matches('/'),
            qs.join("&")
        ))
        .header(reqwest::header::ACCEPT, "text/event-stream");
    let resp = authed(req, token)
        .send()
        .await
        .map_err(|e| unreachable(url, &e))?;
    let resp = check(resp, "GET /events").await?;
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| anyhow::anyhow!("reading /events: {}", root_cause(&e)))?;
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
    let req = http_client(false)?.get(format!("{}/dlq", url.trim_end_matches('/')));
    let resp = authed(req, token)
        .send()
        .await
        .map_err(|e| unreachable(url, &e))?;
    let list: Vec<DlqEntry> = json_of(check(resp, "GET /dlq").await?, "GET /dlq").await?;
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
    let req = http_client(false)?
        .post(format!("{}/dlq/replay", url.trim_end_matches('/')))
        .json(&body);
    let resp = authed(req, token)
        .send()
        .await
        .map_err(|e| unreachable(url, &e))?;
    let report: ReplayReport =
        json_of(check(resp, "POST /dlq/replay").await?, "POST /dlq/replay").await?;
    if report.delivered.is_empty() && report.failed.is_empty() {
        writeln!(out, "nothing to replay: no matching dead letters")?;
    }
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
