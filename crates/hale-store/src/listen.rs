//! Hearing other instances' agent control changes (docs/operations.md,
//! "Scale-out on PostgreSQL").
//!
//! A control change (pause, resume, terminate, decision, task reset) commits
//! its agent row with a [`crate::Write::Announce`], which on PostgreSQL is a
//! `NOTIFY hale_agents` in the same transaction. [`AgentListener`] is the
//! other end: one `LISTEN` connection per instance. PostgreSQL drops
//! notifications sent while a listener is disconnected, so after every
//! reconnect the listener yields [`Heard::Reconnected`] and its owner re-reads
//! every agent row — the row is the truth, the notification only a wake-up.
//! On SQLite there is one instance: the listener never yields.
//!
//! The same connection hears `hale_counts`: every transaction that commits
//! counts notifies the totals after them ([`Heard::Counts`]), so an
//! instance's view of an agent follows other instances' turns within a
//! notification's latency, without traffic of its own.
//!
//! [`follow_events`] is the same for the outbox: every commit that appends
//! events notifies `hale_events`, and each instance's store wakes its
//! relays (`watch_seq`) for events other instances committed, instead of
//! leaving them to the relays' 1 s poll (which stays as a fallback). The
//! same connection hears released idempotency claims (`hale_idem`,
//! src/idem.rs) and hands them to the waiters.
//!
//! Below the handle: the store passes this file its pool and the state its
//! writer shares (`Store::listen_agents` is in src/agents.rs).

use std::time::Duration;

use sqlx::postgres::PgListener;

use std::sync::Arc;

use crate::backend::{
    AGENTS_CHANNEL, COUNTS_CHANNEL, CountsNotice, EVENTS_CHANNEL, IDEM_CHANNEL, Pool, last_seq,
};
use crate::error::{Result, StoreError};
use crate::model::{AgentChange, AgentTotals};
use crate::writer::Shared;

/// Wait between attempts to reconnect a lost listener.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// What the listener heard.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// An agent's control state changed (re-read its row).
    Change(AgentChange),
    /// A transaction (of any instance, this one's too) committed counts:
    /// each agent's totals after it (fold them: `hale_core::counts::Tally::observe`).
    Counts(Vec<AgentTotals>),
    /// The listener (re)connected: notifications may have been missed, so
    /// re-read every agent. Also the first thing yielded.
    Reconnected,
}

/// The `LISTEN hale_agents` connection of one instance.
pub struct AgentListener {
    pg: Option<PgListener>,
    /// This store's schema: changes announced from another one are ignored.
    schema: Option<String>,
    first: bool,
}

impl std::fmt::Debug for AgentListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentListener")
            .field("postgres", &self.pg.is_some())
            .finish()
    }
}

impl AgentListener {
    /// Connects the listener of `pool` (`Store::listen_agents`, src/agents.rs):
    /// on PostgreSQL a `LISTEN hale_agents` connection, on SQLite a listener
    /// that never yields.
    pub(crate) async fn connect(pool: &Pool) -> Result<AgentListener> {
        let mut schema = None;
        let pg = match pool {
            Pool::Sqlite(_) => None,
            Pool::Pg(p) => {
                schema = Some(
                    sqlx::query_scalar::<_, String>("SELECT current_schema()")
                        .fetch_one(p)
                        .await
                        .map_err(StoreError::db("reading the schema for the agents listener"))?,
                );
                let mut l = PgListener::connect_with(p)
                    .await
                    .map_err(StoreError::db("connecting the agents listener"))?;
                l.listen_all([AGENTS_CHANNEL, COUNTS_CHANNEL])
                    .await
                    .map_err(StoreError::db("listening for agent changes"))?;
                Some(l)
            }
        };
        Ok(AgentListener {
            pg,
            schema,
            first: true,
        })
    }

