//! Providers behind an HTTP proxy named in the environment (reqwest's
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`, which hale
//! honoured before its provider client moved to hyper-util and still
//! does: `upstream/http_client.rs`). `hale serve` runs as a process in
//! front of a `hale chaos` provider on loopback, with a loopback proxy
//! (`common/proxy.rs`) in the variables: turns are served through the
//! proxy, and not through it when `NO_PROXY` names the provider's host.
//! The https case (`CONNECT`) is in `tls_provider.rs`.

mod common;

use common::{ChaosRig, proxy};
use serde_json::{Value, json};

const CONFIG: &str = "providers:\n  - name: p\n    kind: openai\n    base_url: {chaos}/v1\n    default_model: ok\n    timeout_ms: 5000\n";

/// Two turns (one streamed) through hale: both served.
async fn two_turns(rig: &ChaosRig) {
    for stream in [false, true] {
        let r = rig
            .http
            .post(format!("{}/v1/chat/completions", rig.base))
            .json(&json!({"model": "ok", "stream": stream,
                          "messages": [{"role": "user", "content": "hello"}]}))
            .send()
            .await
            .expect("call");
        let status = r.status().as_u16();
        let body = r.text().await.expect("body");
        assert_eq!(
            status,
            200,
            "stream {stream}: {body}\n{}",
            rig.hale.stderr()
        );
        if stream {
            assert!(body.contains("[DONE]"), "{body}");
        } else {
            let v: Value = serde_json::from_str(&body).expect("json");
            assert!(v["choices"][0]["message"]["content"].is_string(), "{body}");
        }
    }
}

/// `HTTP_PROXY` set: the provider is reached through the proxy, the
/// request in absolute form to the provider's chat endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_is_reached_through_the_http_proxy_in_the_environment() {
    let (proxy_url, seen) = proxy::start().await;
    let rig = ChaosRig::start_with(
        CONFIG,
        &[],
        &[
            ("HTTP_PROXY", &proxy_url),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
        ],
    )
    .await;
    two_turns(&rig).await;
    let lines = seen.lines();
    let want = format!("POST {}/v1/chat/completions HTTP/1.1", rig.chaos_base);
    assert!(!lines.is_empty(), "nothing went through the proxy");
    assert!(lines.iter().all(|l| *l == want), "{lines:?}");
}

/// `NO_PROXY` naming the provider's host: the proxy is bypassed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_proxy_for_the_providers_host_bypasses_the_proxy() {
    let (proxy_url, seen) = proxy::start().await;
    let rig = ChaosRig::start_with(
        CONFIG,
        &[],
        &[
            ("HTTP_PROXY", &proxy_url),
            ("ALL_PROXY", &proxy_url),
            ("NO_PROXY", "127.0.0.1"),
        ],
    )
    .await;
    two_turns(&rig).await;
    assert!(seen.lines().is_empty(), "{:?}", seen.lines());
}
