//! `guard:` — the per-task caps and loop thresholds, and which tools edit
//! files or only read.

use super::ctx::Ctx;
use crate::RawGuard;
use hale_core::config::GuardConfig;

impl Ctx<'_> {
    pub(super) fn guard(&mut self, r: &RawGuard) -> GuardConfig {
        let mut g = GuardConfig::default();
        if let Some(v) = &r.max_events {
            g.max_events = v.value;
        }
        if let Some(v) = &r.max_tool_calls {
            g.max_tool_calls = v.value;
        }
        g.task_timeout = Self::any_ms(&r.task_timeout_ms, g.task_timeout);
        if let Some(v) = &r.tool_caps {
            g.tool_caps = v.value.clone();
        }
        if let Some(v) = &r.tool_loop_threshold {
            g.tool_loop_threshold = v.value;
        }
        if let Some(v) = &r.file_edit_loop_threshold {
            g.file_edit_loop_threshold = v.value;
        }
        if let Some(v) = &r.result_loop_threshold {
            g.result_loop_threshold = v.value;
        }
        if let Some(v) = &r.edit_tools {
            for (tool, arg) in &v.value {
                if arg.trim().is_empty() {
                    self.at(
                        format!("guard.edit_tools.{tool}"),
                        v,
                        "must name the argument that holds the path",
                    );
                }
            }
            g.edit_tools = v.value.clone();
        }
        if let Some(v) = &r.read_only_tools {
            g.read_only_tools = v.value.clone();
        }
        g
    }
}
