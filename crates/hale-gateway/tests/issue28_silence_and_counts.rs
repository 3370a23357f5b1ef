//! Issue #28, item 6: an upstream that accepts the request, says nothing for
//! longer than the first-byte expectation and then hangs up is a timeout,
//! not a blip. The turn moves on to the fallback after one attempt instead
//! of calling the silent deployment again, and the failure counts toward
//! its ejection (as a timeout).
//!
//! The silent provider is a real loopback TCP server: it accepts, reads the
//! request, sends not one byte for [`SILENCE`] and closes the connection.
//! The fallback is `hale chaos` answering normally.

mod common;

use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The silent provider's first-token timeout in the test: the first-byte
/// expectation is a quarter of it (500 ms).
const FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the silent provider says nothing before it closes: longer than
/// the expectation, shorter than every timeout (the close comes first).
const SILENCE: Duration = Duration::from_secs(1);

/// A provider that accepts, reads, stays silent and hangs up. Counts the
/// requests it received (one per connection: each is closed).
struct SilentUpstream {
    base_url: String,
    requests: Arc<AtomicU64>,
}

impl SilentUpstream {
    async fn start(silence: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut got_any = false;
                    // Read whatever comes (so the close is a clean FIN, not a
                    // reset of unread bytes) until the silence is over.
                    let _ = tokio::time::timeout(silence, async {
                        while let Ok(n) = sock.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            if !got_any {
                                got_any = true;
                                counted.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    })
                    .await;
                    drop(sock);
                });
            }
        });
        SilentUpstream {
            base_url: format!("http://{addr}/v1"),
            requests,
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Route [`ROUTE`] = `silent` (the hanging-up upstream) then `backup` (chaos, ok).
async fn world() -> (SilentUpstream, hale_chaos::ChaosHandle, Hale) {
    let silent = SilentUpstream::start(SILENCE).await;
    let c = chaos().await;
    let mut primary = hale_core::config::ProviderConfig::new(
        "silent",
        hale_core::config::ProviderKind::OpenAi,
        &silent.base_url,
        "silent-model",
    );
    primary.timeout = TEST_TIMEOUT;
    primary.first_token_timeout = FIRST_TOKEN_TIMEOUT;
    primary.stream_idle_timeout = TEST_TIMEOUT;
    let mut cfg = config(vec![primary, openai("backup", &c, BACKUP_MODEL)]);
    // Short backoffs (a blip retried on the same target waits little) and
    // no probe during the test: every call to the silent upstream is a turn's.
    for p in [
        &mut cfg.retry.server_error,
        &mut cfg.retry.network,
        &mut cfg.retry.rate_limit,
    ] {
        p.initial = Duration::from_millis(20);
        p.max = Duration::from_millis(100);
    }
    cfg.retry.probe_interval = Duration::from_secs(600);
    let h = Hale::start(cfg).await;
    (silent, c, h)
}

/// The case (streamed, and not): one attempt to the silent
/// deployment, classified `timeout`, then the fallback serves. After
/// `eject_after` (3) such turns the silent deployment is ejected for a
/// timeout and the next turn does not call it at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_that_hangs_up_is_a_timeout_tried_once_then_the_fallback_serves() {
    let (silent, c, h) = world().await;
    let eject_after = 3;
    for i in 0..eject_after {
        let stream = i % 2 == 0;
        let r = h.openai(ROUTE).stream(stream).send().await;
        assert_eq!(r.status, 200, "turn {i}: {}", r.raw);
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup", "turn {i}");
        assert_eq!(
            silent.requests(),
            i as u64 + 1,
            "turn {i} (stream {stream}) called the silent deployment more than once"
        );
        let timeline = h.timeline(&r.turn_id).await;
        assert_eq!(
            targets_of(&timeline),
            vec!["silent/silent-model", "backup/backup-model"],
            "turn {i}: {timeline:?}"
        );
        assert_eq!(
            classes_of(&timeline),
            vec!["timeout", "ok"],
            "turn {i}: {timeline:?}"
        );
    }
    // Counted toward ejection, as a timeout.
    let (s, v) = h.get_json("/deployments").await;
    assert_eq!(s, 200);
    let view = v["deployments"]
        .as_array()
        .expect("list")
        .iter()
        .find(|d| d["provider"] == "silent")
        .cloned()
        .unwrap_or_else(|| panic!("silent listed: {v}"));
    assert_eq!(view["health"], "ejected", "{view}");
    assert_eq!(view["ejection_class"], "timeout", "{view}");
    // Ejected: the next turn goes straight to the fallback.
    let r = h.openai(ROUTE).send().await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.provider, "backup");
    assert_eq!(silent.requests(), eject_after as u64);
    assert_eq!(c.requests_for(BACKUP_MODEL), eject_after as u64 + 1);
    h.stop().await;
}

