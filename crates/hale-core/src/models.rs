//! The table of known models: context window, default price, tokenizer.
//!
//! Compaction needs a model's context window and budgets need its
//! price; both can be overridden per provider/model in the config, and the
//! overrides win. A model id is matched exactly, then by the longest known
//! prefix that ends at a separator (`-`, `_`, `:`, `@`, `/`), so dated or
//! tagged ids resolve to their family — `gpt-4o-2024-08-06` → `gpt-4o`,
//! `claude-sonnet-4-20250514` → `claude-sonnet-4` — while `gpt-4o` never
//! falls back to `gpt-4`. Matching ignores ASCII case and, when nothing
//! matches, retries with any `vendor/` path stripped
//! (`meta-llama/llama-3.1-70b-instruct`). An unknown model gets
//! [`UNKNOWN_CONTEXT_WINDOW`], deliberately small: compacting too early costs a
//! summary, overflowing costs a failed turn.
//!
//! Prices are list prices in USD per million tokens at the time of writing;
//! they are defaults for budgets, not invoices — override them in `prices:`.

use crate::config::Price;
use std::collections::BTreeMap;

/// The context window assumed for a model not in the table and not overridden.
/// Conservative on purpose (the smallest window of any current chat model).
pub const UNKNOWN_CONTEXT_WINDOW: u32 = 8_192;

/// Which tokenizer counts a model's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenizerFamily {
    /// tiktoken `o200k_base`: gpt-4o, gpt-4.1, gpt-5, o-series.
    O200k,
    /// tiktoken `cl100k_base`: gpt-4, gpt-3.5.
    Cl100k,
    /// Any other model: a character-based estimate with a safety margin.
    Approximate,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelInfo {
    /// The id or id prefix matched.
    pub id: &'static str,
    pub context_window: u32,
    /// Default price, USD per million tokens; `None` when there is no list price.
    pub price: Option<Price>,
    pub tokenizer: TokenizerFamily,
}

const fn m(
    id: &'static str,
    context_window: u32,
    input: f64,
    output: f64,
    tokenizer: TokenizerFamily,
) -> ModelInfo {
    ModelInfo {
        id,
        context_window,
        price: Some(Price {
            input_per_mtok: input,
            output_per_mtok: output,
        }),
        tokenizer,
    }
}

use TokenizerFamily::{Approximate as A, Cl100k as C, O200k as O};

const K200: u32 = 200_000;
const K128: u32 = 128_000;
const GPT41: u32 = 1_047_576;
const M1: u32 = 1_048_576;

/// Every known model.
pub const MODELS: &[ModelInfo] = &[
    // Anthropic
    m("claude-opus-4-1", K200, 15.0, 75.0, A),
    m("claude-opus-4", K200, 15.0, 75.0, A),
    m("claude-sonnet-4-5", K200, 3.0, 15.0, A),
    m("claude-sonnet-4", K200, 3.0, 15.0, A),
    m("claude-haiku-4-5", K200, 1.0, 5.0, A),
    m("claude-3-7-sonnet", K200, 3.0, 15.0, A),
    m("claude-3-5-sonnet", K200, 3.0, 15.0, A),
    m("claude-3-5-haiku", K200, 0.8, 4.0, A),
    m("claude-3-opus", K200, 15.0, 75.0, A),
    m("claude-3-haiku", K200, 0.25, 1.25, A),
    // OpenAI
    m("gpt-4o", K128, 2.5, 10.0, O),
    m("gpt-4o-mini", K128, 0.15, 0.6, O),
    m("gpt-4.1", GPT41, 2.0, 8.0, O),
    m("gpt-4.1-mini", GPT41, 0.4, 1.6, O),
    m("gpt-4.1-nano", GPT41, 0.1, 0.4, O),
    m("gpt-4", 8_192, 30.0, 60.0, C),
    m("gpt-4-turbo", K128, 10.0, 30.0, C),
    m("gpt-3.5-turbo", 16_385, 0.5, 1.5, C),
    m("o1", K200, 15.0, 60.0, O),
    m("o1-mini", K128, 1.1, 4.4, O),
    m("o3", K200, 2.0, 8.0, O),
    m("o3-mini", K200, 1.1, 4.4, O),
    m("o4-mini", K200, 1.1, 4.4, O),
    m("gpt-5", 400_000, 1.25, 10.0, O),
    m("gpt-5-mini", 400_000, 0.25, 2.0, O),
    m("gpt-5-nano", 400_000, 0.05, 0.4, O),
    // Google
    m("gemini-1.5-pro", 2_097_152, 1.25, 5.0, A),
    m("gemini-1.5-flash", M1, 0.075, 0.3, A),
    m("gemini-2.0-flash", M1, 0.1, 0.4, A),
    m("gemini-2.5-pro", M1, 1.25, 10.0, A),
    m("gemini-2.5-flash", M1, 0.3, 2.5, A),
    // Others
    m("deepseek-chat", 65_536, 0.27, 1.1, A),
    m("deepseek-reasoner", 65_536, 0.55, 2.19, A),
    m("qwen-plus", 131_072, 0.4, 1.2, A),
    m("qwen-max", 32_768, 1.6, 6.4, A),
    m("llama-3.1-70b", 131_072, 0.88, 0.88, A),
    m("llama-3.1-8b", 131_072, 0.18, 0.18, A),
    m("mistral-large", 131_072, 2.0, 6.0, A),
];

