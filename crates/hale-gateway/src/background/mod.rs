//! The loops that run beside the requests, each given the components it
//! needs (never the whole gateway): the memory sweep ([`memory`]), the
//! cross-instance sync of agents' control state and counts ([`sync`]), and
//! the health history's flush ([`history`]). The health monitor is
//! `crate::health::monitor`.

pub mod history;
pub mod memory;
pub mod sync;