/// Issue #28, item 7: one body, one token count. The same conversation is
/// sent twice, byte for byte: the first turn compacts it (a summariser call
/// to chaos), the second reuses the stored compaction. Both turns'
/// `agent.compacted` say the same `before_tokens`, and it is the count of
/// the body as sent (the model's tokenizer, or the approximation for a
/// model without one, with the per-message and per-reply overheads). Old
/// code counted the reused path's body with a rougher character estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_body_sent_twice_is_counted_the_same_whether_compacted_fresh_or_reused() {
    use hale_core::config::Target;
    use hale_core::event::EventKind;
    use serde_json::{Value, json};
    // gpt-4o: counted with o200k; claude-sonnet-4: the approximation.
    for model in ["gpt-4o", "claude-sonnet-4"] {
        let c = chaos_script(&format!("{model}:\n  - {{fault: ok}}\n")).await;
        let mut cfg = config(vec![openai("p", &c, model)]);
        // A small window so a modest conversation crosses the threshold.
        cfg.providers[0]
            .context_windows
            .insert(model.to_owned(), 2_000);
        cfg.routes.insert(
            "summarizer".into(),
            vec![Target {
                provider: "p".into(),
                model: "summarize".into(),
            }],
        );
        cfg.compaction.summarizer_model = Some("summarizer".into());
        let h = Hale::start(cfg).await;

        let mut messages = Vec::new();
        for i in 0..12 {
            let text: String = (0..20).map(|w| format!("topic{i} detail{w} ")).collect();
            messages.push(json!({"role": "user", "content": format!("question {i}: {text}")}));
            messages.push(json!({"role": "assistant", "content": format!("answer {i}: {text}")}));
        }
        messages.push(json!({"role": "user", "content": "And now the final question?"}));
        let body = json!({"model": ROUTE, "messages": messages});

        for _ in 0..2 {
            let mut call = h.openai(ROUTE).agent("long-agent");
            *call.body_mut() = body.clone();
            let r = call.send().await;
            assert_eq!(r.status, 200, "{model}: {}", r.raw);
        }
        h.store.flush().await.expect("flush");
        let compacted: Vec<Value> = h
            .store
            .events_after(0, 10_000, Some(&[EventKind::AgentCompacted]))
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.event.payload)
            .collect();
        assert_eq!(compacted.len(), 2, "{model}: {compacted:?}");
        let (fresh, reused) = (&compacted[0], &compacted[1]);
        assert_eq!(fresh["reused"], false, "{model}: {fresh}");
        assert_eq!(reused["reused"], true, "{model}: {reused}");
        assert!(fresh["tier_number"].as_u64() >= Some(2), "{model}: {fresh}");
        // One body, one number, whichever path the turn took.
        assert_eq!(
            fresh["before_tokens"], reused["before_tokens"],
            "{model}: fresh {fresh} vs reused {reused}"
        );
        // And that number is the body's count.
        let texts: Vec<&str> = messages
            .iter()
            .map(|m| m["content"].as_str().expect("text"))
            .collect();
        let expected = hale_tokens::Tokenizer::new().count_messages(model, texts);
        assert_eq!(
            fresh["before_tokens"].as_u64(),
            Some(u64::from(expected)),
            "{model}: {fresh}"
        );
        // What was sent is the same compacted body both times, counted the same.
        assert_eq!(fresh["after_tokens"], reused["after_tokens"], "{model}");
        h.stop().await;
    }
}
