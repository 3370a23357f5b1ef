//! The compaction planner (docs/operations.md, "What hale does to a call":
//! Compaction): which messages to strip, summarise or
//! digest so a conversation fits its model's context window.
//!
//! The gateway counts tokens (crate `hale-tokens`), builds one [`MsgView`]
//! per message and asks [`plan`]; it then carries the plan out (placeholders,
//! summariser calls, [`digest`] when the summariser fails). This module only
//! decides, so every rule below is tested on plain data.
//!
//! Rules, and why:
//!
//! - **Pressure** is `tokens / window`: at `threshold` (0.85) it compacts. A plan aims below
//!   `threshold · window · (1 − HEADROOM)` ([`HEADROOM`]) so the next turn
//!   does not compact again at once.
//! - **Cheapest tier first.** Tier 1 strips large tool results (over
//!   `strip_over_chars`) oldest first, only as many as needed; tier 2
//!   summarises older messages in token-bounded batches whose windows overlap
//!   by one message group, oldest first, only as many batches as needed; tier
//!   3 summarises the oldest half in one summary, extended towards the
//!   protected tail when half is not enough. Tiers 2 and 3 still strip the
//!   large tool results they leave outside their ranges. The estimates are
//!   deliberately simple: a summary is [`SUMMARY_RATIO`] of its input, capped
//!   at `summarizer_max_tokens`; a placeholder is [`PLACEHOLDER_TOKENS`].
//! - **Never touched:** the last `keep_last` messages (the agent's working
//!   memory) and the system messages at the start (its instructions).
//!   Nothing is summarised under `min_messages` messages — tier 1 may still
//!   strip older tool results.
//! - **Pairs are never split.** An assistant message with tool calls and the
//!   results answering them form one group; a range boundary only falls
//!   between groups, so a provider never sees a result without its call (or a
//!   call without its result), which both OpenAI and Anthropic reject.
//! - **Tier 4** is not planned up front: when the summariser fails,
//!   [`fallback_to_digest`] turns the plan into a model-free [`digest`] of the
//!   same range.

use crate::guard::group_thousands;
use serde::Serialize;
use std::collections::HashMap;
use std::ops::Range;

/// A summary is estimated at this fraction of its input tokens.
pub const SUMMARY_RATIO: f64 = 0.10;
/// A stripped tool result's placeholder is estimated at this many tokens.
pub const PLACEHOLDER_TOKENS: u64 = 20;
/// A plan aims this fraction below `threshold · window`.
pub const HEADROOM: f64 = 0.10;
/// A tier-2 batch holds at most this fraction of the window (at least one group).
pub const BATCH_WINDOW_FRACTION: f64 = 0.25;
/// Characters of each message kept in a digest line.
pub const DIGEST_LINE_CHARS: usize = 120;
/// Upper bound of a digest's length in characters.
pub const DIGEST_MAX_CHARS: usize = 8_000;

/// A message's role, as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MsgRole {
    System,
    User,
    Assistant,
    Tool,
}

impl MsgRole {
    /// The lowercase name used in digests.
    pub fn as_str(self) -> &'static str {
        match self {
            MsgRole::System => "system",
            MsgRole::User => "user",
            MsgRole::Assistant => "assistant",
            MsgRole::Tool => "tool",
        }
    }
}

/// What the planner needs to know of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgView {
    pub role: MsgRole,
    pub tokens: u32,
    /// Length of the message's text content in characters.
    pub chars: usize,
    /// Ids of the tool calls made by an assistant message.
    pub tool_call_ids: Vec<String>,
    /// For a tool result: the id of the call it answers.
    pub tool_result_for: Option<String>,
    /// For a tool result: the tool's name, when known.
    pub tool_name: Option<String>,
}

/// A compaction tier, tried in this order until the conversation fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    None,
    StripToolResults,
    SummarizeBatches,
    SummarizeOldestHalf,
    Digest,
}

impl Tier {
    /// The tier's number (0–4), as reported in `agent.compacted`.
    pub fn number(self) -> u8 {
        match self {
            Tier::None => 0,
            Tier::StripToolResults => 1,
            Tier::SummarizeBatches => 2,
            Tier::SummarizeOldestHalf => 3,
            Tier::Digest => 4,
        }
    }
}

