//! [`TaskSet`]: background tasks registered by name, with one way down.
//!
//! A gateway whose outbox relay or supervisor silently died keeps answering
//! `/live` while it no longer does its job. So every long-running task is
//! spawned here under a name; when one ends while the set is not shutting
//! down — with an error, a panic, or even `Ok` — [`TaskSet::first_failure`]
//! resolves with its name and the reason, and the binary shuts the whole
//! process down cleanly (the pattern of Helicone's `meltdown`).
//!
//! Shutdown is one [`CancellationToken`] every task watches, then a bounded
//! wait; a task still running after the bound is aborted and named in the
//! returned list, so a stuck task cannot hold the process hostage.

use std::borrow::Cow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Named background tasks sharing one cancellation token. Cheap to clone;
/// clones share the set.
#[derive(Clone)]
pub struct TaskSet {
    inner: Arc<Inner>,
}

struct Inner {
    token: CancellationToken,
    failures_tx: mpsc::UnboundedSender<(String, anyhow::Error)>,
    failures_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, anyhow::Error)>>,
    handles: Mutex<Vec<(String, JoinHandle<()>)>>,
}

impl Default for TaskSet {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for TaskSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSet")
            .field("tasks", &self.names())
            .finish_non_exhaustive()
    }
}

impl TaskSet {
    pub fn new() -> Self {
        let (failures_tx, failures_rx) = mpsc::unbounded_channel();
        TaskSet {
            inner: Arc::new(Inner {
                token: CancellationToken::new(),
                failures_tx,
                failures_rx: tokio::sync::Mutex::new(failures_rx),
                handles: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The token every task should watch; cancelled by [`TaskSet::shutdown`].
    pub fn token(&self) -> CancellationToken {
        self.inner.token.clone()
    }

    /// Spawns `fut` under `name`. Ending at any time other than shutdown is a
    /// failure reported by [`TaskSet::first_failure`]; a panic is caught and
    /// reported the same way.
    pub fn spawn<F>(&self, name: impl Into<Cow<'static, str>>, fut: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let name: String = name.into().into_owned();
        let token = self.inner.token.clone();
        let tx = self.inner.failures_tx.clone();
        let task_name = name.clone();
        let handle = tokio::spawn(async move {
            let outcome = AssertUnwindSafe(fut).catch_unwind().await;
            if token.is_cancelled() {
                if let Ok(Err(e)) = &outcome {
                    tracing::warn!(task = %task_name, error = %e, "task ended with an error during shutdown");
                }
                return;
            }
            let err = match outcome {
                Ok(Ok(())) => anyhow::anyhow!("task {task_name} exited unexpectedly"),
                Ok(Err(e)) => e.context(format!("task {task_name} failed")),
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a non-string panic".into());
                    anyhow::anyhow!("task {task_name} panicked: {msg}")
                }
            };
            tracing::error!(task = %task_name, error = %format!("{err:#}"), "background task died");
            let _ = tx.send((task_name, err));
        });
        let mut handles = self
            .inner
            .handles
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        handles.retain(|(_, h)| !h.is_finished());
        handles.push((name, handle));
    }

    /// Names of the tasks still running.
    pub fn names(&self) -> Vec<String> {
        let handles = self
            .inner
            .handles
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        handles
            .iter()
            .filter(|(_, h)| !h.is_finished())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Resolves when any task ends unexpectedly (Ok, Err or panic), with its
    /// name and error. Pending forever while every task runs.
    pub fn first_failure<'a>(&'a self) -> futures::future::BoxFuture<'a, (String, anyhow::Error)> {
        Box::pin(self.first_failure_inner())
    }

    async fn first_failure_inner(&self) -> (String, anyhow::Error) {
        let mut rx = self.inner.failures_rx.lock().await;
        match rx.recv().await {
            Some(failure) => failure,
            // The set holds a sender itself, so the channel never closes
            // while `self` is alive.
            None => std::future::pending().await,
        }
    }

    /// Cancels every task and waits up to `within` for them to end; tasks
    /// still running then are aborted. Returns the names of the aborted ones.
    pub fn shutdown(self, within: Duration) -> futures::future::BoxFuture<'static, Vec<String>> {
        Box::pin(self.shutdown_inner(within))
    }

    async fn shutdown_inner(self, within: Duration) -> Vec<String> {
        self.inner.token.cancel();
        let handles: Vec<(String, JoinHandle<()>)> = std::mem::take(
            &mut *self
                .inner
                .handles
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let deadline = tokio::time::Instant::now() + within;
        let mut aborted = Vec::new();
        for (name, mut handle) in handles {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(_) => {}
                Err(_) => {
                    handle.abort();
                    tracing::warn!(task = %name, "task did not stop within the shutdown bound; aborted");
                    aborted.push(name);
                }
            }
        }
        aborted
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C): the start of a graceful shutdown.
pub fn shutdown_signal() -> futures::future::BoxFuture<'static, ()> {
    Box::pin(shutdown_signal_inner())
}

async fn shutdown_signal_inner() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops hale");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
