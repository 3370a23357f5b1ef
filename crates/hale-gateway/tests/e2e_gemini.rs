//! The failure classes (docs/operations.md, "Failure classes") against a
//! `kind: gemini` primary (hale chaos's Gemini mode, Google's error shapes
//! and 200 safety blocks), in both wire modes: each fault is classified as
//! Google's status says, retried or moved on from as its class promises, and
//! a safety block is final with its reason (issue 29).

mod common;

use common::*;
use hale_core::config::Config;

/// A Gemini primary failing with `fault`, an OpenAI backup.
async fn world(fault: &str, tweak: impl FnOnce(&mut Config)) -> (hale_chaos::ChaosHandle, Hale) {
    let c = chaos().await;
    let mut cfg = config(vec![
        gemini("primary", &c, fault),
        openai("backup", &c, BACKUP_MODEL),
    ]);
    tweak(&mut cfg);
    let h = Hale::start(cfg).await;
    (c, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_errors_are_classified_and_healed() {
    for stream in MODES {
        for (fault, class, primary_calls) in [
            // RESOURCE_EXHAUSTED once, then answered on the same target.
            ("rate-limit:retry_after=0:times=1", "rate_limit", 2),
            // UNAVAILABLE once, retried on the same target.
            ("error-503:times=1", "overloaded", 2),
            // "API key not valid" (a 400): auth, moves on at once.
            ("auth", "auth", 1),
            // "exceeds the maximum number of tokens": context overflow.
            ("context-overflow", "context_overflow", 1),
        ] {
            let (c, h) = world(fault, |_| {}).await;
            let r = h.openai(ROUTE).stream(stream).send().await;
            r.assert_complete(&full());
            let tl = h.timeline(&r.turn_id).await;
            assert_eq!(classes_of(&tl)[0], class, "{fault} stream={stream}: {tl:?}");
            assert_eq!(
                c.requests_for(fault),
                primary_calls,
                "{fault} stream={stream}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_safety_block_is_final_with_its_reason() {
    for stream in MODES {
        let (c, h) = world("content-filter", |_| {}).await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        assert_eq!(r.status, 400, "stream={stream}: {}", r.raw);
        assert_eq!(r.error_type(), "content_policy");
        assert!(r.error_message().contains("SAFETY"), "{}", r.raw);
        assert_eq!(c.requests_for("content-filter"), 1);
        assert_eq!(c.requests_for(BACKUP_MODEL), 0, "not failed over");
        let a = h.anthropic(ROUTE).stream(stream).send().await;
        assert_eq!(a.status, 400);
        assert!(a.error_message().contains("SAFETY"), "{}", a.raw);
    }
}

/// A Gemini stream that fails in-band (`data: {"error": UNAVAILABLE}`)
/// after 10 words is resumed on the backup: the caller gets it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_in_band_error_mid_stream_is_resumed() {
    let (c, h) = world("stream-error:after=10", |_| {}).await;
    let r = h.openai(ROUTE).stream(true).send().await;
    r.assert_complete(&full());
    let tl = h.timeline(&r.turn_id).await;
    assert_eq!(classes_of(&tl)[0], "overloaded", "{tl:?}");
    assert_eq!(c.requests_for("stream-error:after=10"), 1);
}
