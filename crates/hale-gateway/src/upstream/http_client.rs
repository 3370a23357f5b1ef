//! The HTTP client of provider attempts: hyper-util's pooled client over
//! rustls, and reqwest for a provider that a proxy variable applies to.
//!
//! Why not reqwest for every attempt: an attempt through it cost ~62k
//! instructions, most of them its layers — the redirect layer parses every
//! request's URL again whatever the policy, the body, timeout and
//! decompression wrappers (callgrind; the run is in BENCHMARKS.md's git
//! history). hyper-util's client is the one reqwest wraps: the same pool,
//! connector and TLS, without those layers.
//!
//! What reqwest gave hale, and is kept:
//! - HTTPS through rustls on ring, certificates checked by the platform
//!   verifier (`SSL_CERT_FILE` names another bundle); ALPN offers `h2` then
//!   `http/1.1`, so HTTP/2 where the server offers it; plain `http` is
//!   HTTP/1.1. `TCP_NODELAY`; idle connections closed 30–60 s after their
//!   last use (`POOL_IDLE`).
//! - `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their lower
//!   case forms), read once at start as reqwest read them: a request whose
//!   URL a proxy applies to is sent through reqwest, which speaks to proxies
//!   (`CONNECT` for https, the absolute form for http, credentials in the
//!   proxy's URL); every other request goes direct. With no proxy variable
//!   set, nothing is looked up per request.
//! - `Accept: */*` when the request names none.
//! - Credentials in a provider's URL (`https://user:pass@host/v1`): taken
//!   out of the URL and sent as `Authorization: Basic`, as reqwest did.
//!
//! Not kept: redirects. reqwest followed up to ten (a redirected POST
//! became a GET without its body); a provider's API does not redirect, and a
//! 3xx now reaches the classifier as the status it is.
//!
//! Errors say which client failed ([`SendError`], [`BodyError`]). Their
//! transport is read from the cause chain by `hale_core::classify::
//! transport_of`, as it was when reqwest wrapped these same hyper-util
//! errors: rustls's words for TLS, the resolver's for DNS, the socket's
//! kind for refused and reset, hyper's "connection closed before message
//! completed" for a reset (`tests::faults_map_as_they_did_through_reqwest`
//! sends each fault through both clients). Their text never holds the URL,
//! which may carry a key.

use bytes::Bytes;
use hale_core::classify::{self, Transport};
use http_body_util::Full;
use hyper_util::client::legacy;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// How long an idle pooled connection may be reused: under the 60-s idle
/// timeout common at providers' front doors (AWS's load balancers'
/// default), so a connection is not reused just as the far side closes it
/// (a reset on the first write: an avoidable retry). reqwest's default was
/// 90 s. hyper-util checks it at checkout, but closes expired connections
/// only when its reaper runs, once per this period: an idle connection
/// goes 30–60 s after its last use. Each holds its buffers (~19 KiB, in
/// blocks of 10 KiB, 8 KiB and 896 B read off mimalloc's pages): the 128 a
/// burst at c=64 left were 2.4 MiB of hale's anonymous memory, still held a
/// minute after the burst with 50 s (issue 45).
const POOL_IDLE: Duration = Duration::from_secs(30);

/// The proxy variables reqwest reads: its system proxy is hyper-util's
/// `Matcher::from_system`, the environment alone without hyper-util's
/// `client-proxy-system` feature (which nothing here turns on). None set:
/// no request is proxied.
const PROXY_VARS: [&str; 6] = [
    "ALL_PROXY",
    "all_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
];

type Direct = legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The provider client: direct over hyper-util, or through reqwest where a
/// proxy applies.
pub struct HttpClient {
    direct: Direct,
    /// Also the client of Bedrock's STS calls (not per turn).
    proxied: reqwest::Client,
    /// `None` when no proxy variable is set.
    proxies: Option<Matcher>,
}

impl HttpClient {
    /// Both clients, with the process's proxy variables. The ring crypto
    /// provider must be installed first (`Gateway::new` does).
    pub fn new() -> anyhow::Result<Self> {
        let proxies = PROXY_VARS
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
            .then(Matcher::from_system);
        Self::with_proxies(proxies)
    }

