//! Incremental Server-Sent-Events framing, fed by the raw byte chunks of `bytes_stream()`.
//!
//! Robust to what real upstreams send: frames split at any byte (also inside a UTF-8 character),
//! `data:` with or without a space, CRLF / LF / CR line ends, `:` comment and keep-alive lines,
//! multi-line `data` joined with `\n`, the `[DONE]` sentinel, and a last event not followed by a
//! blank line (delivered at EOF, unlike the strict spec). The JSON inside a frame is decoded by
//! [`crate::transport::wire::decode_chunk`]; this module knows nothing of OpenAI.

/// One dispatched SSE event.
///
/// ```
/// use polygateway::transport::sse::{SseEvent, SseParser};
/// let mut parser = SseParser::new();
/// let mut events = Vec::new();
/// parser.feed(b"data: {\"n\":1}\n\ndata: [DONE]\n\n", &mut events);
/// let mut frames = Vec::new();
/// for event in events {
///     match event {
///         SseEvent::Data(json) => frames.push(json),
///         SseEvent::Done => break,
///     }
/// }
/// assert_eq!(frames, ["{\"n\":1}"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data` of an event (multi-line data joined with `\n`).
    Data(String),
    /// The `[DONE]` sentinel.
    Done,
}

/// Incremental SSE parser. Feed chunks as they arrive, call [`SseParser::finish`] at EOF.
///
/// ```
/// use polygateway::transport::sse::{SseEvent, SseParser};
/// let mut p = SseParser::new();
/// let mut out = Vec::new();
/// p.feed(b"data: {\"a\"", &mut out);
/// p.feed(b":1}\r\n\r\n: keep-alive\n\ndata:[DONE]\n\n", &mut out);
/// assert_eq!(out, vec![SseEvent::Data("{\"a\":1}".into()), SseEvent::Done]);
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// Data lines of the current event, each followed by `\n`.
    data: String,
    /// At least one `data` field seen for the current event.
    has_data: bool,
    /// The previous chunk ended with `\r`: a leading `\n` of the next one belongs to it.
    pending_cr: bool,
}

impl SseParser {
    /// A parser with empty state.
    ///
    /// ```
    /// use polygateway::transport::sse::SseParser;
    /// let mut parser = SseParser::new();
    /// let mut out = Vec::new();
    /// parser.finish(&mut out); // nothing fed, nothing pending
    /// assert!(out.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume one chunk, appending every event it completes to `out`.
    ///
    /// ```
    /// use polygateway::transport::sse::{SseEvent, SseParser};
    /// let mut parser = SseParser::new();
    /// let mut out = Vec::new();
    /// // A chunk boundary inside "é" (0xC3 0xA9) and a two-line data field.
    /// parser.feed(b"data: caf\xC3", &mut out);
    /// assert!(out.is_empty()); // no blank line yet: the event is not complete
    /// parser.feed(b"\xA9\r\ndata: au lait\r\n\r\n", &mut out);
    /// assert_eq!(out, [SseEvent::Data("café\nau lait".into())]);
    /// ```
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) {
        if self.pending_cr {
            self.pending_cr = false;
            if let Some((&b'\n', rest)) = chunk.split_first() {
                chunk = rest;
            }
        }
        while let Some(pos) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (head, tail) = chunk.split_at(pos);
            if self.line.is_empty() {
                self.process_line(head, out);
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                self.process_line(&line, out);
                // Keep the allocation for the next split line.
                self.line = line;
                self.line.clear();
            }
            if tail[0] == b'\r' {
                match tail.get(1) {
                    Some(b'\n') => chunk = &tail[2..],
                    Some(_) => chunk = &tail[1..],
                    None => {
                        self.pending_cr = true;
                        chunk = &tail[1..];
                    }
                }
            } else {
                chunk = &tail[1..];
            }
        }
        self.line.extend_from_slice(chunk);
    }

    /// End of input: an unterminated last line is processed and a pending event delivered.
    ///
    /// ```
    /// use polygateway::transport::sse::{SseEvent, SseParser};
    /// let mut parser = SseParser::new();
    /// let mut out = Vec::new();
    /// // The upstream closed the connection right after the last data line.
    /// parser.feed(b"data: tail", &mut out);
    /// assert!(out.is_empty());
    /// parser.finish(&mut out);
    /// assert_eq!(out, [SseEvent::Data("tail".into())]);
    /// ```
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
        }
        self.dispatch(out);
        self.pending_cr = false;
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            self.data.push_str(&String::from_utf8_lossy(value));
            self.data.push('\n');
            self.has_data = true;
        }
        // `event`, `id`, `retry` and unknown fields carry nothing an OpenAI stream needs.
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if !self.has_data {
            return;
        }
        self.has_data = false;
        self.data.pop(); // the `\n` after the last data line
        if self.data.trim() == "[DONE]" {
            self.data.clear();
            out.push(SseEvent::Done);
        } else {
            out.push(SseEvent::Data(std::mem::take(&mut self.data)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out);
        }
        p.finish(&mut out);
        out
    }

    fn data(s: &str) -> SseEvent {
        SseEvent::Data(s.to_string())
    }

    #[test]
    fn line_endings_lf_crlf_cr() {
        for sep in ["\n", "\r\n", "\r"] {
            let text = format!("data: a{sep}{sep}data:b{sep}{sep}data: [DONE]{sep}{sep}");
            assert_eq!(
                parse_all(&[text.as_bytes()]),
                vec![data("a"), data("b"), SseEvent::Done],
                "{sep:?}"
            );
        }
    }

    #[test]
    fn crlf_split_between_chunks() {
        assert_eq!(
            parse_all(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]),
            vec![data("a"), data("b")]
        );
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let text = b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n:\n\n";
        assert_eq!(parse_all(&[text]), vec![data("x")]);
    }

    #[test]
    fn multi_line_data_is_joined() {
        let text = b"data: line1\ndata:line2\ndata\n\n";
        assert_eq!(parse_all(&[text]), vec![data("line1\nline2\n")]);
    }

    #[test]
    fn only_one_leading_space_is_stripped() {
        assert_eq!(parse_all(&[b"data:  two\n\n"]), vec![data(" two")]);
    }

    #[test]
    fn utf8_split_inside_a_character() {
        let text = "data: 你好\n\n".as_bytes();
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(parse_all(&[a, b]), vec![data("你好")], "cut at {cut}");
        }
    }

    #[test]
    fn last_event_without_blank_line_is_delivered_at_eof() {
        assert_eq!(
            parse_all(&[b"data: a\n\ndata: tail"]),
            vec![data("a"), data("tail")]
        );
        assert_eq!(parse_all(&[b"data: tail\n"]), vec![data("tail")]);
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing() {
        assert_eq!(parse_all(&[b"\n\n\r\n\n"]), vec![]);
    }

    #[test]
    fn done_with_surrounding_whitespace() {
        assert_eq!(parse_all(&[b"data:[DONE] \n\n"]), vec![SseEvent::Done]);
    }
}