    /// The next change heard. Errors only when the store's pool was closed
    /// (shutdown); a lost connection is retried and reported as
    /// [`Heard::Reconnected`].
    pub fn next<'a>(&'a mut self) -> crate::BoxFut<'a, Result<Heard>> {
        Box::pin(self.next_inner())
    }

    async fn next_inner(&mut self) -> Result<Heard> {
        if std::mem::take(&mut self.first) {
            return Ok(Heard::Reconnected);
        }
        let Some(l) = self.pg.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            match l.try_recv().await {
                Ok(Some(n)) if n.channel() == COUNTS_CHANNEL => {
                    match serde_json::from_str::<CountsNotice>(n.payload()) {
                        Ok(c) if c.schema.is_some() && c.schema != self.schema => {}
                        Ok(c) => return Ok(Heard::Counts(c.counts)),
                        Err(e) => {
                            tracing::warn!(payload = n.payload(), error = %e, "ignoring a malformed hale_counts notification");
                        }
                    }
                }
                Ok(Some(n)) => match serde_json::from_str::<AgentChange>(n.payload()) {
                    Ok(change) if change.schema.is_some() && change.schema != self.schema => {}
                    Ok(change) => return Ok(Heard::Change(change)),
                    Err(e) => {
                        tracing::warn!(payload = n.payload(), error = %e, "ignoring a malformed hale_agents notification");
                    }
                },
                // Lost and already reconnected (eager reconnect).
                Ok(None) => return Ok(Heard::Reconnected),
                Err(sqlx::Error::PoolClosed) => return Err(StoreError::Closed),
                Err(e) => {
                    tracing::warn!(error = %e, "agents listener lost its connection; reconnecting");
                    loop {
                        tokio::time::sleep(RELISTEN_AFTER).await;
                        match l.listen_all([AGENTS_CHANNEL, COUNTS_CHANNEL]).await {
                            Ok(()) => return Ok(Heard::Reconnected),
                            Err(sqlx::Error::PoolClosed) => return Err(StoreError::Closed),
                            Err(e) => {
                                tracing::warn!(error = %e, "agents listener: reconnect failed")
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Wakes `shared.seq` for outbox events committed by any instance, until
/// the pool is closed. Each notification (or reconnect) reads the highest
/// seq once; notifications already queued behind it are covered by that read.
pub(crate) async fn follow_events(pool: sqlx::PgPool, shared: Arc<Shared>) {
    let mut listener = loop {
        match PgListener::connect_with(&pool).await {
            Ok(mut l) => match l.listen_all([EVENTS_CHANNEL, IDEM_CHANNEL]).await {
                Ok(()) => break l,
                Err(e) => tracing::warn!(error = %e, "outbox listener: LISTEN failed"),
            },
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => tracing::warn!(error = %e, "outbox listener: cannot connect"),
        }
        if pool.is_closed() {
            return;
        }
        tokio::time::sleep(RELISTEN_AFTER).await;
    };
    let pool = Pool::Pg(pool);
    loop {
        match listener.try_recv().await {
            Ok(first) => {
                // A lost connection (`None`) may have dropped releases too.
                let mut events = first.is_none();
                if first.is_none() {
                    let _ = shared.released.send(String::new());
                }
                let mut next = first;
                loop {
                    if let Some(n) = &next {
                        if n.channel() == IDEM_CHANNEL {
                            let _ = shared.released.send(n.payload().to_owned());
                        } else {
                            events = true;
                        }
                    }
                    next = listener.next_buffered();
                    if next.is_none() {
                        break;
                    }
                }
                if events {
                    match last_seq(&pool).await {
                        Ok(seq) => shared.seen_seq(seq),
                        Err(e) => {
                            tracing::warn!(error = %e, "outbox listener: reading the last seq failed")
                        }
                    }
                }
            }
            Err(sqlx::Error::PoolClosed) => return,
            Err(e) => {
                tracing::warn!(error = %e, "outbox listener lost its connection; retrying");
                tokio::time::sleep(RELISTEN_AFTER).await;
            }
        }
    }
}
