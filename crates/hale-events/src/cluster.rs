//! [`Cluster`]: this instance among the others on one database — its
//! heartbeat row, the leases it holds, and singleton work run only while its
//! lease is held (docs/operations.md, "Scale-out on PostgreSQL").
//!
//! One keeper task (`cluster-leases`) writes the heartbeat and, for every
//! lease some task asked for, takes or renews it every
//! [`LEASE_RENEW_EVERY`] through the store's conditional UPSERT (the rule is
//! `hale_core::lease`). Each leased task is wrapped by [`Cluster::while_held`]:
//! it waits until the lease is held, runs the work with a child cancellation
//! token, and cancels the work when the lease is lost (a renewal refused, or
//! renewals failing until [`keeps_working`] says stop) — then waits to get it
//! back. The work itself resumes from what is stored (a relay re-reads its
//! sink's cursor), so a takeover loses nothing.
//!
//! With SQLite there is one instance per data directory (the flock): it takes
//! every lease at its first attempt, and a renewal that is slow or fails never
//! stops its work — no other instance can take the lease, and under load the
//! renewals wait behind the journal's writer for seconds (measured: 1–6 s at
//! ~7k turns/s), which used to stop the health monitor and the relays of a
//! busy single-instance gateway. A clean shutdown releases the leases and
//! the heartbeat row, so the others take over at their next attempt instead
//! of after the TTL. `GET /cluster` ([`router`]) lists instances and leases.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use hale_core::lease::{
    INSTANCE_ALIVE_FOR, LEASE_RENEW_EVERY, expiry, instance_alive, keeps_working,
};
use hale_store::{InstanceRecord, Store};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::now_ms;

/// Instance rows whose heartbeat is older than this are deleted by the
/// keeper (they stay listed as gone in between).
const FORGET_INSTANCES_AFTER_MS: u64 = 24 * 3600 * 1000;

/// This instance's place in the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    me: InstanceRecord,
    /// Every lease asked for, with whether it is held now.
    wanted: Mutex<BTreeMap<String, LeaseState>>,
    /// Wakes the keeper early (a new lease asked for).
    wake: Notify,
}

