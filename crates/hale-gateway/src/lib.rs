//! hale-gateway: the HTTP adapter around hale-core.
//!
//! It owns the OpenAI/Anthropic-compatible proxy, the provider clients, the
//! turn pipeline that asks hale-core what to do at every step and does it, and
//! the admin API. Decisions live in hale-core; this crate carries them out.

pub mod proto;
