//! A client's string in an upstream URL: one path segment, or refused.
//!
//! Some provider kinds name the model in the URL: Azure's deployment URLs
//! (`/openai/deployments/{deployment}/…`, the model when `deployments`
//! does not map it), Gemini (`/models/{model}:generateContent`), Vertex
//! (`…/models/{model}:rawPredict`) and Bedrock (`/model/{id}/converse`);
//! a tool node's URL names the tool (`{url}/tools/{name}`). Those strings
//! are the client's. Pasted as they came, `gpt-4o/embeddings?api-version=…#`
//! or `../../x` would send the operator's credentials to another endpoint
//! or API version of the operator's resource (docs/operations.md, "Threat model").
//!
//! The rule ([`problem`], [`Segment::new`]):
//!
//! - **Encoded**: every byte outside RFC 3986's unreserved set (`A–Z a–z
//!   0–9 - . _ ~`) is percent-encoded (`/` → `%2F`, `?` → `%3F`, `#` →
//!   `%23`, `%` → `%25`, …), so the string is exactly one segment and can
//!   add no query and no fragment. Vertex keeps `@` as well (its
//!   version separator, `claude-sonnet-4@20250514`), a `pchar` too.
//! - **Refused** when empty (an empty segment is `//`, which servers
//!   collapse), and when any part of it between `/` or `\` is `.` or `..`
//!   — looked at as it came and again after each round of percent-decoding
//!   (`%2e%2e`, `%252e%252e`). Percent-encoding cannot make a dot segment
//!   safe: the URL standard reads `%2e` as `.` (the `url` crate drops or
//!   climbs such a segment), and many servers and proxies decode `%2F` and
//!   `%5C` into separators before they normalise the path. No model or
//!   tool name has such a part, so refusing costs nothing and needs no
//!   proof about every server on the way. A string still holding an
//!   escape after [`MAX_DECODES`] decodings is refused too, so the check
//!   stays linear in the string's length.
//!
//! Pure: the gateway and the tool runtime assemble URLs with it and answer
//! a refusal with a 400 that says [`Refusal::rule`].

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use std::borrow::Cow;

/// Every byte but RFC 3986's unreserved ones is encoded.
pub(crate) const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// [`UNRESERVED`], and `@` kept (Vertex's model version separator).
const UNRESERVED_AND_AT: &AsciiSet = &UNRESERVED.remove(b'@');

/// Why a string cannot be one URL path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The string is empty.
    Empty,
    /// A part of it between `/` or `\` is `.` or `..` (as it came, or
    /// after percent-decoding).
    DotPart,
    /// It still holds an escape after [`MAX_DECODES`] rounds of decoding
    /// (`%252525…`): what it would become cannot be looked at in bounded
    /// time, and no name is so encoded.
    DeepEscapes,
}

/// How many rounds of percent-decoding [`problem`] looks through.
pub const MAX_DECODES: usize = 3;

impl Refusal {
    /// The rule broken, as a caller reads it in a 400.
    pub fn rule(self) -> &'static str {
        match self {
            Refusal::Empty => "must not be empty",
            Refusal::DotPart => {
                "must have no `.` or `..` part between `/` or `\\` (also once percent-decoded)"
            }
            Refusal::DeepEscapes => {
                "must not be percent-encoded again and again (`%252525…`: escapes left after 3 decodings)"
            }
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.rule())
    }
}

/// What is wrong with `s` as a URL path segment (`None`: nothing; it is
/// then encoded by [`Segment::new`]).
pub fn problem(s: &str) -> Option<Refusal> {
    if s.is_empty() {
        return Some(Refusal::Empty);
    }
    // As it came, then after each round of decoding, up to MAX_DECODES:
    // linear in the length (a loop to the end could take a round per two
    // bytes of `%2525…`).
    let mut cur: Cow<'_, str> = Cow::Borrowed(s);
    for round in 0..=MAX_DECODES {
        if cur
            .split(['/', '\\'])
            .any(|part| part == "." || part == "..")
        {
            return Some(Refusal::DotPart);
        }
        if !cur.contains('%') {
            return None;
        }
        let next = percent_decode_str(&cur).decode_utf8_lossy().into_owned();
        if next == cur {
            return None;
        }
        if round == MAX_DECODES {
            return Some(Refusal::DeepEscapes);
        }
        cur = Cow::Owned(next);
    }
    None
}