struct LeaseState {
    held: watch::Sender<bool>,
    /// Expiry of our latest granted claim (0: none).
    expires_ms: u64,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("instance", &self.inner.me.id)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// This instance, listening on `addr`, with a fresh id.
    pub fn new(store: Store, addr: String) -> Cluster {
        let now = now_ms();
        let id = ulid::Ulid::from_parts(now, rand::random::<u128>()).to_string();
        // Idempotency claims name this instance, so its stale heartbeat frees them.
        store.set_instance(&id);
        Cluster {
            inner: Arc::new(Inner {
                store,
                me: InstanceRecord {
                    id,
                    addr,
                    pid: std::process::id(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    started_ms: now,
                    heartbeat_ms: now,
                },
                wanted: Mutex::new(BTreeMap::new()),
                wake: Notify::new(),
            }),
        }
    }

    /// This instance's id.
    pub fn id(&self) -> &str {
        &self.inner.me.id
    }

    fn wanted(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, LeaseState>> {
        self.inner
            .wanted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this instance holds `name` now.
    pub fn holds(&self, name: &str) -> bool {
        self.wanted().get(name).is_some_and(|s| *s.held.borrow())
    }

    fn watch(&self, name: &str) -> watch::Receiver<bool> {
        let rx = {
            let mut wanted = self.wanted();
            let state = wanted
                .entry(name.to_string())
                .or_insert_with(|| LeaseState {
                    held: watch::channel(false).0,
                    expires_ms: 0,
                });
            state.held.subscribe()
        };
        self.inner.wake.notify_one();
        rx
    }

    /// The keeper: heartbeat and claims every [`LEASE_RENEW_EVERY`] (at once
    /// when a lease is first asked for) until `token` is cancelled. Call
    /// [`Cluster::release_all`] once the leased work has stopped.
    pub fn keep(
        self,
        token: CancellationToken,
    ) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
        Box::pin(self.keep_inner(token))
    }

    async fn keep_inner(self, token: CancellationToken) -> anyhow::Result<()> {
        let mut every = tokio::time::interval(LEASE_RENEW_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                _ = every.tick() => {}
                _ = self.inner.wake.notified() => {}
            }
            // A round never outlasts one interval: a hung database must not
            // keep us believing in a lease past `keeps_working`.
            if tokio::time::timeout(LEASE_RENEW_EVERY, self.round())
                .await
                .is_err()
            {
                tracing::warn!("cluster: a lease round timed out");
                self.drop_lapsed(now_ms());
            }
        }
        Ok(())
    }

    /// Whether no other instance can share this store (SQLite: the data
    /// directory's flock).
    fn exclusive(&self) -> bool {
        match self.inner.store.backend() {
            hale_store::Backend::Sqlite => true,
            hale_store::Backend::Postgres => false,
        }
    }

    async fn round(&self) {
        let now = now_ms();
        let me = InstanceRecord {
            heartbeat_ms: now,
            ..self.inner.me.clone()
        };
        if let Err(e) = self.inner.store.heartbeat(&me).await {
            tracing::warn!(error = %e, "cluster: heartbeat failed");
        }
        let stale = now.saturating_sub(FORGET_INSTANCES_AFTER_MS);
        if let Err(e) = self.inner.store.remove_instances(None, stale).await {
            tracing::warn!(error = %e, "cluster: forgetting old instances failed");
        }
        let names: Vec<String> = self.wanted().keys().cloned().collect();
        for name in names {
            let now = now_ms();
            match self
                .inner
                .store
                .claim_lease(&name, self.id(), now, expiry(now))
                .await
            {
                Ok(row) => {
                    let mine = row.holder == self.id();
                    let mut wanted = self.wanted();
                    if let Some(state) = wanted.get_mut(&name) {
                        state.expires_ms = if mine { row.expires_ms } else { 0 };
                        let was = state.held.send_replace(mine);
                        if was != mine {
                            tracing::info!(lease = %name, holder = %row.holder, held = mine, "cluster: lease changed hands");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %name, error = %e, "cluster: lease claim failed");
                    self.drop_lapsed(now);
                }
            }
        }
    }

    /// Stops work whose lease could not be renewed in time (never with
    /// SQLite: this is the only instance on its data directory).
    fn drop_lapsed(&self, now: u64) {
        if self.exclusive() {
            return;
        }
        let mut wanted = self.wanted();
        for (name, state) in wanted.iter_mut() {
            if *state.held.borrow() && !keeps_working(state.expires_ms, now) {
                tracing::warn!(lease = %name, "cluster: lease could not be renewed; stopping its work");
                state.held.send_replace(false);
            }
        }
    }

    /// At a clean shutdown, after the leased work stopped: gives up every
    /// lease held and removes the heartbeat row, so the others take over at
    /// their next attempt instead of after the TTL.
    pub fn release_all<'a>(&'a self) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.release_all_inner())
    }

    async fn release_all_inner(&self) {
        let held: Vec<String> = {
            let wanted = self.wanted();
            wanted
                .iter()
                .filter(|(_, s)| *s.held.borrow())
                .map(|(n, _)| n.clone())
                .collect()
        };
        for state in self.wanted().values() {
            state.held.send_replace(false);
        }
        for name in held {
            if let Err(e) = self.inner.store.release_lease(&name, self.id()).await {
                tracing::warn!(lease = %name, error = %e, "cluster: releasing a lease failed");
            }
        }
        if let Err(e) = self.inner.store.remove_instances(Some(self.id()), 0).await {
            tracing::warn!(error = %e, "cluster: removing the heartbeat row failed");
        }
    }

    /// Runs the work `make` builds only while this instance holds lease
    /// `name`: started when the lease is taken, cancelled (through the token
    /// it is given) when it is lost, started again when it is taken back.
    /// Returns when `token` is cancelled; work that ends by itself while the
    /// lease is held is an error (as for any named task).
    pub async fn while_held<F, Fut>(
        self,
        name: String,
        token: CancellationToken,
        mut make: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut held = self.watch(&name);
        loop {
            while !*held.borrow_and_update() {
                tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    r = held.changed() => if r.is_err() { return Ok(()) },
                }
            }
            tracing::info!(lease = %name, "cluster: lease held; starting its work");
            let child = token.child_token();
            let work = make(child.clone());
            tokio::pin!(work);
            loop {
                tokio::select! {
                    r = &mut work => {
                        if token.is_cancelled() {
                            return r;
                        }
                        r?;
                        anyhow::bail!("the work of lease {name} ended while the lease was held");
                    }
                    r = held.changed() => {
                        if r.is_err() || !*held.borrow_and_update() {
                            tracing::info!(lease = %name, "cluster: lease lost; stopping its work");
                            child.cancel();
                            if let Err(e) = work.await {
                                tracing::warn!(lease = %name, error = %format!("{e:#}"), "cluster: work ended with an error after losing its lease");
                            }
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Instances and leases as `GET /cluster` shows them.
    pub fn view<'a>(&'a self) -> futures::future::BoxFuture<'a, anyhow::Result<ClusterView>> {
        Box::pin(self.view_inner())
    }

    async fn view_inner(&self) -> anyhow::Result<ClusterView> {
        let now = now_ms();
        let instances = self
            .inner
            .store
            .instances()
            .await?
            .into_iter()
            .map(|i| InstanceView {
                alive: instance_alive(i.heartbeat_ms, now),
                this: i.id == self.id(),
                heartbeat_age_ms: now.saturating_sub(i.heartbeat_ms),
                instance: i,
            })
            .collect();
        let leases = self
            .inner
            .store
            .leases()
            .await?
            .into_iter()
            .map(|l| LeaseView {
                expired: l.expires_ms <= now,
                expires_in_ms: l.expires_ms.saturating_sub(now),
                name: l.name,
                holder: l.holder,
            })
            .collect();
        Ok(ClusterView {
            instance: self.id().to_string(),
            backend: match self.inner.store.backend() {
                hale_store::Backend::Sqlite => "sqlite",
                hale_store::Backend::Postgres => "postgres",
            },
            alive_for_ms: INSTANCE_ALIVE_FOR.as_millis() as u64,
            instances,
            leases,
        })
    }
}

/// The body of `GET /cluster`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ClusterView {
    /// The id of the instance that answered.
    pub instance: String,
    pub backend: &'static str,
    /// A heartbeat older than this means the instance is gone.
    pub alive_for_ms: u64,
    pub instances: Vec<InstanceView>,
    pub leases: Vec<LeaseView>,
}

/// One instance in [`ClusterView`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InstanceView {
    #[serde(flatten)]
    pub instance: InstanceRecord,
    pub alive: bool,
    /// The instance that answered.
    pub this: bool,
    pub heartbeat_age_ms: u64,
}

/// One lease in [`ClusterView`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LeaseView {
    pub name: String,
    pub holder: String,
    pub expires_in_ms: u64,
    pub expired: bool,
}

/// `GET /cluster` (mounted with the admin routes).
pub fn router(cluster: Cluster) -> Router {
    Router::new()
        .route("/cluster", get(cluster_view))
        .with_state(cluster)
}

async fn cluster_view(State(cluster): State<Cluster>) -> Response {
    match cluster.view().await {
        Ok(v) => Json(v).into_response(),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"error": {
                "message": format!("cannot read the cluster state: {e:#}"),
                "type": "server_error",
            }})),
        )
            .into_response(),
    }
}
