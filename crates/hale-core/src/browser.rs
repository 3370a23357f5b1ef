//! What keeps a web page from driving hale (docs/operations.md, "Threat model"): the `Host`
//! a request names, its `Origin`, and the content type of a model call.
//!
//! With no `auth.keys`, hale trusts every client on its host
//! ([`crate::access`]), and a browser on that host is one. Two things would
//! let any page the operator opens use that trust:
//!
//! - **Cross-site requests.** A page may send a `POST` to another origin
//!   without asking first when it looks like a form (`text/plain`,
//!   `application/x-www-form-urlencoded`, `multipart/form-data`, or no
//!   content type at all): hale would pause an agent or spend provider
//!   credit, though the page never reads the answer. Every current browser
//!   names the page's origin in `Origin` on such a request, so a request
//!   whose `Origin` is not hale's own ([`origin_is_own`]) is refused; and a
//!   model call must be JSON ([`is_json`]), as every dialect's SDK and CLI
//!   sends it and as no page can send cross-site without a CORS preflight
//!   (which hale never grants).
//! - **DNS rebinding.** A page at `evil.example:3000` whose name is made to
//!   resolve to 127.0.0.1 is same-origin with hale to the browser, so it
//!   reads every answer — the admin API included — and sends no foreign
//!   `Origin`. Its requests name `Host: evil.example:3000`, so a `Host` that
//!   is not a name hale answers to ([`host_allowed`]) is refused: an IP
//!   address (no name to rebind), `localhost`, or a name the operator listed
//!   in `auth.allowed_hosts`. The port is not compared: the page must use
//!   hale's port anyway, and behind a load balancer the port the client
//!   named is not the one hale listens on.
//!
//! [`decide`] applies the `Host` and `Origin` rules only when no keys are
//! configured ([`applies`]): with keys, the key is the boundary — a page
//! can neither read the operator's key nor send an `Authorization` or
//! `x-api-key` header cross-site without a preflight — and a gateway
//! behind a load balancer or a proxy that rewrites `Host` keeps working
//! with no list of names. The JSON rule holds in both modes: it breaks no
//! client. A request with no `Host` (HTTP/1.0; a browser always sends one)
//! and no `Origin` (SDKs, curl, agents) is not a browser's and passes.

use crate::config::AuthConfig;
use std::net::{IpAddr, Ipv6Addr};

/// The host name every hale answers to besides IP addresses
/// (RFC 6761 §6.3: it always resolves to loopback).
pub const LOCALHOST: &str = "localhost";

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The `Host` is not a name hale answers to (or does not parse).
    Host,
    /// The `Origin` is not hale's own: a page of another site sent it.
    Origin,
}

/// Whether the `Host` and `Origin` rules apply: only without keys (with
/// keys, a key is needed, and no page can send one cross-site).
pub fn applies(auth: &AuthConfig) -> bool {
    auth.keys.is_empty()
}

/// The browser rule: `host` is the request's `Host` (or HTTP/2's
/// `:authority`), `origin` its `Origin`, each as sent (a value that is not
/// UTF-8 is passed lossily and so never matches).
pub fn decide(auth: &AuthConfig, host: Option<&str>, origin: Option<&str>) -> Result<(), Refusal> {
    if !applies(auth) {
        return Ok(());
    }
    if let Some(h) = host
        && !host_allowed(h, &auth.allowed_hosts)
    {
        return Err(Refusal::Host);
    }
    match origin {
        None => Ok(()),
        Some(o) if origin_is_own(o, host, &auth.allowed_hosts) => Ok(()),
        Some(_) => Err(Refusal::Origin),
    }
}

impl Refusal {
    /// The message for the caller; `host` and `origin` are the request's.
    pub fn message(self, host: Option<&str>, origin: Option<&str>) -> String {
        match self {
            Refusal::Host => format!(
                "hale does not answer to Host {}: with no API keys (auth.keys) it serves only requests addressed to localhost, an IP address or a name in auth.allowed_hosts, so that a web page cannot reach it through a name of its own (DNS rebinding); add the name to auth.allowed_hosts or configure auth.keys",
                host.unwrap_or("")
            ),
            Refusal::Origin => format!(
                "a web page of another origin ({}) may not call hale: with no API keys (auth.keys) hale serves its own pages and clients that send no Origin (SDKs, CLIs, curl); call it from your server side or configure auth.keys",
                origin.unwrap_or("")
            ),
        }
    }
}

