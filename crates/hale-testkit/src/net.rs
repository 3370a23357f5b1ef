//! Loopback ports and HTTP servers on them: a port free a moment ago, an
//! axum app served in the background (for the whole test, until dropped, or
//! stopped and started again on the same port), and waiting for a port to
//! accept connections.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago (bound to 0, then released).
pub fn free_port() -> u16 {
    free_addr().port()
}

/// A loopback address nothing listens on (yet).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// Serves `app` on a free loopback port for the rest of the test; returns
/// its base URL (`http://127.0.0.1:PORT`).
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// An app served on a free loopback port until this is dropped (then it
/// stops accepting and closes its connections gracefully).
pub struct Served {
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Served {
    /// `host:port`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// Serves `app` on a free loopback port until the returned [`Served`] is dropped.
pub async fn serve_stoppable(app: axum::Router) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    Served { addr, _stop: stop }
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

/// Blocks until something accepts connections on loopback `port`; panics
/// naming `what` after `limit`.
pub fn wait_listening(port: u16, what: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
