//! Running code inside a named network namespace (`ip netns add NAME`).
//!
//! A network namespace belongs to a thread, so [`run_in`] spawns a scoped
//! thread, moves it with `setns(CLONE_NEWNET)` and runs the closure there;
//! the calling thread never changes namespace. Sockets keep the namespace
//! they were created in, so a socket opened by the closure and returned
//! can be used from any thread afterwards: that is how the tests send from
//! and capture in namespaces while the bridge runs in the caller's.

use std::fs::File;
use std::path::Path;

use crate::error::{LiveError, Result, NEEDS_NETNS};

/// Runs `f` in the network namespace `name` (the file `/run/netns/NAME`,
/// or any path to a netns file such as `/proc/PID/ns/net`).
pub fn run_in<T, F>(name: &str, f: F) -> Result<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    let path = if name.contains('/') { Path::new(name).to_path_buf() } else { Path::new("/run/netns").join(name) };
    let ns = File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            LiveError::Config(format!("no network namespace {name:?} ({} is missing)", path.display()))
        }
        _ => LiveError::io("open netns", NEEDS_NETNS, e),
    })?;
    std::thread::scope(|s| {
        s.spawn(move || {
            crate::sys::setns_net(&ns).map_err(|e| LiveError::io("setns(CLONE_NEWNET)", NEEDS_NETNS, e))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}
