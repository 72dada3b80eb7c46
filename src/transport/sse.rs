//! Incremental Server-Sent-Events framing, fed by the raw byte chunks of `bytes_stream()`.
//!
//! Robust to what real upstreams send: frames split at any byte (also inside a UTF-8 character),
//! `data:` with or without a space, CRLF / LF / CR line ends, `:` comment and keep-alive lines,
//! multi-line `data` joined with `\n`, the `[DONE]` sentinel, and a last event not followed by a
//! blank line (delivered at EOF, unlike the strict spec). The JSON inside a frame is decoded by
//! [`crate::transport::wire::decode_chunk`]; this module knows nothing of OpenAI.
//!
//! Memory is bounded: a single line, or the joined `data` of one event, longer than
//! [`MAX_FRAME_BYTES`] (8 MiB) is refused with [`FrameTooLarge`] instead of buffering an upstream
//! that never sends a line end. Real chat frames are a few hundred bytes.

/// The largest SSE line, and the largest joined `data` of one event, the parser buffers (8 MiB).
pub(crate) const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// A line or event longer than [`MAX_FRAME_BYTES`]: the stream is unusable (the chat transport
/// turns it into a Transient error). The parser must not be fed again after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameTooLarge {
    /// The cap that was exceeded, in bytes.
    pub(crate) limit: usize,
}

impl std::fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SSE line or event larger than the {}-byte cap",
            self.limit
        )
    }
}

impl std::error::Error for FrameTooLarge {}

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseEvent {
    /// The `data` of an event (multi-line data joined with `\n`).
    Data(String),
    /// The `[DONE]` sentinel.
    Done,
}

