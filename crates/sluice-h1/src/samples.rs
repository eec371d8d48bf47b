//! The short heads `sluice-bench http` and the `head_loop` example time
//! (the seed's cases), kept in one place so both measure the same bytes.

/// A request line alone, then the empty line.
pub const REQUEST_LINE: &[u8] = b"GET /wp-content/uploads/2010/03/hello-kitty-darth-vader-pink.jpg HTTP/1.1\r\n\r\n";

/// `GET / HTTP/1.1` and eight ordinary header lines.
pub fn header_lines() -> Vec<u8> {
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    for (name, value) in [
        ("Host", "www.example.com"),
        ("Accept", "*/*"),
        ("Accept-Encoding", "gzip, deflate"),
        ("Connection", "keep-alive"),
        ("Cache-Control", "no-cache"),
        ("Pragma", "no-cache"),
        ("X-Requested-With", "XMLHttpRequest"),
        ("Referer", "http://www.example.com/index.html"),
    ] {
        head.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

#[cfg(test)]
mod tests {
    #[test]
    fn samples_are_complete_heads() {
        for head in [super::REQUEST_LINE.to_vec(), super::header_lines()] {
            let mut p = crate::Parser::new(crate::Options::default());
            assert!(matches!(p.parse_head(&head), Ok(crate::HeadStatus::Complete(n)) if n == head.len()));
            assert_eq!(p.head(&head).map(|h| h.header_count()), Some(if head.len() > 100 { 8 } else { 0 }));
        }
    }
}
