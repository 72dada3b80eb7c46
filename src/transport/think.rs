//! Moving `<think>…</think>` blocks out of streamed `content` into thinking, for providers whose
//! reasoning arrives inline (docs/behaviour.md §7.1, [`crate::provider::ReasoningForm::ThinkTags`]).
//!
//! Incremental: tags may be split across deltas at any byte. Whitespace right after a closing tag
//! (the customary `\n\n`) is dropped so the answer does not start with blank lines. The
//! concatenation of the emitted pieces does not depend on how the input was chunked.

use super::exchange::ChatDelta;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Incremental think-tag splitter.
#[derive(Debug, Default)]
pub(crate) struct ThinkSplitter {
    in_think: bool,
    /// A tail that may be the start of the next tag.
    pending: String,
    /// Drop leading whitespace of content (right after a closing tag).
    skip_ws: bool,
}

impl ThinkSplitter {
    /// A splitter outside any think block.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Split one content delta, appending the resulting pieces to `out`.
    pub(crate) fn push(&mut self, text: &str, out: &mut Vec<ChatDelta>) {
        let mut buf = std::mem::take(&mut self.pending);
        buf.push_str(text);
        let mut rest: &str = &buf;
        loop {
            let tag = if self.in_think { CLOSE } else { OPEN };
            if let Some(i) = rest.find(tag) {
                self.emit(&rest[..i], out);
                rest = &rest[i + tag.len()..];
                self.in_think = !self.in_think;
                if !self.in_think {
                    self.skip_ws = true;
                }
                continue;
            }
            let hold = partial_tag_suffix(rest, tag);
            self.emit(&rest[..rest.len() - hold], out);
            self.pending = rest[rest.len() - hold..].to_string();
            break;
        }
    }

    /// End of stream: a held partial tag is plain text after all.
    pub(crate) fn finish(&mut self, out: &mut Vec<ChatDelta>) {
        let pending = std::mem::take(&mut self.pending);
        self.emit(&pending, out);
    }

    fn emit(&mut self, piece: &str, out: &mut Vec<ChatDelta>) {
        if self.in_think {
            if !piece.is_empty() {
                out.push(ChatDelta::Reasoning(piece.to_string()));
            }
            return;
        }
        let piece = if self.skip_ws {
            piece.trim_start()
        } else {
            piece
        };
        if !piece.is_empty() {
            self.skip_ws = false;
            out.push(ChatDelta::Content(piece.to_string()));
        }
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_tag_suffix(s: &str, tag: &str) -> usize {
    let max = (tag.len() - 1).min(s.len());
    (1..=max)
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&str]) -> (String, String) {
        let mut s = ThinkSplitter::new();
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        let mut content = String::new();
        let mut thinking = String::new();
        for d in out {
            match d {
                ChatDelta::Content(c) => content.push_str(&c),
                ChatDelta::Reasoning(r) => thinking.push_str(&r),
                ChatDelta::ToolCall(_)
                | ChatDelta::Refusal(_)
                | ChatDelta::ThinkingSignature(_) => {
                    unreachable!("the splitter sees text only")
                }
            }
        }
        (content, thinking)
    }

    #[test]
    fn whole_and_split_tags_give_the_same_result() {
        let text = "<think>step 1\nstep 2</think>\n\nThe answer is 42.";
        let expected = (
            "The answer is 42.".to_string(),
            "step 1\nstep 2".to_string(),
        );
        assert_eq!(split(&[text]), expected);
        for cut in 0..=text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(split(&[a, b]), expected, "cut at {cut}");
        }
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(split(&refs), expected);
    }

    #[test]
    fn text_without_tags_passes_through() {
        assert_eq!(
            split(&["a < b", " and <thin", "g>"]),
            ("a < b and <thing>".into(), String::new())
        );
    }

    #[test]
    fn unterminated_think_is_all_reasoning() {
        assert_eq!(
            split(&["<think>still going"]),
            (String::new(), "still going".into())
        );
    }

    #[test]
    fn multibyte_text_next_to_tags() {
        assert_eq!(
            split(&["<think>想</th", "ink>好的<"]),
            ("好的<".into(), "想".into())
        );
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn think_splitter_example() {
        use crate::transport::chat::ChatDelta;
        use crate::transport::think::ThinkSplitter;
        let mut s = ThinkSplitter::new();
        let mut out = Vec::new();
        s.push("<thi", &mut out);
        s.push("nk>why</think>\n\nanswer", &mut out);
        s.finish(&mut out);
        assert_eq!(
            out,
            vec![
                ChatDelta::Reasoning("why".into()),
                ChatDelta::Content("answer".into())
            ]
        );
    }

    #[test]
    fn think_splitter_new_example() {
        use crate::transport::chat::ChatDelta;
        use crate::transport::think::ThinkSplitter;
        let mut splitter = ThinkSplitter::new();
        let mut out = Vec::new();
        // Outside a think block, content passes through unchanged.
        splitter.push("plain answer", &mut out);
        assert_eq!(out, [ChatDelta::Content("plain answer".into())]);
    }

    #[test]
    fn think_splitter_push_example() {
        use crate::transport::chat::ChatDelta;
        use crate::transport::think::ThinkSplitter;
        let mut splitter = ThinkSplitter::new();
        let mut out = Vec::new();
        // What may be the start of a tag is held back until the next delta decides.
        splitter.push("Hi <th", &mut out);
        assert_eq!(out, [ChatDelta::Content("Hi ".into())]);
        splitter.push("ink>plan", &mut out);
        assert_eq!(out[1], ChatDelta::Reasoning("plan".into()));
    }

    #[test]
    fn think_splitter_finish_example() {
        use crate::transport::chat::ChatDelta;
        use crate::transport::think::ThinkSplitter;
        let mut splitter = ThinkSplitter::new();
        let mut out = Vec::new();
        splitter.push("a <", &mut out);
        assert_eq!(out, [ChatDelta::Content("a ".into())]);
        // The stream ended: the held "<" was never a tag.
        splitter.finish(&mut out);
        assert_eq!(out[1], ChatDelta::Content("<".into()));
    }
}
