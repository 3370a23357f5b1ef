//! `prices:` — per-model price overrides, USD per million tokens.

use super::ctx::{Ctx, line_of};
use crate::{Map, Opt, RawPrice};
use hale_core::config::Price;
use std::collections::BTreeMap;

impl Ctx<'_> {
    pub(super) fn prices(&mut self, raw: &Map<RawPrice>) -> BTreeMap<String, Price> {
        let mut prices = BTreeMap::new();
        for (model, p) in raw {
            let path = format!("prices.{model}");
            let pl = line_of(p);
            let mut get = |key: &str, v: &Opt<f64>| -> Option<f64> {
                let s = self.required(&path, key, v, pl)?;
                if s.value.is_finite() && s.value >= 0.0 {
                    Some(s.value)
                } else {
                    self.at(
                        format!("{path}.{key}"),
                        s,
                        "must be a finite price, 0 or more",
                    );
                    None
                }
            };
            let input = get("input_per_mtok", &p.value.input_per_mtok);
            let output = get("output_per_mtok", &p.value.output_per_mtok);
            if let (Some(input_per_mtok), Some(output_per_mtok)) = (input, output) {
                prices.insert(
                    model.clone(),
                    Price {
                        input_per_mtok,
                        output_per_mtok,
                    },
                );
            }
        }
        prices
    }
}
