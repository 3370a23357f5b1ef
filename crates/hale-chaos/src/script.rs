//! Scripts: a YAML mapping of model name → ordered steps, consumed per model.
//!
//! ```yaml
//! gpt-4o:
//!   - {fault: "rate-limit:retry_after=2", times: 1}
//!   - {fault: ok}
//! ```
//!
//! Parsing has two stages, as hale's config does: a raw serde shape with
//! unknown keys refused (serde-saphyr reports line and column), then a
//! validation that parses every fault spec strictly and names the model and
//! step of any problem. A step's `times` (default 1) counts requests for that
//! model; the last step repeats for ever. Within a step the fault applies to
//! every request, so the fault's own `times` parameter is not used.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::fault::{self, FaultSpec};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    fault: String,
    #[serde(default)]
    times: Option<u64>,
}

/// One step of a model's script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What the step does (its `times` is cleared: the step's own count rules).
    pub spec: FaultSpec,
    /// Requests the step lasts; ignored on the last step, which repeats.
    pub times: u64,
}

/// A parsed, validated script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    models: BTreeMap<String, Vec<Step>>,
}

impl Script {
    /// The step for the `n`-th request (1-based) for `model`, if the script names it.
    pub fn step_for(&self, model: &str, n: u64) -> Option<&FaultSpec> {
        let steps = self.models.get(model)?;
        let mut seen = 0u64;
        for step in steps {
            seen = seen.saturating_add(step.times);
            if n <= seen {
                return Some(&step.spec);
            }
        }
        steps.last().map(|s| &s.spec)
    }

    /// The models the script names.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// The steps of one model.
    pub fn steps(&self, model: &str) -> Option<&[Step]> {
        self.models.get(model).map(Vec::as_slice)
    }
}

/// Parses and validates a script; the error names the model, step and problem
/// (or the YAML line for a syntax or shape error).
pub fn parse_script(yaml: &str) -> anyhow::Result<Script> {
    let raw: BTreeMap<String, Vec<RawStep>> =
        serde_saphyr::from_str(yaml).map_err(|e| anyhow::anyhow!("chaos script: {e}"))?;
    let mut problems = Vec::new();
    let mut models = BTreeMap::new();
    for (model, raw_steps) in raw {
        if raw_steps.is_empty() {
            problems.push(format!("model `{model}`: the list of steps is empty"));
            continue;
        }
        let mut steps = Vec::with_capacity(raw_steps.len());
        for (i, rs) in raw_steps.into_iter().enumerate() {
            let at = format!("model `{model}`, step {}", i + 1);
            if rs.times == Some(0) {
                problems.push(format!("{at}: `times` must be at least 1"));
                continue;
            }
            match fault::parse_strict(&rs.fault) {
                Ok(mut spec) => {
                    spec.times = None;
                    steps.push(Step {
                        spec,
                        times: rs.times.unwrap_or(1),
                    });
                }
                Err(e) => problems.push(format!("{at}: {e}")),
            }
        }
        models.insert(model, steps);
    }
    if problems.is_empty() {
        Ok(Script { models })
    } else {
        Err(anyhow::anyhow!("chaos script: {}", problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::Fault;

    #[test]
    fn steps_are_consumed_in_order_and_the_last_repeats() {
        let s = parse_script(
            "m:\n  - {fault: \"rate-limit:retry_after=2\", times: 2}\n  - {fault: error-500}\n  - {fault: ok}\n",
        )
        .unwrap();
        let f = |n| s.step_for("m", n).unwrap().fault.name();
        assert_eq!(
            [f(1), f(2), f(3), f(4), f(5)],
            ["rate-limit", "rate-limit", "error-500", "ok", "ok"]
        );
        assert!(s.step_for("other", 1).is_none());
        assert_eq!(
            s.step_for("m", 1).unwrap().fault,
            Fault::RateLimit {
                retry_after: Some(2)
            }
        );
    }
}
