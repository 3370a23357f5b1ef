//! `tool_jobs:` and `workflows:` — the audit log file of tool jobs (a path,
//! a size that rotates it, old files kept) and the named workflows (their
//! steps are checked in shape by `hale-tools` when it starts; here only that
//! a workflow has steps and a usable name).

use super::ctx::{Ctx, line_of};
use crate::{Map, RawToolJobs, RawWorkflow};
use hale_core::config::{
    AuditLogConfig, DEFAULT_AUDIT_LOG_KEEP, DEFAULT_AUDIT_LOG_MAX_BYTES, ToolJobsConfig,
    WorkflowConfig,
};
use hale_core::tools::MAX_ID_LEN;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Smallest `max_bytes` accepted: one job's line must fit several times.
const MIN_AUDIT_LOG_BYTES: i64 = 4096;

impl Ctx<'_> {
    /// `tool_jobs:` — an audit log needs a path; `max_bytes` ≥ 4096,
    /// `keep` ≥ 1.
    pub(super) fn tool_jobs(&mut self, r: &RawToolJobs) -> ToolJobsConfig {
        let Some(a) = &r.audit_log else {
            return ToolJobsConfig::default();
        };
        let line = line_of(a);
        let path = self.required_str("tool_jobs.audit_log", "path", &a.value.path, line);
        let max_bytes = match &a.value.max_bytes {
            None => DEFAULT_AUDIT_LOG_MAX_BYTES,
            Some(s) if s.value >= MIN_AUDIT_LOG_BYTES => s.value as u64,
            Some(s) => {
                self.at(
                    "tool_jobs.audit_log.max_bytes",
                    s,
                    format!("must be at least {MIN_AUDIT_LOG_BYTES}"),
                );
                DEFAULT_AUDIT_LOG_MAX_BYTES
            }
        };
        let keep = match &a.value.keep {
            None => DEFAULT_AUDIT_LOG_KEEP,
            Some(s) => match u32::try_from(s.value) {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => {
                    self.at(
                        "tool_jobs.audit_log.keep",
                        s,
                        "must be a whole number from 1 to 1000",
                    );
                    DEFAULT_AUDIT_LOG_KEEP
                }
            },
        };
        ToolJobsConfig {
            audit_log: path.map(|p| AuditLogConfig {
                path: PathBuf::from(p),
                max_bytes,
                keep,
            }),
        }
    }

    /// `workflows:` — each name 1 to `MAX_ID_LEN` characters, with at least
    /// one step.
    pub(super) fn workflows(&mut self, m: &Map<RawWorkflow>) -> BTreeMap<String, WorkflowConfig> {
        let mut out = BTreeMap::new();
        for (name, w) in m {
            let path = format!("workflows.{name}");
            if name.trim().is_empty() || name.len() > MAX_ID_LEN {
                self.at(
                    path.clone(),
                    w,
                    format!("a workflow's name must be 1 to {MAX_ID_LEN} characters"),
                );
                continue;
            }
            let steps = w
                .value
                .steps
                .as_ref()
                .map(|s| s.value.clone())
                .unwrap_or_default();
            if steps.is_empty() {
                self.at(path, w, "a workflow needs at least one step (`steps:`)");
                continue;
            }
            let tools = w
                .value
                .tools
                .as_ref()
                .map(|s| s.value.clone())
                .unwrap_or_default();
            out.insert(name.clone(), WorkflowConfig { steps, tools });
        }
        out
    }
}
