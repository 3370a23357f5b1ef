//! `auth:` — the API keys: a unique name, a token read from the environment
//! (each key its own) and a scope (admin or a list of agents); and the host
//! names hale is reached by (`allowed_hosts`, the rule is
//! `hale_core::browser`).

use super::ctx::{Ctx, line_of};
use crate::RawAuth;
use hale_core::config::{ApiKey, AuthConfig, KeyScope};
use std::collections::BTreeMap;

impl Ctx<'_> {
    pub(super) fn auth(&mut self, raw: &RawAuth) -> AuthConfig {
        let mut auth = AuthConfig::default();
        if let Some(hosts) = &raw.allowed_hosts {
            for (i, h) in hosts.value.iter().enumerate() {
                match hale_core::browser::name_problem(&h.value) {
                    Some(problem) => self.at(format!("auth.allowed_hosts[{i}]"), h, problem),
                    None => {
                        let name = hale_core::browser::normalize_name(&h.value);
                        if !auth.allowed_hosts.contains(&name) {
                            auth.allowed_hosts.push(name);
                        }
                    }
                }
            }
        }
        let Some(keys) = &raw.keys else {
            return auth;
        };
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for (i, k) in keys.value.iter().enumerate() {
            let path = format!("auth.keys[{i}]");
            let r = &k.value;
            let kl = line_of(k);
            let name = self.required_str(&path, "name", &r.name, kl);
            if let (Some(n), Some(s)) = (&name, &r.name) {
                match names.get(n) {
                    Some(first) => self.at(
                        format!("{path}.name"),
                        s,
                        format!("duplicate key name `{n}` (also auth.keys[{first}])"),
                    ),
                    None => {
                        names.insert(n.clone(), i);
                    }
                }
            }
            let token = self
                .required(&path, "token_env", &r.token_env, kl)
                .and_then(|t| self.secret(&format!("{path}.token_env"), t));
            if let (Some(t), Some(var)) = (&token, &r.token_env)
                && let Some(j) = auth.keys.iter().position(|k: &ApiKey| k.token == *t)
            {
                self.at(
                    format!("{path}.token_env"),
                    var,
                    format!("gives the same token as auth.keys[{j}]: every key needs its own"),
                );
            }
            let scope = match (&r.scope, &r.agents) {
                (Some(s), None) => match s.value.trim() {
                    "admin" => Some(KeyScope::Admin),
                    other => {
                        self.at(
                            format!("{path}.scope"),
                            s,
                            format!("unknown scope `{other}`: expected admin (or list `agents`)"),
                        );
                        None
                    }
                },
                (None, Some(a)) => {
                    let agents: Vec<String> = a
                        .value
                        .iter()
                        .enumerate()
                        .filter_map(|(j, s)| self.non_empty(&format!("{path}.agents[{j}]"), s))
                        .collect();
                    if a.value.is_empty() {
                        self.at(format!("{path}.agents"), a, "must name at least one agent");
                        None
                    } else {
                        Some(KeyScope::Agents(agents))
                    }
                }
                (Some(s), Some(_)) => {
                    self.at(
                        format!("{path}.scope"),
                        s,
                        "give either `scope: admin` or `agents`, not both",
                    );
                    None
                }
                (None, None) => {
                    self.err(
                        path.clone(),
                        kl,
                        "needs `scope: admin` or a list of `agents`",
                    );
                    None
                }
            };
            if let (Some(name), Some(token), Some(scope)) = (name, token, scope) {
                auth.keys.push(ApiKey { name, token, scope });
            }
        }
        auth
    }
}
