//! `sluice http-serve`: a small, fast HTTP/1.1 server (keep-alive,
//! pipelining) whose responses have a controllable size, delay and status,
//! as the target of the load tester. `request` frames requests, `dist` draws
//! sizes and delays, `server` runs one mio event loop per thread on
//! SO_REUSEPORT sockets. `sluice http-load`: `load` drives a server (open or
//! closed loop, pipelining, many source addresses, request bodies),
//! `pools` runs several kinds of client at once from a pool file.

pub mod dist;
pub mod flags;
pub mod load;
pub mod pools;
pub mod request;
pub mod server;
pub mod tls;

pub use dist::{Dist, DistError, WeightedList};
pub use server::{Config, Report, ServeError, ServeSummary, Server, ServerThreads, Stall, ThreadStats};
