//! NATS for the tests that kill it: a `nats-server -js` child of the test's
//! own on a chosen port (killed with SIGKILL on drop, restartable on the same
//! port and store), and reading back what a JetStream stream holds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::StreamExt;

/// `nats-server` on PATH (or in /usr/sbin), or None after printing why the
/// test is skipped (a failure instead under `CI=true`).
pub fn nats_server_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/sbin".into());
    let found = dirs
        .into_iter()
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            !crate::under_ci(),
            "nats-server is not installed; CI must install it (apt-get install nats-server)"
        );
        eprintln!("SKIP: nats-server is not installed");
    }
    found
}

/// A `nats-server -js` child on `port` storing in `dir`; killed on drop.
pub struct NatsServer {
    pub child: Child,
    pub port: u16,
}

impl NatsServer {
    /// Starts it and waits (up to 10 s) until it accepts connections.
    pub fn start(bin: &Path, port: u16, dir: &Path) -> NatsServer {
        let child = Command::new(bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        crate::wait_listening(port, "nats-server", Duration::from_secs(10));
        NatsServer { child, port }
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One message of a JetStream stream.
#[derive(Debug, Clone)]
pub struct StreamMsg {
    /// Its `Nats-Msg-Id` header ("" without one).
    pub id: String,
    pub subject: String,
    pub payload: bytes::Bytes,
}

impl StreamMsg {
    /// The payload as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or_default()
    }
}

/// How many messages `stream` on the server at `url` holds.
pub async fn jetstream_len(url: &str, stream: &str) -> u64 {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.expect("nats connects"));
    let mut s = js.get_stream(stream).await.expect("the stream");
    s.info().await.expect("stream info").state.messages
}

/// The messages of `stream` on the server at `url`, in stream order: the
/// first `expect`, or all it holds now when None; stops early when none
/// arrives for `wait`.
pub async fn jetstream_messages(
    url: &str,
    stream: &str,
    expect: Option<usize>,
    wait: Duration,
) -> Vec<StreamMsg> {
    use async_nats::jetstream::consumer;
    let expect = match expect {
        Some(n) => n,
        None => jetstream_len(url, stream).await as usize,
    };
    let js = async_nats::jetstream::new(async_nats::connect(url).await.expect("nats connects"));
    let s = js.get_stream(stream).await.expect("the stream");
    let c = s
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("a consumer");
    let mut msgs = c.messages().await.expect("messages");
    let mut out = Vec::with_capacity(expect);
    while out.len() < expect {
        let Ok(Some(m)) = tokio::time::timeout(wait, msgs.next()).await else {
            break;
        };
        let m = m.expect("a message");
        let id = m
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        out.push(StreamMsg {
            id,
            subject: m.subject.to_string(),
            payload: m.payload.clone(),
        });
    }
    out
}
