//! Idempotency keys (docs/operations.md, "What hale does to a call"; across
//! instances, "Scale-out on PostgreSQL"): a key names one request. A
//! key seen before with the same body is answered with the stored response
//! (another body: 422); a concurrent duplicate waits for the first one's
//! answer, on this instance through the in-flight map, across instances
//! through the store's claim.

use crate::emit::wall_ms;
use hale_store::{Store, StoredResponse};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The keys being served right now on this instance, and the store.
pub struct Idempotency {
    store: Store,
    /// Idempotency keys being served right now, with their request's hash: a
    /// duplicate of the same request waits on the watch.
    inflight: Mutex<HashMap<String, (String, tokio::sync::watch::Receiver<bool>)>>,
}

pub enum IdemStart {
    Stored(StoredResponse),
    /// The key answered (or is answering) a request with another body.
    Reused,
    Fresh(IdemGuard),
    /// The store could not be read: calling anyway could run the request twice.
    Unknown(String),
}

/// Attempts at reading an idempotency key before the call is refused.
const IDEMPOTENCY_READS: u32 = 3;

/// Removes an in-flight idempotency key and wakes its waiters when dropped.
pub struct IdemGuard {
    keys: Arc<Idempotency>,
    key: String,
    done: tokio::sync::watch::Sender<bool>,
}

impl Drop for IdemGuard {
    fn drop(&mut self) {
        let keys = self.keys.clone();
        let key = self.key.clone();
        let done = self.done.clone();
        // Wake waiters only once the stored response is committed; then
        // release the key's claim, which wakes other instances' waiters.
        tokio::spawn(async move {
            let _ = keys.store.flush().await;
            keys.inflight.lock().expect("inflight lock").remove(&key);
            let _ = done.send(true);
            if let Err(e) = keys.store.release_idempotency(&key).await {
                tracing::warn!(error = %e, "releasing an idempotency claim failed; it expires");
            }
        });
    }
}

impl Idempotency {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            inflight: Mutex::new(HashMap::new()),
        }
    }

    /// Stripe's rule: a key names one request. The stored (or in-flight) request
    /// hash must be this one; a row stored before hashes were kept has none and
    /// is served as before.
    pub async fn begin(self: &Arc<Self>, key: &str, hash: &str) -> IdemStart {
        // Order matters: the in-flight map first, then the store. A key leaves
        // the map only after its answer is committed (`IdemGuard`), so a key not
        // in the map is either new or readable in the store — checking the store
        // first could miss a row committed just before the key left the map.
        loop {
            let waiter = {
                let map = self.inflight.lock().expect("inflight lock");
                match map.get(key) {
                    Some((h, _)) if h != hash => return IdemStart::Reused,
                    Some((_, rx)) => Some(rx.clone()),
                    None => None,
                }
            };
            if let Some(mut rx) = waiter {
                let _ = rx.wait_for(|d| *d).await;
                continue;
            }
            // A read error is not "absent": retried briefly, then the call is
            // refused rather than possibly made twice.
            let mut read = self.store.idempotent(key).await;
            for n in 1..IDEMPOTENCY_READS {
                if read.is_ok() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20 * u64::from(n))).await;
                read = self.store.idempotent(key).await;
            }
            match read {
                Ok(Some(s)) => {
                    return match s.request_hash {
                        Some(h) if h != hash => IdemStart::Reused,
                        Some(_) | None => IdemStart::Stored(s.response),
                    };
                }
                Ok(None) => {}
                Err(e) => return IdemStart::Unknown(e.to_string()),
            }
            let guard = {
                let mut map = self.inflight.lock().expect("inflight lock");
                if map.contains_key(key) {
                    // Another request claimed the key meanwhile: wait for it.
                    continue;
                }
                let (tx, rx) = tokio::sync::watch::channel(false);
                map.insert(key.to_owned(), (hash.to_owned(), rx));
                IdemGuard {
                    keys: self.clone(),
                    key: key.to_owned(),
                    done: tx,
                }
            };
            // Across instances (PostgreSQL): claim the key; a duplicate being
            // answered by another instance waits for its answer. Dropping the
            // guard on the way out lets this instance's own duplicates go on.
            let mut released = self.store.idempotency_waiter(key);
            match self.store.claim_idempotency(key, hash, wall_ms()).await {
                Ok(hale_store::Claim::Mine) => return IdemStart::Fresh(guard),
                Ok(hale_store::Claim::Held { request_hash }) if request_hash != hash => {
                    return IdemStart::Reused;
                }
                Ok(hale_store::Claim::Held { .. }) => {
                    released
                        .released(hale_core::lease::IDEMPOTENCY_RECHECK_EVERY)
                        .await;
                    drop(guard);
                }
                Err(e) => return IdemStart::Unknown(e.to_string()),
            }
        }
    }
}
