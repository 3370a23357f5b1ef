//! Who may call hale (docs/operations.md, "Who may call"): the access rule,
//! as one pure function.
//!
//! With `auth.keys` configured, a key decides: an admin key may do
//! everything, an agent key may make model calls as its agents. With no keys,
//! hale trusts the clients on its own host, and only those: a loopback peer
//! that did not come through a proxy. A reverse proxy on the same host
//! (nginx, Caddy, a sidecar) connects from loopback on behalf of every
//! internet client, so a request carrying a forwarding header (`Forwarded`,
//! `X-Forwarded-For`, `X-Real-IP`) is treated as remote and refused with a
//! message that says to configure keys. `hale serve --insecure-no-auth`
//! ([`AuthConfig::insecure_no_auth`]) is the one way to serve everyone
//! without keys, and [`exposure_refusal`] is the rule that makes a
//! non-loopback `listen` address without keys refuse to start without it.
//!
//! The bearer scheme is matched case-insensitively (RFC 9110 §11.1), and
//! tokens are compared in constant time.

use crate::config::{ApiKey, AuthConfig};
use std::net::{IpAddr, SocketAddr};

/// Request headers that say a proxy forwarded the request (lower case).
pub const FORWARDING_HEADERS: &[&str] = &["forwarded", "x-forwarded-for", "x-real-ip"];

/// What the access rule knows about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The TCP peer is on this host.
    pub peer_loopback: bool,
    /// The request carries one of [`FORWARDING_HEADERS`].
    pub forwarded: bool,
    /// The key presented (bearer token or `x-api-key`), if any.
    pub token: Option<&'a str>,
    /// The endpoint needs the admin scope.
    pub admin: bool,
}

/// Why a request may go on.
#[derive(Debug, Clone, Copy)]
pub enum Grant<'k> {
    /// No keys are configured and the caller is trusted (a direct loopback
    /// client, or anyone under `--insecure-no-auth`): everything is allowed.
    Trusted,
    /// The caller presented this key, and its scope allows the endpoint.
    Key(&'k ApiKey),
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No keys configured and the peer is not on this host.
    Remote,
    /// No keys configured and the request came through a proxy.
    Forwarded,
    /// Keys configured and none presented.
    MissingKey,
    /// Keys configured and the one presented is not among them.
    UnknownKey,
    /// An agent-scoped key on an admin endpoint.
    NotAdmin,
}

impl Refusal {
    /// Whether the caller failed to authenticate (401) rather than lacking
    /// permission (403).
    pub fn unauthenticated(self) -> bool {
        match self {
            Refusal::MissingKey | Refusal::UnknownKey => true,
            Refusal::Remote | Refusal::Forwarded | Refusal::NotAdmin => false,
        }
    }

    /// The message for the caller.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Remote => {
                "no API keys are configured (auth.keys), so only clients on this host are served; configure auth.keys to serve other clients"
            }
            Refusal::Forwarded => {
                "no API keys are configured (auth.keys) and this request came through a proxy (it carries Forwarded, X-Forwarded-For or X-Real-IP), so it is treated as remote; configure auth.keys to serve clients behind a proxy"
            }
            Refusal::MissingKey | Refusal::UnknownKey => "missing or unknown API key",
            Refusal::NotAdmin => "this endpoint needs an admin key",
        }
    }
}

/// The access rule: who may call what.
pub fn decide<'k>(auth: &'k AuthConfig, req: &Request<'_>) -> Result<Grant<'k>, Refusal> {
    if auth.keys.is_empty() {
        return if auth.insecure_no_auth {
            Ok(Grant::Trusted)
        } else if !req.peer_loopback {
            Err(Refusal::Remote)
        } else if req.forwarded {
            Err(Refusal::Forwarded)
        } else {
            Ok(Grant::Trusted)
        };
    }
    let token = req.token.ok_or(Refusal::MissingKey)?;
    let key = auth
        .keys
        .iter()
        .find(|k| constant_time_eq(k.token.expose().as_bytes(), token.as_bytes()))
        .ok_or(Refusal::UnknownKey)?;
    match &key.scope {
        crate::config::KeyScope::Admin => Ok(Grant::Key(key)),
        crate::config::KeyScope::Agents(_) if req.admin => Err(Refusal::NotAdmin),
        crate::config::KeyScope::Agents(_) => Ok(Grant::Key(key)),
    }
}

