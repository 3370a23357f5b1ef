//! A stream that crawls, end to end (issue 43; docs/configuration.md,
//! "crawling"): `hale chaos` plays a primary whose streams first come at a
//! steady pace (one word every 120 ms: its usual rate, learned by hale from
//! two finished streams) and then crawl (one word every 700 ms, each gap
//! far under the idle timeout), and a healthy backup. `hale serve` in front
//! of them judges streams over a short window (1.5 s, slow for longer than
//! 1 s under half the usual rate).
//!
//! - With the primary's history, the crawling stream is resumed on the
//!   backup: the caller gets one whole answer, the turn's timeline names
//!   `stream_crawling` on the primary's row and `resumed` on the backup's.
//! - The same crawl on a deployment without history, and on a gateway with
//!   `crawling: {enabled: false}`, is not resumed: the primary finishes it.
//!
//! No assert is on time: the verdicts are what the timeline and the chaos
//! server's counts say.

mod common;

use common::{start_chaos_with, start_serve};
use std::time::Duration;

/// Words in every answer (the backup's too, so a resumed answer is the same text).
const WORDS: usize = 12;
const BACKUP: &str = "ok:tokens=12";

/// Steady twice (the usual pace, learned), then a crawl; a crawl from the start.
const SCRIPT: &str = "\
crawler-warm:
  - {fault: \"slow-stream:ms=120:tokens=12\", times: 2}
  - {fault: \"slow-stream:ms=700:tokens=12\"}
crawler-off:
  - {fault: \"slow-stream:ms=120:tokens=12\", times: 2}
  - {fault: \"slow-stream:ms=700:tokens=12\"}
crawler-cold:
  - {fault: \"slow-stream:ms=700:tokens=12\"}
";

fn config(chaos: &str, crawling: &str) -> String {
    format!(
        "\
routes:
  warm: [primary/crawler-warm, backup/{BACKUP}]
  off: [primary/crawler-off, backup/{BACKUP}]
  cold: [primary/crawler-cold, backup/{BACKUP}]
providers:
  - name: primary
    kind: openai
    base_url: {chaos}/v1
    models: [crawler-warm, crawler-off, crawler-cold]
  - name: backup
    kind: openai
    base_url: {chaos}/v1
    default_model: \"{BACKUP}\"
crawling: {crawling}
"
    )
}

/// The whole answer `WORDS` words make, as chaos streams it.
fn whole() -> String {
    hale_chaos::word_chunks(WORDS).concat()
}

/// One streamed turn on `route`: its turn id and the text the caller got,
/// after checking the stream ended with `[DONE]`.
async fn stream(http: &reqwest::Client, base: &str, route: &str, agent: &str) -> (String, String) {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("x-hale-agent", agent)
        .json(&serde_json::json!({
            "model": route,
            "stream": true,
            "messages": [{"role": "user", "content": "hello"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{route}");
    let turn = r
        .headers()
        .get("x-hale-turn-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = r.text().await.unwrap();
    let data: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{route}: {body}");
    let text: String = data
        .iter()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    (turn, text)
}

/// The turn's timeline as `(target, class or "ok", resume)` rows.
async fn timeline(
    http: &reqwest::Client,
    base: &str,
    turn: &str,
) -> (serde_json::Value, Vec<(String, String, String)>) {
    let t = hale_testkit::get_json(http, &format!("{base}/turns/{turn}")).await;
    let rows = t["timeline"]
        .as_array()
        .unwrap_or_else(|| panic!("no timeline: {t}"))
        .iter()
        .map(|r| {
            (
                r["target"].as_str().unwrap_or_default().to_owned(),
                r["class"].as_str().unwrap_or("ok").to_owned(),
                r["resume"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    (t, rows)
}

/// Two streams at the steady pace teach `route`'s primary its usual rate;
/// the third crawls. Returns the third's turn and text.
async fn warm_then_crawl(http: &reqwest::Client, base: &str, route: &str) -> (String, String) {
    for i in 0..2 {
        let (turn, text) = stream(http, base, route, &format!("{route}-warmup")).await;
        assert_eq!(text, whole(), "warm-up {i}");
        let (_, rows) = timeline(http, base, &turn).await;
        assert_eq!(rows.len(), 1, "warm-up {i}: {rows:?}");
        assert_eq!(rows[0].1, "ok", "warm-up {i}: {rows:?}");
    }
    stream(http, base, route, &format!("{route}-agent")).await
}

#[tokio::test]
async fn a_crawling_stream_is_resumed_on_the_backup_only_when_judged() {
    let http = hale_testkit::client(Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let (_chaos, chaos) =
        start_chaos_with(&http, dir.path(), &["--script", &script.to_string_lossy()]).await;
    let judged = "{enabled: true, below: 0.5, window_ms: 1500, after_ms: 1000, min_samples: 2}";
    let (on_dir, off_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_on, on) = start_serve(&http, on_dir.path(), &config(&chaos, judged), &[]).await;
    let off_cfg = "{enabled: false, below: 0.5, window_ms: 1500, after_ms: 1000, min_samples: 2}";
    let (_off, off) = start_serve(&http, off_dir.path(), &config(&chaos, off_cfg), &[]).await;

    let ((warm_turn, warm_text), (cold_turn, cold_text), (off_turn, off_text)) = tokio::join!(
        warm_then_crawl(&http, &on, "warm"),
        stream(&http, &on, "cold", "cold-agent"),
        warm_then_crawl(&http, &off, "off"),
    );

    // Judged: the crawl is resumed on the backup, one whole answer.
    assert_eq!(warm_text, whole());
    let (t, rows) = timeline(&http, &on, &warm_turn).await;
    assert_eq!(t["provider"], "backup", "{t}");
    assert_eq!(rows.len(), 2, "{t}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str(), rows[0].2.as_str()),
        (
            "primary/crawler-warm",
            "stream_crawling",
            "broke mid-stream"
        ),
        "{t}"
    );
    assert_eq!(
        (rows[1].0.as_str(), rows[1].1.as_str(), rows[1].2.as_str()),
        ("backup/ok:tokens=12", "ok", "resumed"),
        "{t}"
    );
    let message = t["timeline"][0]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("stream crawling:"), "{t}");

    // No history, or crawling off: the same crawl is not judged, and the
    // primary finishes it.
    for (name, base, turn, text) in [
        ("cold", &on, &cold_turn, &cold_text),
        ("off", &off, &off_turn, &off_text),
    ] {
        assert_eq!(*text, whole(), "{name}");
        let (t, rows) = timeline(&http, base, turn).await;
        assert_eq!(t["provider"], "primary", "{name}: {t}");
        assert_eq!(rows.len(), 1, "{name}: {t}");
        assert_eq!(rows[0].1, "ok", "{name}: {t}");
    }
}
