//! Names a client chooses (agent and task names from `X-Hale-Agent` /
//! `X-Hale-Task`): what a valid one is.
//!
//! These strings become store keys, event fields, log fields and the lookup
//! key of per-agent state, so they are bounded here once: at most
//! [`MAX_LABEL_BYTES`] bytes of UTF-8 with no control character (a tab, a
//! newline smuggled through a proxy, C1 controls). The gateway refuses a
//! request carrying anything else with a 400 that names the header, instead
//! of storing it or truncating it silently.

/// The longest agent or task name accepted, in bytes of UTF-8.
pub const MAX_LABEL_BYTES: usize = 128;

/// Why a name is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelError {
    /// Longer than [`MAX_LABEL_BYTES`]; carries the length in bytes.
    TooLong(usize),
    /// Contains a control character; carries its byte offset.
    ControlChar(usize),
}

impl std::fmt::Display for LabelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabelError::TooLong(n) => {
                write!(
                    f,
                    "is {n} bytes long; at most {MAX_LABEL_BYTES} are accepted"
                )
            }
            LabelError::ControlChar(at) => {
                write!(f, "contains a control character at byte {at}")
            }
        }
    }
}

impl std::error::Error for LabelError {}

/// Checks an agent or task name: at most [`MAX_LABEL_BYTES`] bytes, no
/// control character (Unicode category Cc: C0, DEL and C1).
pub fn valid_label(s: &str) -> Result<(), LabelError> {
    if s.len() > MAX_LABEL_BYTES {
        return Err(LabelError::TooLong(s.len()));
    }
    match s.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, _)) => Err(LabelError::ControlChar(at)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_in_length_and_free_of_control_characters() {
        let at_limit = "a".repeat(MAX_LABEL_BYTES);
        let over = "a".repeat(MAX_LABEL_BYTES + 1);
        // 64 two-byte characters = 128 bytes: accepted; one more is over.
        let wide_at_limit = "é".repeat(MAX_LABEL_BYTES / 2);
        let wide_over = format!("{wide_at_limit}é");
        let cases: &[(&str, Result<(), LabelError>)] = &[
            ("research-agent", Ok(())),
            ("team/agent.v2 (eu)", Ok(())),
            ("café", Ok(())),
            ("", Ok(())),
            (&at_limit, Ok(())),
            (&wide_at_limit, Ok(())),
            (&over, Err(LabelError::TooLong(MAX_LABEL_BYTES + 1))),
            (&wide_over, Err(LabelError::TooLong(MAX_LABEL_BYTES + 2))),
            ("a\tb", Err(LabelError::ControlChar(1))),
            ("\nx", Err(LabelError::ControlChar(0))),
            ("x\u{7f}", Err(LabelError::ControlChar(1))),
            ("é\u{85}", Err(LabelError::ControlChar(2))),
            ("nul\0", Err(LabelError::ControlChar(3))),
        ];
        for (input, want) in cases {
            assert_eq!(valid_label(input), *want, "{input:?}");
        }
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        assert!(LabelError::TooLong(200).to_string().contains("at most 128"));
        assert!(
            LabelError::ControlChar(3)
                .to_string()
                .contains("control character at byte 3")
        );
    }
}