/// What to do to a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub tier: Tier,
    pub before_tokens: u64,
    /// The total the plan aims under.
    pub target_tokens: u64,
    /// The planner's estimate of the total after the plan is carried out.
    pub est_after_tokens: u64,
    /// Indices of tool-result messages whose content becomes a [`placeholder`].
    /// In tiers 2–4 only messages outside the summarised ranges are listed.
    pub strip: Vec<usize>,
    /// Tier 2: ranges to summarise, oldest first; consecutive ranges may
    /// overlap, and the union is replaced by the summaries.
    pub batches: Vec<Range<usize>>,
    /// Tier 3: the range summarised into one system message. Tier 4: the
    /// range replaced by the digest.
    pub oldest_half: Option<Range<usize>>,
}

/// How full the context is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pressure {
    Ok,
    Compact,
}

/// `total_tokens` against the window: `Compact` at or over the threshold,
/// else `Ok`.
pub fn pressure(total_tokens: u64, window: u32, cfg: &crate::config::CompactionConfig) -> Pressure {
    let window = f64::from(window.max(1));
    let ratio = total_tokens as f64 / window;
    if ratio >= cfg.threshold {
        Pressure::Compact
    } else {
        Pressure::Ok
    }
}

/// Tokens a request can hold at most, from sizes alone (no tokenizer):
/// `bytes` of text (system prompt, message texts, tool-call arguments) plus
/// `overhead` tokens per text and `fixed` once. Byte-level BPEs (tiktoken's
/// `o200k_base`, `cl100k_base`) never produce more tokens than bytes, and the
/// character approximation of the other families stays within
/// [`APPROX_SLACK_PER_TEXT`] of the bytes of each text, so this bounds every
/// family the gateway counts.
pub fn token_upper_bound(bytes: u64, texts: u64, overhead: u64, fixed: u64) -> u64 {
    bytes
        .saturating_add(texts.saturating_mul(overhead.saturating_add(APPROX_SLACK_PER_TEXT)))
        .saturating_add(fixed)
}

/// How far the character approximation of one text can exceed its bytes
/// (two roundings up: `ceil(ceil(ascii / 3.5 + other) · 1.1) ≤ bytes + 2`).
pub const APPROX_SLACK_PER_TEXT: u64 = 2;

/// Whether a request whose tokens are at most `upper_bound` must be counted
/// exactly: only when the bound reaches the compaction threshold. Below it the
/// request cannot be at the threshold whatever its exact count, so the
/// tokenizer is neither run nor loaded (a BPE table costs 24–46 MB of memory).
pub fn needs_exact_count(
    upper_bound: u64,
    window: u32,
    cfg: &crate::config::CompactionConfig,
) -> bool {
    matches!(pressure(upper_bound, window, cfg), Pressure::Compact)
}

/// Estimated tokens of a summary of `input` tokens.
fn summary_estimate(input: u64, max_tokens: u32) -> u64 {
    let est = (input as f64 * SUMMARY_RATIO).ceil() as u64;
    est.min(u64::from(max_tokens))
}

/// The structure of a conversation the tiers share.
struct Layout {
    n: usize,
    /// `prefix[i]` = tokens of messages `0..i`.
    prefix: Vec<u64>,
    /// `valid[p]`: a range boundary may fall at `p` (between `p-1` and `p`).
    valid: Vec<bool>,
    /// First index of the protected tail.
    tail: usize,
    /// The summarisable region, `region_start..region_end` (may be empty).
    region_start: usize,
    region_end: usize,
}

