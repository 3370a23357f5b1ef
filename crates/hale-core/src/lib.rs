//! hale-core: every decision hale makes, pure.
//!
//! This crate owns the rules of the turn pipeline — classification, retry,
//! breakers, cooldowns, target selection, guard, budgets, health, recovery,
//! compaction planning — and the typed events and validated configuration
//! they speak. It has no tokio runtime, no sockets and no files: time comes in
//! as an `Instant` (or a [`clock::Clock`]) and randomness as an `Rng`, so every
//! rule is tested under a fake clock. Adapters (HTTP, storage, sinks,
//! processes, CLI) call into this crate; it never calls them.

pub mod access;
pub mod alert;
pub mod azure;
pub mod balance;
pub mod bedrock;
pub mod breaker;
pub mod browser;
pub mod budget;
pub mod class;
pub mod classify;
pub mod clock;
pub mod compaction;
pub mod config;
pub mod counts;
pub mod crawl;
pub mod delivery;
pub mod deployment;
pub mod event;
pub mod gemini;
pub mod guard;
pub mod health;
pub mod hedge;
pub mod history;
pub mod ids;
pub mod lease;
pub mod memory;
pub mod models;
pub mod pages;
pub mod pause;
pub mod recovery;
pub mod redact;
pub mod responses;
pub mod resume;
pub mod retry;
pub mod segment;
pub mod select;
pub mod severity;
pub mod slow;
pub mod tools;
pub mod vertex;
