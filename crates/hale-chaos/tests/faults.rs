//! Every fault, in both dialects where the shape differs: status, headers,
//! bodies, stream cuts, `times` counters, timers, the header override,
//! scripts and the control endpoints.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hale_chaos::{ChaosConfig, parse_script};
use serde_json::{Value, json};

async fn status_and_body(h: &hale_chaos::ChaosHandle, d: D, model: &str) -> (u16, Value) {
    let r = post(h, d, model, false).await;
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_ok_after_times() {
    let h = server().await;
    for d in BOTH {
        // Counters are per model name: a distinct name per dialect.
        let model = match d {
            D::OpenAi => "rate-limit:retry_after=2:times=1",
            D::Anthropic => "rate-limit:retry_after=2:times=1:tokens=3",
        };
        let r = post(&h, d, model, false).await;
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "2");
        let v: Value = r.json().await.unwrap();
        match d {
            D::OpenAi => assert_eq!(v["error"]["code"], "rate_limit_exceeded"),
            D::Anthropic => assert_eq!(error_type(d, &v), "rate_limit_error"),
        }
        let r = post(&h, d, model, false).await;
        assert_eq!(r.status(), 200, "{d:?} second request is ok");
        assert_eq!(r.headers()["x-chaos-applied"], "ok");
    }
}

#[tokio::test]
async fn rate_limit_without_times_is_forever_and_has_no_retry_after() {
    let h = server().await;
    for _ in 0..3 {
        let r = post(&h, D::OpenAi, "rate-limit", true).await;
        assert_eq!(r.status(), 429);
        assert!(r.headers().get("retry-after").is_none());
    }
    assert_eq!(h.requests_for("rate-limit"), 3);
}

#[tokio::test]
async fn server_errors_have_provider_shapes() {
    let h = server().await;
    assert_eq!(
        status_and_body(&h, D::OpenAi, "error-500:times=1").await.0,
        500
    );
    assert_eq!(
        status_and_body(&h, D::OpenAi, "error-500:times=1").await.0,
        200
    );
    let (s, v) = status_and_body(&h, D::OpenAi, "error-500").await;
    assert_eq!(
        (s, error_type(D::OpenAi, &v).as_str()),
        (500, "server_error")
    );
    let (s, v) = status_and_body(&h, D::Anthropic, "error-500").await;
    assert_eq!(
        (s, error_type(D::Anthropic, &v).as_str()),
        (500, "api_error")
    );
    for _ in 0..2 {
        assert_eq!(status_and_body(&h, D::OpenAi, "error-503").await.0, 503);
    }
    let (s, v) = status_and_body(&h, D::Anthropic, "error-529").await;
    assert_eq!(
        (s, error_type(D::Anthropic, &v).as_str()),
        (529, "overloaded_error")
    );
    assert_eq!(v["error"]["message"], "Overloaded");
    let (s, v) = status_and_body(&h, D::OpenAi, "error-529").await;
    assert_eq!(
        (s, error_type(D::OpenAi, &v).as_str()),
        (529, "overloaded_error")
    );
}

#[tokio::test]
async fn client_errors_have_provider_shapes() {
    let h = server().await;
    let (s, v) = status_and_body(&h, D::OpenAi, "context-overflow").await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["param"], "messages");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length")
    );
    let (s, v) = status_and_body(&h, D::Anthropic, "context-overflow").await;
    assert_eq!(
        (s, error_type(D::Anthropic, &v).as_str()),
        (400, "invalid_request_error")
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long")
    );

    let (s, v) = status_and_body(&h, D::OpenAi, "content-filter").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("content_policy_violation"))
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content filter")
    );
    let (s, v) = status_and_body(&h, D::Anthropic, "content-filter").await;
    assert_eq!(s, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content filter")
    );

    let (s, v) = status_and_body(&h, D::OpenAi, "auth").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (401, Some("invalid_api_key"))
    );
    let (s, v) = status_and_body(&h, D::Anthropic, "auth").await;
    assert_eq!(
        (s, error_type(D::Anthropic, &v).as_str()),
        (401, "authentication_error")
    );
}

