//! The server side of HTTP/2 (RFC 9113), no I/O: [`frame`] (the frame
//! layer, parsed from byte slices, typed errors with the RFC error code).
pub mod frame;
