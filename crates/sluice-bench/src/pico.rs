//! picohttpparser (H2O's C parser, SSE4.2 build) as a benchmark peer, through
//! `picohttpparser-sys`. The only unsafe code in the crate: one FFI call.
#![allow(unsafe_code)]

use picohttpparser_sys::{phr_header, phr_parse_request};
use std::os::raw::c_char;

const MAX_HEADERS: usize = 64;

/// What picohttpparser found in a complete request head.
pub struct PicoRequest {
    pub method: String,
    pub target: String,
    pub headers: usize,
    pub len: usize,
}

fn call(
    buf: &[u8],
    headers: &mut [phr_header; MAX_HEADERS],
) -> (i32, usize, (*const c_char, usize), (*const c_char, usize)) {
    let (mut method, mut method_len) = (std::ptr::null(), 0usize);
    let (mut path, mut path_len) = (std::ptr::null(), 0usize);
    let mut minor = 0i32;
    let mut n = MAX_HEADERS;
    // SAFETY: every pointer passed is valid for the call: `buf` for
    // `buf.len()` bytes, the out-parameters are locals, and `headers` holds
    // `n` entries. picohttpparser only reads `buf` and writes the outputs;
    // the pointers it returns point into `buf`, which outlives their use.
    let r = unsafe {
        phr_parse_request(
            buf.as_ptr().cast(),
            buf.len(),
            &mut method,
            &mut method_len,
            &mut path,
            &mut path_len,
            &mut minor,
            headers.as_mut_ptr(),
            &mut n,
            0,
        )
    };
    (r, n, (method, method_len), (path, path_len))
}

fn empty() -> [phr_header; MAX_HEADERS] {
    [phr_header { name: std::ptr::null(), name_len: 0, value: std::ptr::null(), value_len: 0 }; MAX_HEADERS]
}

/// The head's length, or None (partial or refused): the timed call.
#[inline]
pub fn parse_len(buf: &[u8]) -> Option<usize> {
    let mut headers = empty();
    let (r, _, _, _) = call(buf, &mut headers);
    usize::try_from(r).ok()
}

/// Parse once and copy the answer out (for checking, not timing).
pub fn parse_request(buf: &[u8]) -> Option<PicoRequest> {
    let mut headers = empty();
    let (r, n, (m, ml), (p, pl)) = call(buf, &mut headers);
    let len = usize::try_from(r).ok()?;
    let base = buf.as_ptr() as usize;
    // The pointers point into `buf`; turn them back into safe sub-slices.
    let slice = |ptr: *const c_char, l: usize| -> String {
        let at = ptr as usize - base;
        String::from_utf8_lossy(&buf[at..at + l]).into_owned()
    };
    Some(PicoRequest { method: slice(m, ml), target: slice(p, pl), headers: n, len })
}
