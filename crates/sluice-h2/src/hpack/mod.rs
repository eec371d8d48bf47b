//! HPACK (RFC 7541). The decoder is h2 0.4.18's (see `decoder.rs` and
//! `LICENSE-h2` for what was copied and changed); the encoder is ours and
//! stateless: a field in the static table with its exact value is sent
//! indexed, anything else as a literal without indexing (the name indexed
//! when the static table has it), never Huffman-coded. A server's response
//! heads are small and few; a dynamic table on our side would be state per
//! connection for a few bytes saved.

mod decoder;
mod encoder;
mod huffman;

pub use decoder::{Decoder, DecoderError};
pub use encoder::{encode, encode_size_update};

/// A header field: its name and value, raw bytes.
pub type Field = (Vec<u8>, Vec<u8>);

/// RFC 7541 4.1: a table entry's size is its name and value plus 32.
pub const ENTRY_OVERHEAD: usize = 32;

/// The static table (RFC 7541 Appendix A), 1-based on the wire.
pub const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];
