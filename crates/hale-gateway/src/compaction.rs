//! Context compaction, carried out (docs/operations.md, "What hale does to a
//! call": Compaction).
//!
//! hale-core plans ([`hale_core::compaction::plan`]): which tier, which
//! messages. This module measures the conversation (a real tokenizer for
//! OpenAI families, the documented approximation for others), carries the
//! plan out — placeholders for stripped tool results, summaries made by a
//! model call through the same resilient attempt loop, a plain digest when
//! that call fails — and remembers each compaction by the hash of the message
//! prefix it replaced. A later request that starts with the same prefix gets
//! the stored replacement without a new summariser call, so a long session is
//! summarised once per stretch, not every turn.

use crate::emit::Emitter;
use crate::turn::{self, Env, Served, Turn};
use hale_core::compaction::{self, MsgRole, MsgView, Plan, Pressure, Tier};
use hale_core::config::{Config, ProviderConfig};
use hale_core::event::EventKind;
use hale_core::models;
use hale_core::select;
use hale_proto::{ChatRequest, Dialect, Message, Part, Role};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Compactions remembered for reuse (oldest forgotten first).
pub const PREFIX_CACHE_ENTRIES: usize = 4096;
/// The deadline of one summariser call.
pub const SUMMARIZER_DEADLINE: Duration = Duration::from_secs(60);
/// The most characters of one message put in a summariser transcript.
const TRANSCRIPT_MESSAGE_CHARS: usize = 4_000;
/// Token counts remembered per (tokenizer family, text); a long session
/// re-sends its whole history every turn, and only new messages need counting.
pub const TOKEN_CACHE_ENTRIES: usize = 65_536;
/// Texts shorter than this are counted directly (hashing costs as much).
const TOKEN_CACHE_MIN_CHARS: usize = 64;

/// What a compaction did, for the `agent.compacted` event and evidence.
#[derive(Debug, Clone, Serialize)]
pub struct Compacted {
    pub tier: Tier,
    pub tier_number: u8,
    pub before_tokens: u64,
    pub after_tokens: u64,
    /// Whether a stored compaction of the same prefix was reused.
    pub reused: bool,
    pub summarizer_calls: u32,
    pub window: u32,
}

/// Compaction's state: stored compactions by message prefix, token counts
/// of texts already seen, and the tokenizers (each loaded on first use).
pub struct Compaction {
    cfg: Arc<Config>,
    emit: Emitter,
    /// Stored compactions by message prefix.
    pub prefixes: PrefixCache,
    /// Token counts of message texts already seen.
    pub tokens: TokenCache,
    pub tokenizer: hale_tokens::Tokenizer,
}

impl Compaction {
    /// Nothing stored yet. No BPE table is loaded here: each loads on the
    /// first request that may be near its compaction threshold in its
    /// family (hale-tokens).
    pub fn new(cfg: Arc<Config>, emit: Emitter) -> Self {
        Self {
            cfg,
            emit,
            prefixes: PrefixCache::default(),
            tokens: TokenCache::default(),
            tokenizer: hale_tokens::Tokenizer::new(),
        }
    }

