//! The server side of HTTP/2 (RFC 9113), no I/O: [`frame`] (the frame
//! layer, parsed from byte slices, typed errors with the RFC error code)
//! and [`hpack`] (h2 0.4.18's decoder, adapted; our stateless encoder).
pub mod conn;
pub mod frame;
mod head;
pub mod hpack;

pub use conn::{BreachKind, ConnError, Event, Limits, SendError, ServerConn, DEFAULT_MEMORY_BOUND};
pub use frame::ErrorCode;
pub use head::{chunk, RequestHead};