impl Layout {
    fn new(msgs: &[MsgView], keep_last: usize) -> Self {
        let n = msgs.len();
        let mut prefix = Vec::with_capacity(n + 1);
        prefix.push(0u64);
        for m in msgs {
            let last = prefix.last().copied().unwrap_or(0);
            prefix.push(last + u64::from(m.tokens));
        }
        // A group spans from an assistant message to the last result answering it;
        // no boundary may fall strictly inside a group.
        let mut group_end: Vec<usize> = (0..n).collect();
        let mut caller: HashMap<&str, usize> = HashMap::new();
        for (j, m) in msgs.iter().enumerate() {
            if let Some(id) = &m.tool_result_for
                && let Some(&a) = caller.get(id.as_str())
            {
                group_end[a] = group_end[a].max(j);
            }
            for id in &m.tool_call_ids {
                caller.insert(id.as_str(), j);
            }
        }
        // Difference array: +1 at s+1, -1 at e+1 marks boundaries s+1..=e invalid.
        let mut diff = vec![0i64; n + 2];
        for (s, &e) in group_end.iter().enumerate() {
            if e > s {
                diff[s + 1] += 1;
                diff[e + 1] -= 1;
            }
        }
        let mut valid = Vec::with_capacity(n + 1);
        let mut depth = 0i64;
        for d in diff.iter().take(n + 1) {
            depth += d;
            valid.push(depth == 0);
        }
        let lead = msgs
            .iter()
            .take_while(|m| m.role == MsgRole::System)
            .count();
        let tail = n.saturating_sub(keep_last);
        let region_start = (lead..=n).find(|&p| valid[p]).unwrap_or(n);
        let region_end = (region_start..=tail.max(region_start))
            .rev()
            .find(|&p| p <= tail && valid[p])
            .unwrap_or(region_start);
        Self {
            n,
            prefix,
            valid,
            tail,
            region_start,
            region_end: region_end.max(region_start),
        }
    }

    fn tokens(&self, r: Range<usize>) -> u64 {
        self.prefix[r.end] - self.prefix[r.start]
    }

    fn valid_cuts(&self, r: Range<usize>) -> impl Iterator<Item = usize> + '_ {
        r.filter(|&p| self.valid[p])
    }
}

fn is_strippable(m: &MsgView, strip_over_chars: usize) -> bool {
    let is_result = m.role == MsgRole::Tool || m.tool_result_for.is_some();
    is_result && m.chars > strip_over_chars
}

fn strip_saving(m: &MsgView) -> u64 {
    u64::from(m.tokens).saturating_sub(PLACEHOLDER_TOKENS)
}

/// Plans the cheapest tier that brings the conversation under the threshold with headroom.
pub fn plan(msgs: &[MsgView], window: u32, cfg: &crate::config::CompactionConfig) -> Plan {
    let layout = Layout::new(msgs, cfg.keep_last);
    let before = layout.tokens(0..layout.n);
    let p = pressure(before, window, cfg);
    let target = (f64::from(window) * cfg.threshold * (1.0 - HEADROOM))
        .floor()
        .max(0.0) as u64;
    let mut out = Plan {
        tier: Tier::None,
        before_tokens: before,
        target_tokens: target,
        est_after_tokens: before,
        strip: Vec::new(),
        batches: Vec::new(),
        oldest_half: None,
    };
    match p {
        Pressure::Ok => return out,
        Pressure::Compact => {}
    }

    // Tier 1: strip large tool results outside the tail, oldest first, until it fits.
    let candidates: Vec<usize> = (0..layout.tail)
        .filter(|&i| is_strippable(&msgs[i], cfg.strip_over_chars))
        .collect();
    let mut after = before;
    let mut strip = Vec::new();
    for &i in &candidates {
        if after <= target {
            break;
        }
        after -= strip_saving(&msgs[i]);
        strip.push(i);
    }
    if !strip.is_empty() {
        out.tier = Tier::StripToolResults;
        out.strip = strip;
        out.est_after_tokens = after;
    }
    if after <= target {
        return out;
    }
    let can_summarise = msgs.len() >= cfg.min_messages && layout.region_end > layout.region_start;
    if !can_summarise {
        return out;
    }

    // Strip savings of the candidates at or after `from` (outside a summarised prefix).
    let strips_from = |from: usize| -> (Vec<usize>, u64) {
        let kept: Vec<usize> = candidates.iter().copied().filter(|&i| i >= from).collect();
        let saved = kept.iter().map(|&i| strip_saving(&msgs[i])).sum();
        (kept, saved)
    };

    // Tier 2: overlapping token-bounded batches, oldest first, until it fits.
    let batch_cap = ((f64::from(window) * BATCH_WINDOW_FRACTION) as u64).max(1);
    let batches = make_batches(&layout, batch_cap);
    let mut summaries = 0u64;
    for (k, b) in batches.iter().enumerate() {
        summaries += summary_estimate(layout.tokens(b.clone()), cfg.summarizer_max_tokens);
        let covered = layout.region_start..b.end;
        let (kept, saved) = strips_from(b.end);
        let est = (before - layout.tokens(covered) + summaries).saturating_sub(saved);
        if est <= target {
            out.tier = Tier::SummarizeBatches;
            out.batches = batches[..=k].to_vec();
            out.strip = kept;
            out.est_after_tokens = est;
            return out;
        }
    }

    // Tier 3: the oldest half in one summary, extended until it fits.
    let half = (layout.n / 2).max(layout.region_start + 1);
    let mut best: Option<(Range<usize>, u64)> = None;
    for cut in layout.valid_cuts(half.min(layout.region_end)..layout.region_end + 1) {
        if cut <= layout.region_start {
            continue;
        }
        let r = layout.region_start..cut;
        let (_, saved) = strips_from(cut);
        let est = (before - layout.tokens(r.clone())
            + summary_estimate(layout.tokens(r.clone()), cfg.summarizer_max_tokens))
        .saturating_sub(saved);
        best = Some((r, est));
        if est <= target {
            break;
        }
    }
    if let Some((r, est)) = best {
        out.tier = Tier::SummarizeOldestHalf;
        out.strip = strips_from(r.end).0;
        out.batches = Vec::new();
        out.oldest_half = Some(r);
        out.est_after_tokens = est;
    }
    out
}

