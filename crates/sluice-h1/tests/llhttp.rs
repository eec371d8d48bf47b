//! llhttp's request test cases (tests/data/llhttp, MIT): every strict-mode
//! case (`type: "request"`, no pause/skipBody callbacks) is accepted or
//! refused as llhttp does, except a short list of deliberate differences
//! where our contract is stricter (or a case is outside it).

use sluice_h1::{parse_request, ErrorKind, Options};

struct Case {
    file: String,
    /// Line of the ```http block, as llhttp's own `file.md:line` names a case.
    line: usize,
    title: String,
    input: Vec<u8>,
    llhttp_rejects: bool,
    /// llhttp paused after the first message (CONNECT or Upgrade): what
    /// follows is another protocol, so only that message is ours to parse.
    first_only: bool,
}

/// llhttp's md-test.ts conversion: block lines joined by CRLF, a backslash
/// at a line's end joins lines, then the `\r \n \t \f \xHH \NNN` escapes.
fn convert(lines: &[&str]) -> Vec<u8> {
    let mut joined = String::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(stripped) = l.strip_suffix('\\') {
            joined.push_str(stripped);
        } else {
            joined.push_str(l);
            if i + 1 < lines.len() {
                joined.push_str("\r\n");
            }
        }
    }
    let b = joined.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'f' => out.push(0x0C),
                b'x' => {
                    let hex: String = joined[i + 2..].chars().take_while(char::is_ascii_hexdigit).collect();
                    out.push(u8::from_str_radix(&hex, 16).expect("hex escape"));
                    i += 2 + hex.len();
                    continue;
                }
                b'0'..=b'7' => {
                    let oct: String = joined[i + 1..].chars().take_while(|c| ('0'..='7').contains(c)).take(3).collect();
                    out.push(u8::from_str_radix(&oct, 8).expect("octal escape"));
                    i += 1 + oct.len();
                    continue;
                }
                _ => {
                    out.push(b'\\');
                    i += 1;
                    continue;
                }
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn cases() -> Vec<Case> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llhttp");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut out = Vec::new();
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("README.md")) {
        let text = std::fs::read_to_string(path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let (mut title, mut meta) = (String::new(), String::new());
        let mut i = 0;
        while i < lines.len() {
            let l = lines[i];
            if let Some(t) = l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")) {
                title = t.trim().to_owned();
            } else if let Some(m) = l.strip_prefix("<!-- meta=") {
                meta = m.replace(' ', "");
            } else if l.starts_with("```http") {
                let line = i + 1;
                let start = i + 1;
                i = start;
                while !lines[i].starts_with("```") {
                    i += 1;
                }
                let input = convert(&lines[start..i]);
                // The log block follows.
                while !lines[i + 1].starts_with("```log") {
                    i += 1;
                }
                i += 2;
                let (mut rejects, mut paused) = (false, false);
                while !lines[i].starts_with("```") {
                    // Codes 21 and 22 are llhttp pausing (on CONNECT and
                    // Upgrade: the rest of the stream is another protocol),
                    // not refusing.
                    let l = lines[i];
                    rejects |= l.contains(" error code=") && !l.contains("code=21 ") && !l.contains("code=22 ");
                    paused |= l.contains("code=22 ");
                    i += 1;
                }
                let strict = meta == r#"{"type":"request"}-->"# || meta == r#"{"type":"request","noScan":true}-->"#;
                if strict {
                    out.push(Case {
                        file: file.clone(),
                        line,
                        title: title.clone(),
                        input,
                        llhttp_rejects: rejects,
                        first_only: paused,
                    });
                }
                meta.clear();
            }
            i += 1;
        }
    }
    out
}

/// Our verdict: refused on the first error; a message cut short is not a
/// refusal (llhttp waits for more too). Pipelined messages are all parsed.
fn rejects(input: &[u8], first_only: bool) -> Result<(), String> {
    let mut rest = input;
    while !rest.is_empty() {
        match parse_request(rest, &Options::default()) {
            Ok(r) if r.complete && r.consumed < rest.len() && !first_only => rest = &rest[r.consumed..],
            Ok(_) => return Ok(()),
            Err(e) if e.kind == ErrorKind::IncompleteHead => return Ok(()),
            Err(e) => return Err(e.kind.as_str().to_owned()),
        }
    }
    Ok(())
}

/// (file, case title, why we differ).
/// (file, line of the ```http block, why we differ).
const DELIBERATE: &[(&str, usize, &str)] = &[
    // A message that ends the connection (HTTP/1.0 without keep-alive, or
    // `Connection: close`) followed by more bytes: llhttp refuses the bytes;
    // we parse one message and report `keep_alive: false`. Closing is the
    // server's (the guard's) business.
    ("connection.md", 84, "data after a message that closes the connection"),
    ("connection.md", 297, "data after a message that closes the connection"),
    ("connection.md", 347, "data after a message that closes the connection"),
    // The input ends before the head does. llhttp judges Content-Length as
    // each field ends; we judge the framing fields once the head is complete
    // (and refuse both of these then: see tests/contract.rs).
    ("content-length.md", 78, "head incomplete: Content-Length overflow judged at the head's end"),
    ("content-length.md", 103, "head incomplete: differing Content-Length judged at the head's end"),
    // llhttp knows the methods of HTTP, RTSP and ICE and refuses the others
    // (and RTSP methods with HTTP/x.x); our contract takes any token.
    ("invalid.md", 69, "any token is a method (ANNOUNCE with HTTP/1.0)"),
    ("invalid.md", 359, "any token is a method (MKCOLA)"),
    // Only HTTP/1.0 and HTTP/1.1: no RTSP, no ICE, no HTTP/0.9.
    ("method.md", 375, "ICE/1.0 is not HTTP"),
    ("method.md", 405, "RTSP/1.0 is not HTTP"),
    ("method.md", 433, "RTSP/1.0 is not HTTP"),
    ("sample.md", 317, "HTTP/0.9 (no version) is refused"),
];

#[test]
fn llhttp_request_cases() {
    let cases = cases();
    assert!(cases.len() > 100, "found {} cases", cases.len());
    let (mut agree, mut deliberate) = (0, 0);
    let mut unexpected = Vec::new();
    for c in &cases {
        let ours = rejects(&c.input, c.first_only);
        let differs = ours.is_err() != c.llhttp_rejects;
        let listed = DELIBERATE.iter().any(|(f, l, _)| *f == c.file && *l == c.line);
        match (differs, listed) {
            (false, false) => agree += 1,
            (true, true) => deliberate += 1,
            (true, false) => unexpected.push(format!(
                "{}:{} ({}): llhttp {}, we {:?} on {:?}",
                c.file,
                c.line,
                c.title,
                if c.llhttp_rejects { "rejects" } else { "accepts" },
                ours,
                String::from_utf8_lossy(&c.input)
            )),
            (false, true) => unexpected.push(format!("{}:{}: listed as a difference but agrees", c.file, c.line)),
        }
    }
    println!("llhttp request cases: {} total, {agree} agree, {deliberate} deliberate differences", cases.len());
    assert!(unexpected.is_empty(), "{} unexpected:\n{}", unexpected.len(), unexpected.join("\n"));
}
