//! Throughput of token counting, and the per-request cost of the guard,
//! budget, counting and compaction planning on a 100-message request.
//!
//! `cargo run -p hale-tokens --release --example tokens_bench`

use hale_core::budget::{self, Spend};
use hale_core::compaction::{self, MsgRole, MsgView};
use hale_core::config::{BudgetConfig, CompactionConfig, GuardConfig};
use hale_core::guard::{TaskGuard, ToolCallSeen, ToolResultSeen};
use hale_core::models;
use hale_tokens::Tokenizer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const WORDS: &[&str] = &[
    "the",
    "agent",
    "calls",
    "a",
    "provider",
    "and",
    "reads",
    "file",
    "src/main.rs",
    "with",
    "error",
    "retry",
    "after",
    "timeout",
    "context",
    "window",
    "tokens",
    "summary",
    "of",
    "work",
    "done",
    "so",
    "far",
    "function",
    "returns",
    "value",
    "42",
    "if",
    "not",
    "found",
    "then",
    "{",
    "}",
    "(",
    ")",
    "=>",
    "Result<String>",
    "breaker",
    "opened",
    "because",
    "upstream",
    "was",
    "overloaded",
    ".",
    ",",
];

/// Deterministic English-and-code-like text of about `bytes` bytes.
fn text(bytes: usize, seed: u64) -> String {
    let mut s = String::with_capacity(bytes + 32);
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    while s.len() < bytes {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let w = WORDS[((x >> 33) as usize) % WORDS.len()];
        s.push_str(w);
        s.push(if (x >> 20).is_multiple_of(13) {
            '\n'
        } else {
            ' '
        });
    }
    s
}

fn main() {
    let tok = Tokenizer::new();
    let t = Instant::now();
    tok.warm();
    println!(
        "load o200k + cl100k: {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    let corpus = text(1 << 20, 7);
    for model in ["gpt-4o", "gpt-4", "claude-sonnet-4"] {
        let t = Instant::now();
        let n = tok.count(model, &corpus);
        let dt = t.elapsed();
        println!(
            "{model:16} {:>8} tokens in {:>7.1} ms over {} KiB: {:>6.2} M tokens/s",
            n,
            dt.as_secs_f64() * 1e3,
            corpus.len() / 1024,
            f64::from(n) / dt.as_secs_f64() / 1e6
        );
    }

    // A 100-message request: system, then user / assistant-with-call / tool result groups.
    let msgs: Vec<(MsgRole, String, Option<String>)> = (0..100)
        .map(|i| {
            let role = match i {
                0 => MsgRole::System,
                i if i % 3 == 1 => MsgRole::User,
                i if i % 3 == 2 => MsgRole::Assistant,
                _ => MsgRole::Tool,
            };
            let len = if role == MsgRole::Tool { 2000 } else { 300 };
            let id = match role {
                MsgRole::Assistant | MsgRole::Tool => Some(format!("call_{}", (i + 1) / 3)),
                MsgRole::System | MsgRole::User => None,
            };
            (role, text(len, i as u64), id)
        })
        .collect();
    let gcfg = GuardConfig::default();
    let bcfg = BudgetConfig {
        max_tokens_per_task: Some(10_000_000),
        max_cost_usd_per_agent: Some(100.0),
        ..Default::default()
    };
    let ccfg = CompactionConfig::default();
    let model = "gpt-4o";
    let window = models::context_window(model, &BTreeMap::new());
    let price = models::price(model, &BTreeMap::new());

    let iters = 200u32;
    let t0 = Instant::now();
    let mut guard = TaskGuard::new(t0);
    let (mut g_time, mut b_time, mut c_time, mut p_time) = (
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
    );
    let mut total = 0;
    for it in 0..iters {
        // The model answered with one call; this request carries its result and the history.
        let call_id = format!("it{it}");
        let args = format!("{{\"path\":\"src/f{}.rs\"}}", it % 3);
        let _ = guard.on_response(
            &gcfg,
            &[ToolCallSeen {
                id: &call_id,
                name: "read_file",
                arguments: &args,
            }],
            t0,
        );
        let mut results: Vec<ToolResultSeen<'_>> = msgs
            .iter()
            .filter_map(|(r, body, id)| match (r, id) {
                (MsgRole::Tool, Some(id)) => Some(ToolResultSeen {
                    tool_call_id: id,
                    content: body,
                }),
                _ => None,
            })
            .collect();
        results.push(ToolResultSeen {
            tool_call_id: &call_id,
            content: "ok",
        });

        let t = Instant::now();
        let g = guard.on_request(&gcfg, &results, t0);
        g_time += t.elapsed();

        let t = Instant::now();
        let b = budget::check(&bcfg, &Spend::default(), &Spend::default());
        let cost = price.map(|p| budget::cost(p, 1000, 100));
        b_time += t.elapsed();

        let t = Instant::now();
        let counts: Vec<u32> = msgs
            .iter()
            .map(|(_, body, _)| tok.count(model, body))
            .collect();
        total = tok.count_messages(model, msgs.iter().map(|(_, b, _)| b.as_str()));
        c_time += t.elapsed();

        let t = Instant::now();
        let views: Vec<MsgView> = msgs
            .iter()
            .zip(&counts)
            .map(|((role, body, id), &tokens)| MsgView {
                role: *role,
                tokens,
                chars: body.len(),
                tool_call_ids: match role {
                    MsgRole::Assistant => id.iter().cloned().collect(),
                    MsgRole::System | MsgRole::User | MsgRole::Tool => Vec::new(),
                },
                tool_result_for: match role {
                    MsgRole::Tool => id.clone(),
                    MsgRole::System | MsgRole::User | MsgRole::Assistant => None,
                },
                tool_name: None,
            })
            .collect();
        // A small window forces a real plan (tiers 1–2), the expensive path.
        let plan = compaction::plan(&views, window / 8, &ccfg);
        p_time += t.elapsed();
        let _ = std::hint::black_box((g, b, cost, &plan));
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(iters);
    println!(
        "100-message request ({total} tokens): guard {:.1} µs | budget {:.2} µs | count {:.0} µs | compaction plan {:.1} µs | total {:.0} µs",
        per(g_time),
        per(b_time),
        per(c_time),
        per(p_time),
        per(g_time + b_time + c_time + p_time)
    );
}
