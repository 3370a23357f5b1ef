//! The server's memory: per-key request counters (for `times` and scripts),
//! `down` timers, the `down-until-reset` switch, statistics and the last
//! request bodies.
//!
//! One `std::sync::Mutex` guards it; it is held only for a few map updates
//! and never across an `.await`, so the `ok` path stays cheap. Bodies are kept
//! as `Bytes`, which are reference-counted: keeping them copies nothing.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::script::Script;

/// Response ids remembered for `previous_response_id` (the oldest are forgotten).
pub const MAX_STORED_RESPONSES: usize = 65_536;

/// Request bodies kept for `/chaos/requests` and [`crate::ChaosHandle::last_requests`].
pub const MAX_KEPT_BODIES: usize = 32;

/// Counters the server exposes on `GET /chaos/stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Chat requests received (every dialect) since start or the last reset.
    pub requests_total: u64,
    /// Requests per requested model name.
    pub requests_per_model: BTreeMap<String, u64>,
    /// Requests per fault actually applied (`ok` once a fault's `times` ran out).
    pub requests_per_fault: BTreeMap<String, u64>,
    /// How many request bodies are kept (at most [`MAX_KEPT_BODIES`]).
    pub last_request_bodies: usize,
    /// Input tokens of the requests answered (each answer's `usage`: body
    /// bytes / 4), so a benchmark can count what a run cost at the providers.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens sent: each answer's, or the part of it sent before a
    /// cut (the pieces sent, in proportion).
    #[serde(default)]
    pub output_tokens: u64,
}

#[derive(Debug)]
struct KeyState {
    count: u64,
    first_seen: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    keys: HashMap<String, KeyState>,
    /// Faults set at run time by `POST /chaos/override`, per model.
    overrides: HashMap<String, String>,
    stats: Stats,
    bodies: VecDeque<Bytes>,
}

/// What the server remembers, shared by every connection.
#[derive(Debug)]
pub struct Shared {
    pub script: Option<Script>,
    inner: Mutex<Inner>,
    /// `down-until-reset` answers ok once this is set (by a reset).
    revived: AtomicBool,
    seq: AtomicU64,
    /// Responses API ids this server answered with `store` not false, oldest
    /// first; a reset keeps them (they are the provider's data, not counters).
    stored: Mutex<(HashSet<String>, VecDeque<String>)>,
    /// Eight hex digits unique to this server, in the Responses API's ids
    /// (`resp_chaos_<tag>_<n>`), so two chaos deployments behind one hale
    /// never issue the same response or call id.
    pub tag: String,
    /// The key Azure requests must carry (`api-key` or a bearer); `None`:
    /// any non-empty one ([`crate::ChaosConfig::azure_api_key`]).
    pub azure_key: Option<String>,
    /// The service-account key the token endpoint checks assertions
    /// against ([`crate::ChaosConfig::vertex_key`]).
    pub vertex_key: Option<crate::vertex::Key>,
    /// Vertex tokens minted by `POST /token`, the grants, the refusals.
    pub vertex_tokens: Mutex<crate::vertex::Tokens>,
    /// The Bedrock API key a bearer must equal; `None`: any non-empty one
    /// ([`crate::ChaosConfig::bedrock_api_key`]).
    pub bedrock_key: Option<String>,
}

/// What the counters say about one request.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// 1-based position of this request among those of its key.
    pub n: u64,
    /// When the first request of its key arrived.
    pub first_seen: Instant,
}