/// Token-bounded batches over the summarisable region, each overlapping the
/// previous one by its last group, every boundary at a valid cut.
fn make_batches(layout: &Layout, cap: u64) -> Vec<Range<usize>> {
    let (start, end) = (layout.region_start, layout.region_end);
    let cuts: Vec<usize> = layout.valid_cuts(start..end + 1).collect();
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut b = start;
    let mut prev_end = start;
    while prev_end < end {
        // Furthest cut within the cap, at least past the previous batch's end.
        let mut e = None;
        for &c in cuts.iter().filter(|&&c| c > prev_end) {
            if e.is_none() || layout.tokens(b..c) <= cap {
                e = Some(c);
            } else {
                break;
            }
        }
        let Some(e) = e else { break };
        out.push(b..e);
        // The next batch starts at the last group of this one, for overlap.
        b = cuts.iter().copied().rfind(|&c| c > b && c < e).unwrap_or(e);
        prev_end = e;
    }
    out
}

/// After a provider refused `sent_tokens` as too long although hale's window
/// table thought it fitted, plan against this window instead: one in which
/// what was sent is [`OVERFLOW_SHRINK`] over the threshold, so the plan aims
/// below what was sent (never above the table's `window`).
pub fn overflow_window(
    sent_tokens: u64,
    window: u32,
    cfg: &crate::config::CompactionConfig,
) -> u32 {
    let w = sent_tokens as f64 / cfg.threshold * OVERFLOW_SHRINK;
    (w.max(1.0) as u32).min(window)
}

/// How much smaller than what the provider refused a forced compaction aims.
pub const OVERFLOW_SHRINK: f64 = 0.9;

/// A tier 1–3 plan whose summariser failed: a digest of the same range.
/// A plan that calls no summariser (tiers 0, 1, 4) is returned unchanged.
pub fn fallback_to_digest(plan: &Plan) -> Plan {
    let range = match plan.tier {
        Tier::None | Tier::StripToolResults | Tier::Digest => return plan.clone(),
        Tier::SummarizeBatches => match (plan.batches.first(), plan.batches.last()) {
            (Some(f), Some(l)) => Some(f.start..l.end),
            (Some(_), None) | (None, Some(_)) | (None, None) => None,
        },
        Tier::SummarizeOldestHalf => plan.oldest_half.clone(),
    };
    let Some(range) = range else {
        return plan.clone();
    };
    Plan {
        tier: Tier::Digest,
        batches: Vec::new(),
        oldest_half: Some(range),
        ..plan.clone()
    }
}

/// The text that replaces a stripped tool result.
pub fn placeholder(tool_name: Option<&str>, chars: usize) -> String {
    let size = group_thousands(u64::try_from(chars).unwrap_or(u64::MAX));
    match tool_name {
        Some(name) => format!("[tool result of {name} stripped by hale: {size} chars]"),
        None => format!("[tool result stripped by hale: {size} chars]"),
    }
}

