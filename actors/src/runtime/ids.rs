//! Random identifiers for attempts, leases and probes.

use rand::RngCore;

/// A random RFC 4122 version-4 UUID in its canonical text form.
///
/// Every attempt, cache-hit record and lease gets its own; ids are never reused, so
/// `ON CONFLICT DO NOTHING` never swallows a row and a re-sent script never double counts.
///
/// ```
/// let id = polygateway_actors::runtime::new_id();
/// assert_eq!(id.len(), 36);
/// assert_eq!(&id[14..15], "4");
/// ```
pub fn new_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Written into a fixed array and copied once: pushing 36 `char`s one by one checked the
    // capacity and encoded each as UTF-8, and every request takes several ids (issue #48).
    let mut text = [b'-'; 36];
    let mut at = 0;
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        text[at] = HEX[usize::from(b >> 4)];
        text[at + 1] = HEX[usize::from(b & 0x0f)];
        at += 2;
    }
    String::from_utf8(text.to_vec()).expect("hex digits and dashes are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_v4() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn ids_have_the_canonical_form() {
        for _ in 0..100 {
            let id = new_id();
            for (i, c) in id.char_indices() {
                match i {
                    8 | 13 | 18 | 23 => assert_eq!(c, '-', "{id}"),
                    _ => assert!(matches!(c, '0'..='9' | 'a'..='f'), "{id}"),
                }
            }
        }
    }
}
