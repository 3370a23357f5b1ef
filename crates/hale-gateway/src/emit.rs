//! What components receive instead of the whole gateway: an [`Emitter`]
//! (the store, the metrics and the redactor) to record events and writes,
//! and the wall clock ([`wall_ms`]).
//!
//! A component is built from the config, an `Emitter` and what it owns, so
//! it can report what it did without reaching into any other component.

use crate::metrics::Metrics;
use crate::secrets::Redactor;
use hale_core::clock::Clock;
use hale_core::event::{Event, EventKind};
use hale_store::{Store, Write};
use std::sync::Arc;

/// Milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    hale_core::clock::SystemClock.wall_ms()
}

/// The store and the metrics, as the components use them: new events,
/// counted and group-committed, their payloads masked of every secret hale
/// holds ([`crate::secrets`]). Cheap to clone.
#[derive(Clone)]
pub struct Emitter {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// The gateway's one redactor.
    pub secrets: Arc<Redactor>,
}

impl Emitter {
    pub fn new(store: Store, metrics: Arc<Metrics>, secrets: Arc<Redactor>) -> Self {
        Self {
            store,
            metrics,
            secrets,
        }
    }

    /// A new event at the current wall time.
    pub fn event(&self, kind: EventKind) -> Event {
        Event::new(kind, wall_ms(), &mut rand::rng())
    }

    /// Records an event that is not tied to a state change (group-committed,
    /// no wait), its payload masked.
    pub fn emit(&self, mut ev: Event) {
        self.secrets.mask_json(&mut ev.payload);
        self.metrics.event(ev.kind);
        self.store.submit(vec![Write::Event(ev)]);
    }
}