    /// Both clients with the given proxy rules (tests).
    fn with_proxies(proxies: Option<Matcher>) -> anyhow::Result<Self> {
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let verifier = rustls_platform_verifier::Verifier::new(provider.clone())?;
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::ALL_VERSIONS)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let direct = legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(https);
        let proxied = reqwest::Client::builder()
            .pool_idle_timeout(POOL_IDLE)
            .tcp_nodelay(true)
            .build()?;
        Ok(Self {
            direct,
            proxied,
            proxies,
        })
    }

    /// The reqwest client, for calls that are not provider attempts (STS).
    pub fn reqwest(&self) -> &reqwest::Client {
        &self.proxied
    }

    /// Whether a proxy applies to `uri`.
    fn proxied(&self, uri: &http::Uri) -> bool {
        self.proxies
            .as_ref()
            .is_some_and(|m| m.intercept(uri).is_some())
    }

    /// Sends `req`; the response's headers, its body still to read.
    pub async fn send(
        &self,
        mut req: http::Request<Bytes>,
    ) -> Result<http::Response<Body>, SendError> {
        if self.proxied(req.uri()) {
            // reqwest adds `Accept: */*` itself.
            let req = reqwest::Request::try_from(req).map_err(SendError::Proxied)?;
            let resp = self
                .proxied
                .execute(req)
                .await
                .map_err(SendError::Proxied)?;
            return Ok(http::Response::from(resp).map(Body::Proxied));
        }
        req.headers_mut()
            .entry(http::header::ACCEPT)
            .or_insert(http::HeaderValue::from_static("*/*"));
        let resp = self
            .direct
            .request(req.map(Full::new))
            .await
            .map_err(SendError::Direct)?;
        Ok(resp.map(Body::Direct))
    }
}

/// `url` as a request target. A text `http::Uri` refuses but a browser's
/// URL parser takes (a space, a non-ASCII host) is taken as reqwest took it,
/// through the `url` crate's normalised form; one neither takes is the
/// parser's reason, as reqwest's builder gave it.
pub fn uri(url: &str) -> Result<http::Uri, SendError> {
    if let Ok(u) = http::Uri::try_from(url) {
        return Ok(u);
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| SendError::Build(e.to_string()))?;
    http::Uri::try_from(parsed.as_str()).map_err(|e| SendError::Build(e.to_string()))
}

/// The credentials in `uri` (`user:pass@`, percent-decoded) as a sensitive
/// `Basic` authorization, and `uri` without them; `None` when it holds none
/// (reqwest's `extract_authority` and `basic_auth`).
fn credentials(uri: &http::Uri) -> Option<(http::Uri, http::HeaderValue)> {
    let mut url = reqwest::Url::parse(&uri.to_string()).ok()?;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|d| d.into_owned())
    };
    let user = decode(url.username())?;
    let pass = url.password().and_then(decode);
    if user.is_empty() && pass.is_none() {
        return None;
    }
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    let bare = http::Uri::try_from(url.as_str()).ok()?;
    let pair = format!("{user}:{}", pass.unwrap_or_default());
    let token = aws_smithy_types::base64::encode(pair);
    let mut basic = http::HeaderValue::from_str(&format!("Basic {token}")).ok()?;
    basic.set_sensitive(true);
    Some((bare, basic))
}

/// A provider request being built: a POST of a JSON body. A URL that is
/// not one, or the first header value that is not one, is kept and
/// reported by [`Post::finish`], as reqwest's builder reported it at
/// `build` (so credentials are still fetched first, as they were).
pub struct Post {
    req: http::Request<Bytes>,
    bad: Option<SendError>,
}

