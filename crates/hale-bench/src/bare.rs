//! The floor: a bare pass-through proxy (issue 13).
//!
//! `hale-bench bare-proxy --listen ADDR --upstream http://HOST:PORT` runs, as
//! its own process like hale, a hyper HTTP/1.1 server that forwards every
//! request to the upstream with reqwest (the same pool and `TCP_NODELAY`
//! settings as hale, mimalloc) and relays the answer's status, content type
//! and body frame by frame. No pipeline, no parsing, no journal: the
//! difference between direct and bare is the cost of an extra loopback hop
//! through this stack, and the difference between bare and hale is what
//! hale itself adds.
//!
//! With `--hyper` the upstream client is hyper-util's pooled client, plain
//! HTTP only, without reqwest's layers (reqwest's redirect layer parses
//! every request's URL again, whatever the redirect policy): the client
//! hale's provider attempts use (hale-gateway `upstream/http_client.rs`;
//! reqwest only behind a proxy variable).

use bytes::Bytes;
use clap::Parser;
use futures::TryStreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;

/// `hale-bench bare-proxy` arguments.
#[derive(Parser, Debug)]
#[command(name = "hale-bench bare-proxy")]
pub struct BareArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Upstream origin, e.g. `http://127.0.0.1:4001`; the request's path is appended.
    #[arg(long)]
    pub upstream: String,
    /// hyper-util's pooled client (plain HTTP) instead of reqwest.
    #[arg(long)]
    pub hyper: bool,
}

type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

type HyperClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// The upstream client of the bare proxy.
enum Client {
    Reqwest(reqwest::Client),
    Hyper(Box<HyperClient>),
}

/// Serves until killed.
pub async fn run(args: BareArgs) -> anyhow::Result<()> {
    // The same TLS provider and client settings as hale's gateway (hale-gateway upstream/http_client.rs).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let idle = std::time::Duration::from_secs(90);
    let client = if args.hyper {
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.set_nodelay(true);
        Client::Hyper(Box::new(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(idle)
                .build(http),
        ))
    } else {
        Client::Reqwest(
            reqwest::Client::builder()
                .pool_idle_timeout(idle)
                .tcp_nodelay(true)
                .build()?,
        )
    };
    let ctx = Arc::new((client, args.upstream.trim_end_matches('/').to_owned()));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    loop {
        let (sock, _) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| forward(ctx.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(sock), svc)
                .await;
        });
    }
}

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(text)).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r
}

async fn forward(
    ctx: Arc<(Client, String)>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let (client, upstream) = &*ctx;
    let (parts, body) = req.into_parts();
    if parts.uri.path() == "/ready" {
        return Ok(plain(StatusCode::OK, "ready".into()));
    }
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, e.to_string())),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{upstream}{path}");
    let ct = parts.headers.get(hyper::header::CONTENT_TYPE).cloned();
    let (status, ct, body) = match client {
        Client::Reqwest(client) => {
            let mut up = client.request(parts.method, url).body(body);
            if let Some(ct) = ct {
                up = up.header(hyper::header::CONTENT_TYPE, ct);
            }
            let resp = match up.send().await {
                Ok(r) => r,
                Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, e.to_string())),
            };
            let status = resp.status();
            let ct = resp.headers().get(hyper::header::CONTENT_TYPE).cloned();
            let frames = resp
                .bytes_stream()
                .map_ok(Frame::data)
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
            (status, ct, BodyExt::boxed(StreamBody::new(frames)))
        }
        Client::Hyper(client) => {
            let mut up = Request::new(Full::new(body));
            *up.method_mut() = parts.method;
            *up.uri_mut() = match url.parse() {
                Ok(u) => u,
                Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, format!("{e}"))),
            };
            if let Some(ct) = ct {
                up.headers_mut().insert(hyper::header::CONTENT_TYPE, ct);
            }
            let resp = match client.request(up).await {
                Ok(r) => r,
                Err(e) => return Ok(plain(StatusCode::BAD_GATEWAY, e.to_string())),
            };
            let (rp, rb) = resp.into_parts();
            let ct = rp.headers.get(hyper::header::CONTENT_TYPE).cloned();
            let body = rb
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                .boxed();
            (rp.status, ct, body)
        }
    };
    let mut out = Response::new(body);
    *out.status_mut() = status;
    if let Some(ct) = ct {
        out.headers_mut().insert(hyper::header::CONTENT_TYPE, ct);
    }
    Ok(out)
}