/// `auth-echo` is the dialect's 401 whose message carries the credential
/// headers the request came with, as they came.
#[tokio::test]
async fn auth_echo_is_a_401_echoing_the_credentials_received() {
    let h = server().await;
    let (s, v) = status_and_body(&h, D::OpenAi, "auth-echo").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (401, Some("invalid_api_key"))
    );
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.ends_with("(the request carried authorization: Bearer k)"),
        "{m}"
    );
    let (s, v) = status_and_body(&h, D::Anthropic, "auth-echo").await;
    assert_eq!(
        (s, error_type(D::Anthropic, &v).as_str()),
        (401, "authentication_error")
    );
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.ends_with("(the request carried x-api-key: k)"), "{m}");
    assert_eq!(
        h.stats().requests_per_fault.get("auth-echo").copied(),
        Some(2)
    );
}

#[tokio::test]
async fn context_overflow_max_chars_lets_a_small_request_through() {
    let h = server().await;
    let small = body("context-overflow:max_chars=100", false, json!({}));
    let big = body(
        "context-overflow:max_chars=100",
        false,
        json!({"messages": [{"role": "user", "content": "x".repeat(101)}]}),
    );
    for d in BOTH {
        assert_eq!(send(&h, d, &big).await.unwrap().status(), 400);
        assert_eq!(send(&h, d, &small).await.unwrap().status(), 200);
    }
}

#[tokio::test]
async fn no_prefill_rejects_only_an_assistant_last_message() {
    let h = server().await;
    let pre = body(
        "no-prefill",
        false,
        json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "w0"}]}),
    );
    for d in BOTH {
        let r = send(&h, d, &pre).await.unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(error_type(d, &v), "invalid_request_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("prefill is not supported")
        );
        assert_eq!(post(&h, d, "no-prefill", false).await.status(), 200);
    }
}

#[tokio::test]
async fn reset_closes_before_headers_then_ok_after_times() {
    let h = server().await;
    for d in BOTH {
        let model = "reset:times=1";
        let c = client();
        let e = send_with(&c, &h, d, &body(model, false, json!({})), None)
            .await
            .expect_err("no response at all");
        assert!(e.is_request() || e.is_connect(), "{e:?}");
        assert!(e.status().is_none());
        let r = send_with(&c, &h, d, &body(model, false, json!({})), None)
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{d:?}");
        h.reset();
    }
    assert_eq!(h.stats().requests_total, 0, "reset cleared the stats");
}

#[tokio::test]
async fn hang_never_answers() {
    let h = server().await;
    install_provider();
    let c = hale_testkit::client(Duration::from_millis(300));
    let e = send_with(&c, &h, D::OpenAi, &body("hang", false, json!({})), None)
        .await
        .expect_err("hang");
    assert!(e.is_timeout(), "{e:?}");
    assert_eq!(h.stats().requests_per_fault["hang"], 1);
}

#[tokio::test]
async fn slow_first_token_sends_headers_at_once_and_content_later() {
    let h = server().await;
    let t0 = Instant::now();
    let mut r = post(&h, D::OpenAi, "slow-first-token:ms=400:tokens=2", true).await;
    let headers_at = t0.elapsed();
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().unwrap();
    let first_at = t0.elapsed();
    assert!(headers_at < Duration::from_millis(400), "{headers_at:?}");
    assert!(first_at >= Duration::from_millis(400), "{first_at:?}");
    assert!(String::from_utf8_lossy(&first).starts_with("data: "));

    let t0 = Instant::now();
    let r = post(&h, D::Anthropic, "slow-first-token:ms=200:tokens=2", false).await;
    let v: Value = r.json().await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(full_text(D::Anthropic, &v), "w0 w1");
}

