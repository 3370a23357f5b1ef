//! The HTTP edge (issue 9, items 3 and 4), through the real server: the
//! request body limit, every hale-made error in the route's error shape,
//! `Idempotency-Key` reuse with another body, bounded metric labels, agent
//! and task header validation, and who is trusted without keys.

mod common;

use common::*;
use hale_core::config::{AgentConfig, ApiKey, KeyScope, Secret};
use serde_json::{Value, json};
use std::time::Duration;

/// A raw request to the gateway: (status, headers, JSON body or Null).
async fn raw(
    h: &Hale,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &[u8])],
    body: Option<Vec<u8>>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut rb = h.http.request(method, format!("{}{path}", h.base));
    for (k, v) in headers {
        rb = rb.header(
            *k,
            reqwest::header::HeaderValue::from_bytes(v).expect("header value"),
        );
    }
    if let Some(b) = body {
        rb = rb.body(b);
    }
    let r = rb.send().await.expect("the gateway answers");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, headers, json)
}

fn content_type(h: &reqwest::header::HeaderMap) -> &str {
    h.get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Asserts the OpenAI error shape with this type; returns the message.
fn openai_error(v: &Value, kind: &str) -> String {
    assert_eq!(v["error"]["type"], kind, "OpenAI error shape: {v}");
    assert!(v.get("type").is_none(), "not the Anthropic shape: {v}");
    v["error"]["message"].as_str().expect("message").to_owned()
}

/// Asserts the Anthropic error shape with this type; returns the message.
fn anthropic_error(v: &Value, kind: &str) -> String {
    assert_eq!(v["type"], "error", "Anthropic error shape: {v}");
    assert_eq!(v["error"]["type"], kind, "Anthropic error shape: {v}");
    v["error"]["message"].as_str().expect("message").to_owned()
}

/// A chat body of at least `bytes` bytes (one user message).
fn chat_body(anthropic: bool, bytes: usize) -> Vec<u8> {
    let mut v = json!({
        "model": ROUTE,
        "messages": [{"role": "user", "content": "x".repeat(bytes)}],
    });
    if anthropic {
        v["max_tokens"] = json!(64);
    }
    serde_json::to_vec(&v).expect("json")
}

const LIMIT: u64 = 64 * 1024;

async fn small_limit_hale() -> (hale_chaos::ChaosHandle, Hale) {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "m")]);
    cfg.limits.max_request_bytes = LIMIT;
    (c, Hale::start(cfg).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_is_413_in_the_openai_shape() {
    let (c, h) = small_limit_hale().await;
    let json_ct: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let post = reqwest::Method::POST;
    // Under the limit: served.
    let (s, _, v) = raw(
        &h,
        post.clone(),
        "/v1/chat/completions",
        json_ct,
        Some(chat_body(false, 1000)),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    // Over it: 413 JSON, OpenAI shape, naming the limit; the provider never sees it.
    let (s, hd, v) = raw(
        &h,
        post.clone(),
        "/v1/chat/completions",
        json_ct,
        Some(chat_body(false, 2 * LIMIT as usize)),
    )
    .await;
    assert_eq!(s, 413);
    assert!(content_type(&hd).starts_with("application/json"));
    let msg = openai_error(&v, "request_too_large");
    assert!(
        msg.contains(&LIMIT.to_string()) && msg.contains("limits.max_request_bytes"),
        "{msg}"
    );
    assert_eq!(c.requests_for("m"), 1);
    // An admin route (a checkpoint upload) has the same limit and shape.
    let big = serde_json::to_vec(&json!({"state": "y".repeat(2 * LIMIT as usize)})).unwrap();
    let (s, _, v) = raw(
        &h,
        post,
        "/agents/a/tasks/t/checkpoints",
        json_ct,
        Some(big),
    )
    .await;
    assert_eq!(s, 413);
    openai_error(&v, "request_too_large");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_is_413_in_the_anthropic_shape() {
    let (c, h) = small_limit_hale().await;
    let hdrs: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let (s, hd, v) = raw(
        &h,
        reqwest::Method::POST,
        "/v1/messages",
        hdrs,
        Some(chat_body(true, 2 * LIMIT as usize)),
    )
    .await;
    assert_eq!(s, 413);
    assert!(content_type(&hd).starts_with("application/json"));
    let msg = anthropic_error(&v, "request_too_large");
    assert!(msg.contains(&LIMIT.to_string()), "{msg}");
    assert_eq!(c.requests_for("m"), 0);
    h.stop().await;
}

/// The old limit was axum's 2 MiB default: a 3 MiB request (one base64
/// image) is served under the default 32 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_of_three_mib_is_served_under_the_default_limit() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let image = format!("data:image/png;base64,{}", "A".repeat(3 * 1024 * 1024));
    let body = json!({
        "model": ROUTE,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": image}},
        ]}],
    });
    let body = serde_json::to_vec(&body).unwrap();
    assert!(body.len() > 3 * 1024 * 1024);
    let hdrs: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let (s, _, v) = raw(
        &h,
        reqwest::Method::POST,
        "/v1/chat/completions",
        hdrs,
        Some(body),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(c.requests_for("m"), 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_route_is_404_json() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let (s, hd, v) = raw(&h, reqwest::Method::GET, "/v1/nope", &[], None).await;
    assert_eq!(s, 404);
    assert!(content_type(&hd).starts_with("application/json"));
    let msg = openai_error(&v, "not_found");
    assert!(msg.contains("GET /v1/nope"), "{msg}");
    // Under /v1/messages the Anthropic shape.
    let (s, _, v) = raw(
        &h,
        reqwest::Method::POST,
        "/v1/messages/batches",
        &[],
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(s, 404);
    anthropic_error(&v, "not_found");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_is_405_json() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let (s, hd, v) = raw(&h, reqwest::Method::GET, "/v1/chat/completions", &[], None).await;
    assert_eq!(s, 405);
    assert!(content_type(&hd).starts_with("application/json"));
    assert_eq!(hd.get("allow").and_then(|v| v.to_str().ok()), Some("POST"));
    let msg = openai_error(&v, "method_not_allowed");
    assert!(
        msg.contains("GET") && msg.contains("/v1/chat/completions"),
        "{msg}"
    );
    let (s, _, v) = raw(&h, reqwest::Method::DELETE, "/v1/messages", &[], None).await;
    assert_eq!(s, 405);
    anthropic_error(&v, "method_not_allowed");
    let (s, _, v) = raw(&h, reqwest::Method::POST, "/agents", &[], None).await;
    assert_eq!(s, 405);
    openai_error(&v, "method_not_allowed");
    h.stop().await;
}

/// axum's query and path rejections (plain text by default) come back as
/// JSON 400s with axum's explanation as the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_query_is_400_json() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let (s, hd, v) = raw(
        &h,
        reqwest::Method::POST,
        "/agents/a/tasks/t/checkpoints?parent=x&parent=y",
        &[],
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert!(content_type(&hd).starts_with("application/json"));
    let msg = openai_error(&v, "invalid_request_error");
    assert!(msg.contains("parent"), "{msg}");
    // A path parameter that is not UTF-8.
    let (s, _, v) = raw(&h, reqwest::Method::GET, "/agents/%FF", &[], None).await;
    assert_eq!(s, 400, "{v}");
    openai_error(&v, "invalid_request_error");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_reused_with_other_body_is_422() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let first = h
        .openai(ROUTE)
        .user("first question")
        .header("idempotency-key", "k")
        .send()
        .await;
    first.assert_complete(&full());
    let other = h
        .openai(ROUTE)
        .user("another question")
        .header("idempotency-key", "k")
        .send()
        .await;
    assert_eq!(other.status, 422, "{}", other.raw);
    let msg = openai_error(&other.json, "idempotency_key_reused");
    assert!(msg.contains("Idempotency-Key"), "{msg}");
    // The same body still gets the stored answer; the provider was called once.
    let again = h
        .openai(ROUTE)
        .user("first question")
        .header("idempotency-key", "k")
        .send()
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.raw, first.raw);
    assert_eq!(
        again
            .headers
            .get("x-hale-idempotent-replay")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(c.requests_for("m"), 1);
    // Anthropic callers get the Anthropic shape.
    let a1 = h
        .anthropic(ROUTE)
        .user("q1")
        .header("idempotency-key", "ka")
        .send()
        .await;
    a1.assert_complete(&full());
    let a2 = h
        .anthropic(ROUTE)
        .user("q2")
        .header("idempotency-key", "ka")
        .send()
        .await;
    assert_eq!(a2.status, 422);
    anthropic_error(&a2.json, "idempotency_key_reused");
    h.stop().await;
}

/// A duplicate arriving while the first request with its key is still being
/// served, with another body, is refused at once (it does not wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicate_with_other_body_is_422() {
    let c = chaos().await;
    let model = "slow-first-token:ms=1500";
    let h = Hale::start(config(vec![openai("p", &c, model)])).await;
    let a = h
        .openai(ROUTE)
        .user("one")
        .header("idempotency-key", "same")
        .send();
    let b = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.openai(ROUTE)
            .user("two")
            .header("idempotency-key", "same")
            .send()
            .await
    };
    let (a, b) = tokio::join!(a, b);
    a.assert_complete(&full());
    assert_eq!(b.status, 422, "{}", b.raw);
    openai_error(&b.json, "idempotency_key_reused");
    assert!(
        b.elapsed < a.elapsed,
        "refused without waiting for the first"
    );
    assert_eq!(c.requests_for(model), 1);
    h.stop().await;
}