/// A string checked by [`problem`] and percent-encoded: exactly one path
/// segment, with no query and no fragment, to paste between two `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment(String);

impl Segment {
    /// `s` as one segment (unreserved characters kept), or why not.
    pub fn new(s: &str) -> Result<Segment, Refusal> {
        Self::encoded(s, UNRESERVED)
    }

    /// [`Segment::new`], keeping `@` too (Vertex's model names).
    pub fn keeping_at(s: &str) -> Result<Segment, Refusal> {
        Self::encoded(s, UNRESERVED_AND_AT)
    }

    fn encoded(s: &str, set: &'static AsciiSet) -> Result<Segment, Refusal> {
        match problem(s) {
            Some(r) => Err(r),
            None => Ok(Segment(utf8_percent_encode(s, set).to_string())),
        }
    }

    /// The encoded text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (string, refusal) for the rule; accepted strings with their encoding.
    #[test]
    fn refused_and_encoded_strings() {
        use Refusal::{DeepEscapes, DotPart, Empty};
        for (s, want) in [
            ("", Some(Empty)),
            (".", Some(DotPart)),
            ("..", Some(DotPart)),
            ("../../x", Some(DotPart)),
            ("a/../b", Some(DotPart)),
            ("a/./b", Some(DotPart)),
            ("x/..", Some(DotPart)),
            ("..\\x", Some(DotPart)),
            ("a\\.\\b", Some(DotPart)),
            ("%2e%2e", Some(DotPart)),
            ("%2E.", Some(DotPart)),
            ("a%2F..%2Fb", Some(DotPart)),
            ("%252e%252e", Some(DotPart)),
            ("x%2f%2e", Some(DotPart)),
            ("%25252e%25252e", Some(DotPart)),
            ("%2525252e", Some(DeepEscapes)),
            ("x%2525252541", Some(DeepEscapes)),
            ("x%252541", None),
            ("gpt-4o", None),
            ("gpt-4o/embeddings?api-version=2024-10-21#", None),
            ("x?key=abc", None),
            ("...", None),
            (".x", None),
            ("x.", None),
            ("..x/y", None),
            ("%2e%2ex", None),
            ("%", None),
            ("%zz", None),
            ("%ff%fe", None),
            ("claude-sonnet-4@20250514", None),
            ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", None),
            (
                "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.x",
                None,
            ),
        ] {
            assert_eq!(problem(s), want, "{s:?}");
            assert_eq!(Segment::new(s).err(), want, "{s:?}");
        }
        for (s, want) in [
            ("gpt-4o", "gpt-4o"),
            ("a b", "a%20b"),
            ("a/b?c#d", "a%2Fb%3Fc%23d"),
            ("x?key=abc&api-version=1", "x%3Fkey%3Dabc%26api-version%3D1"),
            ("%2ex", "%252ex"),
            ("a:b@c", "a%3Ab%40c"),
            ("é", "%C3%A9"),
            ("a\\b", "a%5Cb"),
            ("~_.-", "~_.-"),
        ] {
            assert_eq!(Segment::new(s).map(|g| g.0), Ok(want.to_owned()), "{s:?}");
        }
        assert_eq!(
            Segment::keeping_at("claude-sonnet-4@20250514:x").map(|g| g.0),
            Ok("claude-sonnet-4@20250514%3Ax".to_owned())
        );
    }

    proptest! {
        /// Whatever the string, an accepted one's segment holds only
        /// unreserved characters and `%XX` escapes, is never `.` or `..`,
        /// and decodes back to the string; a refused one is empty or has a
        /// dot part.
        #[test]
        fn an_accepted_string_is_one_segment_that_decodes_back(s in any::<String>()) {
            match Segment::new(&s) {
                Ok(seg) => {
                    let t = seg.as_str();
                    prop_assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)), "{t}");
                    prop_assert!(t != "." && t != "..");
                    prop_assert_eq!(percent_decode_str(t).decode_utf8().map(|d| d.into_owned()), Ok(s.clone()));
                }
                Err(Refusal::Empty) => prop_assert!(s.is_empty()),
                Err(Refusal::DotPart | Refusal::DeepEscapes) => prop_assert!(!s.is_empty()),
            }
        }
    }
}
