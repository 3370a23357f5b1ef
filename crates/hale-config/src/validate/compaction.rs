//! `compaction:` — when to warn (below `self_healing.compaction_threshold`)
//! and the summarizer.

use super::ctx::{Ctx, line_of};
use crate::{RawCompaction, RawSelfHealing};
use hale_core::config::CompactionConfig;
use serde_saphyr::Spanned;

impl Ctx<'_> {
    pub(super) fn compaction(
        &mut self,
        r: &RawCompaction,
        self_healing: Option<&Spanned<RawSelfHealing>>,
        c: &mut CompactionConfig,
    ) {
        if let Some(w) = &r.warn_at
            && let Some(v) = self.fraction("compaction.warn_at", w)
        {
            if v >= c.threshold {
                let threshold_line = self_healing
                    .and_then(|s| s.value.compaction_threshold.as_ref())
                    .and_then(line_of);
                let mut msg = format!(
                    "warn_at ({v}) must be below self_healing.compaction_threshold ({})",
                    c.threshold
                );
                if let Some(l) = threshold_line {
                    msg.push_str(&format!(" set on line {l}"));
                }
                self.at("compaction.warn_at", w, msg);
            } else {
                c.warn_at = v;
            }
        }
        if let Some(m) = &r.summarizer_model {
            c.summarizer_model = self.non_empty("compaction.summarizer_model", m);
        }
        c.summarizer_max_tokens = self.at_least_one(
            "compaction.summarizer_max_tokens",
            &r.summarizer_max_tokens,
            c.summarizer_max_tokens,
        );
    }
}