#[tokio::test]
async fn cut_stream_drops_after_n_words_without_finish_then_answers_fully() {
    let h = server().await;
    for d in BOTH {
        let model = "cut:after=3:tokens=10";
        let b = body(
            model,
            true,
            json!({"stream_options": {"include_usage": true}}),
        );
        let (text, err) = read_all(send(&h, d, &b).await.unwrap()).await;
        assert!(err, "{d:?}: the body ends in an error, not cleanly");
        let f = parse_sse(&text);
        assert_eq!(pieces(d, &f), ["w0", " w1", " w2"], "{d:?}");
        assert!(!text.contains("[DONE]"));
        assert!(!text.contains("finish_reason\":\"stop"));
        assert!(!text.contains("message_delta") && !text.contains("message_stop"));
        // The next request (default times=1) is answered fully.
        let (text, err) = read_all(send(&h, d, &b).await.unwrap()).await;
        assert!(!err);
        assert_eq!(pieces(d, &parse_sse(&text)).concat(), words(10));
        h.reset();
    }
}

#[tokio::test]
async fn cut_non_stream_closes_mid_body() {
    let h = server().await;
    for d in BOTH {
        let r = post(&h, d, "cut", false).await;
        assert_eq!(r.status(), 200);
        let (_, err) = read_all(r).await;
        assert!(err, "{d:?}");
        h.reset();
    }
}

#[tokio::test]
async fn stall_pauses_then_completes() {
    let h = server().await;
    let t0 = Instant::now();
    let mut r = post(&h, D::Anthropic, "stall:after=2:ms=300:tokens=4", true).await;
    let mut text = String::new();
    let mut got_two_at = None;
    while let Some(c) = r.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&c));
        if got_two_at.is_none() && anthropic_pieces(&parse_sse(&text)).len() >= 2 {
            got_two_at = Some(t0.elapsed());
        }
    }
    let total = t0.elapsed();
    let f = parse_sse(&text);
    assert_eq!(anthropic_pieces(&f).concat(), words(4));
    assert_eq!(events(&f).last().unwrap(), "message_stop");
    assert!(total >= Duration::from_millis(300));
    assert!(
        got_two_at.unwrap() < Duration::from_millis(300),
        "two words before the stall"
    );
}

#[tokio::test]
async fn malformed_inserts_one_garbage_line_then_continues() {
    let h = server().await;
    for d in BOTH {
        let (text, err) = read_all(post(&h, d, "malformed:at=2:tokens=4", true).await).await;
        assert!(!err);
        let f = parse_sse(&text);
        let bad: Vec<usize> = (0..f.len()).filter(|&i| f[i].data == "{not json").collect();
        assert_eq!(bad.len(), 1, "{d:?}");
        let before: Vec<String> = pieces(d, &f[..bad[0]]);
        assert_eq!(before, ["w0", " w1"]);
        assert_eq!(pieces(d, &f).concat(), words(4));
        match d {
            D::OpenAi => assert_eq!(f.last().unwrap().data, "[DONE]"),
            D::Anthropic => assert_eq!(events(&f).last().unwrap(), "message_stop"),
        }
    }
    let r = post(&h, D::OpenAi, "malformed", false).await;
    assert_eq!(r.status(), 200);
    assert!(
        r.json::<Value>().await.is_err(),
        "non-stream body is not JSON"
    );
}

#[tokio::test]
async fn no_done_ends_cleanly_after_finish_without_done_or_usage() {
    let h = server().await;
    let b = body(
        "no-done:tokens=3",
        true,
        json!({"stream_options": {"include_usage": true}}),
    );
    let (text, err) = read_all(send(&h, D::OpenAi, &b).await.unwrap()).await;
    assert!(!err, "clean end");
    let f = parse_sse(&text);
    assert_eq!(
        f.last().unwrap().json()["choices"][0]["finish_reason"],
        "stop"
    );
    assert!(!text.contains("[DONE]"));
    assert!(f.iter().all(|x| x.json()["usage"].is_null()));

    let (text, err) = read_all(send(&h, D::Anthropic, &b).await.unwrap()).await;
    assert!(!err);
    let f = parse_sse(&text);
    assert_eq!(events(&f).last().unwrap(), "message_delta");
    assert!(f.last().unwrap().json().get("usage").is_none());
    assert!(!text.contains("message_stop"));
}