/// 50 distinct agent names and 50 distinct model names the config does not
/// know create no series of their own: they are all `other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfigured_agent_and_model_labels_fold_into_other() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "m")]);
    cfg.agents.insert("known".into(), AgentConfig::default());
    let h = Hale::start(cfg).await;
    for i in 0..50 {
        // `p/model-i` pins provider p with a model no config names.
        let r = h
            .openai(&format!("p/model-{i}"))
            .agent(&format!("agent-{i}"))
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.raw);
    }
    let r = h.openai(ROUTE).agent("known").send().await;
    assert_eq!(r.status, 200);
    let (s, text) = h.get_text("/metrics").await;
    assert_eq!(s, 200);
    assert!(
        !text.contains("agent-") && !text.contains("model-"),
        "{text}"
    );
    let series = |name: &str| -> Vec<&str> {
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains('{'))
            .collect()
    };
    let attempts = series("hale_attempts_total");
    assert!(
        attempts
            .iter()
            .any(|l| l.contains(r#"target="p/other""#) && l.ends_with(" 50")),
        "{attempts:?}"
    );
    assert!(
        attempts.iter().any(|l| l.contains(r#"target="p/m""#)),
        "{attempts:?}"
    );
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let breakers = series("hale_breaker_state");
    assert!(
        breakers.contains(
            &r#"hale_breaker_state{agent="other",deployment="p/other",state="closed"} 50"#
        ),
        "{breakers:?}"
    );
    assert!(
        breakers.iter().any(|l| l.contains(r#"agent="known""#)),
        "{breakers:?}"
    );
    assert_eq!(
        breakers.len(),
        2 * 5,
        "two agent labels x five states: {breakers:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_or_control_char_agent_header_is_400() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let at_limit = "a".repeat(128);
    let r = h.openai(ROUTE).agent(&at_limit).send().await;
    assert_eq!(r.status, 200, "128 bytes is accepted: {}", r.raw);
    let r = h.openai(ROUTE).agent(&"a".repeat(129)).send().await;
    assert_eq!(r.status, 400);
    let msg = openai_error(&r.json, "invalid_request_error");
    assert!(
        msg.contains("x-hale-agent") && msg.contains("129 bytes"),
        "{msg}"
    );
    let r = h.openai(ROUTE).header("x-hale-task", "a\tb").send().await;
    assert_eq!(r.status, 400);
    let msg = openai_error(&r.json, "invalid_request_error");
    assert!(
        msg.contains("x-hale-task") && msg.contains("control character"),
        "{msg}"
    );
    let r = h.anthropic(ROUTE).agent(&"a".repeat(10_000)).send().await;
    assert_eq!(r.status, 400);
    assert!(anthropic_error(&r.json, "invalid_request_error").contains("x-hale-agent"));
    // A C1 control character (U+0085, UTF-8 C2 85) and bytes that are not UTF-8.
    let hdrs: &[(&str, &[u8])] = &[
        ("content-type", b"application/json"),
        ("x-hale-agent", b"a\xc2\x85"),
    ];
    let (s, _, v) = raw(
        &h,
        reqwest::Method::POST,
        "/v1/chat/completions",
        hdrs,
        Some(chat_body(false, 10)),
    )
    .await;
    assert_eq!(s, 400);
    assert!(openai_error(&v, "invalid_request_error").contains("control character"));
    let hdrs: &[(&str, &[u8])] = &[
        ("content-type", b"application/json"),
        ("x-hale-task", b"\xff\xfe"),
    ];
    let (s, _, v) = raw(
        &h,
        reqwest::Method::POST,
        "/v1/chat/completions",
        hdrs,
        Some(chat_body(false, 10)),
    )
    .await;
    assert_eq!(s, 400);
    assert!(openai_error(&v, "invalid_request_error").contains("x-hale-task is not UTF-8"));
    assert_eq!(
        c.requests_for("m"),
        1,
        "refused requests never reach the provider"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_request_without_keys_is_refused() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
    let r = h.openai(ROUTE).send().await;
    assert_eq!(r.status, 200, "a direct loopback client is trusted");
    for (k, v) in [
        ("x-forwarded-for", "203.0.113.7"),
        ("forwarded", "for=203.0.113.7;proto=https"),
        ("x-real-ip", "203.0.113.7"),
    ] {
        let r = h.openai(ROUTE).header(k, v).send().await;
        assert_eq!(r.status, 403, "{k}");
        let msg = openai_error(&r.json, "forbidden");
        assert!(msg.contains("auth.keys") && msg.contains("proxy"), "{msg}");
        let (s, v) = {
            let r = h
                .http
                .get(format!("{}/agents", h.base))
                .header(k, v)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        };
        assert_eq!(s, 403, "admin routes too: {v}");
    }
    let r = h
        .anthropic(ROUTE)
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await;
    assert_eq!(r.status, 403);
    assert!(anthropic_error(&r.json, "forbidden").contains("auth.keys"));
    assert_eq!(c.requests_for("m"), 1);
    h.stop().await;

    // With keys, a forwarded request is served on its key.
    let mut cfg = config(vec![openai("p", &c, "m")]);
    cfg.auth.keys.push(ApiKey {
        name: "admin".into(),
        token: Secret::new("s3cret"),
        scope: KeyScope::Admin,
    });
    let h = Hale::start(cfg).await;
    let r = h
        .openai(ROUTE)
        .header("x-forwarded-for", "203.0.113.7")
        .header("authorization", "Bearer s3cret")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    h.stop().await;

    // --insecure-no-auth: everyone, forwarded or not.
    let mut cfg = config(vec![openai("p", &c, "m")]);
    cfg.auth.insecure_no_auth = true;
    let h = Hale::start(cfg).await;
    let r = h
        .openai(ROUTE)
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.raw);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_scheme_is_case_insensitive() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "m")]);
    cfg.auth.keys.push(ApiKey {
        name: "admin".into(),
        token: Secret::new("s3cret"),
        scope: KeyScope::Admin,
    });
    let h = Hale::start(cfg).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let (s, _, v) = raw(
            &h,
            reqwest::Method::GET,
            "/agents",
            &[("authorization", format!("{scheme} s3cret").as_bytes())],
            None,
        )
        .await;
        assert_eq!(s, 200, "{scheme}: {v}");
    }
    for bad in ["Bearer wrong", "Basic s3cret", "s3cret"] {
        let (s, _, v) = raw(
            &h,
            reqwest::Method::GET,
            "/agents",
            &[("authorization", bad.as_bytes())],
            None,
        )
        .await;
        assert_eq!(s, 401, "{bad}");
        openai_error(&v, "unauthorized");
    }
    h.stop().await;
}

/// The gateway's serve entry point refuses a non-loopback listener when no
/// keys are configured, saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_non_loopback_address_without_keys_refuses_to_start() {
    let c = chaos().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = std::sync::Arc::new(config(vec![openai("p", &c, "m")]));
    let store = hale_store::Store::open(None, dir.path(), (&cfg.events).into())
        .await
        .expect("store");
    let gw = hale_gateway::Gateway::new(cfg, store.clone())
        .await
        .expect("gateway");
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let err = hale_gateway::http::serve(gw, listener, std::future::pending())
        .await
        .expect_err("refuses to start");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    let msg = err.to_string();
    assert!(
        msg.contains("auth.keys") && msg.contains("--insecure-no-auth"),
        "{msg}"
    );
    store.close().await;
}
