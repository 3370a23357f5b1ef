//! `compaction:` — the summarizer (compaction starts at
//! `self_healing.compaction_threshold`).

use super::ctx::Ctx;
use crate::RawCompaction;
use hale_core::config::CompactionConfig;

impl Ctx<'_> {
    pub(super) fn compaction(&mut self, r: &RawCompaction, c: &mut CompactionConfig) {
        self.removed(
            "compaction.warn_at",
            &r.warn_at,
            "use self_healing.compaction_threshold (nothing acted on a warning below it)",
        );
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
