//! The reference's own character classes, written from the RFC 9110/9112
//! grammar rather than shared with the fast path's tables.

/// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
///         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
pub(super) fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// A field value byte: HTAB, SP, VCHAR or obs-text (no CTL but HTAB, no DEL).
pub(super) fn value_byte(c: u8) -> bool {
    c == b'\t' || c == b' ' || (0x21..=0x7E).contains(&c) || c >= 0x80
}

/// A request-target byte: VCHAR.
pub(super) fn target_byte(c: u8) -> bool {
    (0x21..=0x7E).contains(&c)
}

/// quoted-string's qdtext: HTAB, SP, 0x21, 0x23-0x5B, 0x5D-0x7E, obs-text.
pub(super) fn qdtext(c: u8) -> bool {
    c == b'\t' || c == b' ' || c == 0x21 || (0x23..=0x5B).contains(&c) || (0x5D..=0x7E).contains(&c) || c >= 0x80
}

/// What may follow a backslash in a quoted-string: HTAB, SP, VCHAR, obs-text.
pub(super) fn quoted_pair(c: u8) -> bool {
    c == b'\t' || c == b' ' || (0x21..=0x7E).contains(&c) || c >= 0x80
}
