//! `routes:` — each model name's ordered `provider/model` targets, naming
//! defined providers and models they list.

use super::ctx::Ctx;
use crate::Map;
use hale_core::config::{ProviderConfig, Target};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

impl Ctx<'_> {
    pub(super) fn routes(
        &mut self,
        raw: &Map<Vec<Spanned<String>>>,
        providers: &[ProviderConfig],
    ) -> BTreeMap<String, Vec<Target>> {
        let mut routes = BTreeMap::new();
        for (name, targets) in raw {
            let path = format!("routes.{name}");
            if targets.value.is_empty() {
                self.at(&path, targets, "a route needs at least one target");
                continue;
            }
            let mut out = Vec::new();
            for (i, t) in targets.value.iter().enumerate() {
                let tpath = format!("{path}[{i}]");
                let text = t.value.trim();
                let Some((p, m)) = text
                    .split_once('/')
                    .filter(|(p, m)| !p.is_empty() && !m.is_empty())
                else {
                    self.at(
                        &tpath,
                        t,
                        format!("`{text}` is not of the form provider/model"),
                    );
                    continue;
                };
                let pname = Spanned::new(p.to_owned(), t.referenced, t.defined);
                let Some(provider) = self.provider_ref(&tpath, &pname) else {
                    continue;
                };
                if let Some(pc) = providers.iter().find(|pc| pc.name == provider)
                    && !pc.offers(m)
                {
                    self.at(
                        &tpath,
                        t,
                        format!("provider `{provider}` does not list model `{m}` in its models"),
                    );
                    continue;
                }
                out.push(Target {
                    provider,
                    model: m.to_owned(),
                });
            }
            routes.insert(name.clone(), out);
        }
        routes
    }
}
