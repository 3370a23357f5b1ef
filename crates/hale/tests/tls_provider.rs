//! TLS to providers (docs/operations.md, "TLS"): every real provider is HTTPS.
//!
//! A provider on loopback over TLS — a certificate for 127.0.0.1 from the
//! test CA in `tests/tls/` (made with openssl, valid until 2126), offering
//! HTTP/2 and HTTP/1.1 by ALPN — answers OpenAI chat completions and
//! records the HTTP version of each request. `hale serve` runs as a
//! process: with `SSL_CERT_FILE` naming the test CA (the platform
//! verifier's roots then come from that file) it reaches the provider over
//! HTTP/2, streaming or not; without it the provider's certificate is not
//! trusted, and the failure is a `network` failure to connect that names
//! the certificate, which marks the provider's `base_url`.

mod common;

use common::start_serve;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const ANSWER: &str = "over tls";

fn tls_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls")
}

/// The HTTP versions the provider saw, request by request.
type Versions = Arc<Mutex<Vec<Version>>>;

/// Starts the TLS provider on a free loopback port; returns its port.
async fn tls_provider(versions: Versions) -> u16 {
    let certs = vec![CertificateDer::from_pem_file(tls_dir().join("server.pem")).expect("cert")];
    let key = PrivateKeyDer::from_pem_file(tls_dir().join("server.key")).expect("key");
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let versions = versions.clone();
            tokio::spawn(async move {
                // A client that does not trust the certificate ends here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let svc = hyper::service::service_fn(move |req| answer(versions.clone(), req));
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, svc)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                }
            });
        }
    });
    port
}

async fn answer(
    versions: Versions,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    versions.lock().expect("versions").push(req.version());
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = v["model"].as_str().unwrap_or("m").to_owned();
    let (ct, text) = if v["stream"] == json!(true) {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}});
        (
            "text/event-stream",
            format!(
                "data: {}\n\ndata: {}\n\ndata: {usage}\n\ndata: [DONE]\n\n",
                chunk(json!({"role": "assistant", "content": ANSWER}), Value::Null),
                chunk(json!({}), json!("stop")),
            ),
        )
    } else {
        (
            "application/json",
            json!({"id": "c", "object": "chat.completion", "created": 0, "model": model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
            .to_string(),
        )
    };
    let mut r = Response::new(Full::new(Bytes::from(text)));
    r.headers_mut()
        .insert("content-type", ct.parse().expect("content type"));
    Ok(r)
}

fn config(port: u16) -> String {
    format!(
        "providers:\n  - name: secure\n    kind: openai\n    base_url: https://127.0.0.1:{port}/v1\n    default_model: m\n    timeout_ms: 5000\n"
    )
}

async fn chat(http: &reqwest::Client, base: &str, stream: bool) -> (u16, String) {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "m", "stream": stream,
                      "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .expect("call");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

/// A TLS provider and `hale serve` in front of it with `extra` config and
/// `envs`; the provider's record of HTTP versions, and hale's base URL.
async fn hale_over_tls(
    dir: &Path,
    http: &reqwest::Client,
    extra: &str,
    envs: &[(&str, &str)],
) -> (Versions, common::Proc, String) {
    let versions = Versions::default();
    let port = tls_provider(versions.clone()).await;
    let (hale, base) = start_serve(http, dir, &(config(port) + extra), envs).await;
    (versions, hale, base)
}

/// Turns each way, over the same pooled connection.
const TURNS: usize = 20;

/// With the test CA trusted, turns reach the HTTPS provider over HTTP/2
/// (ALPN), streaming and not, and are served — every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_over_tls_is_reached_over_http2_when_its_ca_is_trusted() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = reqwest::Client::new();
    let ca = tls_dir().join("ca.pem");
    let (versions, _hale, base) = hale_over_tls(
        dir.path(),
        &http,
        "",
        &[("SSL_CERT_FILE", ca.to_str().expect("path"))],
    )
    .await;
    for k in 0..TURNS {
        let stream = k % 2 == 1;
        let (status, body) = chat(&http, &base, stream).await;
        assert_eq!(status, 200, "turn {k}: {body}");
        if stream {
            assert!(body.contains(ANSWER) && body.contains("[DONE]"), "{body}");
        } else {
            let v: Value = serde_json::from_str(&body).expect("json");
            assert_eq!(v["choices"][0]["message"]["content"], ANSWER, "{body}");
        }
    }
    let seen = versions.lock().expect("versions").clone();
    assert_eq!(seen.len(), TURNS);
    assert!(seen.iter().all(|v| *v == Version::HTTP_2), "{seen:?}");
}

/// `HTTPS_PROXY` set: the provider is reached through the proxy's
/// `CONNECT` tunnel (`common/proxy.rs`), the certificate checked and
/// HTTP/2 chosen inside it, as without a proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_over_tls_is_reached_through_the_https_proxy_in_the_environment() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = reqwest::Client::new();
    let ca = tls_dir().join("ca.pem");
    let (proxy_url, seen) = common::proxy::start().await;
    let (versions, _hale, base) = hale_over_tls(
        dir.path(),
        &http,
        "",
        &[
            ("SSL_CERT_FILE", ca.to_str().expect("path")),
            ("HTTPS_PROXY", &proxy_url),
            ("NO_PROXY", ""),
        ],
    )
    .await;
    for k in 0..4 {
        let (status, body) = chat(&http, &base, k % 2 == 1).await;
        assert_eq!(status, 200, "turn {k}: {body}");
        assert!(body.contains(ANSWER), "{body}");
    }
    let lines = seen.lines();
    assert!(!lines.is_empty(), "nothing went through the proxy");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("CONNECT 127.0.0.1:") && l.ends_with(" HTTP/1.1")),
        "{lines:?}"
    );
    let seen = versions.lock().expect("versions").clone();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|v| *v == Version::HTTP_2), "{seen:?}");
}

/// A provider whose certificate is not trusted: no request ever reaches
/// it. Each turn's attempts — retried on the same target, as network
/// failures are — are `network` failures naming the certificate (a failure
/// to connect, which marks the provider's `base_url`:
/// `upstream::tests::a_tls_failure_is_a_failure_to_connect_with_its_reason`),
/// where they were one `unknown` "transport error" that said nothing of the
/// certificate. After the `base_url` is ejected (three failures in a row),
/// later turns still call it (fail open) and say why they failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_provider_certificate_is_a_network_failure_to_connect() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = reqwest::Client::new();
    let retry = "retry:\n  network: {max_attempts: 3, initial_ms: 10, max_ms: 20}\n";
    let (versions, _hale, base) = hale_over_tls(dir.path(), &http, retry, &[]).await;
    for k in 0..5 {
        let (status, body) = chat(&http, &base, k % 2 == 1).await;
        assert_eq!(status, 503, "turn {k}: {body}");
        let v: Value = serde_json::from_str(&body).expect("json");
        let timeline = v["error"]["hale"]["timeline"].as_array().expect("timeline");
        assert!(!timeline.is_empty(), "turn {k} called the provider: {body}");
        for row in timeline {
            assert_eq!(row["class"], "network", "turn {k}: {body}");
            assert!(
                row["message"].as_str().is_some_and(
                    |m| m.contains("tls handshake failed") && m.contains("certificate")
                ),
                "turn {k}: {body}"
            );
        }
        if k == 0 {
            assert_eq!(timeline.len(), 3, "retried on the same target: {body}");
        }
    }
    assert!(versions.lock().expect("versions").is_empty());
}
