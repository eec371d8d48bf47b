//! picohttpparser (H2O's C parser, SSE4.2 build) as a benchmark peer, through
//! `picohttpparser-sys`. The only unsafe code here: one FFI call.
#![allow(unsafe_code)]

use crate::http_parse::MAX_HEADERS;
use picohttpparser_sys::{phr_header, phr_parse_request};
use std::os::raw::c_char;

/// What picohttpparser found in a complete request head.
pub struct PicoRequest {
    pub method: String,
    pub target: String,
    pub headers: usize,
    pub len: usize,
}

/// The header array picohttpparser fills, kept between calls as its own
/// benchmark keeps it (not cleared per request).
pub struct Headers([phr_header; MAX_HEADERS]);

struct Found {
    ret: i32,
    headers: usize,
    method: (*const c_char, usize),
    path: (*const c_char, usize),
}

impl Headers {
    pub fn new() -> Headers {
        Headers(
            [phr_header { name: std::ptr::null(), name_len: 0, value: std::ptr::null(), value_len: 0 }; MAX_HEADERS],
        )
    }

    fn call(&mut self, buf: &[u8]) -> Found {
        let (mut method, mut method_len) = (std::ptr::null(), 0usize);
        let (mut path, mut path_len) = (std::ptr::null(), 0usize);
        let mut minor = 0i32;
        let mut n = MAX_HEADERS;
        // SAFETY: every pointer passed is valid for the call: `buf` for
        // `buf.len()` bytes, the out-parameters are locals, and the header
        // array holds `n` entries. picohttpparser only reads `buf` and
        // writes the outputs; the pointers it returns point into `buf`,
        // which outlives their use in `parse_request`.
        let ret = unsafe {
            phr_parse_request(
                buf.as_ptr().cast(),
                buf.len(),
                &mut method,
                &mut method_len,
                &mut path,
                &mut path_len,
                &mut minor,
                self.0.as_mut_ptr(),
                &mut n,
                0,
            )
        };
        Found { ret, headers: n, method: (method, method_len), path: (path, path_len) }
    }

    /// The head's length, or None (partial or refused): the timed call.
    #[inline]
    pub fn parse_len(&mut self, buf: &[u8]) -> Option<usize> {
        usize::try_from(self.call(buf).ret).ok()
    }

    /// Parse once and copy the answer out (for checking, not timing).
    pub fn parse_request(&mut self, buf: &[u8]) -> Option<PicoRequest> {
        let f = self.call(buf);
        let len = usize::try_from(f.ret).ok()?;
        let base = buf.as_ptr() as usize;
        // The pointers point into `buf`; turn them back into safe sub-slices.
        let slice = |(ptr, l): (*const c_char, usize)| -> String {
            let at = ptr as usize - base;
            String::from_utf8_lossy(&buf[at..at + l]).into_owned()
        };
        Some(PicoRequest { method: slice(f.method), target: slice(f.path), headers: f.headers, len })
    }
}

impl Default for Headers {
    fn default() -> Headers {
        Headers::new()
    }
}