    /// Compacts `req` in place when it is over the threshold of `window`, or —
    /// with `force` (the provider said the context overflowed) — below its current
    /// size. Returns what was done, or `None` when nothing changed.
    pub async fn compact(
        &self,
        env: Env<'_>,
        turn: &Turn,
        req: &mut ChatRequest,
        model: &str,
        window: u32,
        force: bool,
    ) -> Option<Compacted> {
        let cfg = &self.cfg.compaction;
        // Reuse the longest stored compaction of a prefix of this conversation
        // (hashing every prefix costs a serialisation of the conversation: only
        // when something is stored).
        let hashes = if self.prefixes.is_empty() && !force {
            Vec::new()
        } else {
            prefix_hashes(&req.messages)
        };
        let mut reused = false;
        let mut before_reuse = None;
        // (raw prefix length, its replacement's length) of a reused compaction.
        let mut spliced = (0usize, 0usize);
        for k in (1..hashes.len()).rev() {
            if let Some((len, replacement)) = self.prefixes.get(hashes[k])
                && len == k
            {
                // The request as the caller sent it, counted exactly as a
                // fresh compaction counts it: one body, one number,
                // whichever path the turn takes.
                let raw_views = views(self, model, &req.messages, &tool_names(&req.messages));
                before_reuse = Some(total_tokens(self, model, req, &raw_views));
                spliced = (k, replacement.len());
                req.messages.splice(..k, replacement);
                reused = true;
                break;
            }
        }
        if !force && !reused {
            // Far from the threshold (even counting one token per byte) there is
            // nothing to do, and no tokenizer is run or loaded.
            if !compaction::needs_exact_count(token_upper_bound(req), window, cfg) {
                return None;
            }
        }
        let tool_names = tool_names(&req.messages);
        let v = views(self, model, &req.messages, &tool_names);
        let total = total_tokens(self, model, req, &v);
        let plan_window = if force {
            compaction::overflow_window(total, window, cfg)
        } else {
            window
        };
        let pressure = compaction::pressure(total, plan_window, cfg);
        let compact_now = force || matches!(pressure, Pressure::Compact);
        if !compact_now {
            return reused.then(|| Compacted {
                tier: Tier::None,
                tier_number: 0,
                before_tokens: before_reuse.unwrap_or(total),
                after_tokens: total,
                reused,
                summarizer_calls: 0,
                window,
            });
        }
        let plan = compaction::plan(&v, plan_window, cfg);
        if plan.tier == Tier::None {
            return None;
        }
        let hashes = if hashes.is_empty() {
            prefix_hashes(&req.messages)
        } else {
            hashes
        };
        let sent_len = req.messages.len();
        let (new_msgs, calls, tier) = carry_out(env, turn, req, &plan, &v).await;
        // Everything before `end` (in the messages as sent) was replaced; the rest is unchanged.
        let end = region_end(&plan).max(spliced.1);
        let replaced_len = new_msgs.len() - (sent_len - end);
        req.messages = new_msgs;
        // Remember it under the caller's own messages, so the next turn finds it.
        let raw_len = spliced.0 + (end - spliced.1);
        self.prefixes.put(
            hashes[raw_len],
            raw_len,
            req.messages[..replaced_len].to_vec(),
        );
        let after_v = views(self, model, &req.messages, &tool_names);
        let after = total_tokens(self, model, req, &after_v);
        Some(Compacted {
            tier,
            tier_number: tier.number(),
            before_tokens: before_reuse.unwrap_or(total).max(total),
            after_tokens: after,
            reused,
            summarizer_calls: calls,
            window,
        })
    }

    /// Emits `agent.compacted` for a compaction.
    pub fn emit(&self, turn: &Turn, c: &Compacted) {
        let mut ev = self
            .emit
            .event(EventKind::AgentCompacted)
            .agent(&turn.agent)
            .turn(&turn.id)
            .payload(serde_json::to_value(c).unwrap_or_default());
        if let Some(t) = &turn.task {
            ev = ev.task(t);
        }
        self.emit.emit(ev);
    }
}

/// Token counts by (tokenizer family, text hash), bounded, oldest forgotten first.
#[derive(Default)]
pub struct TokenCache {
    map: Bounded<u32>,
}

