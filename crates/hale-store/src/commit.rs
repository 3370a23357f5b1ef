//! The write path of [`Store`]: `commit` (wait until durable), `submit`
//! (fire and forget), `flush`, and the backlog's measures and brake
//! (`queued`, `commits`, `room`).
//!
//! Every write is encoded here, in the caller's task ([`crate::rows`]), and
//! queued to the group-commit writer ([`crate::writer`]), which applies it;
//! this file only talks to that queue and to the state the writer shares.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use crate::error::{Result, StoreError};
use crate::model::Write;
use crate::rows;
use crate::store::{Store, now_ms};
use crate::writer::Msg;

/// What [`Store::room`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// The backlog was under the limit.
    Free,
    /// It was over, and came under it within the wait.
    Waited,
    /// Still over it after the whole wait (the caller goes on).
    TimedOut,
    /// Over it, and the writer has finished no batch for the longest wait:
    /// stuck (the store down or locked), so the caller did not wait at all.
    Stuck,
}

/// Writes queued by [`Store::queue`]: [`Committing::committed`] waits for
/// their commit.
pub struct Committing(Pending);

enum Pending {
    Ready(Result<()>),
    Queued(oneshot::Receiver<Result<()>>),
    Taken,
}

impl Committing {
    /// Waits until the writes are committed (or failed). Cancel-safe: a
    /// wait given up (a timeout around it) can be taken up again.
    pub fn committed<'a>(&'a mut self) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.committed_inner())
    }

    async fn committed_inner(&mut self) -> Result<()> {
        match &mut self.0 {
            Pending::Queued(rx) => {
                let r = rx.await.map_err(|_| StoreError::Closed).and_then(|r| r);
                self.0 = Pending::Taken;
                r
            }
            Pending::Ready(_) => match std::mem::replace(&mut self.0, Pending::Taken) {
                Pending::Ready(r) => r,
                Pending::Queued(_) | Pending::Taken => Ok(()),
            },
            Pending::Taken => Ok(()),
        }
    }
}

impl Store {
    pub(crate) fn encode(writes: Vec<Write>) -> Result<Vec<rows::Encoded>> {
        let now = now_ms();
        writes.into_iter().map(|w| rows::encode(w, now)).collect()
    }

    /// Queues writes into the next group commit and waits until that commit
    /// is durable. Everything in one call lands in the same transaction (e.g.
    /// an agent's state change and the event reporting it).
    pub fn commit<'a>(&'a self, writes: Vec<Write>) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.commit_inner(writes))
    }

    async fn commit_inner(&self, writes: Vec<Write>) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let rows = Self::encode(writes)?;
        let n = rows.len() as u64;
        let (done, rx) = oneshot::channel();
        self.inner.shared.queued.fetch_add(n, Ordering::Relaxed);
        let msg = Msg::Writes {
            rows,
            done: Some(done),
            at: tokio::time::Instant::now(),
        };
        if self.inner.tx.send(msg).is_err() {
            self.inner.shared.queued.fetch_sub(n, Ordering::Relaxed);
            return Err(StoreError::Closed);
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues writes into the next group commit now, like [`Store::submit`]
    /// (in the caller's order with everything it submitted before), and
    /// returns a handle to wait for that commit with: like
    /// [`Store::commit`], but the caller decides how long to wait (a
    /// durable answer waits bounded; `hale_core::memory::durable_release`).
    /// The commit happens whether anyone waits or not.
    pub fn queue(&self, writes: Vec<Write>) -> Committing {
        if writes.is_empty() {
            return Committing(Pending::Ready(Ok(())));
        }
        let rows = match Self::encode(writes) {
            Ok(rows) => rows,
            Err(e) => return Committing(Pending::Ready(Err(e))),
        };
        let n = rows.len() as u64;
        let (done, rx) = oneshot::channel();
        self.inner.shared.queued.fetch_add(n, Ordering::Relaxed);
        let msg = Msg::Writes {
            rows,
            done: Some(done),
            at: tokio::time::Instant::now(),
        };
        if self.inner.tx.send(msg).is_err() {
            self.inner.shared.queued.fetch_sub(n, Ordering::Relaxed);
            return Committing(Pending::Ready(Err(StoreError::Closed)));
        }
        Committing(Pending::Queued(rx))
    }

    /// How long ago the writer last finished a batch (since the store
    /// opened, when it never has): over `hale_core::memory::
    /// JOURNAL_BACKLOG_MAX_WAIT` with writes waiting, the writer is stuck.
    pub fn since_last_batch(&self) -> std::time::Duration {
        self.inner.shared.since_last_batch()
    }

    /// Queues writes into the next group commit without waiting (journal
    /// rows, events not tied to a state change). A failure is logged and
    /// reported by the next [`Store::flush`].
    pub fn submit(&self, writes: Vec<Write>) {
        if writes.is_empty() {
            return;
        }
        let rows = match Self::encode(writes) {
            Ok(rows) => rows,
            Err(e) => return self.inner.shared.record_submit_failure(&e),
        };
        let n = rows.len() as u64;
        self.inner.shared.queued.fetch_add(n, Ordering::Relaxed);
        let msg = Msg::Writes {
            rows,
            done: None,
            at: tokio::time::Instant::now(),
        };
        if self.inner.tx.send(msg).is_err() {
            self.inner.shared.queued.fetch_sub(n, Ordering::Relaxed);
            self.inner.shared.record_submit_failure(&StoreError::Closed);
        }
    }

    /// Waits until everything submitted so far is committed. Returns
    /// [`StoreError::SubmitFailed`] when submitted writes failed since the
    /// previous flush.
    pub fn flush<'a>(&'a self) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.flush_inner())
    }

    async fn flush_inner(&self) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Flush(done))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Group commits (transactions) made so far by this handle's writer.
    pub fn commits(&self) -> u64 {
        self.inner.shared.commits.load(Ordering::Relaxed)
    }

    /// Writes queued and not yet taken by the writer.
    pub fn queued(&self) -> u64 {
        self.inner.shared.queued.load(Ordering::Relaxed)
    }

    /// Waits, at most `max_wait`, until at most `limit` writes are queued
    /// (`hale_core::memory::journal_backlog_max`): a caller about to submit
    /// more keeps the journal's backlog — held in memory — bounded by
    /// slowing to the writer's pace, and goes on after `max_wait` all the
    /// same. A writer that finished no batch for `max_wait` is stuck (a
    /// store down): then nobody waits at all — fail open, the backlog grows
    /// as it did before, and the store's errors say why.
    pub fn room<'a>(
        &'a self,
        limit: u64,
        max_wait: std::time::Duration,
    ) -> crate::BoxFut<'a, Room> {
        Box::pin(self.room_inner(limit, max_wait))
    }

    async fn room_inner(&self, limit: u64, max_wait: std::time::Duration) -> Room {
        let wait = |s: &Self| {
            hale_core::memory::journal_wait(
                s.queued(),
                limit,
                s.inner.shared.since_last_batch(),
                max_wait,
            )
        };
        if self.queued() <= limit {
            return Room::Free;
        }
        if !wait(self) {
            return Room::Stuck;
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let woken = self.inner.shared.room.notified();
            tokio::pin!(woken);
            // Registered before the check, so a batch between the two wakes it.
            woken.as_mut().enable();
            if self.queued() <= limit {
                return Room::Waited;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return if self.queued() <= limit {
                    Room::Waited
                } else {
                    Room::TimedOut
                };
            }
        }
    }
}