fn is_separator(c: char) -> bool {
    matches!(c, '-' | '_' | ':' | '@' | '/')
}

/// The item of `items` with the longest key (`key`) that equals `model` or
/// is a prefix of it ending at a separator; failing that, the same for the
/// part of `model` after its last `/`. The item itself, so a caller does not
/// look its key up again.
fn best_match<T, I>(model: &str, items: I, key: impl Fn(&T) -> &str) -> Option<T>
where
    I: IntoIterator<Item = T> + Clone,
    T: Copy,
{
    let try_one = |name: &str| -> Option<T> {
        let mut best: Option<(T, usize)> = None;
        for item in items.clone() {
            let k = key(&item);
            let klen = k.len();
            let matches = name.len() >= klen
                && name.is_char_boundary(klen)
                && name[..klen].eq_ignore_ascii_case(k)
                && name[klen..].chars().next().is_none_or(is_separator);
            if matches && best.is_none_or(|(_, b)| b < klen) {
                best = Some((item, klen));
            }
        }
        best.map(|(item, _)| item)
    };
    let name = model.trim();
    try_one(name).or_else(|| {
        let (_, tail) = name.rsplit_once('/')?;
        try_one(tail)
    })
}

/// The table row for `model`, by exact id or longest prefix.
pub fn lookup(model: &str) -> Option<&'static ModelInfo> {
    best_match(model, MODELS.iter(), |m| m.id)
}

enum Resolved<'a, V> {
    Override(&'a V),
    Table(&'static ModelInfo),
    Unknown,
}

/// The most specific match among the overrides and the table; on a tie the override wins.
fn resolve<'a, V>(model: &str, overrides: &'a BTreeMap<String, V>) -> Resolved<'a, V> {
    let over = best_match(model, overrides.iter(), |(k, _)| k.as_str());
    let table = lookup(model);
    match (over, table) {
        (Some((k, v)), Some(m)) if k.len() >= m.id.len() => Resolved::Override(v),
        (Some(_), Some(m)) | (None, Some(m)) => Resolved::Table(m),
        (Some((_, v)), None) => Resolved::Override(v),
        (None, None) => Resolved::Unknown,
    }
}

/// The context window of `model`: the most specific of the overrides (same
/// matching, winning ties) and the table, else [`UNKNOWN_CONTEXT_WINDOW`].
pub fn context_window(model: &str, overrides: &BTreeMap<String, u32>) -> u32 {
    match resolve(model, overrides) {
        Resolved::Override(&w) => w,
        Resolved::Table(m) => m.context_window,
        Resolved::Unknown => UNKNOWN_CONTEXT_WINDOW,
    }
}

/// The price of `model`: the most specific of the overrides (winning ties)
/// and the table's list prices.
pub fn price(model: &str, overrides: &BTreeMap<String, Price>) -> Option<Price> {
    match resolve(model, overrides) {
        Resolved::Override(&p) => Some(p),
        Resolved::Table(m) => m.price,
        Resolved::Unknown => None,
    }
}