impl TokenCache {
    /// Counts `text` for `model`, from the cache when it was counted before.
    pub fn count(&self, tokenizer: &hale_tokens::Tokenizer, model: &str, text: &str) -> u32 {
        if text.len() < TOKEN_CACHE_MIN_CHARS {
            return tokenizer.count(model, text);
        }
        let family = models::tokenizer_family(model);
        let mut h = DefaultHasher::new();
        family.hash(&mut h);
        text.hash(&mut h);
        let key = h.finish();
        if let Some(n) = self.map.lock().expect("token cache lock").0.get(&key) {
            return *n;
        }
        let n = tokenizer.count_family(family, text);
        let mut g = self.map.lock().expect("token cache lock");
        let (map, order) = &mut *g;
        if map.insert(key, n).is_none() {
            order.push_back(key);
        }
        while order.len() > TOKEN_CACHE_ENTRIES {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
        n
    }
}

/// A bounded map: entries and their insertion order (oldest first).
type Bounded<V> = Mutex<(HashMap<u64, V>, VecDeque<u64>)>;

/// Stored compactions: prefix hash → (prefix length, replacement messages).
#[derive(Default)]
pub struct PrefixCache {
    map: Bounded<(usize, Vec<Message>)>,
}

impl PrefixCache {
    fn get(&self, key: u64) -> Option<(usize, Vec<Message>)> {
        self.map
            .lock()
            .expect("prefix cache lock")
            .0
            .get(&key)
            .cloned()
    }

