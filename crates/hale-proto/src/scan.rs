//! A hand-written reader of one JSON document, for the streaming decoders'
//! per-token fast paths: a stream sends one small object per token, and
//! serde's derived read of it (field names matched through a visitor,
//! unread values skipped through `IgnoredAny`) was most of the cost of
//! decoding a chunk (callgrind; BENCHMARKS.md's git history).
//!
//! It reads only well-formed JSON, and answers `None` — "not understood,
//! ask serde" — for everything it does not handle or that is not JSON: a
//! key holding an escape, a lone surrogate in a string it reads, a number
//! where a count must be a plain `u64`, nesting deeper than [`MAX_DEPTH`],
//! trailing bytes. A caller therefore takes its serde path on `None`, and
//! its answer on `Some` must be what that path would have read (each
//! caller's property test). Values it skips are checked for syntax only
//! (a number's digits, an escape's form), as serde_json's `IgnoredAny` does.

use std::borrow::Cow;

/// Deepest nesting of skipped arrays and objects; deeper → `None`.
const MAX_DEPTH: u32 = 64;

/// A position in one JSON document.
pub(crate) struct Scan<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Scan<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Self { s, i: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.s.as_bytes()
    }

    /// The next byte after any whitespace (JSON's four characters), not read.
    fn peek(&mut self) -> Option<u8> {
        let b = self.bytes();
        while let Some(&c) = b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(c);
            }
            self.i += 1;
        }
        None
    }

    /// Reads `c` (after whitespace) if it is next.
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        self.eat(c).then_some(())
    }

    /// The string whose opening quote is at byte `at` of `s`, and the offset
    /// just past its closing quote; `None` as [`Scan::string`] answers it.
    pub(crate) fn string_at(s: &'a str, at: usize) -> Option<(Cow<'a, str>, usize)> {
        if s.as_bytes().get(at) != Some(&b'"') {
            return None;
        }
        let mut scan = Self { s, i: at };
        let text = scan.string()?;
        Some((text, scan.i))
    }

    /// Only whitespace is left.
    pub(crate) fn end(mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// Reads `null` if it is the next value: `true` when it was.
    pub(crate) fn null(&mut self) -> bool {
        if self.peek() == Some(b'n') && self.bytes().get(self.i..self.i + 4) == Some(b"null") {
            self.i += 4;
            true
        } else {
            false
        }
    }

    /// `null` as `None`, else the value `f` reads (as serde reads an `Option`).
    pub(crate) fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.null() {
            Some(None)
        } else {
            f(self).map(Some)
        }
    }

    /// An object, `f` called with each key (escape-free; its `:` read)
    /// to read that key's value.
    pub(crate) fn object(
        &mut self,
        mut f: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return None;
            }
            let key = self.plain_string()?;
            self.expect(b':')?;
            f(self, key)?;
            if !self.eat(b',') {
                return self.expect(b'}');
            }
        }
    }

    /// An array, `f` called to read each element.
    pub(crate) fn array(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.eat(b']') {
            return Some(());
        }
        loop {
            f(self)?;
            if !self.eat(b',') {
                return self.expect(b']');
            }
        }
    }

    /// A string without escapes, borrowed; its opening quote is next.
    fn plain_string(&mut self) -> Option<&'a str> {
        self.i += 1;
        let start = self.i;
        let b = self.bytes();
        loop {
            match *b.get(self.i)? {
                b'"' => break,
                b'\\' | 0x00..=0x1f => return None,
                _ => self.i += 1,
            }
        }
        // `start` and `self.i` sit next to ASCII quotes: char boundaries.
        let s = self.s.get(start..self.i)?;
        self.i += 1;
        Some(s)
    }

    /// A string, borrowed when it holds no escape. `None` for anything but
    /// a string, and for a lone surrogate (`\ud800`).
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.i + 1;
        let b = self.bytes();
        let mut i = start;
        loop {
            match *b.get(i)? {
                b'"' => {
                    let s = self.s.get(start..i)?;
                    self.i = i + 1;
                    return Some(Cow::Borrowed(s));
                }
                b'\\' => break,
                0x00..=0x1f => return None,
                _ => i += 1,
            }
        }
        let mut out = String::with_capacity(i - start + 8);
        out.push_str(self.s.get(start..i)?);
        loop {
            // At a backslash.
            let c = match *b.get(i + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => {
                    let hi = hex4(b, i + 2)?;
                    i += 4;
                    match hi {
                        0xd800..=0xdbff => {
                            if b.get(i + 2..i + 4)? != b"\\u" {
                                return None;
                            }
                            let lo = hex4(b, i + 4)?;
                            if !(0xdc00..=0xdfff).contains(&lo) {
                                return None;
                            }
                            i += 6;
                            char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00))?
                        }
                        // A low surrogate alone is no char.
                        _ => char::from_u32(hi)?,
                    }
                }
                _ => return None,
            };
            out.push(c);
            i += 2;
            let run = i;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        out.push_str(self.s.get(run..i)?);
                        self.i = i + 1;
                        return Some(Cow::Owned(out));
                    }
                    b'\\' => break,
                    0x00..=0x1f => return None,
                    _ => i += 1,
                }
            }
            out.push_str(self.s.get(run..i)?);
        }
    }

    /// A count: a JSON integer that fits a `u64` and is written without a
    /// sign, a fraction or an exponent (serde reads anything else as
    /// another type, or fails).
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let b = self.bytes();
        let first = self.peek()?;
        if !first.is_ascii_digit() {
            return None;
        }
        let mut n = u64::from(first - b'0');
        self.i += 1;
        if n == 0 {
            // No leading zeros; what follows must not continue the number.
            return (!matches!(b.get(self.i), Some(b'0'..=b'9' | b'.' | b'e' | b'E'))).then_some(0);
        }
        while let Some(&c) = b.get(self.i) {
            match c {
                b'0'..=b'9' => {
                    n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                    self.i += 1;
                }
                b'.' | b'e' | b'E' => return None,
                _ => break,
            }
        }
        Some(n)
    }

    /// Skips any one value, checking its syntax only.
    pub(crate) fn skip(&mut self) -> Option<()> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: u32) -> Option<()> {
        let b = self.bytes();
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.object(|s, _| s.skip_at(depth + 1))
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.array(|s| s.skip_at(depth + 1))
            }
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            c @ (b'-' | b'0'..=b'9') => {
                // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
                if c == b'-' {
                    self.i += 1;
                }
                match *b.get(self.i)? {
                    b'0' => self.i += 1,
                    b'1'..=b'9' => self.digits(),
                    _ => return None,
                }
                if b.get(self.i) == Some(&b'.') {
                    self.i += 1;
                    self.some_digits()?;
                }
                if matches!(b.get(self.i), Some(b'e' | b'E')) {
                    self.i += 1;
                    if matches!(b.get(self.i), Some(b'+' | b'-')) {
                        self.i += 1;
                    }
                    self.some_digits()?;
                }
                Some(())
            }
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes().get(self.i..self.i + word.len())? != word {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    fn digits(&mut self) {
        while matches!(self.bytes().get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// Skips a string (its opening quote next): escapes checked for form
    /// only, as serde_json skips one.
    fn skip_string(&mut self) -> Option<()> {
        let b = self.bytes();
        let mut i = self.i + 1;
        loop {
            match *b.get(i)? {
                b'"' => {
                    self.i = i + 1;
                    return Some(());
                }
                b'\\' => {
                    match *b.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            hex4(b, i + 2)?;
                            i += 4;
                        }
                        _ => return None,
                    }
                    i += 2;
                }
                0x00..=0x1f => return None,
                _ => i += 1,
            }
        }
    }
}