impl Shared {
    pub fn new(script: Option<Script>) -> Self {
        Shared {
            script,
            inner: Mutex::new(Inner::default()),
            revived: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            stored: Mutex::new((HashSet::new(), VecDeque::new())),
            tag: server_tag(),
            azure_key: None,
            vertex_key: None,
            vertex_tokens: Mutex::new(Default::default()),
            bedrock_key: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain counters behind; they stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh sequence number for ids.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts one chat request for `model` under `key` and keeps its body.
    pub fn record(&self, model: &str, key: &str, body: &Bytes, now: Instant) -> Seen {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.stats.requests_total += 1;
        match inner.stats.requests_per_model.get_mut(model) {
            Some(n) => *n += 1,
            None => {
                inner.stats.requests_per_model.insert(model.to_owned(), 1);
            }
        }
        if inner.bodies.len() >= MAX_KEPT_BODIES {
            inner.bodies.pop_front();
        }
        inner.bodies.push_back(body.clone());
        inner.stats.last_request_bodies = inner.bodies.len();
        match inner.keys.get_mut(key) {
            Some(k) => {
                k.count += 1;
                Seen {
                    n: k.count,
                    first_seen: k.first_seen,
                }
            }
            None => {
                inner.keys.insert(
                    key.to_owned(),
                    KeyState {
                        count: 1,
                        first_seen: now,
                    },
                );
                Seen {
                    n: 1,
                    first_seen: now,
                }
            }
        }
    }

    /// Counts the fault applied to a request.
    pub fn record_fault(&self, name: &'static str) {
        let mut g = self.lock();
        match g.stats.requests_per_fault.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                g.stats.requests_per_fault.insert(name.to_owned(), 1);
            }
        }
    }

    /// Counts the tokens of one answer ([`Stats::input_tokens`],
    /// [`Stats::output_tokens`]).
    pub fn record_tokens(&self, input: u64, output: u64) {
        let mut g = self.lock();
        g.stats.input_tokens += input;
        g.stats.output_tokens += output;
    }

    /// The fault spec set for `model` by `POST /chaos/override`, if any.
    pub fn override_for(&self, model: &str) -> Option<String> {
        let g = self.lock();
        if g.overrides.is_empty() {
            return None;
        }
        g.overrides.get(model).cloned()
    }

    /// Sets (or, with `None`, clears) the fault of `model`. The model's
    /// request count starts again, so the new fault's `times` (and `down`,
    /// `flaky`) count from now, not from the server's start.
    pub fn set_override(&self, model: &str, spec: Option<String>) {
        let mut g = self.lock();
        g.keys.remove(model);
        match spec {
            Some(s) => g.overrides.insert(model.to_owned(), s),
            None => g.overrides.remove(model),
        };
    }

    pub fn revived(&self) -> bool {
        self.revived.load(Ordering::Relaxed)
    }

    /// Puts `down-until-reset` models down again.
    pub fn bring_down(&self) {
        self.revived.store(false, Ordering::Relaxed);
    }

    /// Clears counters, timers, statistics and kept bodies, and brings
    /// `down-until-reset` models up.
    pub fn reset(&self) {
        let mut g = self.lock();
        *g = Inner::default();
        self.revived.store(true, Ordering::Relaxed);
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats.clone()
    }

    pub fn requests_for(&self, model: &str) -> u64 {
        self.lock()
            .stats
            .requests_per_model
            .get(model)
            .copied()
            .unwrap_or(0)
    }

    /// Remembers a stored response's id.
    pub fn store_response(&self, id: &str) {
        let mut g = self.stored.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *g;
        if order.len() >= MAX_STORED_RESPONSES
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        if set.insert(id.to_owned()) {
            order.push_back(id.to_owned());
        }
    }

    /// Whether this server answered (and stored) the response `id`.
    pub fn holds_response(&self, id: &str) -> bool {
        self.stored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .contains(id)
    }

    pub fn bodies(&self) -> Vec<Bytes> {
        self.lock().bodies.iter().cloned().collect()
    }
}

/// A tag unlikely to repeat: this process's servers count up, and the clock
/// separates processes.
fn server_tag() -> String {
    static SERVERS: AtomicU64 = AtomicU64::new(0);
    let n = SERVERS.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = (nanos ^ u64::from(std::process::id()).rotate_left(32))
        .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    format!("{:08x}", (mixed ^ (mixed >> 32)) as u32)
}

/// Kept request bodies as JSON; a body that is not JSON becomes a JSON string.
pub(crate) fn parse_bodies(bodies: &[Bytes]) -> Vec<serde_json::Value> {
    bodies
        .iter()
        .map(|b| {
            serde_json::from_slice(b).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
            })
        })
        .collect()
}