impl Post {
    /// A POST of `body`, JSON already (the client's own bytes).
    pub fn raw_json(uri: Result<http::Uri, SendError>, body: Bytes) -> Self {
        let mut req = http::Request::new(body);
        *req.method_mut() = http::Method::POST;
        let with_credentials =
            |u: &http::Uri| u.authority().is_some_and(|a| a.as_str().contains('@'));
        let bad = match uri {
            Ok(u) if with_credentials(&u) => {
                match credentials(&u) {
                    Some((bare, basic)) => {
                        *req.uri_mut() = bare;
                        req.headers_mut().append(http::header::AUTHORIZATION, basic);
                    }
                    None => *req.uri_mut() = u,
                }
                None
            }
            Ok(u) => {
                *req.uri_mut() = u;
                None
            }
            Err(e) => Some(e),
        };
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Self { req, bad }
    }

    /// A POST of `body` serialised.
    pub fn json(uri: Result<http::Uri, SendError>, body: &serde_json::Value) -> Self {
        match serde_json::to_vec(body) {
            Ok(bytes) => Self::raw_json(uri, Bytes::from(bytes)),
            Err(e) => {
                let mut post = Self::raw_json(uri, Bytes::new());
                post.bad.get_or_insert(SendError::Build(e.to_string()));
                post
            }
        }
    }

    /// Adds `name: value` (another value of the same name stays, as
    /// reqwest's `header` kept it).
    pub fn header(&mut self, name: &str, value: &str) {
        self.add(name, value, false);
    }

    /// Adds a credential header: marked sensitive, so HTTP/2 never indexes
    /// it and `Debug` never shows it.
    pub fn secret(&mut self, name: &str, value: &str) {
        self.add(name, value, true);
    }

    /// `Authorization: Bearer {token}`, sensitive (reqwest's `bearer_auth`).
    pub fn bearer(&mut self, token: &str) {
        self.add("authorization", &format!("Bearer {token}"), true);
    }

    fn add(&mut self, name: &str, value: &str, sensitive: bool) {
        if self.bad.is_some() {
            return;
        }
        let name = match http::HeaderName::from_bytes(name.as_bytes()) {
            Ok(n) => n,
            Err(e) => {
                self.bad = Some(SendError::Build(e.to_string()));
                return;
            }
        };
        match http::HeaderValue::from_str(value) {
            Ok(mut v) => {
                v.set_sensitive(sensitive);
                self.req.headers_mut().append(name, v);
            }
            Err(e) => self.bad = Some(SendError::Build(e.to_string())),
        }
    }

    /// The headers so far.
    #[cfg(test)]
    pub fn headers(&self) -> &http::HeaderMap {
        self.req.headers()
    }

    /// The request, or why it cannot be sent.
    pub fn finish(self) -> Result<http::Request<Bytes>, SendError> {
        match self.bad {
            Some(e) => Err(e),
            None => Ok(self.req),
        }
    }
}

/// Why no response came.
#[derive(Debug)]
pub enum SendError {
    /// The request could not be made: a URL or header value that is not
    /// one (the text names what, never the URL).
    Build(String),
    Direct(legacy::Error),
    Proxied(reqwest::Error),
}

impl SendError {
    /// What failed below HTTP, as hale-core names it.
    pub fn transport(&self) -> Transport {
        match self {
            SendError::Build(_) => Transport::Other,
            SendError::Direct(e) => classify::transport_of(e),
            SendError::Proxied(e) => classify::transport_of(e),
        }
    }

    /// The error's text without the URL: a short head, then the causes, at
    /// most 5 levels deep. hyper-util's errors never name the URL, so its
    /// own text is the first cause; reqwest's does, so only its causes are
    /// kept. The same text either way (reqwest's first cause is the
    /// hyper-util error).
    pub fn redacted(&self) -> String {
        match self {
            SendError::Build(why) => format!("request failed: {why}"),
            SendError::Direct(e) => {
                let head = if chain_has_timeout(e) {
                    "timed out"
                } else if e.is_connect() {
                    "connection failed"
                } else {
                    "request failed"
                };
                with_causes(head, Some(e))
            }
            SendError::Proxied(e) => redact_reqwest(e),
        }
    }
}

