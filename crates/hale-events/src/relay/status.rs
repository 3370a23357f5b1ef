//! What each relay publishes about its sink: the shared [`Counters`] a relay
//! updates as it works, and the [`RelayStats`] snapshot built from them for
//! `/ready`, `/metrics` and `hale doctor`.

use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hale_core::delivery::{SinkKind, SinkState, SinkStatus};
use hale_store::StoredEvent;
use serde::Serialize;

/// The status of every relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelayStats {
    pub sinks: Vec<SinkStatus>,
    /// Undelivered events shed at the outbox cap since start.
    pub shed: u64,
}

/// What one relay shares with [`super::Relays::stats`].
#[derive(Debug)]
pub(super) struct Counters {
    /// The store's name of the sink (cursor, dead letters); may hold a URL.
    pub(super) name: String,
    /// The name shown publicly.
    pub(super) public: String,
    kind: SinkKind,
    pub(super) delivered: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    /// Dead letters of this sink in the store now.
    pub(super) dead_letters: AtomicU64,
    pub(super) cursor: AtomicI64,
    /// A [`SinkState`] as `state_code`.
    state: AtomicU8,
    /// `time_ms` of the event being delivered; 0 = none.
    head_time_ms: AtomicU64,
    last_error: Mutex<Option<String>>,
}

fn state_code(s: SinkState) -> u8 {
    match s {
        SinkState::Up => 0,
        SinkState::Down => 1,
        SinkState::HalfOpen => 2,
    }
}

fn state_of(code: u8) -> SinkState {
    match code {
        1 => SinkState::Down,
        2 => SinkState::HalfOpen,
        // 0 is the only other value ever stored.
        _up => SinkState::Up,
    }
}

impl Counters {
    pub(super) fn new(name: String, public: String, kind: SinkKind) -> Arc<Self> {
        Arc::new(Counters {
            name,
            public,
            kind,
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            cursor: AtomicI64::new(0),
            state: AtomicU8::new(state_code(SinkState::Up)),
            head_time_ms: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    fn state(&self) -> SinkState {
        state_of(self.state.load(Ordering::Relaxed))
    }

    /// Records the state; logs the transitions an operator cares about.
    pub(super) fn set_state(&self, new: SinkState) {
        let old = state_of(self.state.swap(state_code(new), Ordering::Relaxed));
        match (old, new) {
            (SinkState::Up, SinkState::Down) => tracing::warn!(
                sink = %self.public,
                error = self.last_error().unwrap_or_default(),
                "sink down: holding its events (nothing is dead-lettered) until it answers"
            ),
            (SinkState::Down | SinkState::HalfOpen, SinkState::Up) => tracing::info!(
                sink = %self.public,
                "sink back: draining its backlog in order"
            ),
            (SinkState::Up, SinkState::Up | SinkState::HalfOpen)
            | (SinkState::Down, SinkState::Down | SinkState::HalfOpen)
            | (SinkState::HalfOpen, SinkState::Down | SinkState::HalfOpen) => {}
        }
    }

    fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_error(&self, e: Option<&str>) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = e.map(str::to_string);
    }

    /// The relay is working on `se` (the oldest event it has not delivered).
    pub(super) fn note_head(&self, se: &StoredEvent) {
        self.head_time_ms
            .store(se.event.time_ms.max(1), Ordering::Relaxed);
    }

    pub(super) fn clear_head(&self) {
        self.head_time_ms.store(0, Ordering::Relaxed);
    }

    pub(super) fn status(&self, latest_seq: i64, now_ms: u64) -> SinkStatus {
        let cursor = self.cursor.load(Ordering::Relaxed);
        let backlog = u64::try_from(latest_seq.saturating_sub(cursor)).unwrap_or(0);
        let head = self.head_time_ms.load(Ordering::Relaxed);
        SinkStatus {
            name: self.public.clone(),
            kind: self.kind,
            state: self.state(),
            backlog,
            oldest_undelivered_age_ms: (backlog > 0 && head > 0)
                .then(|| now_ms.saturating_sub(head)),
            dead_letters: self.dead_letters.load(Ordering::Relaxed),
            last_error: self.last_error(),
            delivered: self.delivered.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            cursor,
        }
    }
}