/// A `Host` value (or an origin's authority) split into its host, without
/// a trailing dot or IPv6 brackets (case kept: compare with
/// `eq_ignore_ascii_case`), and its port. `None` when it is not
/// `host[:port]`. No allocation: it runs on every request without keys.
fn authority(value: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        inside.parse::<Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (inside, port)
    } else {
        match value.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (value, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() || !host.bytes().all(is_host_byte) {
        return None;
    }
    Some((host, port))
}

/// The bytes of a host name or an IP literal (`:` for IPv6).
fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':')
}

/// Whether a host (already split from its port) is an IP address.
fn is_ip(host: &str) -> bool {
    host.parse::<IpAddr>().is_ok()
}

/// Whether `name` is one of `allowed` (normalized, lower case).
fn listed(name: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// Whether hale answers to this `Host`: an IP address, `localhost`, or one
/// of `allowed` (normalized names, [`normalize_name`]); any port.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let Some((name, _port)) = authority(host) else {
        return false;
    };
    is_ip(name) || name.eq_ignore_ascii_case(LOCALHOST) || listed(name, allowed)
}

/// The port a scheme implies when an origin omits it (RFC 6454 §4).
fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

/// Whether `origin` is hale's own: the origin of a page hale served, which
/// is the request's own `host` (same host name and port, the port implied
/// by the origin's scheme when either omits it: behind a TLS load balancer
/// the page is `https://name` and the `Host` is `name`), or a name in
/// `allowed` at any port (for a proxy in front of hale that rewrites
/// `Host`). `null`, a scheme other than http(s), or an origin with a path
/// is never own.
pub fn origin_is_own(origin: &str, host: Option<&str>, allowed: &[String]) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let Some(implied) = default_port(scheme) else {
        return false;
    };
    let Some((o_name, o_port)) = authority(rest) else {
        return false;
    };
    if listed(o_name, allowed) {
        return true;
    }
    let Some((h_name, h_port)) = host.and_then(authority) else {
        return false;
    };
    o_name.eq_ignore_ascii_case(h_name) && o_port.unwrap_or(implied) == h_port.unwrap_or(implied)
}

/// Whether a `Content-Type` is JSON: `application/json`, any parameters
/// (`; charset=utf-8`), the media type matched case-insensitively. What
/// the OpenAI, Anthropic and google-genai SDKs, Codex, Claude Code and
/// Gemini CLI send; a missing content type is not JSON (a page can send a
/// body without one cross-site, with no preflight).
pub fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|ct| {
        let media = ct.split(';').next().unwrap_or("").trim();
        media.eq_ignore_ascii_case("application/json")
    })
}

