//! An event's JSON written from its pieces: the fixed text (keys, event types, punctuation)
//! copied as it is, only the strings that vary escaped. For the frames written once per delta
//! of the Messages and Responses streams, where serialising a struct had serde_json scan every
//! key and constant value byte by byte for characters to escape (issue #46: most of what those
//! ingresses cost beyond the chat one). Not for whole objects: those stay typed structs.

use bytes::{BufMut, BytesMut};

/// One piece of an event's JSON.
pub(crate) enum Piece<'a> {
    /// JSON text written verbatim: a constant of the caller's, or what serde_json wrote,
    /// valid JSON in its place.
    Raw(&'a str),
    /// A string value, written quoted and escaped.
    Str(&'a str),
    /// An unsigned number.
    Num(u64),
}

/// Appends `pieces` to `out`, in order.
pub(crate) fn write(out: &mut BytesMut, pieces: &[Piece<'_>]) {
    for piece in pieces {
        match piece {
            Piece::Raw(text) => out.put_slice(text.as_bytes()),
            // Writing a string into a buffer cannot fail.
            Piece::Str(s) => {
                let _ = serde_json::to_writer((&mut *out).writer(), s);
            }
            Piece::Num(n) => {
                let _ = serde_json::to_writer((&mut *out).writer(), n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_write_what_serde_json_writes() {
        let mut out = BytesMut::new();
        write(
            &mut out,
            &[
                Piece::Raw(r#"{"a":"#),
                Piece::Str("say \"hi\"\n\u{1}é"),
                Piece::Raw(r#","b":"#),
                Piece::Num(u64::MAX),
                Piece::Raw("}"),
            ],
        );
        let expected = serde_json::json!({"a": "say \"hi\"\n\u{1}é", "b": u64::MAX});
        assert_eq!(std::str::from_utf8(&out).unwrap(), expected.to_string());
    }
}
