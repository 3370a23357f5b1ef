//! A web page on the operator's machine cannot drive a hale without keys
//! (issue 42, item 4), through the real `hale serve` in front of `hale
//! chaos`: a cross-site `POST /agents/x/pause` is refused and the agent
//! stays active; a model call that is not JSON (`text/plain`, none) is
//! refused in the route's dialect and chaos receives nothing; a request
//! addressed to another host name (`Host: evil.example:PORT`, DNS
//! rebinding) is refused on the admin API; the same requests from hale's
//! own origin, by IP, `localhost` or a name in `auth.allowed_hosts`, and
//! from clients that send no `Origin` (SDKs, curl) still work. With keys
//! the key decides and `Host`/`Origin` are not checked; the JSON rule holds.
//! The rules are `hale_core::browser`; the edge is `api/edge.rs`.

mod common;

use common::{Proc, start_chaos, start_serve};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// `hale chaos` and `hale serve` (no keys unless `extra` says so) with
/// provider `p1` (model `m1`) and agent `x`.
struct Rig {
    _dir: tempfile::TempDir,
    _chaos: Proc,
    hale: Proc,
    chaos_base: String,
    base: String,
    /// `127.0.0.1:PORT`, the `Host` a client of `base` sends.
    authority: String,
    http: reqwest::Client,
}

async fn rig(extra: &str, envs: &[(&str, &str)]) -> Rig {
    hale_testkit::install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = hale_testkit::client(Duration::from_secs(30));
    let (chaos, chaos_base) = start_chaos(&http, dir.path()).await;
    let config = format!(
        "providers:\n  - {{name: p1, kind: openai, base_url: {chaos_base}/v1, default_model: m1}}\nagents:\n  default: {{provider: p1}}\n  x: {{provider: p1}}\n{extra}"
    );
    let (hale, base) = start_serve(&http, dir.path(), &config, envs).await;
    let authority = base.trim_start_matches("http://").to_owned();
    Rig {
        _dir: dir,
        _chaos: chaos,
        hale,
        chaos_base,
        base,
        authority,
        http,
    }
}

impl Rig {
    /// Model calls chaos received for `m1`.
    async fn chaos_calls(&self) -> u64 {
        let v =
            hale_testkit::get_json(&self.http, &format!("{}/chaos/stats", self.chaos_base)).await;
        v["requests_per_model"]["m1"].as_u64().unwrap_or(0)
    }

    /// Agent `x`'s state, as the admin API shows it.
    async fn state_of_x(&self) -> String {
        let v = hale_testkit::get_json(&self.http, &format!("{}/agents/x", self.base)).await;
        v["state"].as_str().unwrap_or("").to_owned()
    }

    /// A request with these headers: (status, JSON body or the text).
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut rb = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb.body(b.to_owned());
        }
        let r = rb.send().await.expect("hale answers");
        let status = r.status();
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = r.text().await.expect("a body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            assert!(
                ct.starts_with("application/json"),
                "{path}: a {status} refusal is JSON, got {ct}: {v}\nhale:\n{}",
                self.hale.stderr()
            );
        }
        (status, v)
    }
}

