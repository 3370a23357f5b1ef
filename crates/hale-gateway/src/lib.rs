//! hale-gateway: the HTTP adapter around hale-core.
//!
//! (modules are being wired in)

pub mod proto;
