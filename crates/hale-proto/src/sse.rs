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
        let mut s = Vec::with_capacity(self.wire_len());
        self.write_wire(&mut s);
        // Written from `&str`s and ASCII only: always UTF-8.
        String::from_utf8(s).unwrap_or_default()
    }

    /// Appends [`SseFrame::to_wire`]'s bytes to `out` (the relay writes
    /// every frame straight into the stream's body).
    pub fn write_wire(&self, out: &mut Vec<u8>) {
        if let Some(e) = self.event {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(e.as_bytes());
            out.push(b'\n');
        }
        for line in self.data.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
    }

    /// About the length on the wire (exact for data of one line).
    pub fn wire_len(&self) -> usize {
        self.event.map_or(0, |e| e.len() + 8) + self.data.len() + 8
    }
}