const POST: reqwest::Method = reqwest::Method::POST;
const GET: reqwest::Method = reqwest::Method::GET;
const CHAT: &str = r#"{"model": "m1", "messages": [{"role": "user", "content": "hi"}]}"#;
const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_pause_is_refused_and_hales_own_page_still_pauses() {
    let r = rig("", &[]).await;
    let (s, _) = r
        .send(
            POST,
            "/v1/chat/completions",
            &[JSON, ("x-hale-agent", "x")],
            Some(CHAT),
        )
        .await;
    assert_eq!(s, 200, "agent x served once");
    assert_eq!(r.state_of_x().await, "active");

    // A page at evil.example posts a form (no preflight) to the admin API.
    for ct in ["application/x-www-form-urlencoded", "text/plain"] {
        let (s, v) = r
            .send(
                POST,
                "/agents/x/pause",
                &[("origin", "http://evil.example"), ("content-type", ct)],
                Some("reason=gotcha"),
            )
            .await;
        assert_eq!(s, 403, "{v}");
        assert_eq!(v["error"]["type"], "forbidden", "{v}");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(
            msg.contains("http://evil.example") && msg.contains("auth.keys"),
            "{msg}"
        );
    }
    // Another port of this host is another origin; `null` (a sandboxed frame) too.
    for origin in ["http://127.0.0.1:1", "null"] {
        let (s, v) = r
            .send(POST, "/agents/x/pause", &[("origin", origin)], None)
            .await;
        assert_eq!(s, 403, "{origin}: {v}");
    }
    assert_eq!(r.state_of_x().await, "active", "the agent was not paused");

    // The dashboard, served by hale at this origin, pauses and resumes.
    let own = format!("http://{}", r.authority);
    let (s, v) = r
        .send(
            POST,
            "/agents/x/pause",
            &[("origin", own.as_str()), JSON],
            Some("{}"),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(r.state_of_x().await, "paused");
    // A client that sends no Origin (curl, the CLI) still works.
    let (s, v) = r.send(POST, "/agents/x/resume", &[], None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(r.state_of_x().await, "active");
    // The dashboard's own reads carry its origin when a browser adds one.
    let (s, v) = r
        .send(GET, "/agents", &[("origin", own.as_str())], None)
        .await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_that_is_not_json_is_refused_before_any_provider() {
    let r = rig("", &[]).await;
    let gemini = "/v1beta/models/m1:generateContent";
    let gemini_body = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;
    let anthropic_body =
        r#"{"model": "m1", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}"#;
    // A page's simple requests (no Origin here: the content type alone
    // refuses them), in each route's error shape.
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = ct.map(|c| ("content-type", c)).into_iter().collect();
        let (s, v) = r
            .send(POST, "/v1/chat/completions", &headers, Some(CHAT))
            .await;
        assert_eq!(s, 415, "{ct:?}: {v}");
        assert_eq!(
            v["error"]["type"], "unsupported_media_type",
            "OpenAI shape: {v}"
        );
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("application/json"), "{msg}");
        let (s, v) = r
            .send(
                POST,
                "/v1/responses",
                &headers,
                Some(r#"{"model": "m1", "input": "hi"}"#),
            )
            .await;
        assert_eq!(s, 415, "{ct:?}: {v}");
        assert_eq!(v["error"]["type"], "unsupported_media_type", "{v}");
        let (s, v) = r
            .send(POST, "/v1/messages", &headers, Some(anthropic_body))
            .await;
        assert_eq!(s, 415, "{ct:?}: {v}");
        assert_eq!(v["type"], "error", "Anthropic shape: {v}");
        assert_eq!(v["error"]["type"], "unsupported_media_type", "{v}");
        let (s, v) = r.send(POST, gemini, &headers, Some(gemini_body)).await;
        assert_eq!(s, 415, "{ct:?}: {v}");
        assert_eq!(v["error"]["code"], 415, "Google shape: {v}");
        assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{v}");
    }
    assert_eq!(r.chaos_calls().await, 0, "chaos received nothing");

    // The same calls as JSON, as every SDK sends them, are served.
    let json_utf8 = ("content-type", "application/json; charset=utf-8");
    let (s, v) = r
        .send(POST, "/v1/chat/completions", &[JSON], Some(CHAT))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = r
        .send(POST, "/v1/messages", &[json_utf8], Some(anthropic_body))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = r.send(POST, gemini, &[JSON], Some(gemini_body)).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(r.chaos_calls().await, 3);
    // A cross-site JSON call (a page cannot send one without a preflight,
    // but its Origin alone refuses it).
    let (s, v) = r
        .send(
            POST,
            "/v1/chat/completions",
            &[JSON, ("origin", "https://evil.example")],
            Some(CHAT),
        )
        .await;
    assert_eq!(s, 403, "{v}");
    assert_eq!(r.chaos_calls().await, 3, "chaos received nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_host_is_refused_and_hales_own_names_are_served() {
    let r = rig("", &[]).await;
    let (s, _) = r
        .send(
            POST,
            "/v1/chat/completions",
            &[JSON, ("x-hale-agent", "x")],
            Some(CHAT),
        )
        .await;
    assert_eq!(s, 200, "agent x served once");
    let port = r.authority.rsplit_once(':').expect("a port").1.to_owned();
    let evil = format!("evil.example:{port}");
    // A page at evil.example:PORT whose name now resolves to 127.0.0.1:
    // same-origin to the browser, so it sends its own Origin, or none.
    for path in ["/agents", "/agents/x", "/deployments", "/metrics", "/"] {
        let (s, v) = r.send(GET, path, &[("host", evil.as_str())], None).await;
        assert_eq!(s, 421, "{path}: {v}");
        assert_eq!(v["error"]["type"], "misdirected_request", "{v}");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(
            msg.contains(&evil) && msg.contains("auth.allowed_hosts"),
            "{msg}"
        );
    }
    let evil_origin = format!("http://{evil}");
    let (s, v) = r
        .send(
            POST,
            "/agents/x/pause",
            &[("host", evil.as_str()), ("origin", evil_origin.as_str())],
            None,
        )
        .await;
    assert_eq!(s, 421, "{v}");
    assert_eq!(r.state_of_x().await, "active", "the agent was not paused");
    // A model call through the rebound name, in the caller's dialect.
    let (s, v) = r
        .send(
            POST,
            "/v1/messages",
            &[("host", evil.as_str()), JSON],
            Some(CHAT),
        )
        .await;
    assert_eq!(s, 421, "{v}");
    assert_eq!(v["type"], "error", "Anthropic shape: {v}");
    assert_eq!(r.chaos_calls().await, 1, "only agent x's first call");

    // hale's own names: its IP, localhost, [::1]; any port (a proxy's).
    for host in [
        r.authority.clone(),
        format!("localhost:{port}"),
        format!("LOCALHOST.:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.1".to_owned(),
    ] {
        let (s, v) = r
            .send(GET, "/agents", &[("host", host.as_str())], None)
            .await;
        assert_eq!(s, 200, "Host {host}: {v}");
    }
    let own = format!("http://localhost:{port}");
    let host = format!("localhost:{port}");
    let (s, v) = r
        .send(
            GET,
            "/",
            &[("host", host.as_str()), ("origin", own.as_str())],
            None,
        )
        .await;
    assert_eq!(s, 200, "the dashboard page at localhost: {v}");
}

/// `auth.allowed_hosts`: a name the operator gave hale (an /etc/hosts
/// alias, a load balancer's name) is served on every route, `/mcp`
/// included, and pages at that name are hale's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_host_name_is_served_and_its_pages_are_hales_own() {
    let r = rig("auth:\n  allowed_hosts: [Hale.Internal]\n", &[]).await;
    let port = r.authority.rsplit_once(':').expect("a port").1.to_owned();
    let host = format!("hale.internal:{port}");
    let (s, v) = r
        .send(GET, "/agents", &[("host", host.as_str())], None)
        .await;
    assert_eq!(s, 200, "{v}");
    // Behind a TLS load balancer: the page is https://hale.internal, and the
    // proxy may have rewritten Host to hale's address.
    for (h, origin) in [
        (host.as_str(), format!("http://hale.internal:{port}")),
        (r.authority.as_str(), "https://hale.internal".to_owned()),
    ] {
        let (s, v) = r
            .send(
                POST,
                "/agents/x/pause",
                &[("host", h), ("origin", origin.as_str())],
                None,
            )
            .await;
        assert_eq!(s, 200, "Host {h}, Origin {origin}: {v}");
    }
    assert_eq!(r.state_of_x().await, "paused");
    // MCP's own Host check accepts the name too.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "browser-origin-test", "version": "1"}}})
    .to_string();
    let mcp = r
        .http
        .post(format!("{}/mcp", r.base))
        .header("host", host.as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init)
        .send()
        .await
        .expect("hale answers");
    assert_eq!(mcp.status(), 200, "MCP initialize through hale.internal");
    assert!(
        mcp.headers().contains_key("mcp-session-id"),
        "a session began: {:?}",
        mcp.headers()
    );
    // Other names are still refused.
    let (s, v) = r
        .send(GET, "/agents", &[("host", "evil.example")], None)
        .await;
    assert_eq!(s, 421, "{v}");
}

/// With keys the key decides: a page can neither read nor send one, so
/// `Host` and `Origin` are not checked (a gateway behind a load balancer
/// needs no list of names); a model call must still be JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_the_key_decides_and_model_calls_must_still_be_json() {
    const TOKEN: &str = "browser-origin-admin-0123456789";
    let r = rig(
        "auth:\n  keys:\n    - {name: ops, token_env: HALE_T_BROWSER, scope: admin}\n",
        &[("HALE_T_BROWSER", TOKEN)],
    )
    .await;
    let bearer = format!("Bearer {TOKEN}");
    let auth = ("authorization", bearer.as_str());
    let (s, v) = r
        .send(
            POST,
            "/agents/x/pause",
            &[("origin", "http://evil.example")],
            None,
        )
        .await;
    assert_eq!(s, 401, "no key: {v}");
    let (s, v) = r
        .send(
            POST,
            "/agents/x/pause",
            &[
                auth,
                ("host", "gateway.example.com"),
                ("origin", "https://gateway.example.com"),
            ],
            None,
        )
        .await;
    assert_eq!(s, 200, "an admin key from any name: {v}");
    let (s, v) = r
        .send(
            POST,
            "/v1/chat/completions",
            &[auth, ("content-type", "text/plain")],
            Some(CHAT),
        )
        .await;
    assert_eq!(s, 415, "{v}");
    assert_eq!(r.chaos_calls().await, 0);
    let (s, v) = r
        .send(POST, "/v1/chat/completions", &[auth, JSON], Some(CHAT))
        .await;
    assert_eq!(s, 200, "{v}");
}
