//! What hale adds before a turn leaves for a provider on a long conversation:
//! guard (step 4), compaction check with real token counting (step 6) and
//! budget (step 7), on a 100-message request.
//!
//! ```sh
//! cargo run --release -p hale-gateway --example preflight_bench
//! ```
//!
//! The window is set so the conversation is past half the compaction
//! threshold (the point from which hale counts exactly) but under it, so the
//! measured path is "count every message, decide nothing needs compacting" —
//! the most a turn pays when no compaction happens. The first turn counts
//! every message with tiktoken; later turns of the same session find the
//! counts of the messages they repeat in the token cache.

use hale_core::config::{Config, ProviderConfig, ProviderKind};
use hale_gateway::{compaction, turn::Turn};
use hale_proto::openai;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MESSAGES: usize = 100;
const TURNS: usize = 2_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut p = ProviderConfig::new("p", ProviderKind::OpenAi, "http://127.0.0.1:9/v1", "gpt-4o");
    p.context_windows.insert("gpt-4o".into(), 40_000);
    let mut cfg = Config::with_providers(vec![p]);
    cfg.data_dir = dir.path().to_path_buf();
    let cfg = Arc::new(cfg);
    let store = hale_store::Store::open(None, dir.path(), (&cfg.events).into()).await?;
    let gw = hale_gateway::Gateway::new(cfg.clone(), store).await?;
    hale_tokens::Tokenizer::new().warm();

    // ~200 tokens per message, alternating user/assistant, ~20k tokens in all.
    let messages: Vec<serde_json::Value> = (0..MESSAGES)
        .map(|i| {
            let text: String = (0..150)
                .map(|w| format!("word{} ", (i * 7 + w) % 97))
                .collect();
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": text})
        })
        .collect();
    let body = serde_json::json!({"model": "gpt-4o", "messages": messages});
    let req = openai::parse_request(&body)?;
    let tokens = hale_tokens::Tokenizer::new().count_messages(
        "gpt-4o",
        req.messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|p| match p {
                hale_proto::Part::Text { text } => Some(text.as_str()),
                _ => None,
            }),
    );

    let mut times = Vec::with_capacity(TURNS);
    let mut first = Duration::ZERO;
    for i in 0..TURNS {
        let mut r = req.clone();
        let task = format!("t{}", i / 1000);
        let t0 = Instant::now();
        gw.tasks
            .check_request("bench", &task, &r)
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let turn = Turn::new(
            &gw.cfg,
            format!("turn{i}"),
            "bench".into(),
            Some(task.clone()),
            cfg.routes.values().next().cloned().unwrap_or_else(|| {
                vec![hale_core::config::Target {
                    provider: "p".into(),
                    model: "gpt-4o".into(),
                }]
            }),
        );
        let window = compaction::window_of(cfg.provider("p"), "gpt-4o");
        let c = gw
            .compaction
            .compact(gw.env(), &turn, &mut r, "gpt-4o", window, false)
            .await;
        gw.tasks
            .check_budget("bench", &task, || gw.agent_record("bench"))
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let dt = t0.elapsed();
        assert!(
            c.is_none(),
            "the conversation must stay under the threshold"
        );
        if i == 0 {
            first = dt;
        } else {
            times.push(dt);
        }
    }
    times.sort();
    println!(
        "preflight on a {MESSAGES}-message request (~{tokens} tokens, gpt-4o, exact counting):"
    );
    println!(
        "  first turn (every message counted with tiktoken): {:.3} ms",
        first.as_secs_f64() * 1e3
    );
    println!(
        "  later turns (counts from the cache):              p50 {:.1} µs  p99 {:.1} µs  ({} turns)",
        percentile(&times, 0.50).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6,
        times.len()
    );
    Ok(())
}