/// Which tokenizer counts `model`'s tokens; unknown models are approximated.
pub fn tokenizer_family(model: &str) -> TokenizerFamily {
    lookup(model).map_or(TokenizerFamily::Approximate, |m| m.tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_windows_of_known_models() {
        let none = BTreeMap::new();
        let rows: &[(&str, u32)] = &[
            ("claude-sonnet-4", 200_000),
            ("claude-sonnet-4-5", 200_000),
            ("claude-opus-4", 200_000),
            ("claude-opus-4-1", 200_000),
            ("claude-3-5-sonnet", 200_000),
            ("claude-3-5-haiku", 200_000),
            ("claude-haiku-4-5", 200_000),
            ("gpt-4o", 128_000),
            ("gpt-4o-mini", 128_000),
            ("gpt-4.1", 1_047_576),
            ("gpt-4.1-mini", 1_047_576),
            ("gpt-4.1-nano", 1_047_576),
            ("gpt-4", 8_192),
            ("gpt-4-turbo", 128_000),
            ("gpt-3.5-turbo", 16_385),
            ("o1", 200_000),
            ("o3", 200_000),
            ("o4-mini", 200_000),
            ("gpt-5", 400_000),
            ("gpt-5-mini", 400_000),
            ("gpt-5-nano", 400_000),
            ("gemini-1.5-pro", 2_097_152),
            ("gemini-1.5-flash", 1_048_576),
            ("gemini-2.5-pro", 1_048_576),
            ("gemini-2.5-flash", 1_048_576),
            ("deepseek-chat", 65_536),
            ("deepseek-reasoner", 65_536),
            ("qwen-plus", 131_072),
            ("qwen-max", 32_768),
            ("llama-3.1-70b", 131_072),
            ("mistral-large", 131_072),
        ];
        for &(model, window) in rows {
            assert_eq!(context_window(model, &none), window, "{model}");
        }
    }

    #[test]
    fn dated_and_tagged_ids_match_the_longest_prefix() {
        let none = BTreeMap::new();
        let rows: &[(&str, &str)] = &[
            ("gpt-4o-2024-08-06", "gpt-4o"),
            ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
            ("claude-sonnet-4-20250514", "claude-sonnet-4"),
            ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
            ("claude-opus-4-1-20250805", "claude-opus-4-1"),
            ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
            ("gpt-4-0613", "gpt-4"),
            ("gpt-4-turbo-2024-04-09", "gpt-4-turbo"),
            ("gpt-4.1-2025-04-14", "gpt-4.1"),
            ("GPT-4O", "gpt-4o"),
            ("meta-llama/llama-3.1-70b-instruct", "llama-3.1-70b"),
            ("mistral-large-latest", "mistral-large"),
            ("o3-mini-2025-01-31", "o3-mini"),
        ];
        for &(model, id) in rows {
            assert_eq!(lookup(model).map(|m| m.id), Some(id), "{model}");
        }
        assert_eq!(context_window("gpt-4o-2024-08-06", &none), 128_000);
    }

    #[test]
    fn a_prefix_must_end_at_a_separator() {
        // "gpt-4" must not swallow "gpt-4o…" or "gpt-4.5…"; "o1" must not match "o1x".
        assert_eq!(lookup("gpt-4oz"), None);
        assert_eq!(lookup("gpt-4.5-preview"), None);
        assert_eq!(lookup("o1x"), None);
    }

    #[test]
    fn unknown_models_get_the_conservative_fallback() {
        let none = BTreeMap::new();
        assert_eq!(
            context_window("my-local-model", &none),
            UNKNOWN_CONTEXT_WINDOW
        );
        assert_eq!(price("my-local-model", &BTreeMap::new()), None);
        assert_eq!(
            tokenizer_family("my-local-model"),
            TokenizerFamily::Approximate
        );
    }

    #[test]
    fn overrides_win_and_match_by_prefix_too() {
        let mut w = BTreeMap::new();
        w.insert("gpt-4o".to_string(), 64_000);
        w.insert("my-model".to_string(), 32_000);
        assert_eq!(context_window("gpt-4o-2024-08-06", &w), 64_000);
        assert_eq!(context_window("my-model", &w), 32_000);
        assert_eq!(context_window("gpt-4o-mini", &w), 128_000);
        let mut p = BTreeMap::new();
        let cheap = Price {
            input_per_mtok: 0.01,
            output_per_mtok: 0.02,
        };
        p.insert("claude-sonnet-4".to_string(), cheap);
        assert_eq!(price("claude-sonnet-4-20250514", &p), Some(cheap));
        assert_eq!(
            price("claude-opus-4", &p),
            Some(Price {
                input_per_mtok: 15.0,
                output_per_mtok: 75.0
            })
        );
    }

    #[test]
    fn tokenizer_families() {
        let rows: &[(&str, TokenizerFamily)] = &[
            ("gpt-4o", TokenizerFamily::O200k),
            ("gpt-4o-mini-2024-07-18", TokenizerFamily::O200k),
            ("gpt-4.1-mini", TokenizerFamily::O200k),
            ("gpt-5", TokenizerFamily::O200k),
            ("o1", TokenizerFamily::O200k),
            ("o3-mini", TokenizerFamily::O200k),
            ("o4-mini", TokenizerFamily::O200k),
            ("gpt-4", TokenizerFamily::Cl100k),
            ("gpt-4-turbo", TokenizerFamily::Cl100k),
            ("gpt-3.5-turbo-0125", TokenizerFamily::Cl100k),
            ("claude-sonnet-4", TokenizerFamily::Approximate),
            ("gemini-2.5-pro", TokenizerFamily::Approximate),
        ];
        for &(model, fam) in rows {
            assert_eq!(tokenizer_family(model), fam, "{model}");
        }
    }

    #[test]
    fn every_row_has_a_positive_window_and_a_unique_id() {
        let mut ids = std::collections::BTreeSet::new();
        for m in MODELS {
            assert!(m.context_window > 0, "{}", m.id);
            assert!(ids.insert(m.id), "duplicate {}", m.id);
        }
    }
}
