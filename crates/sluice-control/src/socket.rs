//! The control socket: a Unix stream socket (mode 0600, or 0660 with a
//! group to share it) whose peers are checked by `SO_PEERCRED`: root, the
//! owner, or a member of the group. A client writes one request (see
//! [`crate::ctl`]), closes its write side, and reads one JSON reply; the
//! controller thread does the work, so requests are serialised with
//! reloads and expiry.

use crate::control::{Event, Request};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest request read (a batch of about a million lines).
pub const MAX_REQUEST: u64 = 64 << 20;

/// Who may connect besides root and the socket's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub uid: u32,
    pub group: Option<u32>,
}

/// Why the socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("control socket {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("control socket {0}: something is listening there already (another bridge?)")]
    InUse(String),
    #[error("--control-group {0}: no such group in /etc/group")]
    NoGroup(String),
}

/// A group by name (from /etc/group) or number.
pub fn group_id(name: &str) -> Result<u32, SocketError> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let text = std::fs::read_to_string("/etc/group").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 3 && f[0] == name).then(|| f[2].parse().ok()).flatten()
        })
        .next()
        .ok_or_else(|| SocketError::NoGroup(name.into()))
}

/// What the socket thread counts (the metrics read it).
#[derive(Debug, Default)]
pub struct SocketCounters {
    /// Peers refused by `SO_PEERCRED`.
    pub refused: AtomicU64,
}

/// The serving thread; [`Serving::stop`] ends it.
pub struct Serving {
    thread: std::thread::JoinHandle<()>,
    stop: Arc<AtomicBool>,
    path: PathBuf,
}

impl Serving {
    /// Ends the accept loop (a connection wakes its blocking accept) and
    /// removes the socket file.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = UnixStream::connect(&self.path);
        let _ = self.thread.join();
    }
}

/// Binds `path` (replacing a stale socket file, refusing a live one), sets
/// its mode and group, and serves it on a thread until stopped: each
/// request is handed to the controller through `events`.
/// [`serve`] at `path` when one is given, for members of the group named
/// `group` too (a name or a number), logging where.
pub fn serve_at(
    path: Option<&Path>,
    group: Option<&str>,
    events: &Sender<Event>,
    counters: &Arc<SocketCounters>,
) -> Result<Option<Serving>, SocketError> {
    let Some(path) = path else { return Ok(None) };
    let group = group.map(group_id).transpose()?;
    let serving = serve(path, group, events.clone(), Arc::clone(counters))?;
    tracing::info!("control socket at {}", path.display());
    Ok(Some(serving))
}

pub fn serve(
    path: &Path,
    group: Option<u32>,
    events: Sender<Event>,
    counters: Arc<SocketCounters>,
) -> Result<Serving, SocketError> {
    let name = path.display().to_string();
    let io = |error| SocketError::Io { path: name.clone(), error };
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(SocketError::InUse(name));
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    if let Some(g) = group {
        std::os::unix::fs::chown(path, None, Some(g)).map_err(io)?;
    }
    let access = Access { uid: rustix::process::geteuid().as_raw(), group };
    let stop = Arc::new(AtomicBool::new(false));
    let (listener_path, flag) = (path.to_owned(), Arc::clone(&stop));
    let thread = std::thread::Builder::new()
        .name("sluice-control".into())
        .spawn(move || {
            // Blocking accept: a request is taken the moment it connects;
            // `Serving::stop` connects once to wake it.
            loop {
                let accepted = listener.accept();
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                match accepted {
                    Ok((conn, _)) => {
                        let events = events.clone();
                        let counters = Arc::clone(&counters);
                        let _ = std::thread::Builder::new()
                            .name("sluice-ctl-conn".into())
                            .spawn(move || handle(conn, access, &events, &counters));
                    }
                    Err(e) => {
                        tracing::warn!("control socket: accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            let _ = std::fs::remove_file(&listener_path);
        })
        .map_err(io)?;
    Ok(Serving { thread, stop, path: path.to_owned() })
}

/// Whether the peer may use the socket.
fn allowed(conn: &UnixStream, access: Access) -> Result<(), String> {
    let cred = rustix::net::sockopt::socket_peercred(conn).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    let (uid, gid) = (cred.uid.as_raw(), cred.gid.as_raw());
    // The group may be one of the peer's supplementary groups, which
    // SO_PEERCRED does not carry: the peer's /proc entry does.
    let in_group = |g: u32| {
        g == gid
            || std::fs::read_to_string(format!("/proc/{}/status", cred.pid.as_raw_nonzero())).is_ok_and(|st| {
                st.lines()
                    .find_map(|l| l.strip_prefix("Groups:"))
                    .is_some_and(|gs| gs.split_whitespace().any(|x| x.parse() == Ok(g)))
            })
    };
    if uid == 0 || uid == access.uid || access.group.is_some_and(in_group) {
        Ok(())
    } else {
        Err(format!(
            "refused: uid {uid} gid {gid} may not use this socket (owner uid {}, root, or --control-group)",
            access.uid
        ))
    }
}

fn handle(mut conn: UnixStream, access: Access, events: &Sender<Event>, counters: &SocketCounters) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let reply = match allowed(&conn, access) {
        Err(e) => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("control socket: {e}");
            // Read what it sent, so closing does not reset the connection
            // before the refusal is read.
            let _ = std::io::copy(&mut (&conn).take(MAX_REQUEST), &mut std::io::sink());
            error_json(&e, None)
        }
        Ok(()) => {
            let mut text = String::new();
            match (&conn).take(MAX_REQUEST).read_to_string(&mut text) {
                Err(e) => error_json(&format!("reading the request: {e}"), None),
                Ok(_) => {
                    let (tx, rx) = channel();
                    let sent = events.send(Event::Ctl(Request { text, received: Instant::now(), reply: tx }));
                    match sent.ok().and_then(|()| rx.recv().ok()) {
                        Some(r) => r,
                        None => error_json("the bridge is stopping", None),
                    }
                }
            }
        }
    };
    let _ = conn.write_all(reply.as_bytes());
    let _ = conn.write_all(b"\n");
}

/// `{"ok": false, "error": ..., "line": ...}`.
pub fn error_json(message: &str, line: Option<usize>) -> String {
    let mut v = serde_json::json!({ "ok": false, "error": message });
    if let Some(l) = line {
        v["line"] = l.into();
    }
    v.to_string()
}

/// The client side: sends `request` to the socket at `path` and returns
/// the JSON reply.
pub fn request(path: &Path, request: &str, timeout: Duration) -> std::io::Result<serde_json::Value> {
    let mut conn = UnixStream::connect(path)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.write_all(request.as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply)?;
    serde_json::from_str(reply.trim()).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the reply is not JSON ({e}): {reply:?}"))
    })
}
