//! Google Vertex AI's wire (issue 29): the token endpoint mints a token for
//! a well-formed JWT-bearer assertion and refuses a bad one; the publisher
//! routes take only minted (and not revoked) tokens, check the body Vertex
//! wants, and answer in the publisher's dialect; a rate limit is Google's
//! `RESOURCE_EXHAUSTED` with a `RetryInfo` wait.

mod common;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use hale_chaos::{ChaosConfig, ChaosHandle};
use serde_json::{Value, json};

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// An (unsigned) assertion: chaos without `--vertex-key` checks its shape only.
fn assertion(scope: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let claims = json!({"iss": "sa@p.iam.gserviceaccount.com", "scope": scope,
        "aud": "http://x/token", "iat": now, "exp": now + 3595});
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(b"not-checked")
    )
}

async fn token(h: &ChaosHandle, scope: &str) -> reqwest::Response {
    client()
        .post(format!("http://{}/token", h.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={}",
            assertion(scope)
        ))
        .send()
        .await
        .expect("chaos answers")
}

async fn predict(
    h: &ChaosHandle,
    publisher: &str,
    action: &str,
    bearer: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut rb = client()
        .post(format!(
            "http://{}/v1/projects/p/locations/us-east5/publishers/{publisher}/models/{action}",
            h.addr
        ))
        .json(body);
    if let Some(t) = bearer {
        rb = rb.bearer_auth(t);
    }
    rb.send().await.expect("chaos answers")
}

fn claude(stream: bool) -> Value {
    json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
}

fn gemini() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
}

#[tokio::test]
async fn tokens_are_minted_for_good_assertions_and_checked_on_every_route() {
    let h = server_with(ChaosConfig::default()).await;
    let r = token(&h, "https://www.googleapis.com/auth/userinfo.email").await;
    assert_eq!(r.status(), 400, "the wrong scope is refused");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"], "invalid_grant", "{v}");
    let r = token(&h, SCOPE).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["token_type"], "Bearer", "{v}");
    let t = v["access_token"].as_str().expect("a token").to_owned();

    // No token, a token never minted: Google's 401.
    for bearer in [None, Some("ya29.forged")] {
        let r = predict(
            &h,
            "anthropic",
            "claude-x:rawPredict",
            bearer,
            &claude(false),
        )
        .await;
        assert_eq!(r.status(), 401, "{bearer:?}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["status"], "UNAUTHENTICATED", "{v}");
    }
    // Claude: Anthropic's answer, non-streamed and streamed; the URL's model.
    let r = predict(
        &h,
        "anthropic",
        "claude-x:rawPredict",
        Some(&t),
        &claude(false),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(v["model"], "claude-x");
    let r = predict(
        &h,
        "anthropic",
        "claude-x:streamRawPredict",
        Some(&t),
        &claude(true),
    )
    .await;
    let (text, _) = read_all(r).await;
    assert!(text.contains("event: message_stop"), "{text}");
    // A body Vertex refuses: a `model`, or no Vertex version.
    let mut with_model = claude(false);
    with_model["model"] = json!("claude-x");
    let r = predict(
        &h,
        "anthropic",
        "claude-x:rawPredict",
        Some(&t),
        &with_model,
    )
    .await;
    assert_eq!(r.status(), 400);
    let mut old_version = claude(false);
    old_version["anthropic_version"] = json!("2023-06-01");
    let r = predict(
        &h,
        "anthropic",
        "claude-x:rawPredict",
        Some(&t),
        &old_version,
    )
    .await;
    assert_eq!(r.status(), 400);
    // Gemini: Google's answer; a content without a role is refused.
    let r = predict(
        &h,
        "google",
        "gemini-2.5-flash:generateContent",
        Some(&t),
        &gemini(),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert!(v["candidates"][0]["content"]["parts"].is_array(), "{v}");
    let no_role = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    let r = predict(
        &h,
        "google",
        "gemini-2.5-flash:generateContent",
        Some(&t),
        &no_role,
    )
    .await;
    assert_eq!(r.status(), 400);
    // A method of the other publisher is not found.
    let r = predict(
        &h,
        "google",
        "gemini-2.5-flash:rawPredict",
        Some(&t),
        &gemini(),
    )
    .await;
    assert_eq!(r.status(), 404);

    // Revoked: refused until a new token is fetched.
    let r = client()
        .post(format!("http://{}/chaos/vertex/revoke", h.addr))
        .send()
        .await
        .expect("chaos answers");
    assert_eq!(r.status(), 204);
    let r = predict(
        &h,
        "anthropic",
        "claude-x:rawPredict",
        Some(&t),
        &claude(false),
    )
    .await;
    assert_eq!(r.status(), 401);
    let v: Value = client()
        .get(format!("http://{}/chaos/vertex/tokens", h.addr))
        .send()
        .await
        .expect("chaos answers")
        .json()
        .await
        .expect("json");
    assert_eq!(v["minted"], 1, "{v}");
    assert_eq!(v["valid"], 0, "{v}");
    assert_eq!(v["refused"], 3, "{v}");
    assert_eq!(v["grants"][0]["iss"], "sa@p.iam.gserviceaccount.com");
}

#[tokio::test]
async fn a_rate_limit_is_resource_exhausted_with_a_retry_info_wait() {
    let h = server_with(ChaosConfig::default()).await;
    let v: Value = token(&h, SCOPE).await.json().await.expect("json");
    let t = v["access_token"].as_str().expect("a token").to_owned();
    for (publisher, action, body) in [
        (
            "anthropic",
            "rate-limit:retry_after=7:rawPredict",
            claude(false),
        ),
        (
            "google",
            "rate-limit:retry_after=7:generateContent",
            gemini(),
        ),
    ] {
        let r = predict(&h, publisher, action, Some(&t), &body).await;
        assert_eq!(r.status(), 429, "{publisher}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{v}");
        let details = v["error"]["details"].as_array().expect("details");
        assert!(
            details.iter().any(|d| d["retryDelay"] == "7s"),
            "{publisher}: {v}"
        );
    }
}
