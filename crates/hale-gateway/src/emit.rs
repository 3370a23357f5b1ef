//! What components receive instead of the whole gateway: an [`Emitter`]
//! (the store and the metrics) to record events and writes, and the wall
//! clock ([`wall_ms`]).
//!
//! A component is built from the config, an `Emitter` and what it owns, so
//! it can report what it did without reaching into any other component.

use crate::metrics::Metrics;
use hale_core::clock::Clock;
use hale_core::event::{Event, EventKind};
use hale_store::{Store, Write};
use std::sync::Arc;

/// Milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    hale_core::clock::SystemClock.wall_ms()
}

/// The store and the metrics, as the components use them: new events,
/// counted and group-committed. Cheap to clone.
#[derive(Clone)]
pub struct Emitter {
    pub store: Store,
    pub metrics: Arc<Metrics>,
}

impl Emitter {
    pub fn new(store: Store, metrics: Arc<Metrics>) -> Self {
        Self { store, metrics }
    }

    /// A new event at the current wall time.
    pub fn event(&self, kind: EventKind) -> Event {
        Event::new(kind, wall_ms(), &mut rand::rng())
    }

    /// Records an event that is not tied to a state change (group-committed, no wait).
    pub fn emit(&self, ev: Event) {
        self.metrics.event(ev.kind);
        self.store.submit(vec![Write::Event(ev)]);
    }
}