/// Incremental SSE parser. Feed chunks as they arrive, call [`SseParser::finish`] at EOF.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
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
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Consume one chunk, appending every event it completes to `out`.
    pub(crate) fn feed(
        &mut self,
        mut chunk: &[u8],
        out: &mut Vec<SseEvent>,
    ) -> Result<(), FrameTooLarge> {
        // An empty chunk (HTTP/2 allows empty DATA frames) must not end a pending CR: the LF
        // of that CRLF may still come in the next one.
        if self.pending_cr && !chunk.is_empty() {
            self.pending_cr = false;
            if let Some((&b'\n', rest)) = chunk.split_first() {
                chunk = rest;
            }
        }
        // memchr scans a word (or a SIMD register) at a time: a stream's bytes are mostly
        // JSON between line ends, and this loop sees every one of them.
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', chunk) {
            let (head, tail) = chunk.split_at(pos);
            if self.line.is_empty() {
                self.process_line(head, out)?;
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                self.process_line(&line, out)?;
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
        // Refuse before buffering: an unterminated line past the cap can only get longer.
        if self.line.len() + chunk.len() > MAX_FRAME_BYTES {
            return Err(too_large());
        }
        self.line.extend_from_slice(chunk);
        Ok(())
    }

    /// End of input: an unterminated last line is processed and a pending event delivered.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), FrameTooLarge> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out)?;
        }
        self.dispatch(out);
        self.pending_cr = false;
        Ok(())
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), FrameTooLarge> {
        if line.len() > MAX_FRAME_BYTES {
            return Err(too_large());
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment / keep-alive
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            // The event's first line sizes its buffer, the `\n` included: it was allocated to
            // the text alone and grown again for the `\n`, a reallocation per event (issue #48).
            if self.data.is_empty() {
                self.data.reserve(value.len() + 1);
            }
            // Valid UTF-8 is the rule and `from_utf8` checks it far faster than the lossy
            // decoder; only a broken frame pays for the replacement characters.
            match std::str::from_utf8(value) {
                Ok(text) => self.data.push_str(text),
                Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
            }
            self.data.push('\n');
            self.has_data = true;
            // The joined event, without the `\n` after its last line.
            if self.data.len() - 1 > MAX_FRAME_BYTES {
                return Err(too_large());
            }
        }
        // `event`, `id`, `retry` and unknown fields carry nothing an OpenAI stream needs.
        Ok(())
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

fn too_large() -> FrameTooLarge {
    FrameTooLarge {
        limit: MAX_FRAME_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out).unwrap();
        }
        p.finish(&mut out).unwrap();
        out
    }

    fn data(s: &str) -> SseEvent {
        SseEvent::Data(s.to_string())
    }

    #[test]
    fn invalid_utf8_in_data_becomes_replacement_characters() {
        // A broken byte inside a frame, and a character split between two chunks: the first is
        // replaced, the second is joined whole.
        let euro = "€".as_bytes();
        let out = parse_all(&[b"data: a\xffb\n\ndata: ", &euro[..1], &euro[1..], b"\n\n"]);
        assert_eq!(out, vec![data("a\u{fffd}b"), data("€")]);
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
    fn an_empty_chunk_between_cr_and_lf_keeps_them_one_line_end() {
        // Found by the fuzz target `sse_framing_is_chunking_invariant`: the empty chunk ended
        // the pending CR, so the LF after it counted as a blank line and split the event.
        assert_eq!(
            parse_all(&[b"data: a\r", b"", b"\ndata: b\n\n"]),
            vec![data("a\nb")]
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

    #[test]
    fn a_line_at_the_cap_passes_one_past_it_is_refused_however_fed() {
        let at_cap = vec![b'x'; MAX_FRAME_BYTES];
        assert_eq!(parse_all(&[&at_cap, b"\n"]), vec![]);
        let mut past = at_cap.clone();
        past.push(b'x');
        for chunk in [past.len(), 4096, 1_000_003] {
            let mut p = SseParser::new();
            let mut out = Vec::new();
            let refused = past.chunks(chunk).any(|c| p.feed(c, &mut out).is_err())
                || p.feed(b"\n", &mut out).is_err();
            assert!(refused, "chunk {chunk}");
            // Nothing past the cap was ever buffered.
            assert!(p.line.len() <= MAX_FRAME_BYTES, "chunk {chunk}");
        }
        // Unterminated at EOF: refused by `finish`'s line as well.
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(&at_cap, &mut out).unwrap();
        assert!(p.feed(b"x", &mut out).is_err());
    }

    #[test]
    fn an_event_of_many_lines_past_the_cap_is_refused() {
        let line = format!("data: {}\n", "y".repeat(1 << 20));
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for _ in 0..7 {
            p.feed(line.as_bytes(), &mut out).unwrap();
        }
        // 8 lines of 1 MiB plus the joining newlines: past 8 MiB.
        assert_eq!(p.feed(line.as_bytes(), &mut out), Err(too_large()));
        assert!(out.is_empty());
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn max_frame_bytes_example() {
        use crate::transport::sse::{SseParser, MAX_FRAME_BYTES};
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        // A line that never ends stops being buffered at the cap.
        let endless = vec![b'x'; MAX_FRAME_BYTES + 1];
        let err = parser.feed(&endless, &mut out).unwrap_err();
        assert_eq!(err.limit, MAX_FRAME_BYTES);
    }

    #[test]
    fn frame_too_large_example() {
        use crate::transport::sse::SseParser;
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        // Many short `data` lines that never end the event add up too.
        let line = format!("data: {}\n", "y".repeat(1024 * 1024));
        let result = (0..9).try_for_each(|_| parser.feed(line.as_bytes(), &mut out));
        assert_eq!(
            result.unwrap_err().to_string(),
            "SSE line or event larger than the 8388608-byte cap"
        );
        assert!(out.is_empty());
    }

    #[test]
    fn sse_event_example() {
        use crate::transport::sse::{SseEvent, SseParser};
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser
            .feed(b"data: {\"n\":1}\n\ndata: [DONE]\n\n", &mut events)
            .unwrap();
        let mut frames = Vec::new();
        for event in events {
            match event {
                SseEvent::Data(json) => frames.push(json),
                SseEvent::Done => break,
            }
        }
        assert_eq!(frames, ["{\"n\":1}"]);
    }

    #[test]
    fn sse_parser_example() {
        use crate::transport::sse::{SseEvent, SseParser};
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(b"data: {\"a\"", &mut out).unwrap();
        p.feed(b":1}\r\n\r\n: keep-alive\n\ndata:[DONE]\n\n", &mut out)
            .unwrap();
        assert_eq!(
            out,
            vec![SseEvent::Data("{\"a\":1}".into()), SseEvent::Done]
        );
    }

    #[test]
    fn sse_parser_new_example() {
        use crate::transport::sse::SseParser;
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.finish(&mut out).unwrap(); // nothing fed, nothing pending
        assert!(out.is_empty());
    }

    #[test]
    fn sse_parser_feed_example() {
        use crate::transport::sse::{SseEvent, SseParser};
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        // A chunk boundary inside "é" (0xC3 0xA9) and a two-line data field.
        parser.feed(b"data: caf\xC3", &mut out).unwrap();
        assert!(out.is_empty()); // no blank line yet: the event is not complete
        parser
            .feed(b"\xA9\r\ndata: au lait\r\n\r\n", &mut out)
            .unwrap();
        assert_eq!(out, [SseEvent::Data("café\nau lait".into())]);
    }

    #[test]
    fn sse_parser_finish_example() {
        use crate::transport::sse::{SseEvent, SseParser};
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        // The upstream closed the connection right after the last data line.
        parser.feed(b"data: tail", &mut out).unwrap();
        assert!(out.is_empty());
        parser.finish(&mut out).unwrap();
        assert_eq!(out, [SseEvent::Data("tail".into())]);
    }
}
