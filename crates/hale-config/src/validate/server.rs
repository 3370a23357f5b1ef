//! `listen:` and `limits:` — the address hale serves on and the bounds on
//! what a caller may send.

use super::ctx::Ctx;
use crate::RawLimits;
use hale_core::config::{DEFAULT_LISTEN, LimitsConfig};
use serde_saphyr::Spanned;
use std::net::SocketAddr;

impl Ctx<'_> {
    pub(super) fn listen(&mut self, l: &Spanned<String>, listen: &mut SocketAddr) {
        match l.value.trim().parse::<SocketAddr>() {
            Ok(addr) => *listen = addr,
            Err(_) => self.at(
                "listen",
                l,
                format!(
                    "`{}` is not a socket address (ip:port, e.g. {DEFAULT_LISTEN})",
                    l.value
                ),
            ),
        }
    }

    pub(super) fn limits(&mut self, r: &RawLimits, limits: &mut LimitsConfig) {
        if let Some(n) = &r.max_request_bytes {
            if n.value == 0 {
                self.at("limits.max_request_bytes", n, "must be at least 1");
            } else {
                limits.max_request_bytes = n.value;
            }
        }
    }
}
