//! hale-store: durable state.
//!
//! (being written)
