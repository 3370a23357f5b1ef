//! Aligning a resumed stream with what the caller already has
//! (docs/operations.md, "What hale does to a call": Streams). When a stream
//! breaks after content reached the caller and another attempt answers
//! afresh, the relay skips what the new answer repeats and stops when it
//! contradicts. These are the rules; the gateway's relay (`relay.rs`) maps
//! its stream events onto them and carries out the answer.
//!
//! - [`align`]: text. The resumed text must start with the delivered text;
//!   the part past it is new.
//! - [`align_tool`]: tool calls, call by call. A delivered call is not
//!   started again (its name must match, and the calls before it must be
//!   repeated whole); its arguments skip what was delivered; a call past the
//!   delivered ones is new once every delivered call is repeated whole.

/// Skips the part of `t` that repeats what was already delivered (`skip`,
/// which shrinks as it is repeated). Returns the new part, or `None` when
/// `t` contradicts the delivered text.
pub fn align<'a>(skip: &mut String, t: &'a str) -> Option<&'a str> {
    if skip.is_empty() {
        return Some(t);
    }
    let n = skip.len().min(t.len());
    if skip.as_bytes()[..n] != t.as_bytes()[..n] {
        return None;
    }
    // Equal byte prefixes of two valid strings end on a char boundary of both.
    skip.drain(..n);
    Some(&t[n..])
}

/// A resumed answer's tool-call event, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolEvent<'a> {
    /// A call starts: its index in the answer and the tool's name.
    Start { index: u32, name: &'a str },
    /// A piece of a call's arguments.
    Delta { index: u32, arguments: &'a str },
}

/// What becomes of a resumed answer's tool-call event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolAligned<'a> {
    /// Send the event as it came (a new call, or arguments wholly new).
    Send,
    /// Send only this end of the arguments: the rest was delivered.
    SendRest(&'a str),
    /// Nothing new: the start of a delivered call, or arguments delivered already.
    Repeat,
    /// The resumed answer differs from what was delivered.
    Contradicts,
}

/// Aligns a resumed answer's tool-call event with the calls delivered
/// before the break: `names` are theirs by index, `skips` the part of each
/// one's arguments the resumed answer has not repeated yet (emptied as it
/// is repeated).
pub fn align_tool<'a>(
    ev: ToolEvent<'a>,
    names: &[String],
    skips: &mut [String],
) -> ToolAligned<'a> {
    let before_complete =
        |i: usize, skips: &[String]| skips[..i.min(skips.len())].iter().all(String::is_empty);
    match ev {
        ToolEvent::Start { index, name } => {
            let i = index as usize;
            if !before_complete(i, skips) {
                return ToolAligned::Contradicts;
            }
            match names.get(i) {
                Some(delivered) if delivered == name => ToolAligned::Repeat,
                Some(_) => ToolAligned::Contradicts,
                None => ToolAligned::Send,
            }
        }
        ToolEvent::Delta { index, arguments } => {
            let Some(skip) = skips.get_mut(index as usize) else {
                return ToolAligned::Send;
            };
            match align(skip, arguments) {
                None => ToolAligned::Contradicts,
                Some("") => ToolAligned::Repeat,
                Some(rest) if rest.len() == arguments.len() => ToolAligned::Send,
                Some(rest) => ToolAligned::SendRest(rest),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ToolAligned, ToolEvent, align, align_tool};

    fn start(index: u32, name: &str) -> ToolEvent<'_> {
        ToolEvent::Start { index, name }
    }

    fn delta(index: u32, arguments: &str) -> ToolEvent<'_> {
        ToolEvent::Delta { index, arguments }
    }

    /// One call (`edit_file`) was delivered, cut inside its arguments
    /// (`{"path":"a`); each row is a resumed answer's events and what
    /// becomes of each.
    #[test]
    fn align_tool_table() {
        use ToolAligned::{Contradicts, Repeat, Send, SendRest};
        let names = vec!["edit_file".to_owned()];
        let cases: Vec<(Vec<ToolEvent>, Vec<ToolAligned>)> = vec![
            // Answered again whole, in two pieces: the start once, the rest
            // of the arguments.
            (
                vec![
                    start(0, "edit_file"),
                    delta(0, r#"{"pa"#),
                    delta(0, r#"th":"a.rs"}"#),
                ],
                vec![Repeat, Repeat, SendRest(r#".rs"}"#)],
            ),
            (
                vec![start(0, "edit_file"), delta(0, r#"{"path":"a.rs"}"#)],
                vec![Repeat, SendRest(r#".rs"}"#)],
            ),
            // Exactly what was delivered, then new arguments: sent as they came.
            (
                vec![delta(0, r#"{"path":"a"#), delta(0, "}")],
                vec![Repeat, Send],
            ),
            // Another tool, or other arguments: the resumed answer contradicts.
            (vec![start(0, "run_shell")], vec![Contradicts]),
            (
                vec![start(0, "edit_file"), delta(0, r#"{"path":"b"#)],
                vec![Repeat, Contradicts],
            ),
            // A second call before the first is repeated whole.
            (
                vec![start(0, "edit_file"), delta(0, r#"{"pa"#), start(1, "x")],
                vec![Repeat, Repeat, Contradicts],
            ),
            // Once the delivered call is whole, a new call passes as it is.
            (
                vec![
                    delta(0, r#"{"path":"a.rs"}"#),
                    start(1, "x"),
                    delta(1, "{}"),
                ],
                vec![SendRest(r#".rs"}"#), Send, Send],
            ),
        ];
        for (events, want) in cases {
            let mut skips = vec![r#"{"path":"a"#.to_owned()];
            let got: Vec<ToolAligned> = events
                .iter()
                .map(|e| align_tool(*e, &names, &mut skips))
                .collect();
            assert_eq!(got, want, "{events:?}");
        }
    }

    #[test]
    fn align_skips_the_delivered_prefix_across_chunks() {
        let mut skip = "w0 w1 w2".to_owned();
        assert_eq!(align(&mut skip, "w0"), Some(""));
        assert_eq!(align(&mut skip, " w1 w"), Some(""));
        assert_eq!(align(&mut skip, "2 w3"), Some(" w3"));
        assert!(skip.is_empty());
        assert_eq!(align(&mut skip, " w4"), Some(" w4"));
    }

    #[test]
    fn align_rejects_a_different_answer() {
        let mut skip = "w0 w1".to_owned();
        assert_eq!(align(&mut skip, "x0"), None);
    }

    #[test]
    fn align_handles_multibyte_text() {
        let mut skip = "héllo".to_owned();
        assert_eq!(align(&mut skip, "hé"), Some(""));
        assert_eq!(align(&mut skip, "llo wörld"), Some(" wörld"));
    }
}
