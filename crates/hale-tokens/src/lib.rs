//! Token counting for compaction and budgets.
//!
//! OpenAI models are counted exactly with tiktoken's `o200k_base` (gpt-4o,
//! gpt-4.1, gpt-5, o-series) and `cl100k_base` (gpt-4, gpt-3.5); which one is
//! decided by [`hale_core::models::tokenizer_family`]. Every other model
//! (Claude, Gemini, Llama, …) has no public tokenizer we can run offline, so it
//! is estimated by [`Tokenizer::approximate`], which errs high: compacting a
//! little early costs a summary, overflowing the window costs a failed turn.
//!
//! A loaded BPE table holds memory (o200k ≈ 46 MB, cl100k ≈ 24 MB) and takes
//! 0.1–0.4 s to load, so each is loaded at most once per process, lazily and
//! thread-safely (`std::sync::OnceLock`), on the first count in its family —
//! never at start-up: a gateway serving only Claude models never loads one,
//! and one serving gpt-4o loads only o200k. Every model of a family (gpt-4o,
//! gpt-4.1, gpt-5, the o-series) shares the one table of its encoding. The
//! gateway counts only requests that may be near their compaction threshold
//! (`hale_core::compaction::needs_exact_count`), so a table is loaded the
//! first time such a request arrives. [`Tokenizer`] itself is a zero-sized
//! handle: cloning and sharing it across threads costs nothing. Text is
//! encoded as ordinary text — special-token strings such as `<|endoftext|>`
//! inside a message are counted as the text they are, never interpreted, so
//! no input can make counting fail. Should a table ever fail to load, counts
//! fall back to the approximation instead of failing the turn.

use hale_core::models::{TokenizerFamily, tokenizer_family};
use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

/// Tokens added per chat message for the role and separators (OpenAI cookbook,
/// "How to count tokens with tiktoken", gpt-3.5-turbo-0613 and later).
pub const TOKENS_PER_MESSAGE: u32 = 3;
/// Tokens added once per request: every reply is primed with `<|start|>assistant<|message|>`.
pub const TOKENS_PER_REPLY: u32 = 3;
/// ASCII characters per token assumed by [`Tokenizer::approximate`].
pub const APPROX_CHARS_PER_TOKEN: f64 = 3.5;
/// Safety margin added by [`Tokenizer::approximate`].
pub const APPROX_MARGIN: f64 = 0.10;

static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();
static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();

fn o200k() -> Option<&'static CoreBPE> {
    O200K
        .get_or_init(|| tiktoken_rs::o200k_base().ok())
        .as_ref()
}

fn cl100k() -> Option<&'static CoreBPE> {
    CL100K
        .get_or_init(|| tiktoken_rs::cl100k_base().ok())
        .as_ref()
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Counts tokens the way each model family does.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokenizer {
    _private: (),
}

impl Tokenizer {
    /// A handle; the BPE tables load on first use (or [`Tokenizer::warm`]).
    pub fn new() -> Self {
        Self { _private: () }
    }

    /// Loads both BPE tables now (benchmarks that time counting alone).
    pub fn warm(&self) {
        let _ = (o200k(), cl100k());
    }

    /// The encodings whose table is loaded in this process, for metrics and
    /// tests of laziness.
    pub fn loaded(&self) -> Vec<TokenizerFamily> {
        let mut out = Vec::new();
        if O200K.get().is_some() {
            out.push(TokenizerFamily::O200k);
        }
        if CL100K.get().is_some() {
            out.push(TokenizerFamily::Cl100k);
        }
        out
    }

    /// Tokens of `text` for `model`.
    pub fn count(&self, model: &str, text: &str) -> u32 {
        self.count_family(tokenizer_family(model), text)
    }

    /// Tokens of `text` in a given family.
    pub fn count_family(&self, family: TokenizerFamily, text: &str) -> u32 {
        let bpe = match family {
            TokenizerFamily::O200k => o200k(),
            TokenizerFamily::Cl100k => cl100k(),
            TokenizerFamily::Approximate => None,
        };
        match bpe {
            Some(bpe) => to_u32(bpe.count_ordinary(text)),
            None => Self::approximate(text),
        }
    }