#[tokio::test]
async fn stream_error_sends_the_in_band_error() {
    let h = server().await;
    let (text, _) = read_all(post(&h, D::OpenAi, "stream-error:after=2", true).await).await;
    let f = parse_sse(&text);
    assert_eq!(openai_pieces(&f), ["w0", " w1"]);
    assert_eq!(f.last().unwrap().json()["error"]["type"], "server_error");
    assert!(!text.contains("[DONE]"));
    // A distinct model name: the OpenAI request used up the default `times=1`.
    let (text, _) =
        read_all(post(&h, D::Anthropic, "stream-error:after=2:tokens=5", true).await).await;
    let f = parse_sse(&text);
    assert_eq!(events(&f).last().unwrap(), "error");
    assert_eq!(
        f.last().unwrap().json()["error"]["type"],
        "overloaded_error"
    );
}

/// The one test with a real sleep: `down:secs` is a wall-clock rule of the server itself.
#[tokio::test]
async fn down_answers_503_for_secs_from_the_first_request() {
    let h = server().await;
    assert_eq!(
        post(&h, D::OpenAi, "down:secs=1", false).await.status(),
        503
    );
    assert_eq!(
        post(&h, D::OpenAi, "down:secs=1", false).await.status(),
        503
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        post(&h, D::OpenAi, "down:secs=1", false).await.status(),
        200
    );
}

#[tokio::test]
async fn down_until_reset_is_controlled_over_http() {
    let h = server().await;
    let c = client();
    assert_eq!(
        post(&h, D::Anthropic, "down-until-reset", false)
            .await
            .status(),
        503
    );
    let r = c
        .post(format!("{}/chaos/reset", h.base_url_anthropic))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(
        post(&h, D::Anthropic, "down-until-reset", false)
            .await
            .status(),
        200
    );
    let r = c
        .post(format!("{}/chaos/down", h.base_url_anthropic))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(
        post(&h, D::Anthropic, "down-until-reset", false)
            .await
            .status(),
        503
    );
}

#[tokio::test]
async fn header_overrides_the_model_name() {
    let h = server().await;
    let c = client();
    let b = body("gpt-4o", false, json!({}));
    let r = send_with(&c, &h, D::OpenAi, &b, Some("error-500:times=1"))
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let r = send_with(&c, &h, D::OpenAi, &b, Some("error-500:times=1"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["model"], "gpt-4o");
    assert_eq!(h.requests_for("gpt-4o"), 2);
}

#[tokio::test]
async fn bad_fault_params_are_a_400_naming_the_problem() {
    let h = server().await;
    for d in BOTH {
        let (s, v) = status_and_body(&h, d, "cut:aftr=3").await;
        assert_eq!(s, 400);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("no parameter `aftr`"), "{msg}");
    }
}

