//! Shared test helpers: a store in a tempdir, events, free ports, servers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreOptions, Write};

pub async fn store(dir: &Path) -> Store {
    Store::open_sqlite(dir, StoreOptions::default())
        .await
        .expect("open store")
}

/// `n` events with increasing times, kinds cycling through `kinds`.
pub fn events(n: usize, kinds: &[EventKind]) -> Vec<Event> {
    let mut rng = rand::rng();
    let base = 1_700_000_000_000u64;
    (0..n)
        .map(|i| {
            Event::new(kinds[i % kinds.len()], base + i as u64, &mut rng)
                .agent("a1")
                .payload(serde_json::json!({ "i": i }))
        })
        .collect()
}

pub async fn commit_all(store: &Store, evs: &[Event]) {
    for chunk in evs.chunks(2000) {
        store
            .commit(chunk.iter().cloned().map(Write::Event).collect())
            .await
            .expect("commit");
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Serves `app` on a free loopback port; returns its base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Polls `f` every 20 ms until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if f().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `nats-server` on PATH, or None after printing why the test is skipped
/// (panics instead when CI=true).
pub fn nats_server_bin() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("nats-server"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("nats-server is not on PATH; CI must install it (apt-get install nats-server)");
        }
        eprintln!("SKIP: nats-server is not on PATH");
    }
    found
}

/// A `nats-server -js` child on `port` storing in `dir`; killed on drop.
pub struct NatsServer {
    pub child: Child,
    pub port: u16,
}

impl NatsServer {
    pub fn start(bin: &Path, port: u16, dir: &Path) -> NatsServer {
        let child = Command::new(bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        NatsServer { child, port }
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

/// An HTTP server on a fixed loopback port that can be stopped (its port
/// then refuses connections) and started again on the same port.
pub struct Stoppable {
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Stoppable {
    pub async fn start(app: axum::Router, port: u16) -> Stoppable {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(Instant::now() < deadline, "cannot bind {port} again: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Stoppable {
            port,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops accepting, closes the open connections and frees the port.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Commits one event every few milliseconds until `stop`; returns the ids in
/// commit (= outbox) order.
pub fn produce(
    store: Store,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let kinds = [
            EventKind::AgentPaused,
            EventKind::AgentResumed,
            EventKind::TurnCompleted,
        ];
        let mut ids = Vec::new();
        let mut i = 0usize;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis() as u64;
            let ev = Event::new(kinds[i % kinds.len()], now, &mut rand::rng())
                .agent("producer")
                .payload(serde_json::json!({ "i": i }));
            ids.push(ev.id.clone());
            store.commit(vec![Write::Event(ev)]).await.expect("commit");
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ids
    })
}

/// How long an outage test keeps its sink down at least, beyond the trial
/// count it waits for: `HALE_OUTAGE_SECS` (default 0; 60 reproduces the
/// issue's minute-long outage).
pub fn min_outage() -> Duration {
    Duration::from_secs(
        std::env::var("HALE_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    )
}

/// Failed trials of a down sink an outage test waits for: many more than
/// the attempts that would dead-letter an event.
pub const OUTAGE_TRIALS: u64 = 20;
