//! The runtime's background tasks: the capability refresh (every
//! `refresh_every`, also the node health check) and the store-and-forward
//! queue, both until a cancellation token.

use crate::queue::QUEUE_TICK;
use crate::tools::Tools;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Tools {
    /// The capability refresh (the node health check), until `token`.
    pub fn refresh_loop(
        self: Arc<Self>,
        token: CancellationToken,
    ) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(self.refresh_loop_inner(token))
    }

    async fn refresh_loop_inner(self: Arc<Self>, token: CancellationToken) {
        let mut every = tokio::time::interval(self.refresh_every);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = every.tick() => self.refresh_all().await,
            }
        }
    }

    /// The store-and-forward queue, until `token`. A failed pass is logged
    /// and retried at the next tick.
    pub fn queue_loop(
        self: Arc<Self>,
        token: CancellationToken,
    ) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(self.queue_loop_inner(token))
    }

    async fn queue_loop_inner(self: Arc<Self>, token: CancellationToken) {
        let mut every = tokio::time::interval(QUEUE_TICK);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = every.tick() => {
                    if let Err(e) = self.queue_tick().await {
                        tracing::warn!(error = %e, "tool job queue: a pass failed; retrying");
                    }
                }
            }
        }
    }

    /// Starts both loops on the runtime; both stop on `token`.
    pub fn spawn_background(
        self: &Arc<Self>,
        token: CancellationToken,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(self.clone().refresh_loop(token.clone())),
            tokio::spawn(self.clone().queue_loop(token)),
        ]
    }
}