/// The text of an assistant message for [`digest`], with the tools it called.
pub fn digest_entry(text: &str, tool_names: &[&str]) -> String {
    if tool_names.is_empty() {
        text.to_owned()
    } else {
        format!("{text} [called: {}]", tool_names.join(", "))
    }
}

/// A plain-text digest made without a model (tier 4): one line per message,
/// `role: first 120 chars…`; an assistant's tool calls are included when its
/// text was built with [`digest_entry`]. At most [`DIGEST_MAX_CHARS`]
/// characters; messages past the bound are counted, not shown.
pub fn digest(lines: &[(MsgRole, &str)]) -> String {
    let mut out = format!(
        "Digest of {} earlier messages (compacted by hale without a model):",
        lines.len()
    );
    let mut used = out.chars().count();
    for (shown, (role, text)) in lines.iter().enumerate() {
        let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut head: String = flat.chars().take(DIGEST_LINE_CHARS).collect();
        if flat.chars().nth(DIGEST_LINE_CHARS).is_some() {
            head.push('…');
        }
        let line = format!("\n{}: {head}", role.as_str());
        let len = line.chars().count();
        let reserve = 48; // room for the "more messages" line
        if used + len + reserve > DIGEST_MAX_CHARS {
            out.push_str(&format!(
                "\n[… {} more messages not shown]",
                lines.len() - shown
            ));
            return out;
        }
        used += len;
        out.push_str(&line);
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn token_upper_bound_adds_overheads_and_saturates() {
        // ((bytes, texts, overhead per text, fixed), bound)
        type Row = ((u64, u64, u64, u64), u64);
        let rows: &[Row] = &[
            ((0, 0, 3, 3), 3),
            ((1_000, 1, 3, 3), 1_000 + 5 + 3),
            ((10_000, 4, 3, 3), 10_000 + 4 * 5 + 3),
            ((u64::MAX, 1, 3, 3), u64::MAX),
            ((0, u64::MAX, 3, 0), u64::MAX),
        ];
        for &((bytes, texts, overhead, fixed), want) in rows {
            assert_eq!(
                token_upper_bound(bytes, texts, overhead, fixed),
                want,
                "{bytes} {texts}"
            );
        }
    }

    #[test]
    fn exact_count_only_when_the_bound_reaches_the_threshold() {
        let cfg = crate::config::CompactionConfig::default(); // threshold 0.85
        let rows: &[(u64, u32, bool)] = &[
            (0, 128_000, false),
            (1_000, 128_000, false),
            (102_000, 128_000, false), // 80 %: still cannot compact
            (108_799, 128_000, false),
            (108_800, 128_000, true), // exactly the threshold
            (500_000, 128_000, true),
            (6_964, 8_192, true), // 0.85 · 8192 = 6963.2
            (6_963, 8_192, false),
            (1, 0, true), // an unknown (zero) window is treated as 1 token
        ];
        for &(bound, window, want) in rows {
            assert_eq!(
                needs_exact_count(bound, window, &cfg),
                want,
                "{bound} / {window}"
            );
        }
    }

    #[test]
    fn an_overflow_plans_below_what_was_sent_never_above_the_table() {
        let cfg = crate::config::CompactionConfig::default();
        let w = overflow_window(10_000, 128_000, &cfg);
        // 10,000 sent tokens are over the threshold of that window.
        assert!(10_000.0 >= f64::from(w) * cfg.threshold, "{w}");
        assert_eq!(overflow_window(1_000_000, 8_192, &cfg), 8_192);
        assert_eq!(overflow_window(0, 8_192, &cfg), 1);
    }
    use super::*;
    use crate::config::CompactionConfig;
    use proptest::prelude::*;

    fn cfg() -> CompactionConfig {
        CompactionConfig::default()
    }

    fn msg(role: MsgRole, tokens: u32) -> MsgView {
        MsgView {
            role,
            tokens,
            chars: tokens as usize * 4,
            tool_call_ids: Vec::new(),
            tool_result_for: None,
            tool_name: None,
        }
    }
    fn sys(t: u32) -> MsgView {
        msg(MsgRole::System, t)
    }
    fn user(t: u32) -> MsgView {
        msg(MsgRole::User, t)
    }
    fn asst(t: u32) -> MsgView {
        msg(MsgRole::Assistant, t)
    }
    fn call(t: u32, ids: &[&str]) -> MsgView {
        MsgView {
            tool_call_ids: ids.iter().map(|s| s.to_string()).collect(),
            ..asst(t)
        }
    }
    fn result(t: u32, id: &str) -> MsgView {
        MsgView {
            tool_result_for: Some(id.into()),
            tool_name: Some("read_file".into()),
            ..msg(MsgRole::Tool, t)
        }
    }
    fn total(m: &[MsgView]) -> u64 {
        m.iter().map(|m| u64::from(m.tokens)).sum()
    }

    #[test]
    fn pressure_levels() {
        let c = cfg();
        assert_eq!(pressure(799, 1000, &c), Pressure::Ok);
        assert_eq!(pressure(849, 1000, &c), Pressure::Ok);
        assert_eq!(pressure(850, 1000, &c), Pressure::Compact);
    }

    #[test]
    fn under_threshold_plans_nothing() {
        let msgs = vec![sys(100), user(300), asst(400)];
        let p = plan(&msgs, 1000, &cfg());
        assert_eq!(p.tier, Tier::None);
        assert!(p.strip.is_empty() && p.batches.is_empty() && p.oldest_half.is_none());
    }

    /// A conversation of 12 messages: system, then user/call/result groups.
    fn convo(result_tokens: u32) -> Vec<MsgView> {
        vec![
            sys(50),                    // 0
            user(50),                   // 1
            call(20, &["a"]),           // 2
            result(result_tokens, "a"), // 3
            call(20, &["b", "c"]),      // 4
            result(result_tokens, "b"), // 5
            result(result_tokens, "c"), // 6
            asst(50),                   // 7
            user(50),                   // 8  tail starts here
            call(20, &["d"]),           // 9
            result(result_tokens, "d"), // 10
            asst(50),                   // 11
        ]
    }

    #[test]
    fn tier1_strips_oldest_large_results_outside_the_tail_only_as_needed() {
        let msgs = convo(300);
        let t = total(&msgs);
        // Window such that stripping one or two results suffices.
        let window = (t as f64 / 0.86).ceil() as u32;
        let p = plan(&msgs, window, &cfg());
        assert_eq!(p.tier, Tier::StripToolResults);
        assert_eq!(p.strip[0], 3, "oldest first");
        assert!(
            p.strip
                .iter()
                .all(|&i| i < msgs.len() - 4 && msgs[i].role == MsgRole::Tool)
        );
        assert!(p.est_after_tokens <= p.target_tokens);
        assert!(p.strip.len() < 3, "only as many as needed: {:?}", p.strip);
    }

    #[test]
    fn tier1_ignores_small_results() {
        let mut msgs = convo(300);
        for m in &mut msgs {
            if m.role == MsgRole::Tool {
                m.chars = cfg().strip_over_chars; // not over
            }
        }
        let p = plan(&msgs, (total(&msgs) as f64 / 0.9) as u32, &cfg());
        assert!(p.strip.is_empty());
        assert_ne!(p.tier, Tier::StripToolResults);
    }

    #[test]
    fn tier2_batches_keep_pairs_and_tail_and_system_prefix() {
        let mut msgs = vec![sys(100)];
        for i in 0..30 {
            msgs.push(user(200));
            msgs.push(call(50, &[&format!("x{i}")]));
            msgs.push(MsgView {
                chars: 10,
                ..result(100, &format!("x{i}"))
            });
            msgs.push(asst(150));
        }
        let t = total(&msgs);
        let window = (t as f64 / 1.2) as u32;
        let p = plan(&msgs, window, &cfg());
        assert_eq!(p.tier, Tier::SummarizeBatches, "{p:?}");
        assert!(p.batches.len() >= 2, "{p:?}");
        for b in &p.batches {
            assert!(b.start >= 1, "system prefix untouched");
            assert!(b.end <= msgs.len() - 4, "tail untouched");
            // never ends between a call and its result
            assert_ne!(msgs[b.end.min(msgs.len() - 1)].role, MsgRole::Tool);
            assert_ne!(msgs[b.start].role, MsgRole::Tool);
        }
        for w in p.batches.windows(2) {
            assert!(w[1].start < w[0].end, "windows overlap: {:?}", p.batches);
            assert!(w[1].end > w[0].end);
        }
        assert!(p.est_after_tokens <= p.target_tokens);
    }

    #[test]
    fn tier3_when_batches_are_not_enough() {
        // Many big batches whose summaries add up: one capped summary wins.
        let c = cfg();
        let mut msgs = vec![sys(10)];
        for _ in 0..40 {
            msgs.push(user(1000));
            msgs.push(asst(1000));
        }
        let t = total(&msgs);
        // Target so low that only summarising most of the conversation fits.
        let window = (t as f64 * 0.2) as u32;
        let p = plan(&msgs, window, &c);
        assert_eq!(p.tier, Tier::SummarizeOldestHalf, "{p:?}");
        let r = p.oldest_half.clone().unwrap();
        assert_eq!(r.start, 1);
        assert!(r.end >= msgs.len() / 2 && r.end <= msgs.len() - 4);
    }

    #[test]
    fn nothing_is_summarised_under_min_messages() {
        let msgs = vec![
            sys(10),
            user(5000),
            call(10, &["a"]),
            result(5000, "a"),
            asst(10),
        ];
        let p = plan(&msgs, 1000, &cfg());
        assert!(p.batches.is_empty() && p.oldest_half.is_none());
        assert_eq!(p.tier, Tier::None, "the only large result is in the last 4");
    }

    #[test]
    fn tier1_still_allowed_under_min_messages() {
        let msgs = vec![
            user(10),
            call(10, &["a"]),
            result(3000, "a"),
            asst(10),
            user(10),
        ];
        let mut c = cfg();
        c.keep_last = 2;
        let p = plan(&msgs, 1000, &c);
        assert_eq!(p.tier, Tier::StripToolResults);
        assert_eq!(p.strip, vec![2]);
    }

    #[test]
    fn boundary_moves_to_keep_a_call_with_its_results() {
        // Call at 6, results at 7 and 8; tail = last 4 starts at 8: the region must end at 6.
        let msgs = vec![
            sys(10),
            user(3000),
            asst(3000),
            user(3000),
            asst(3000),
            user(10),
            call(10, &["p", "q"]),
            MsgView {
                chars: 5,
                ..result(10, "p")
            },
            MsgView {
                chars: 5,
                ..result(10, "q")
            },
            asst(10),
            user(10),
            asst(10),
        ];
        let p = plan(&msgs, 10_000, &cfg());
        let end = p
            .batches
            .last()
            .map(|b| b.end)
            .or(p.oldest_half.as_ref().map(|r| r.end))
            .expect("summarises");
        assert!(end <= 6, "{p:?}");
    }

    #[test]
    fn fallback_covers_the_same_range() {
        let p = Plan {
            tier: Tier::SummarizeBatches,
            before_tokens: 10,
            target_tokens: 5,
            est_after_tokens: 4,
            strip: vec![9],
            batches: vec![1..5, 4..8],
            oldest_half: None,
        };
        let d = fallback_to_digest(&p);
        assert_eq!(d.tier, Tier::Digest);
        assert_eq!(d.oldest_half, Some(1..8));
        assert_eq!(d.strip, vec![9]);
        let p3 = Plan {
            tier: Tier::SummarizeOldestHalf,
            batches: vec![],
            oldest_half: Some(1..6),
            ..p.clone()
        };
        assert_eq!(fallback_to_digest(&p3).oldest_half, Some(1..6));
        let p1 = Plan {
            tier: Tier::StripToolResults,
            batches: vec![],
            ..p
        };
        assert_eq!(fallback_to_digest(&p1), p1);
    }

    #[test]
    fn placeholder_text() {
        assert_eq!(
            placeholder(Some("read_file"), 12_345),
            "[tool result of read_file stripped by hale: 12,345 chars]"
        );
        assert_eq!(
            placeholder(None, 201),
            "[tool result stripped by hale: 201 chars]"
        );
    }

    #[test]
    fn digest_lines_are_truncated_and_bounded() {
        let long = "word ".repeat(100);
        let entry = digest_entry("looking", &["read_file", "grep"]);
        let d = digest(&[
            (MsgRole::User, "fix the\nbug"),
            (MsgRole::Assistant, &entry),
            (MsgRole::Tool, &long),
        ]);
        assert!(d.contains("\nuser: fix the bug"));
        assert!(d.contains("\nassistant: looking [called: read_file, grep]"));
        let tool_line = d.lines().last().unwrap();
        assert!(tool_line.ends_with('…'));
        assert_eq!(
            tool_line.chars().count(),
            "tool: ".len() + DIGEST_LINE_CHARS + 1
        );

        let many: Vec<(MsgRole, &str)> =
            (0..1000).map(|_| (MsgRole::User, long.as_str())).collect();
        let d = digest(&many);
        assert!(d.chars().count() <= DIGEST_MAX_CHARS);
        assert!(d.contains("more messages not shown"));
    }

    // ---- property test ----

    #[derive(Debug, Clone)]
    enum Item {
        User(u32),
        Asst(u32),
        MidSystem(u32),
        Calls(u32, Vec<(u32, usize)>),
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            (1u32..3000).prop_map(Item::User),
            (1u32..3000).prop_map(Item::Asst),
            (1u32..500).prop_map(Item::MidSystem),
            (
                1u32..200,
                prop::collection::vec((1u32..5000, 0usize..2000), 1..4)
            )
                .prop_map(|(t, r)| Item::Calls(t, r)),
        ]
    }

    fn build(lead: usize, items: &[Item]) -> Vec<MsgView> {
        let mut msgs: Vec<MsgView> = (0..lead).map(|_| sys(100)).collect();
        let mut id = 0;
        for it in items {
            match it {
                Item::User(t) => msgs.push(user(*t)),
                Item::Asst(t) => msgs.push(asst(*t)),
                Item::MidSystem(t) => msgs.push(sys(*t)),
                Item::Calls(t, results) => {
                    let ids: Vec<String> =
                        (0..results.len()).map(|k| format!("c{id}_{k}")).collect();
                    id += 1;
                    msgs.push(MsgView {
                        tool_call_ids: ids.clone(),
                        ..asst(*t)
                    });
                    for (k, (rt, chars)) in results.iter().enumerate() {
                        msgs.push(MsgView {
                            chars: *chars,
                            ..result(*rt, &ids[k])
                        });
                    }
                }
            }
        }
        msgs
    }

    /// Whether a boundary at `p` separates a call from one of its results.
    fn splits_pair(msgs: &[MsgView], p: usize) -> bool {
        msgs[..p].iter().any(|m| {
            m.tool_call_ids.iter().any(|id| {
                msgs[p..]
                    .iter()
                    .any(|r| r.tool_result_for.as_deref() == Some(id))
            })
        })
    }

    proptest! {
        #[test]
        fn plans_never_touch_the_tail_or_the_system_prefix_or_split_pairs(
            lead in 0usize..3,
            items in prop::collection::vec(item(), 0..30),
            window_factor in 0.2f64..1.5,
            keep_last in 0usize..6,
            min_messages in 0usize..10,
        ) {
            let msgs = build(lead, &items);
            let window = ((total(&msgs) as f64 * window_factor) as u32).max(1);
            let c = CompactionConfig { keep_last, min_messages, ..cfg() };
            let p = plan(&msgs, window, &c);
            let n = msgs.len();
            let tail = n.saturating_sub(keep_last);
            for &i in &p.strip {
                prop_assert!(i < tail, "strip in tail: {i}");
                prop_assert!(msgs[i].role == MsgRole::Tool);
                prop_assert!(msgs[i].chars > c.strip_over_chars);
            }
            let mut ranges: Vec<Range<usize>> = p.batches.clone();
            ranges.extend(p.oldest_half.clone());
            ranges.extend(fallback_to_digest(&p).oldest_half);
            if n < min_messages {
                prop_assert!(ranges.is_empty());
            }
            for r in &ranges {
                prop_assert!(r.start < r.end);
                prop_assert!(r.start >= lead, "leading system touched: {r:?}");
                prop_assert!(r.end <= tail, "tail touched: {r:?}");
                prop_assert!(!splits_pair(&msgs, r.start), "pair split at {}", r.start);
                prop_assert!(!splits_pair(&msgs, r.end), "pair split at {}", r.end);
                for &i in &p.strip {
                    prop_assert!(!r.contains(&i) || p.tier == Tier::StripToolResults);
                }
            }
            prop_assert!(p.est_after_tokens <= p.before_tokens);
            match pressure(p.before_tokens, window, &c) {
                Pressure::Ok => prop_assert_eq!(p.tier, Tier::None),
                Pressure::Compact => {}
            }
        }
    }
}