/// An `auth.allowed_hosts` entry as it is compared: lower case, without a
/// trailing dot.
pub fn normalize_name(name: &str) -> String {
    let name = name.trim();
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// What is wrong with an `auth.allowed_hosts` entry, if anything: it must
/// be a host name — letters, digits, `-` and `_` in dot-separated labels —
/// without a scheme, port, path or wildcard (an IP address is accepted
/// without being listed; one listed is harmless).
pub fn name_problem(name: &str) -> Option<String> {
    let name = normalize_name(name);
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if is_ip(&name) {
        return None;
    }
    if name.contains("://") {
        return Some(format!(
            "`{name}` is a URL: give the host name alone (e.g. hale.example.com)"
        ));
    }
    if name.contains(':') || name.contains('/') {
        return Some(format!(
            "`{name}` has a port or a path: give the host name alone (any port is accepted)"
        ));
    }
    if name.contains('*') {
        return Some(format!(
            "`{name}` is a wildcard: list each name hale is reached by"
        ));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Some(format!(
            "`{name}` is not a host name (letters, digits, `-` and `_` in dot-separated labels)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ApiKey, KeyScope, Secret};

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| normalize_name(n)).collect()
    }

    #[test]
    fn host_table() {
        let allowed = names(&["hale.internal", "Gateway.Example.COM."]);
        let cases: &[(&str, bool)] = &[
            // IP addresses: no name to rebind.
            ("127.0.0.1:3000", true),
            ("127.0.0.1", true),
            ("10.0.0.5:3000", true),
            ("[::1]:3000", true),
            ("[::1]", true),
            ("[::ffff:127.0.0.1]:3000", true),
            // localhost, any case, a trailing dot, any port.
            ("localhost:3000", true),
            ("LOCALHOST", true),
            ("localhost.:3000", true),
            // Configured names, normalized on both sides.
            ("hale.internal:3000", true),
            ("HALE.internal", true),
            ("gateway.example.com", true),
            ("gateway.example.com.:443", true),
            // Any other name: a rebinding page's.
            ("evil.example:3000", false),
            ("evil.example", false),
            ("localhost.evil.example:3000", false),
            ("hale.internal.evil.example", false),
            ("x.localhost:3000", false),
            ("127.0.0.1.nip.io:3000", false),
            // Not a Host at all.
            ("", false),
            (":3000", false),
            ("localhost:", false),
            ("localhost:port", false),
            ("localhost:99999", false),
            ("::1", false),
            ("[::1", false),
            ("[evil.example]:3000", false),
            ("[::1]x", false),
            ("user@localhost:3000", false),
            ("local host", false),
            ("localhost/x", false),
            ("evil\u{fffd}.example", false),
        ];
        for (host, want) in cases {
            assert_eq!(host_allowed(host, &allowed), *want, "Host: {host:?}");
        }
    }

    #[test]
    fn origin_table() {
        let allowed = names(&["hale.example.com"]);
        // (Origin, Host, own?)
        let cases: &[(&str, Option<&str>, bool)] = &[
            // The page hale served: same host and port.
            ("http://127.0.0.1:3000", Some("127.0.0.1:3000"), true),
            ("http://localhost:3000", Some("localhost:3000"), true),
            ("http://[::1]:3000", Some("[::1]:3000"), true),
            ("HTTP://LocalHost:3000", Some("localhost:3000"), true),
            // Ports implied by the scheme (a TLS load balancer in front).
            ("https://gw.corp", Some("gw.corp"), true),
            ("https://gw.corp", Some("gw.corp:443"), true),
            ("http://gw.corp", Some("gw.corp:80"), true),
            ("https://gw.corp", Some("gw.corp:80"), false),
            // A configured name at any port, whatever Host a proxy wrote.
            ("https://hale.example.com", Some("127.0.0.1:3000"), true),
            ("http://hale.example.com:8080", None, true),
            // Another page: another host, another port of this host.
            ("http://evil.example", Some("127.0.0.1:3000"), false),
            ("http://127.0.0.1:8080", Some("127.0.0.1:3000"), false),
            ("http://localhost:3000", Some("127.0.0.1:3000"), false),
            ("http://127.0.0.1", Some("127.0.0.1:3000"), false),
            ("http://evil.example:3000", Some("evil.example:3000"), true),
            // No Host to compare with.
            ("http://127.0.0.1:3000", None, false),
            // Not an http(s) origin of a page.
            ("null", Some("127.0.0.1:3000"), false),
            ("", Some("127.0.0.1:3000"), false),
            ("chrome-extension://abc", Some("127.0.0.1:3000"), false),
            ("file://", Some("127.0.0.1:3000"), false),
            ("http://127.0.0.1:3000/", Some("127.0.0.1:3000"), false),
            ("127.0.0.1:3000", Some("127.0.0.1:3000"), false),
        ];
        for (origin, host, want) in cases {
            assert_eq!(
                origin_is_own(origin, *host, &allowed),
                *want,
                "Origin {origin:?}, Host {host:?}"
            );
        }
    }

    #[test]
    fn the_rule_without_keys_and_with_keys() {
        let none = AuthConfig {
            allowed_hosts: names(&["hale.internal"]),
            ..AuthConfig::default()
        };
        let insecure = AuthConfig {
            insecure_no_auth: true,
            ..none.clone()
        };
        let keyed = AuthConfig {
            keys: vec![ApiKey {
                name: "admin".into(),
                token: Secret::new("t"),
                scope: KeyScope::Admin,
            }],
            ..AuthConfig::default()
        };
        let own = Some("http://127.0.0.1:3000");
        let evil = Some("http://evil.example");
        // (config, Host, Origin, expected)
        type Case<'a> = (
            &'a AuthConfig,
            Option<&'a str>,
            Option<&'a str>,
            Result<(), Refusal>,
        );
        let cases: &[Case] = &[
            // No keys: an SDK or curl (no Origin), the dashboard (own Origin).
            (&none, Some("127.0.0.1:3000"), None, Ok(())),
            (&none, Some("127.0.0.1:3000"), own, Ok(())),
            (&none, Some("hale.internal:3000"), None, Ok(())),
            (&none, None, None, Ok(())),
            // A cross-site page; a rebinding page (its Host is refused first).
            (&none, Some("127.0.0.1:3000"), evil, Err(Refusal::Origin)),
            (&none, None, own, Err(Refusal::Origin)),
            (&none, Some("evil.example:3000"), None, Err(Refusal::Host)),
            (
                &none,
                Some("evil.example:3000"),
                Some("http://evil.example:3000"),
                Err(Refusal::Host),
            ),
            // --insecure-no-auth: the same rules.
            (
                &insecure,
                Some("evil.example:3000"),
                None,
                Err(Refusal::Host),
            ),
            (&insecure, Some("10.1.2.3:3000"), evil, Err(Refusal::Origin)),
            (&insecure, Some("10.1.2.3:3000"), None, Ok(())),
            // Keys: the key decides.
            (&keyed, Some("evil.example:3000"), evil, Ok(())),
            (&keyed, Some("gateway.example.com"), None, Ok(())),
        ];
        for (i, (auth, host, origin, want)) in cases.iter().enumerate() {
            assert_eq!(
                decide(auth, *host, *origin),
                *want,
                "case {i}: Host {host:?}, Origin {origin:?}"
            );
        }
    }

    #[test]
    fn json_content_types() {
        let cases: &[(Option<&str>, bool)] = &[
            (Some("application/json"), true),
            (Some("application/json; charset=utf-8"), true),
            (Some("application/json;charset=UTF-8"), true),
            (Some("Application/JSON"), true),
            (Some(" application/json "), true),
            // What a page can send cross-site without a preflight.
            (None, false),
            (Some(""), false),
            (Some("text/plain"), false),
            (Some("text/plain; charset=utf-8"), false),
            (Some("application/x-www-form-urlencoded"), false),
            (Some("multipart/form-data; boundary=x"), false),
            // Neither JSON nor what the SDKs send.
            (Some("text/json"), false),
            (Some("application/jsonx"), false),
            (Some("application/json-seq"), false),
            (Some("application/vnd.api+json"), false),
        ];
        for (ct, want) in cases {
            assert_eq!(is_json(*ct), *want, "{ct:?}");
        }
    }

    #[test]
    fn allowed_host_names() {
        for ok in [
            "hale.internal",
            "Gateway.Example.COM.",
            "hale",
            "my_host.corp",
            "10.0.0.5",
            "::1",
            "localhost",
        ] {
            assert_eq!(name_problem(ok), None, "{ok}");
        }
        for (bad, says) in [
            ("", "empty"),
            ("  ", "empty"),
            ("https://hale.example.com", "URL"),
            ("hale.example.com:443", "port"),
            ("hale.example.com/x", "path"),
            ("*.example.com", "wildcard"),
            ("hale..example", "not a host name"),
            (".example", "not a host name"),
            ("hale example", "not a host name"),
            ("hålé.example", "not a host name"),
        ] {
            let msg = name_problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(msg.contains(says), "{bad:?}: {msg}");
        }
        assert_eq!(normalize_name(" Hale.Internal. "), "hale.internal");
    }
}
