//! Hedged first token end to end (issue 43; docs/configuration.md,
//! "hedging"): `hale chaos` serves a primary whose first token comes after
//! 20 s and a healthy backup; `hale serve` in front of them, with a hedge
//! point of 1 s for a deployment it knows nothing of yet. Each turn, streamed
//! and not, is answered by the backup — long before the primary would have
//! answered (20 s) or `first_token_timeout_ms` (30 s) would have moved on —,
//! is marked `x-hale-hedged: true`, has a `turn.hedged` event naming the
//! winner and the loser's cost, and shows both attempts in its timeline:
//! the primary's cancelled, the backup's the hedge.

mod common;

use common::{start_chaos, start_serve};
use std::time::Duration;

const SLOW: &str = "slow-first-token:ms=20000:tokens=5";

fn config(chaos: &str) -> String {
    format!(
        "\
routes:
  r: [primary/{SLOW}, backup/backup-model]
providers:
  - name: primary
    kind: openai
    base_url: {chaos}/v1
    default_model: {SLOW}
  - name: backup
    kind: openai
    base_url: {chaos}/v1
    default_model: backup-model
hedging: {{default_after_ms: 1000, budget_share: 1.0}}
"
    )
}

#[tokio::test]
async fn a_silent_primary_is_hedged_on_the_backup_which_answers() {
    let http = hale_testkit::client(Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let (_chaos, chaos) = start_chaos(&http, dir.path()).await;
    let (_hale, base) = start_serve(&http, dir.path(), &config(&chaos), &[]).await;

    for (agent, stream) in [("hedge-complete", false), ("hedge-stream", true)] {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .header("x-hale-agent", agent)
            .json(&serde_json::json!({
                "model": "r",
                "stream": stream,
                "messages": [{"role": "user", "content": "hello"}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{agent}");
        let header = |k: &str| {
            r.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        // The backup answered, through a hedge.
        assert_eq!(header("x-hale-provider"), "backup", "{agent}");
        assert_eq!(header("x-hale-hedged"), "true", "{agent}");
        let turn_id = header("x-hale-turn-id");
        let body = r.text().await.unwrap();
        assert!(body.contains("w0"), "{agent}: {body}");

        // Both attempts are in the timeline: the primary's cancelled, the backup's the hedge.
        let turn = hale_testkit::get_json(&http, &format!("{base}/turns/{turn_id}")).await;
        assert_eq!(turn["provider"], "backup", "{turn}");
        let rows = turn["timeline"].as_array().expect("timeline");
        let row = |target: &str| {
            rows.iter()
                .find(|r| r["target"] == target)
                .unwrap_or_else(|| panic!("no {target} row: {turn}"))
                .clone()
        };
        let primary = row(&format!("primary/{SLOW}"));
        assert_eq!(primary["hedge"], "cancelled", "{turn}");
        let backup = row("backup/backup-model");
        assert_eq!(backup["hedge"], "hedge", "{turn}");
        assert_eq!(backup["status"], 200, "{turn}");

        // The event names the winner and what the cancelled primary cost.
        let events = http
            .get(format!(
                "{base}/events?follow=false&tail=1000&kind=turn.hedged"
            ))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let ev = events
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
            .find(|ev| ev["turn"] == turn_id.as_str())
            .unwrap_or_else(|| panic!("no turn.hedged event of {turn_id}: {events}"));
        assert_eq!(ev["payload"]["winner"], "backup/backup-model", "{ev}");
        assert_eq!(ev["payload"]["loser"], format!("primary/{SLOW}"), "{ev}");
        assert!(
            ev["payload"]["loser_input_tokens"].as_u64().unwrap_or(0) > 0,
            "{ev}"
        );
    }
}
