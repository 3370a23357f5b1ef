//! The server-sent event as hale writes it to a caller: the frame every
//! dialect's stream encoder emits.

/// One server-sent event as hale writes it to a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event:` field (Anthropic names every event; OpenAI never does).
    pub event: Option<&'static str>,
    /// The `data:` field (JSON, or `[DONE]`).
    pub data: String,
}

impl SseFrame {
    /// The frame on the wire: `event: …\n` when named, one `data:` line per
    /// line of data, and the blank line that ends the event.
    pub fn to_wire(&self) -> String {
        let mut s = String::with_capacity(self.wire_len());
        self.write_wire(&mut s);
        s
    }

    /// Appends [`SseFrame::to_wire`] to `s`.
    pub fn write_wire(&self, s: &mut String) {
        if let Some(e) = self.event {
            s.push_str("event: ");
            s.push_str(e);
            s.push('\n');
        }
        for line in self.data.split('\n') {
            s.push_str("data: ");
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
    }

    /// About the length on the wire (exact for data of one line).
    pub fn wire_len(&self) -> usize {
        self.event.map_or(0, |e| e.len() + 8) + self.data.len() + 8
    }
}
