//! The one shared body summariser (docs/behaviour.md §6).
//!
//! Every HTTP error translation keeps a bounded summary of the upstream body, in the message and
//! in `body_text`. This module only shortens text for humans; classification (e.g. spotting
//! `insufficient_quota`) must parse the untruncated body, never this summary.

/// Longest summary, in chars, that is returned unshortened.
pub(crate) const SUMMARY_MAX_CHARS: usize = 2048;
/// Chars kept from the start of a body that is too long.
pub(crate) const SUMMARY_HEAD_CHARS: usize = 1400;
/// Chars kept from the end of a body that is too long.
pub(crate) const SUMMARY_TAIL_CHARS: usize = 600;

/// Fold whitespace and bound a response body for messages and `body_text`.
///
/// Runs of whitespace (spaces, tabs, newlines) become one space and the ends are trimmed. A
/// folded body of at most 2048 chars is returned as is; a longer one keeps its first 1400 and
/// last 600 chars around a marker naming how many chars were left out. Lengths count `char`s,
/// not bytes, so multibyte text is never split inside a character.
pub(crate) fn summarize_body(body: &str) -> String {
    let folded = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let total = folded.chars().count();
    if total <= SUMMARY_MAX_CHARS {
        return folded;
    }
    let omitted = total - SUMMARY_HEAD_CHARS - SUMMARY_TAIL_CHARS;
    let head: String = folded.chars().take(SUMMARY_HEAD_CHARS).collect();
    let tail: String = folded.chars().skip(total - SUMMARY_TAIL_CHARS).collect();
    format!("{head} …({omitted} chars omitted)… {tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_whitespace_and_trims() {
        assert_eq!(
            summarize_body("\n  error:\t bad \r\n request  "),
            "error: bad request"
        );
        assert_eq!(summarize_body(""), "");
        assert_eq!(summarize_body(" \n\t "), "");
    }

    #[test]
    fn exactly_2048_chars_is_kept_whole() {
        let body = "a".repeat(2048);
        assert_eq!(summarize_body(&body), body);
    }

    #[test]
    fn chars_2049_is_shortened_with_count() {
        let body: String = (0..2049)
            .map(|i| {
                if i < 1400 {
                    'h'
                } else if i >= 1449 {
                    't'
                } else {
                    'm'
                }
            })
            .collect();
        let s = summarize_body(&body);
        let expected = format!(
            "{} …(49 chars omitted)… {}",
            "h".repeat(1400),
            "t".repeat(600)
        );
        assert_eq!(s, expected);
        assert!(s.chars().count() <= SUMMARY_MAX_CHARS);
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        // 3000 three-byte chars: a byte-based cut would panic or split a char.
        let body = "汉".repeat(2999) + "尾";
        let s = summarize_body(&body);
        assert!(s.starts_with(&"汉".repeat(1400)));
        assert!(s.ends_with(&format!("{}尾", "汉".repeat(599))));
        assert!(s.contains(" …(1000 chars omitted)… "));
        assert!(s.chars().count() <= SUMMARY_MAX_CHARS);
    }

    #[test]
    fn folding_happens_before_measuring() {
        // 2048 visible chars separated by long whitespace runs fold back under the limit.
        let body = "ab\n\n\n\n".repeat(682) + "cd";
        let folded = summarize_body(&body);
        assert!(!folded.contains('…'));
        assert_eq!(folded.chars().count(), 2048);
    }

    #[test]
    fn huge_body_stays_within_limit() {
        let body = "é ".repeat(500_000);
        let s = summarize_body(&body);
        assert!(s.chars().count() <= SUMMARY_MAX_CHARS);
        assert!(s.contains("chars omitted"));
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn summarize_body_example() {
        use crate::error::summarize_body;
        assert_eq!(summarize_body("  a\n\tb  "), "a b");
        let long = "x".repeat(3000);
        let s = summarize_body(&long);
        assert!(s.contains(" …(1000 chars omitted)… "));
        assert!(s.chars().count() <= 2048);
    }
}