#[tokio::test]
async fn stats_count_models_faults_and_bodies_and_reset_clears() {
    let h = server().await;
    post(&h, D::OpenAi, "rate-limit:times=1", false).await;
    post(&h, D::OpenAi, "rate-limit:times=1", false).await;
    post(&h, D::Anthropic, "gpt-4o", false).await;
    let v: Value =
        hale_testkit::get_json(&client(), &format!("{}/chaos/stats", h.base_url_anthropic)).await;
    assert_eq!(v["requests_total"], 3);
    assert_eq!(v["requests_per_model"]["rate-limit:times=1"], 2);
    assert_eq!(v["requests_per_model"]["gpt-4o"], 1);
    assert_eq!(v["requests_per_fault"]["rate-limit"], 1);
    assert_eq!(v["requests_per_fault"]["ok"], 2);
    assert_eq!(v["last_request_bodies"], 3);
    assert_eq!(h.stats().requests_total, 3);
    // Two answers of 60 words each; the 429 cost nothing.
    assert_eq!(v["output_tokens"], 120);
    assert!(v["input_tokens"].as_u64() > Some(0), "{v}");
    let reqs: Value = hale_testkit::get_json(
        &client(),
        &format!("{}/chaos/requests", h.base_url_anthropic),
    )
    .await;
    assert_eq!(reqs[2]["model"], "gpt-4o");
    assert_eq!(h.last_requests().len(), 3);
    h.reset();
    assert_eq!(h.stats(), hale_chaos::Stats::default());
    // Counters restart: the fault applies again.
    assert_eq!(
        post(&h, D::OpenAi, "rate-limit:times=1", false)
            .await
            .status(),
        429
    );
}

#[tokio::test]
async fn an_overrides_times_count_from_when_it_is_set_and_a_cut_counts_the_tokens_sent() {
    let h = server().await;
    for _ in 0..3 {
        assert_eq!(post(&h, D::OpenAi, "gpt-4o", false).await.status(), 200);
    }
    // `cut` applies to one request: the first after the override, not the
    // server's first for the model.
    h.set_fault("gpt-4o", Some("cut:after=10"));
    let before = h.stats().output_tokens;
    let (_, broke) = read_all(post(&h, D::OpenAi, "gpt-4o", true).await).await;
    assert!(broke, "the first request after the override is cut");
    assert_eq!(h.stats().output_tokens - before, 10, "ten words were sent");
    let (_, broke) = read_all(post(&h, D::OpenAi, "gpt-4o", true).await).await;
    assert!(!broke, "then whole");
}

#[tokio::test]
async fn script_steps_are_consumed_in_order_per_model() {
    let script = parse_script(
        "gpt-4o:\n  - {fault: \"rate-limit:retry_after=2\", times: 2}\n  - {fault: error-503}\n  - {fault: ok}\n",
    )
    .unwrap();
    let h = server_with(ChaosConfig {
        script: Some(script),
        ..Default::default()
    })
    .await;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(post(&h, D::OpenAi, "gpt-4o", false).await.status().as_u16());
    }
    assert_eq!(got, [429, 429, 503, 200, 200]);
    // Models the script does not name use the grammar.
    assert_eq!(post(&h, D::OpenAi, "error-500", false).await.status(), 500);
}

#[test]
fn script_errors_name_the_problem() {
    let cases = [
        (
            "m:\n  - {fault: rate-limt}\n",
            "model `m`, step 1: bad fault spec `rate-limt`: unknown fault `rate-limt`",
        ),
        (
            "m:\n  - {fault: ok}\n  - {fault: \"cut:aftr=2\"}\n",
            "model `m`, step 2",
        ),
        ("m:\n  - {fault: ok, time: 1}\n", "unknown field `time`"),
        ("m: []\n", "model `m`: the list of steps is empty"),
        (
            "m:\n  - {fault: ok, times: 0}\n",
            "`times` must be at least 1",
        ),
        (
            "m:\n  - {fault: ok}\nm:\n  - {fault: ok}\n",
            "duplicate mapping key: m",
        ),
        ("m: [ {fault: ok\n", "chaos script"),
    ];
    for (yaml, want) in cases {
        let e = parse_script(yaml).expect_err(yaml).to_string();
        assert!(e.contains(want), "{yaml:?}: {e}");
    }
    let e = parse_script("m:\n  - {fault: ok, time: 1}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line") || e.contains("2:"),
        "the YAML error has a position: {e}"
    );
}

#[tokio::test]
async fn shutdown_stops_the_server() {
    let h = server().await;
    let addr = h.addr;
    h.shutdown().await;
    install_provider();
    let e = reqwest::Client::new()
        .get(format!("http://{addr}/chaos/stats"))
        .send()
        .await;
    assert!(e.is_err());
}