/// Whether an `io::Error` of kind `TimedOut` is in `e`'s chain (reqwest's
/// `is_timeout` for an error it did not time out itself).
fn chain_has_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// `head: first: its source: …`, at most 5 levels below the head.
fn with_causes(head: &str, first: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut out = head.to_owned();
    let mut cur = first;
    let mut n = 0;
    while let Some(e) = cur {
        if n == 5 {
            break;
        }
        out.push_str(": ");
        out.push_str(&e.to_string());
        cur = e.source();
        n += 1;
    }
    out
}

/// A reqwest error's text without the URL (its own text names it).
fn redact_reqwest(e: &reqwest::Error) -> String {
    let head = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "body error"
    } else {
        "request failed"
    };
    with_causes(head, std::error::Error::source(e))
}

/// A response body from either client.
#[derive(Debug)]
pub enum Body {
    Direct(hyper::body::Incoming),
    Proxied(reqwest::Body),
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            Body::Direct(b) => Pin::new(b).poll_frame(cx).map_err(BodyError::Direct),
            Body::Proxied(b) => Pin::new(b).poll_frame(cx).map_err(BodyError::Proxied),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Direct(b) => b.is_end_stream(),
            Body::Proxied(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Body::Direct(b) => b.size_hint(),
            Body::Proxied(b) => b.size_hint(),
        }
    }
}

/// A body that broke off. Its text is the cause chain without the URL.
#[derive(Debug)]
pub enum BodyError {
    Direct(hyper::Error),
    Proxied(reqwest::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Direct(e) => f.write_str(&with_causes("body error", Some(e))),
            BodyError::Proxied(e) => f.write_str(&redact_reqwest(e)),
        }
    }
}

