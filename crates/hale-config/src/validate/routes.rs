//! `routes:` — each model name's ordered targets, `provider/model` naming
//! defined providers and models they list; an entry that is a list is a
//! rank of targets load-balanced among themselves (`hale_core::balance`).

use super::ctx::Ctx;
use crate::{Map, RawRouteEntry};
use hale_core::config::{ProviderConfig, Target};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// The routes' targets, flattened in order, and each route's rank sizes
/// (only for a route with a rank of two or more).
pub(super) struct Routes {
    pub targets: BTreeMap<String, Vec<Target>>,
    pub ranks: BTreeMap<String, Vec<usize>>,
}

impl Ctx<'_> {
    pub(super) fn routes(
        &mut self,
        raw: &Map<Vec<Spanned<RawRouteEntry>>>,
        providers: &[ProviderConfig],
    ) -> Routes {
        let mut out = Routes {
            targets: BTreeMap::new(),
            ranks: BTreeMap::new(),
        };
        for (name, entries) in raw {
            let path = format!("routes.{name}");
            if entries.value.is_empty() {
                self.at(&path, entries, "a route needs at least one target");
                continue;
            }
            let mut targets = Vec::new();
            let mut sizes = Vec::new();
            for (i, entry) in entries.value.iter().enumerate() {
                let epath = format!("{path}[{i}]");
                let before = targets.len();
                match &entry.value {
                    RawRouteEntry::One(text) => {
                        let t = Spanned::new(text.clone(), entry.referenced, entry.defined);
                        targets.extend(self.target(&epath, &t, providers));
                    }
                    RawRouteEntry::Group(group) => {
                        if group.is_empty() {
                            self.at(
                                &epath,
                                entry,
                                "a group of equal rank needs at least one target",
                            );
                        }
                        for (j, t) in group.iter().enumerate() {
                            targets.extend(self.target(&format!("{epath}[{j}]"), t, providers));
                        }
                    }
                }
                sizes.push(targets.len() - before);
            }
            if sizes.iter().any(|&n| n > 1) {
                out.ranks.insert(name.clone(), sizes);
            }
            out.targets.insert(name.clone(), targets);
        }
        out
    }

    /// One `provider/model` at `path`, or `None` (its error recorded).
    fn target(
        &mut self,
        path: &str,
        t: &Spanned<String>,
        providers: &[ProviderConfig],
    ) -> Option<Target> {
        let text = t.value.trim();
        let Some((p, m)) = text
            .split_once('/')
            .filter(|(p, m)| !p.is_empty() && !m.is_empty())
        else {
            self.at(
                path,
                t,
                format!("`{text}` is not of the form provider/model"),
            );
            return None;
        };
        let pname = Spanned::new(p.to_owned(), t.referenced, t.defined);
        let provider = self.provider_ref(path, &pname)?;
        if let Some(pc) = providers.iter().find(|pc| pc.name == provider)
            && !pc.offers(m)
        {
            self.at(
                path,
                t,
                format!("provider `{provider}` does not list model `{m}` in its models"),
            );
            return None;
        }
        Some(Target {
            provider,
            model: m.to_owned(),
        })
    }
}