    /// Tokens of a chat request whose messages have these texts, per-message
    /// overhead included: [`TOKENS_PER_MESSAGE`] per message plus
    /// [`TOKENS_PER_REPLY`], as OpenAI's cookbook counts them.
    pub fn count_messages<'a>(&self, model: &str, texts: impl IntoIterator<Item = &'a str>) -> u32 {
        let family = tokenizer_family(model);
        texts.into_iter().fold(TOKENS_PER_REPLY, |acc, t| {
            acc.saturating_add(TOKENS_PER_MESSAGE)
                .saturating_add(self.count_family(family, t))
        })
    }

    /// An estimate for models without a tokenizer here: ASCII characters / 3.5
    /// ([`APPROX_CHARS_PER_TOKEN`]) plus one token per non-ASCII character
    /// (CJK, accents and emoji rarely share a token), rounded up, then +10 %
    /// ([`APPROX_MARGIN`]) rounded up. For ASCII English text (≈ 4 characters
    /// per token in every current BPE) it stays above the real count.
    pub fn approximate(text: &str) -> u32 {
        let (mut ascii, mut other) = (0u64, 0u64);
        for c in text.chars() {
            if c.is_ascii() {
                ascii += 1;
            } else {
                other += 1;
            }
        }
        let base = (ascii as f64 / APPROX_CHARS_PER_TOKEN).ceil() + other as f64;
        let with_margin = (base * (1.0 + APPROX_MARGIN)).ceil();
        if with_margin >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            with_margin as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENGLISH: &[&str] = &[
        "hello world",
        "The quick brown fox jumps over the lazy dog.",
        "Please review the work completed so far and summarise what is left to do.",
        "A circuit breaker stops calling a provider that keeps failing, and lets a \
         single trial call through after a while to see whether it has recovered.",
        "In the beginning of the project we wrote down the contracts: the command \
         line, the HTTP endpoints, the configuration file and the events. Everything \
         else followed from those, one small crate at a time.",
    ];

    #[test]
    fn known_counts_match_tiktoken() {
        let t = Tokenizer::new();
        // Values from Python tiktoken (and OpenAI's cookbook for cl100k).
        assert_eq!(t.count_family(TokenizerFamily::O200k, "hello world"), 2);
        assert_eq!(t.count_family(TokenizerFamily::Cl100k, "hello world"), 2);
        assert_eq!(
            t.count_family(TokenizerFamily::Cl100k, "tiktoken is great!"),
            6
        );
        assert_eq!(
            t.count_family(TokenizerFamily::Cl100k, "antidisestablishmentarianism"),
            6
        );
        assert_eq!(t.count_family(TokenizerFamily::Cl100k, "2 + 2 = 4"), 7);
        assert_eq!(
            t.count_family(TokenizerFamily::Cl100k, "お誕生日おめでとう"),
            9
        );
        assert_eq!(t.count("gpt-4o-2024-08-06", "hello world"), 2);
        assert_eq!(t.count("gpt-3.5-turbo", "hello world"), 2);
        assert_eq!(t.count("gpt-4o", ""), 0);
    }

    #[test]
    fn special_token_text_is_counted_not_interpreted() {
        let t = Tokenizer::new();
        let n = t.count("gpt-4o", "<|endoftext|>");
        assert!(n > 1, "counted as ordinary text: {n}");
    }

    #[test]
    fn the_model_picks_the_encoding() {
        let t = Tokenizer::new();
        let text = "お誕生日おめでとう — tokenizers differ on this";
        assert_eq!(
            t.count("gpt-4o", text),
            t.count_family(TokenizerFamily::O200k, text)
        );
        assert_eq!(
            t.count("gpt-4", text),
            t.count_family(TokenizerFamily::Cl100k, text)
        );
        assert_eq!(
            t.count("claude-sonnet-4", text),
            Tokenizer::approximate(text)
        );
        assert_eq!(t.count("unknown-model", text), Tokenizer::approximate(text));
    }

    #[test]
    fn count_messages_adds_the_cookbook_overhead() {
        let t = Tokenizer::new();
        let texts = [
            "hello world",
            "The quick brown fox jumps over the lazy dog.",
        ];
        let body: u32 = texts.iter().map(|s| t.count("gpt-4o", s)).sum();
        assert_eq!(
            t.count_messages("gpt-4o", texts),
            body + 2 * TOKENS_PER_MESSAGE + TOKENS_PER_REPLY
        );
        assert_eq!(
            t.count_messages("gpt-4o", std::iter::empty()),
            TOKENS_PER_REPLY
        );
    }

    #[test]
    fn approximation_is_at_least_the_real_count_for_english() {
        let t = Tokenizer::new();
        for text in ENGLISH {
            let approx = Tokenizer::approximate(text);
            for fam in [TokenizerFamily::O200k, TokenizerFamily::Cl100k] {
                let real = t.count_family(fam, text);
                assert!(
                    approx >= real,
                    "{fam:?}: approx {approx} < real {real} for {text:?}"
                );
            }
        }
        let long = ENGLISH.join(" ").repeat(50);
        let approx = Tokenizer::approximate(&long);
        let real = t.count_family(TokenizerFamily::O200k, &long);
        assert!(
            approx >= real && f64::from(approx) < f64::from(real) * 1.6,
            "{approx} vs {real}"
        );
    }

    #[test]
    fn approximation_formula() {
        assert_eq!(Tokenizer::approximate(""), 0);
        // 7 ASCII chars → 2 → ×1.1 = 2.2 → 3.
        assert_eq!(Tokenizer::approximate("abcdefg"), 3);
        // 35 chars → 10 → 11.
        assert_eq!(Tokenizer::approximate(&"a".repeat(35)), 11);
        // Non-ASCII: one token each before the margin: 9 → 9.9 → 10.
        assert_eq!(Tokenizer::approximate("お誕生日おめでとう"), 10);
    }

    #[test]
    fn handle_is_shareable_across_threads() {
        let t = Tokenizer::new();
        let handles: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(move || t.count("gpt-4o", "hello world")))
            .collect();
        for h in handles {
            assert_eq!(h.join().ok(), Some(2));
        }
    }
}