/// The key a request presents, from the places each client dialect puts
/// it, first found wins: `Authorization: Bearer` (OpenAI), `x-api-key`
/// (Anthropic), `x-goog-api-key` and the `key=` query parameter (Google's
/// API). Blank values are no key.
pub fn presented_key<'a>(
    bearer: Option<&'a str>,
    x_api_key: Option<&'a str>,
    x_goog_api_key: Option<&'a str>,
    query_key: Option<&'a str>,
) -> Option<&'a str> {
    [bearer, x_api_key, x_goog_api_key, query_key]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|k| !k.is_empty())
}

/// The token of an `Authorization: Bearer …` value; the scheme is
/// case-insensitive, the token is trimmed and must not be empty.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, rest) = authorization.trim().split_once(char::is_whitespace)?;
    let token = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether an address is this host (an IPv4-mapped IPv6 loopback counts).
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Why `hale serve` must not start on `listen`, if it must not: a
/// non-loopback address with no keys, unless `insecure_no_auth` is set.
pub fn exposure_refusal(auth: &AuthConfig, listen: SocketAddr) -> Option<String> {
    (auth.keys.is_empty() && !auth.insecure_no_auth && !is_loopback(listen.ip())).then(|| {
        format!(
            "refusing to listen on {listen} with no API keys: configure auth.keys, listen on a loopback address (e.g. 127.0.0.1:{}), or pass --insecure-no-auth to serve every client without authentication",
            listen.port()
        )
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{KeyScope, Secret};

    fn key(name: &str, token: &str, scope: KeyScope) -> ApiKey {
        ApiKey {
            name: name.into(),
            token: Secret::new(token),
            scope,
        }
    }

    fn keyed() -> AuthConfig {
        AuthConfig {
            keys: vec![
                key("admin", "adm-token", KeyScope::Admin),
                key("agent", "agt-token", KeyScope::Agents(vec!["a1".into()])),
            ],
            ..AuthConfig::default()
        }
    }

    /// What a case expects: trusted, granted with the named key, or refused.
    #[derive(Debug, PartialEq)]
    enum Want {
        Trusted,
        Key(&'static str),
        No(Refusal),
    }

    #[test]
    fn access_rule_table() {
        let none = AuthConfig::default();
        let insecure = AuthConfig {
            insecure_no_auth: true,
            ..AuthConfig::default()
        };
        let keys = keyed();
        /// (config, peer loopback, forwarded, token, admin endpoint, expected)
        type Case<'a> = (&'a AuthConfig, bool, bool, Option<&'a str>, bool, Want);
        let cases: &[Case] = &[
            // No keys: direct loopback clients only.
            (&none, true, false, None, true, Want::Trusted),
            (&none, true, false, Some("anything"), false, Want::Trusted),
            (&none, false, false, None, false, Want::No(Refusal::Remote)),
            (&none, false, true, None, true, Want::No(Refusal::Remote)),
            (&none, true, true, None, false, Want::No(Refusal::Forwarded)),
            (&none, true, true, None, true, Want::No(Refusal::Forwarded)),
            // No keys, --insecure-no-auth: everyone.
            (&insecure, false, false, None, true, Want::Trusted),
            (&insecure, true, true, None, true, Want::Trusted),
            // Keys: the key decides, wherever the caller is.
            (
                &keys,
                true,
                false,
                None,
                false,
                Want::No(Refusal::MissingKey),
            ),
            (
                &keys,
                false,
                true,
                None,
                true,
                Want::No(Refusal::MissingKey),
            ),
            (
                &keys,
                true,
                false,
                Some("nope"),
                false,
                Want::No(Refusal::UnknownKey),
            ),
            (
                &keys,
                true,
                false,
                Some("adm-toke"),
                false,
                Want::No(Refusal::UnknownKey),
            ),
            (
                &keys,
                false,
                true,
                Some("adm-token"),
                true,
                Want::Key("admin"),
            ),
            (
                &keys,
                false,
                false,
                Some("agt-token"),
                false,
                Want::Key("agent"),
            ),
            (
                &keys,
                true,
                false,
                Some("agt-token"),
                true,
                Want::No(Refusal::NotAdmin),
            ),
        ];
        for (i, (auth, peer_loopback, forwarded, token, admin, want)) in cases.iter().enumerate() {
            let req = Request {
                peer_loopback: *peer_loopback,
                forwarded: *forwarded,
                token: *token,
                admin: *admin,
            };
            let got = match decide(auth, &req) {
                Ok(Grant::Trusted) => Want::Trusted,
                Ok(Grant::Key(k)) if k.name == "admin" => Want::Key("admin"),
                Ok(Grant::Key(_)) => Want::Key("agent"),
                Err(r) => Want::No(r),
            };
            assert_eq!(&got, want, "case {i}: {req:?}");
        }
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Bearer tok", Some("tok")),
            ("bearer tok", Some("tok")),
            ("BEARER tok", Some("tok")),
            ("bEaReR   tok  ", Some("tok")),
            ("Bearer\ttok", Some("tok")),
            ("Bearer", None),
            ("Bearer   ", None),
            ("Basic dXNlcjpwdw==", None),
            ("Bearertok", None),
            ("tok", None),
        ];
        for (value, want) in cases {
            assert_eq!(bearer_token(value), *want, "{value:?}");
        }
    }

    #[test]
    fn non_loopback_listen_without_keys_refuses_unless_insecure() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let none = AuthConfig::default();
        let insecure = AuthConfig {
            insecure_no_auth: true,
            ..AuthConfig::default()
        };
        assert_eq!(exposure_refusal(&none, addr("127.0.0.1:3000")), None);
        assert_eq!(exposure_refusal(&none, addr("[::1]:3000")), None);
        assert_eq!(
            exposure_refusal(&none, addr("[::ffff:127.0.0.1]:3000")),
            None
        );
        let msg = exposure_refusal(&none, addr("0.0.0.0:3000")).expect("refused");
        assert!(
            msg.contains("auth.keys") && msg.contains("--insecure-no-auth"),
            "{msg}"
        );
        assert!(exposure_refusal(&none, addr("[::]:3000")).is_some());
        assert!(exposure_refusal(&none, addr("10.0.0.5:3000")).is_some());
        assert_eq!(exposure_refusal(&insecure, addr("0.0.0.0:3000")), None);
        assert_eq!(exposure_refusal(&keyed(), addr("0.0.0.0:3000")), None);
    }

    #[test]
    fn ipv4_mapped_loopback_is_loopback() {
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.0.0.2".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn the_key_comes_from_the_first_place_that_holds_one() {
        for (places, want) in [
            ([Some("b"), Some("x"), Some("g"), Some("q")], Some("b")),
            ([None, Some("x"), Some("g"), Some("q")], Some("x")),
            ([None, None, Some("g"), Some("q")], Some("g")),
            ([None, None, None, Some("q")], Some("q")),
            ([None, Some("  "), Some(" g "), None], Some("g")),
            ([None, None, None, None], None),
            ([None, None, Some(""), Some("")], None),
        ] {
            assert_eq!(
                presented_key(places[0], places[1], places[2], places[3]),
                want,
                "{places:?}"
            );
        }
    }
}
