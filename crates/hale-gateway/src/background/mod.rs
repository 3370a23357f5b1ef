//! The loops that run beside the requests and compose several components,
//! each given the components it needs (never the whole gateway): the memory
//! sweep ([`memory`]) and the cross-instance sync of agents' control state
//! and counts ([`sync`]). A loop that only serves one component lives with
//! it: the health monitor (`crate::health::monitor`) and the health
//! history's flush (`crate::history::run`).

pub mod memory;
pub mod sync;