/// Where the value of the member `key` of the object `doc` (the whole
/// document) lies: `Some(None)` when the object has no such key, `None`
/// as [`Scan`] answers it (a key holding an escape, nesting past
/// [`MAX_DEPTH`], anything but one object). The first such member when a
/// key repeats: callers give documents without repeated keys.
pub(crate) fn member(doc: &str, key: &str) -> Option<Option<std::ops::Range<usize>>> {
    let mut scan = Scan::new(doc);
    let mut found = None;
    scan.object(|s, k| {
        // The value's first byte, past the whitespace after `:`.
        s.peek()?;
        let at = s.i;
        s.skip()?;
        if k == key && found.is_none() {
            found = Some(at..s.i);
        }
        Some(())
    })?;
    scan.end()?;
    Some(found)
}

/// Marks `bit` of `seen`: `None` when it was marked already (serde's
/// derived read refuses a duplicate field).
pub(crate) fn once(seen: &mut u8, bit: u8) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    Some(())
}

/// The four hex digits at `at`.
fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let mut n = 0;
    for &c in b.get(at..at + 4)? {
        n = n * 16 + char::from(c).to_digit(16)?;
    }
    Some(n)
}

/// `doc` as the scanners' property tests read it besides as it is: cut
/// after `cut` bytes (at a char boundary), and with whitespace around
/// every `:` `,` `{` `[` (inside strings too, where a newline is a control
/// character both readers refuse).
#[cfg(test)]
pub(crate) fn variants(doc: &str, cut: usize) -> [String; 3] {
    let mut at = cut.min(doc.len());
    while !doc.is_char_boundary(at) {
        at -= 1;
    }
    let spaced = doc
        .replace(':', " :\t")
        .replace(',', "\r\n,  ")
        .replace('{', "{ ")
        .replace('[', "\n[");
    [doc.to_string(), doc[..at].to_string(), spaced]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reads `doc` as a string through the scanner.
    fn scan_string(doc: &str) -> Option<String> {
        let mut s = Scan::new(doc);
        let v = s.string()?;
        s.end()?;
        Some(v.into_owned())
    }

    /// Skips `doc` as one value.
    fn scan_skip(doc: &str) -> Option<()> {
        let mut s = Scan::new(doc);
        s.skip()?;
        s.end()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// Any string, serialised by serde_json (with its escapes) or with
        /// every character written as `\u` escapes (surrogate pairs for
        /// the astral ones), reads back as itself.
        #[test]
        fn a_string_reads_back(text in "\\PC{0,12}|[\\x00-\\x1f\"\\\\/a-z😀é]{0,12}") {
            let doc = serde_json::to_string(&text).unwrap();
            prop_assert_eq!(scan_string(&doc), Some(text.clone()));
            let mut escaped = String::from("\"");
            for u in text.encode_utf16() {
                escaped.push_str(&format!("\\u{u:04X}"));
            }
            escaped.push('"');
            prop_assert_eq!(scan_string(&escaped), Some(text));
        }

        /// Whatever the bytes, a string the scanner reads is the one
        /// serde_json reads, and a value it skips serde_json skips too.
        #[test]
        fn the_scanner_never_accepts_what_serde_refuses(
            doc in "[ \"\\\\/unbtrfl0-9a-fA-F.eE+\\-\\[\\]{}:,\\x00\\x1fé😀]{0,16}"
        ) {
            if let Some(v) = scan_string(&doc) {
                prop_assert_eq!(serde_json::from_str::<String>(&doc).ok(), Some(v));
            }
            if scan_skip(&doc).is_some() {
                prop_assert!(serde_json::from_str::<serde::de::IgnoredAny>(&doc).is_ok(), "{}", doc);
            }
        }
    }

    #[test]
    fn strings_it_leaves_to_serde() {
        for doc in [
            r#""\ud800""#,
            r#""\ud800 and more""#,
            r#""\udc00x""#,
            r#""\ud83d\u0041""#,
            r#""\x""#,
            "\"a\u{1}\"",
            r#""abc"#,
            r#""\u12""#,
            "1",
        ] {
            assert_eq!(scan_string(doc), None, "{doc}");
        }
        assert_eq!(scan_string(r#""\ud83d\ude00""#).as_deref(), Some("😀"));
        assert_eq!(scan_string(r#""a\/b""#).as_deref(), Some("a/b"));
    }

    #[test]
    fn counts_are_plain_integers() {
        let count = |doc: &str| {
            let mut s = Scan::new(doc);
            let n = s.u64()?;
            s.end()?;
            Some(n)
        };
        assert_eq!(count("0"), Some(0));
        assert_eq!(count(" 42 "), Some(42));
        assert_eq!(count("18446744073709551615"), Some(u64::MAX));
        for doc in [
            "18446744073709551616",
            "01",
            "1.0",
            "1e2",
            "-1",
            "-0",
            "\"1\"",
        ] {
            assert_eq!(count(doc), None, "{doc}");
        }
    }

    #[test]
    fn skipped_values_are_json() {
        for doc in [
            "null",
            "true",
            "-0.5e+3",
            "1E9",
            "1e400",
            r#""\ud800""#,
            r#"[1,{"a":[null,"x\"y"]},[]]"#,
            "{}",
        ] {
            assert_eq!(scan_skip(doc), Some(()), "{doc}");
        }
        for doc in [
            "nul", "01", "1.", "-", "1e", "[1,]", "{\"a\"}", "{,}", "[1 2]", "tru", "\"\\q\"", "+1",
        ] {
            assert_eq!(scan_skip(doc), None, "{doc}");
        }
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(scan_skip(&deep), None);
        let fine = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert_eq!(scan_skip(&fine), Some(()));
    }
}