    fn put(&self, key: u64, len: usize, replacement: Vec<Message>) {
        let mut g = self.map.lock().expect("prefix cache lock");
        let (map, order) = &mut *g;
        if map.insert(key, (len, replacement)).is_none() {
            order.push_back(key);
        }
        while order.len() > PREFIX_CACHE_ENTRIES {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// How many compactions are stored.
    pub fn len(&self) -> usize {
        self.map.lock().expect("prefix cache lock").0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The hash of every prefix: `h[k]` covers `msgs[..k]`.
fn prefix_hashes(msgs: &[Message]) -> Vec<u64> {
    let mut out = Vec::with_capacity(msgs.len() + 1);
    let mut h = DefaultHasher::new();
    out.push(h.finish());
    for m in msgs {
        // serde_json of a Message is canonical for our own types.
        serde_json::to_string(m).unwrap_or_default().hash(&mut h);
        out.push(h.finish());
    }
    out
}

fn role_of(m: &Message) -> MsgRole {
    match m.role {
        Role::System => MsgRole::System,
        Role::User => MsgRole::User,
        Role::Assistant => MsgRole::Assistant,
        Role::Tool => MsgRole::Tool,
    }
}

/// Counts one text for `model`: exact for OpenAI families, approximate otherwise.
fn count(c: &Compaction, model: &str, text: &str) -> u32 {
    c.tokens.count(&c.tokenizer, model, text)
}

fn views(
    c: &Compaction,
    model: &str,
    msgs: &[Message],
    tool_names: &HashMap<String, String>,
) -> Vec<MsgView> {
    msgs.iter()
        .map(|m| {
            let text = m.joined_text();
            let mut tool_call_ids = Vec::new();
            let mut tool_result_for = None;
            let mut args_tokens = 0;
            for p in &m.content {
                match p {
                    Part::ToolCall { id, arguments, .. } => {
                        tool_call_ids.push(id.clone());
                        args_tokens += count(c, model, arguments);
                    }
                    Part::ToolResult { tool_call_id, .. } => {
                        tool_result_for = Some(tool_call_id.clone())
                    }
                    Part::Text { .. } | Part::Opaque { .. } => {}
                }
            }
            let tool_name = tool_result_for
                .as_ref()
                .and_then(|id| tool_names.get(id).cloned());
            MsgView {
                role: role_of(m),
                tokens: count(c, model, &text) + args_tokens + hale_tokens::TOKENS_PER_MESSAGE,
                chars: text.chars().count(),
                tool_call_ids,
                tool_result_for,
                tool_name,
            }
        })
        .collect()
}

/// Total tokens of a request for `model`.
fn total_tokens(c: &Compaction, model: &str, req: &ChatRequest, v: &[MsgView]) -> u64 {
    let system = req
        .system
        .as_deref()
        .map(|s| count(c, model, s))
        .unwrap_or(0);
    u64::from(system)
        + v.iter().map(|m| u64::from(m.tokens)).sum::<u64>()
        + u64::from(hale_tokens::TOKENS_PER_REPLY)
}

/// The most tokens `req` can count in any family, from its text sizes
/// ([`compaction::token_upper_bound`]): the texts [`views`] and
/// [`total_tokens`] count, with the per-message and per-reply overheads.
fn token_upper_bound(req: &ChatRequest) -> u64 {
    let (mut bytes, mut texts) = (0u64, 0u64);
    if let Some(s) = req.system.as_deref() {
        bytes += s.len() as u64;
        texts += 1;
    }
    for m in &req.messages {
        texts += 1;
        for p in &m.content {
            bytes += match p {
                Part::Text { text } => text.len() as u64,
                Part::ToolResult { content, .. } => content.len() as u64,
                Part::ToolCall { arguments, .. } => {
                    texts += 1;
                    arguments.len() as u64
                }
                Part::Opaque { .. } => 0,
            };
        }
    }
    compaction::token_upper_bound(
        bytes,
        texts,
        u64::from(hale_tokens::TOKENS_PER_MESSAGE),
        u64::from(hale_tokens::TOKENS_PER_REPLY),
    )
}

/// The context window of `target` (provider overrides first).
pub fn window_of(provider: Option<&ProviderConfig>, model: &str) -> u32 {
    let empty = Default::default();
    let overrides = provider.map(|p| &p.context_windows).unwrap_or(&empty);
    models::context_window(model, overrides)
}

/// Whether `model`'s window is known (in the table or overridden).
pub fn window_known(provider: Option<&ProviderConfig>, model: &str) -> bool {
    provider.is_some_and(|p| p.context_windows.contains_key(model))
        || models::lookup(model).is_some()
}

/// The end (exclusive) of the messages a plan touches.
fn region_end(plan: &Plan) -> usize {
    let mut end = 0;
    for &i in &plan.strip {
        end = end.max(i + 1);
    }
    for r in &plan.batches {
        end = end.max(r.end);
    }
    if let Some(r) = &plan.oldest_half {
        end = end.max(r.end);
    }
    end
}

fn tool_names(msgs: &[Message]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for m in msgs {
        for p in &m.content {
            if let Part::ToolCall { id, name, .. } = p {
                out.insert(id.clone(), name.clone());
            }
        }
    }
    out
}

/// Carries out a plan; returns the new messages, summariser calls made, and the tier used.
async fn carry_out(
    env: Env<'_>,
    turn: &Turn,
    req: &ChatRequest,
    plan: &Plan,
    v: &[MsgView],
) -> (Vec<Message>, u32, Tier) {
    let mut msgs = req.messages.clone();
    // Tier 1 (and the stripping that comes with every tier).
    for &i in &plan.strip {
        if let Some(m) = msgs.get_mut(i) {
            for p in &mut m.content {
                if let Part::ToolResult { content, .. } = p {
                    *content =
                        compaction::placeholder(v[i].tool_name.as_deref(), content.chars().count());
                }
            }
        }
    }
    let mut calls = 0;
    match plan.tier {
        Tier::None | Tier::StripToolResults => (msgs, calls, plan.tier),
        Tier::SummarizeBatches => {
            let (Some(first), Some(last)) = (plan.batches.first(), plan.batches.last()) else {
                return (msgs, calls, plan.tier);
            };
            let mut summaries = Vec::new();
            for r in &plan.batches {
                calls += 1;
                match summarise(env, turn, req, &msgs[r.clone()]).await {
                    Some(s) => summaries.push(Message::text(
                        Role::System,
                        format!(
                            "[Summary by hale of earlier messages {}–{}] {s}",
                            r.start + 1,
                            r.end
                        ),
                    )),
                    None => {
                        let d = compaction::fallback_to_digest(plan);
                        return (digest_into(msgs, &d), calls, Tier::Digest);
                    }
                }
            }
            msgs.splice(first.start..last.end, summaries);
            (msgs, calls, plan.tier)
        }
        Tier::SummarizeOldestHalf => {
            let Some(r) = plan.oldest_half.clone() else {
                return (msgs, calls, plan.tier);
            };
            calls += 1;
            match summarise(env, turn, req, &msgs[r.clone()]).await {
                Some(s) => {
                    let summary = Message::text(
                        Role::System,
                        format!(
                            "[Summary by hale of the first {} messages] {s}",
                            r.end - r.start
                        ),
                    );
                    msgs.splice(r, [summary]);
                    (msgs, calls, plan.tier)
                }
                None => {
                    let d = compaction::fallback_to_digest(plan);
                    (digest_into(msgs, &d), calls, Tier::Digest)
                }
            }
        }
        Tier::Digest => (digest_into(msgs, plan), calls, Tier::Digest),
    }
}

/// Tier 4: replaces the plan's range with a plain digest.
fn digest_into(mut msgs: Vec<Message>, plan: &Plan) -> Vec<Message> {
    let Some(r) = plan.oldest_half.clone() else {
        return msgs;
    };
    let texts: Vec<(MsgRole, String)> = msgs[r.clone()]
        .iter()
        .map(|m| {
            let names: Vec<&str> = m
                .content
                .iter()
                .filter_map(|p| match p {
                    Part::ToolCall { name, .. } => Some(name.as_str()),
                    Part::Text { .. } | Part::Opaque { .. } | Part::ToolResult { .. } => None,
                })
                .collect();
            (
                role_of(m),
                compaction::digest_entry(&m.joined_text(), &names),
            )
        })
        .collect();
    let lines: Vec<(MsgRole, &str)> = texts.iter().map(|(r, t)| (*r, t.as_str())).collect();
    let digest = compaction::digest(&lines);
    msgs.splice(r, [Message::text(Role::System, digest)]);
    msgs
}

/// One summariser call through the attempt loop. `None` when it failed.
async fn summarise(
    env: Env<'_>,
    turn: &Turn,
    req: &ChatRequest,
    msgs: &[Message],
) -> Option<String> {
    let mut transcript = String::new();
    for m in msgs {
        let role = role_of(m).as_str();
        let mut text = m.joined_text();
        for p in &m.content {
            if let Part::ToolCall {
                name, arguments, ..
            } = p
            {
                text.push_str(&format!(" [called {name}({arguments})]"));
            }
        }
        let text: String = text.chars().take(TRANSCRIPT_MESSAGE_CHARS).collect();
        transcript.push_str(&format!("{role}: {text}\n"));
    }
    let model = env
        .cfg
        .compaction
        .summarizer_model
        .clone()
        .unwrap_or_else(|| req.model.clone());
    let sreq = ChatRequest {
        model: model.clone(),
        system: Some(
            "You are hale's context compactor. Summarize the conversation excerpt you are given: keep facts, \
             decisions, open questions, file names, identifiers and numbers; drop chatter. Answer with the summary only."
                .into(),
        ),
        messages: vec![Message::text(Role::User, format!("Summarize these messages:\n\n{transcript}"))],
        tools: Vec::new(),
        tool_choice: None,
        max_tokens: Some(env.cfg.compaction.summarizer_max_tokens),
        temperature: Some(0.0),
        top_p: None,
        stop: Vec::new(),
        stream: false,
        include_usage: false,
        extra: Default::default(),
        dialect: Dialect::OpenAi,
        origin: None,
    };
    let targets = select::plan(env.cfg, &turn.agent, &model).ok()?;
    let id = format!("{}-summary", turn.id);
    let mut st = Turn::new(env.cfg, id, turn.agent.clone(), turn.task.clone(), targets);
    st.deadline = st.started + SUMMARIZER_DEADLINE.min(env.cfg.retry.turn_deadline);
    // Marked for the provider as hale's own compaction request.
    st.purpose = crate::upstream::Purpose::Compaction;
    match turn::run(env, &mut st, &sreq, None, None).await {
        Ok((_, Served::Complete(r))) => {
            let s = r.answer.text();
            (!s.trim().is_empty()).then_some(s)
        }
        Ok((_, Served::Stream(_))) | Err(_) => None,
    }
}
