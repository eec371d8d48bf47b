//! Traffic over real sockets, for measuring the kernel path the seed measured:
//! `udp` is the seed's RSS UDP test (a multi-threaded echo server, one
//! `SO_REUSEPORT` socket per pinned worker, and a load client whose flows are
//! chosen by their Toeplitz hash). Unlike the engine and the pipeline, this
//! crate does socket I/O; only `sluice-cli` drives it.
#![deny(unsafe_code)]

pub mod udp;