impl std::error::Error for BodyError {}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn clients() -> (HttpClient, reqwest::Client) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ours = HttpClient::with_proxies(None).expect("client");
        let theirs = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("reqwest");
        (ours, theirs)
    }

    /// A loopback server that runs `serve` on each connection; its port.
    async fn server<F, Fut>(serve: F) -> u16
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                serve(s).await;
            }
        });
        port
    }

    /// Reads a request's head (enough for these tests' small requests).
    async fn read_head(s: &mut tokio::net::TcpStream) {
        let mut buf = vec![0u8; 16 * 1024];
        let mut got = 0;
        while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf[got..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    }

    fn post(url: &str) -> http::Request<Bytes> {
        let mut r = http::Request::new(Bytes::from_static(b"{}"));
        *r.method_mut() = http::Method::POST;
        *r.uri_mut() = url.parse().expect("uri");
        r
    }

    /// Each fault, sent through hale's client and through reqwest as hale
    /// used it: the same transport from both, the one named, and no URL
    /// (with a key in its query) in the text.
    #[tokio::test]
    async fn faults_map_as_they_did_through_reqwest() {
        let (ours, theirs) = clients();
        // Refused: a port that was bound and let go.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        // Reset: the request is read and the connection closed, no answer.
        let hangs_up = server(|mut s| async move {
            read_head(&mut s).await;
        })
        .await;
        // TLS: a certificate no trust store holds (the test CA of the
        // binary's TLS tests).
        let tls = {
            use rustls::pki_types::pem::PemObject;
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../hale/tests/tls");
            let certs = vec![
                rustls::pki_types::CertificateDer::from_pem_file(dir.join("server.pem"))
                    .expect("cert"),
            ];
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(dir.join("server.key"))
                .expect("key");
            let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config");
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
            server(move |s| {
                let acceptor = acceptor.clone();
                async move {
                    let _ = acceptor.accept(s).await;
                }
            })
            .await
        };
        let key = "?key=sk-abcdefghijklmnopqrstuvwx";
        let cases = [
            (
                format!("http://127.0.0.1:{closed}/v1{key}"),
                Transport::ConnectRefused,
            ),
            (format!("http://hale-test.invalid/v1{key}"), Transport::Dns),
            (
                format!("http://127.0.0.1:{hangs_up}/v1{key}"),
                Transport::ConnectReset,
            ),
            (format!("https://127.0.0.1:{tls}/v1{key}"), Transport::Tls),
        ];
        for (url, want) in cases {
            let e = ours.send(post(&url)).await.expect_err("a failure");
            let them = theirs
                .post(&url)
                .body("{}")
                .send()
                .await
                .expect_err("a failure");
            let theirs_t = classify::transport_of(&them);
            assert_eq!(e.transport(), want, "{url}: {}", e.redacted());
            assert_eq!(
                theirs_t,
                want,
                "{url} through reqwest: {}",
                redact_reqwest(&them)
            );
            let text = e.redacted();
            assert!(
                !text.contains("sk-abc") && !text.contains("127.0.0.1:"),
                "{text}"
            );
            if want == Transport::Tls {
                // The reason an operator needs, as reqwest's chain gave it.
                assert!(text.contains("invalid peer certificate"), "{text}");
                assert_eq!(text, redact_reqwest(&them));
            }
        }
    }

    /// A 2xx whose body breaks off before its length: a body error without
    /// the URL, the status and headers read first.
    #[tokio::test]
    async fn a_body_cut_short_is_a_body_error() {
        use http_body_util::BodyExt;
        let (ours, _) = clients();
        let port = server(|mut s| async move {
            read_head(&mut s).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"par")
                .await;
        })
        .await;
        let resp = ours
            .send(post(&format!(
                "http://127.0.0.1:{port}/v1?key=sk-abcdefghijklmnop"
            )))
            .await
            .expect("headers");
        assert_eq!(resp.status(), 200);
        let e = resp.into_body().collect().await.expect_err("cut");
        let text = e.to_string();
        assert!(text.starts_with("body error: "), "{text}");
        assert!(!text.contains("sk-abc"), "{text}");
    }

    /// A server that answers 200 to each request and keeps each request's
    /// head, lower-cased.
    async fn recorder() -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let port = server(move |mut s| {
            let log = log.clone();
            async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                log.lock().expect("log").push(head);
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        })
        .await;
        (port, seen)
    }

    /// Credentials in a provider's URL go as reqwest sent them: out of the
    /// request line, percent-decoded into `Authorization: Basic`.
    #[tokio::test]
    async fn credentials_in_the_url_are_sent_as_reqwest_sent_them() {
        let (ours, theirs) = clients();
        let (port, seen) = recorder().await;
        let url = format!("http://us%40er:p%3Ass@127.0.0.1:{port}/v1/chat");
        ours.send(
            Post::raw_json(uri(&url), Bytes::from_static(b"{}"))
                .finish()
                .expect("built"),
        )
        .await
        .expect("sent");
        theirs.post(&url).body("{}").send().await.expect("sent");
        let heads = seen.lock().expect("log").clone();
        let auth = |h: &str| {
            h.lines()
                .find_map(|l| l.strip_prefix("authorization: ").map(str::to_owned))
        };
        // base64 of `us@er:p:ss`, lower-cased with the head.
        assert_eq!(
            auth(&heads[0]),
            Some("basic dxnazxi6cdpzcw==".to_owned()),
            "{heads:?}"
        );
        assert_eq!(auth(&heads[0]), auth(&heads[1]), "{heads:?}");
        for h in &heads {
            assert!(h.starts_with("post /v1/chat http/1.1\r\n"), "{h}");
            assert!(!h.contains("us%40er") && !h.contains("p%3ass"), "{h}");
        }
    }

    /// A request with no `Accept` goes with reqwest's `*/*`; one that names
    /// its own keeps it.
    #[tokio::test]
    async fn accept_defaults_to_any() {
        let (ours, _) = clients();
        let (port, seen) = recorder().await;
        let url = format!("http://127.0.0.1:{port}/");
        ours.send(post(&url)).await.expect("sent");
        let mut r = post(&url);
        r.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/vnd.amazon.eventstream"),
        );
        ours.send(r).await.expect("sent");
        let accepts: Vec<_> = seen
            .lock()
            .expect("log")
            .iter()
            .map(|h| {
                h.lines()
                    .find_map(|l| l.strip_prefix("accept: ").map(str::to_owned))
            })
            .collect();
        assert_eq!(
            accepts,
            vec![
                Some("*/*".to_owned()),
                Some("application/vnd.amazon.eventstream".to_owned())
            ]
        );
    }
}
