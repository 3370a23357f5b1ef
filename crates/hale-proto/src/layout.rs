//! The layout of a stream's last text-only event, for reading the events
//! after it by their text alone.
//!
//! A provider streams one small JSON object per token, all alike but for the
//! text: an OpenAI chunk (`{"id":…,"choices":[{"index":0,"delta":{"content":"…"}…}]}`),
//! an Anthropic `content_block_delta` (`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"…"}}`).
//! Once a dialect's decoder has read such an event in full and found it
//! text-only, it keeps its bytes and the span of its text here. An event
//! whose bytes before the text's opening quote and from its closing quote
//! on equal this one's is the same event with another text: only that
//! string is read (~0.5k instructions instead of ~4.5k for the whole
//! object; callgrind, BENCHMARKS.md's git history). This is sound because
//! replacing one JSON string token by another leaves every other token, and
//! so every other field's value, as it was; an event that differs anywhere
//! else is read the whole way. What "text-only" means, and what such an
//! event decodes to, is each dialect's (its property tests compare the
//! whole stream with the `Value` path).

use super::scan::Scan;
use std::borrow::Cow;

/// A text-only event's bytes and the place of its text.
#[derive(Debug)]
pub(crate) struct TextLayout {
    /// The event's data, as the decoder read it (trimmed).
    data: String,
    /// The text's opening quote.
    open: usize,
    /// The text's closing quote.
    close: usize,
}

impl TextLayout {
    /// The layout of `data`, whose text-only field holds `text`, a slice
    /// borrowed from `data` (a text with escapes is a copy: no layout).
    pub(crate) fn of(data: &str, text: &str) -> Option<Self> {
        // Where `text` starts in `data`, if it lies within it (a live copy
        // elsewhere cannot overlap `data`).
        let start = (text.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        let close = start + text.len();
        if close >= data.len() {
            return None;
        }
        let open = start.checked_sub(1)?;
        let b = data.as_bytes();
        (b.get(open) == Some(&b'"') && b.get(close) == Some(&b'"')).then(|| Self {
            data: data.to_string(),
            open,
            close,
        })
    }

    /// The text of `data` if `data` is this layout's event with another
    /// text: the same bytes up to the text's opening quote and from its
    /// closing quote on, and a well-formed string between them.
    pub(crate) fn text_of<'a>(&self, data: &'a str) -> Option<Cow<'a, str>> {
        let head = self.data.get(..=self.open)?;
        let tail = self.data.get(self.close..)?;
        if data.len() < head.len() + tail.len() || !data.starts_with(head) || !data.ends_with(tail)
        {
            return None;
        }
        let (text, after) = Scan::string_at(data, self.open)?;
        (after == data.len() - tail.len() + 1).then_some(text)
    }
}

/// A JSON string's body as a provider might send it, or not quite:
/// escapes, surrogates paired and lone, a bad escape, a control character,
/// a bare quote (which ends the string early), and `tails` (a layout's own
/// bytes after its text). For the dialects' layout property tests.
#[cfg(test)]
pub(crate) fn text_body(
    tails: &'static [&'static str],
) -> proptest::strategy::BoxedStrategy<String> {
    use proptest::prelude::*;
    let odd = [
        r"\n",
        r#"\""#,
        r"\\",
        r"\u00e9",
        r"\ud83d\ude00",
        r"\ud800",
        r"\udc00x",
        r"\x",
        "\u{1}",
        "é",
        "\"",
        "w",
    ];
    let parts: Vec<&'static str> = odd.iter().chain(tails).copied().collect();
    prop_oneof![
        4 => "[a-z ]{0,6}",
        2 => proptest::collection::vec(proptest::sample::select(parts), 0..5)
            .prop_map(|parts| parts.concat()),
    ]
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_reads_the_text_of_an_event_alike_but_for_it() {
        let first = r#"{"a":1,"t":"one","z":[true]}"#;
        let l = TextLayout::of(first, &first[12..15]).expect("a borrowed text");
        let read = |d| l.text_of(d).map(Cow::into_owned);
        assert_eq!(
            read(r#"{"a":1,"t":"two words","z":[true]}"#).as_deref(),
            Some("two words")
        );
        assert_eq!(read(r#"{"a":1,"t":"","z":[true]}"#).as_deref(), Some(""));
        assert_eq!(
            read(r#"{"a":1,"t":"a\"b\n","z":[true]}"#).as_deref(),
            Some("a\"b\n")
        );
        // Another byte outside the text, a string that ends early, a text
        // that is no string, a lone surrogate: not this layout.
        assert_eq!(read(r#"{"a":2,"t":"two","z":[true]}"#), None);
        assert_eq!(read(r#"{"a":1,"t":"x","y":"","z":[true]}"#), None);
        assert_eq!(read(r#"{"a":1,"t":"x	","z":[true]}"#), None);
        assert_eq!(read(r#"{"a":1,"t":"\ud800","z":[true]}"#), None);
        assert_eq!(read(r#"{"a":1,"t":""#), None);
        // A text that is not a slice of the data has no layout.
        assert!(TextLayout::of(first, "one").is_none());
    }
}
