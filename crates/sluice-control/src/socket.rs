//! The control socket every product serves: a Unix stream socket (mode
//! 0600, 0660 with a group to share it) whose peers are checked by
//! `SO_PEERCRED` and given a [`Role`]: root, the owner and members of
//! `--control-group` may do everything, members of `--control-add-group`
//! only add, test and list. A client writes one request (see
//! [`crate::command`]), closes its write side, and reads one JSON reply.
//! The socket reads, parses (into the product's own [`Protocol`]) and
//! checks the role on the connection's thread; the product's thread gets
//! only requests it may run ([`CtlRequest`]), so its work is serialised with
//! its own (a bridge's reloads and expiry).
//!
//! Hostile or broken clients are bounded ([`SocketLimits`]): a request is read
//! whole or not at all (over 64 MiB, not in whole within 30 s, or cut by
//! its client closing the connection: refused, nothing applied), at most 8
//! connections are served at once (one more is told `busy`), and a refused
//! peer is answered without reading anything it sent.

use crate::command::{check_role, parse_request, Protocol, Role};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest request read (a batch of about a million lines). A longer
/// one is refused whole: cut, its last line could change meaning
/// (`10.0.0.0/24` read as `10.0.0.0/2`).
pub const MAX_REQUEST: u64 = 64 << 20;

/// What one connection may take of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketLimits {
    /// The largest request, in bytes.
    pub max_request: u64,
    /// Connections served at once; one more is answered `busy` and closed.
    pub max_connections: usize,
    /// The whole request must arrive within this from accept, however it
    /// trickles in: a timeout per read would let a byte every few seconds
    /// hold a connection for ever.
    pub read_deadline: Duration,
    /// The whole reply must be taken within this.
    pub write_deadline: Duration,
}

impl Default for SocketLimits {
    fn default() -> SocketLimits {
        SocketLimits {
            max_request: MAX_REQUEST,
            max_connections: 8,
            read_deadline: Duration::from_secs(30),
            // A `list` of millions of elements is hundreds of MB of JSON, read
            // at GB/s by a client that reads at all.
            write_deadline: Duration::from_secs(60),
        }
    }
}

/// Who may connect besides root and the socket's owner, and what they
/// may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// The owner: this process's effective uid.
    pub uid: u32,
    /// `--control-group`: may do everything.
    pub group: Option<u32>,
    /// `--control-add-group`: may add, test and list ([`Role::Add`]).
    pub add_group: Option<u32>,
}

/// The control socket's flags (every product that serves one).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ControlFlags {
    /// Serve the control socket (`sluice ctl`) at PATH: runtime changes and
    /// queries (docs/ctl.md lists each product's commands). Mode 0600:
    /// root and this user only.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Let members of group G use every command of the control socket
    /// too (mode 0660).
    #[arg(long, value_name = "G", requires = "control")]
    pub control_group: Option<String>,
    /// Let members of group G add, test and list only (what a guard
    /// forwarding its blocks, or a fail2ban action that only bans, needs;
    /// a guard's `block` and `blocks`).
    #[arg(long, value_name = "G", requires = "control")]
    pub control_add_group: Option<String>,
}

impl ControlFlags {
    /// The socket's path and who may use it, when one is asked for.
    pub fn access(&self) -> Result<Option<(PathBuf, Access)>, SocketError> {
        let Some(path) = &self.control else { return Ok(None) };
        let access = Access::owner_and(self.control_group.as_deref(), self.control_add_group.as_deref())?;
        Ok(Some((path.clone(), access)))
    }
}

impl Access {
    /// This process as the owner, and the groups named (names from
    /// /etc/group, or numbers).
    pub fn owner_and(group: Option<&str>, add_group: Option<&str>) -> Result<Access, SocketError> {
        Ok(Access {
            uid: rustix::process::geteuid().as_raw(),
            group: group.map(group_id).transpose()?,
            add_group: add_group.map(group_id).transpose()?,
        })
    }

    /// The socket file's mode and group: only the owner (0600); one group
    /// (0660, that group); both groups, which one file cannot name, 0666,
    /// and `SO_PEERCRED` alone tells who may connect (as it does in every
    /// case: a mode opened by mistake lets no other user in).
    fn file_mode(&self) -> (u32, Option<u32>) {
        match (self.group, self.add_group) {
            (None, None) => (0o600, None),
            (Some(g), None) | (None, Some(g)) => (0o660, Some(g)),
            (Some(a), Some(b)) if a == b => (0o660, Some(a)),
            (Some(_), Some(_)) => (0o666, None),
        }
    }
}

/// A request the product may run: its commands with their lines, parsed
/// and allowed by the peer's role, and where its JSON reply goes.
#[derive(Debug)]
pub struct CtlRequest<C> {
    pub commands: Vec<(usize, C)>,
    pub received: Instant,
    pub reply: Sender<String>,
}

/// How the socket hands a request to its product (a channel's send):
/// `false` when the product is gone (the client is told it is stopping).
pub type Deliver<C> = Arc<dyn Fn(CtlRequest<C>) -> bool + Send + Sync>;

/// Why the socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("control socket {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("control socket {0}: something is listening there already (another bridge?)")]
    InUse(String),
    #[error("control socket {0}: exists and is not a socket (left as it is; remove it or choose another path)")]
    NotASocket(String),
    #[error("--control-group {0}: no such group in /etc/group")]
    NoGroup(String),
}

/// Why a request was not read whole (the reply's `error`).
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("request over {} MiB ({max} bytes), the most one request may be: refused whole, nothing applied; split the batch", max >> 20)]
    TooLarge { max: u64 },
    #[error("the request did not arrive whole within {} s (end it by closing the write side)", .0.as_secs_f64())]
    Deadline(Duration),
    #[error("the request is not UTF-8 text")]
    NotUtf8,
    #[error("the client closed the connection instead of only its write side: the request may be cut short, so nothing was applied")]
    Closed,
    #[error("reading the request: {0}")]
    Io(std::io::Error),
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

sluice_metrics::counters! {
    /// What the socket thread counts (the metrics read it).
    pub struct SocketCounters / SocketTotals {
        /// Peers refused by `SO_PEERCRED`.
        refused => "sluice_control_requests" { "result" = "refused" },
        /// Connections answered `busy`: [`SocketLimits::max_connections`] were being
        /// served.
        busy => "sluice_control_requests" { "result" = "busy" },
        /// Requests over [`SocketLimits::max_request`], refused whole.
        too_large => "sluice_control_requests" { "result" = "too_large" },
        /// Requests not in whole by [`SocketLimits::read_deadline`].
        timed_out => "sluice_control_requests" { "result" = "timed_out" },
        /// Requests that did not parse (an unknown command, a bad address).
        malformed => "sluice_control_requests" { "result" = "malformed" },
        /// Requests with a command the peer's role may not send.
        forbidden => "sluice_control_requests" { "result" = "forbidden" },
    }
    families {
        /// Control socket requests the socket itself answered, by result
        /// (refused: the peer is not allowed; busy; too_large; timed_out;
        /// malformed; forbidden: the peer's role).
        "sluice_control_requests",
    }
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

/// [`serve`] at `path` when one is given, logging where.
pub fn serve_at<C: Protocol>(
    path: Option<&Path>,
    access: Access,
    deliver: Deliver<C>,
    counters: &Arc<SocketCounters>,
) -> Result<Option<Serving>, SocketError> {
    let Some(path) = path else { return Ok(None) };
    let serving = serve(path, access, deliver, Arc::clone(counters))?;
    tracing::info!("control socket at {}", path.display());
    Ok(Some(serving))
}

/// [`serve_with`] the default [`SocketLimits`].
pub fn serve<C: Protocol>(
    path: &Path,
    access: Access,
    deliver: Deliver<C>,
    counters: Arc<SocketCounters>,
) -> Result<Serving, SocketError> {
    serve_with(path, access, deliver, counters, SocketLimits::default())
}

/// Makes way for a socket at `path`: nothing there, or a socket nobody
/// listens on (a previous run's, removed). Anything else stays: a live
/// socket, and a file, directory or symlink that a mistyped `--control`
/// would otherwise delete.
fn clear(path: &Path, name: &str) -> Result<(), SocketError> {
    let io = |error| SocketError::Io { path: name.to_owned(), error };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(e)),
        Ok(meta) if !meta.file_type().is_socket() => Err(SocketError::NotASocket(name.to_owned())),
        Ok(_) => match UnixStream::connect(path) {
            Ok(_) => Err(SocketError::InUse(name.to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path).map_err(io),
            // Not known to be stale (e.g. not ours to connect to): left.
            Err(e) => Err(io(e)),
        },
    }
}

/// Binds `path` (replacing a stale socket, refusing a live one or any
/// other file), sets its mode and group, and serves it on a thread until
/// stopped: each request a peer may send is handed to the product through
/// `deliver`, at most `limits.max_connections` at once.
pub fn serve_with<C: Protocol>(
    path: &Path,
    access: Access,
    deliver: Deliver<C>,
    counters: Arc<SocketCounters>,
    limits: SocketLimits,
) -> Result<Serving, SocketError> {
    let name = path.display().to_string();
    let io = |error| SocketError::Io { path: name.clone(), error };
    clear(path, &name)?;
    let listener = UnixListener::bind(path).map_err(io)?;
    let (mode, group) = access.file_mode();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    if let Some(g) = group {
        std::os::unix::fs::chown(path, None, Some(g)).map_err(io)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (listener_path, flag) = (path.to_owned(), Arc::clone(&stop));
    let active = Arc::new(AtomicUsize::new(0));
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
                    Ok((conn, _)) => accepted_one(conn, access, limits, &active, &deliver, &counters),
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

/// One of the `max_connections` places; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(active: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        let mut n = active.load(Ordering::Relaxed);
        loop {
            if n >= max {
                return None;
            }
            match active.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(Slot(Arc::clone(active))),
                Err(now) => n = now,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// On the accept thread: a refused peer and a connection beyond the bound
/// are answered here at once, without reading their request (so neither
/// can make the server read or wait), and closed; the rest get a thread.
fn accepted_one<C: Protocol>(
    conn: UnixStream,
    access: Access,
    limits: SocketLimits,
    active: &Arc<AtomicUsize>,
    deliver: &Deliver<C>,
    counters: &Arc<SocketCounters>,
) {
    let role = match allowed(&conn, access) {
        Ok(role) => role,
        Err(e) => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("control socket: {e}");
            answer_at_once(conn, &error_json(&e, None));
            return;
        }
    };
    let Some(slot) = Slot::take(active, limits.max_connections) else {
        counters.busy.fetch_add(1, Ordering::Relaxed);
        let n = limits.max_connections;
        answer_at_once(conn, &error_json(&format!("busy: {n} requests in progress; try again"), None));
        return;
    };
    let (deliver, counters) = (Arc::clone(deliver), Arc::clone(counters));
    let spawned = std::thread::Builder::new().name("sluice-ctl-conn".into()).spawn(move || {
        let _slot = slot;
        handle(conn, role, limits, &deliver, &counters);
    });
    // The closure, the connection and its slot are dropped with the error.
    if let Err(e) = spawned {
        tracing::warn!("control socket: no thread for a connection: {e}");
    }
}

/// Writes a short reply without blocking the accept thread, and closes.
/// Closing with the request unread does not lose the reply: a Unix
/// socket's peer reads what was queued to it before it sees the close (its
/// write fails instead; [`request`] reads the reply then).
fn answer_at_once(conn: UnixStream, reply: &str) {
    let _ = conn.set_nonblocking(true);
    // A fresh connection's send buffer is empty: a short reply fits whole.
    let _ = (&conn).write_all(format!("{reply}\n").as_bytes());
}

/// What the peer may do, if it may use the socket at all.
fn allowed(conn: &UnixStream, access: Access) -> Result<Role, String> {
    let cred = rustix::net::sockopt::socket_peercred(conn).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    let (uid, gid) = (cred.uid.as_raw(), cred.gid.as_raw());
    // The group may be one of the peer's supplementary groups, which
    // SO_PEERCRED does not carry: SO_PEERGROUPS does. Not the peer's
    // /proc entry: under systemd's ProtectProc=invisible (the units') a
    // service does not see another user's processes, so the guard, in the
    // group as a supplementary one, would be refused.
    let in_group = |g: u32| g == gid || peer_groups(conn).is_ok_and(|gs| gs.contains(&g));
    if uid == 0 || uid == access.uid || access.group.is_some_and(in_group) {
        Ok(Role::Admin)
    } else if access.add_group.is_some_and(in_group) {
        Ok(Role::Add)
    } else {
        Err(format!(
            "refused: uid {uid} gid {gid} may not use this socket (owner uid {}, root, --control-group or --control-add-group)",
            access.uid
        ))
    }
}

/// The peer's supplementary groups when it connected (`SO_PEERGROUPS`,
/// Linux 4.13), which rustix does not wrap.
#[allow(unsafe_code)]
pub fn peer_groups(conn: &UnixStream) -> std::io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    const GID: usize = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    loop {
        let mut len = (groups.len() * GID) as libc::socklen_t;
        // SAFETY: `groups` has room for `len` bytes and `len` is a valid
        // socklen_t; the kernel writes at most `len` bytes and sets `len`.
        let r = unsafe {
            libc::getsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / GID);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        // Too small: `len` says how much room it takes.
        if e.raw_os_error() == Some(libc::ERANGE) && len as usize > groups.len() * GID {
            groups.resize(len as usize / GID, 0);
            continue;
        }
        return Err(e);
    }
}

/// The request, read to its end within one deadline. One byte past
/// `max_request` is read to know it is over, and none is kept: a request
/// over the limit is not applied in part.
fn read_request(conn: &UnixStream, limits: &SocketLimits) -> Result<String, ReadError> {
    let end = Instant::now() + limits.read_deadline;
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::Deadline(limits.read_deadline));
        }
        conn.set_read_timeout(Some(left)).map_err(ReadError::Io)?;
        let room = usize::try_from(limits.max_request).unwrap_or(usize::MAX) - text.len();
        let want = chunk.len().min(room.saturating_add(1));
        match (&*conn).read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) if n > room => return Err(ReadError::TooLarge { max: limits.max_request }),
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(ReadError::Deadline(limits.read_deadline))
            }
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    if peer_gone(conn) {
        return Err(ReadError::Closed);
    }
    String::from_utf8(text).map_err(|_| ReadError::NotUtf8)
}

/// Whether the peer closed its whole connection, not just its write side
/// (a hang-up, not only end of input): a client that dies mid-request
/// ends it the same way as one that is done, and only this tells them
/// apart.
fn peer_gone(conn: &UnixStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(conn, PollFlags::empty())];
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    poll(&mut fds, Some(&now)).is_ok() && fds[0].revents().contains(PollFlags::HUP)
}

fn handle<C: Protocol>(
    conn: UnixStream,
    role: Role,
    limits: SocketLimits,
    deliver: &Deliver<C>,
    counters: &SocketCounters,
) {
    let _ = conn.set_nonblocking(false);
    let reply = match read_request(&conn, &limits) {
        Ok(text) => {
            let received = Instant::now();
            let allowed = parse_request::<C>(&text)
                .inspect_err(|_| {
                    counters.malformed.fetch_add(1, Ordering::Relaxed);
                })
                .and_then(|commands| {
                    check_role(&commands, role).inspect_err(|_| {
                        counters.forbidden.fetch_add(1, Ordering::Relaxed);
                    })?;
                    Ok(commands)
                });
            match allowed {
                Err(e) => error_json(&e.to_string(), Some(e.line)),
                Ok(commands) => {
                    let (tx, rx) = channel();
                    let sent = deliver(CtlRequest { commands, received, reply: tx });
                    match sent.then(|| rx.recv().ok()).flatten() {
                        Some(r) => r,
                        None => error_json("the server is stopping", None),
                    }
                }
            }
        }
        Err(e) => {
            match e {
                ReadError::TooLarge { .. } => counters.too_large.fetch_add(1, Ordering::Relaxed),
                ReadError::Deadline(_) => counters.timed_out.fetch_add(1, Ordering::Relaxed),
                ReadError::NotUtf8 | ReadError::Closed | ReadError::Io(_) => 0,
            };
            tracing::warn!("control socket: {e}");
            error_json(&e.to_string(), None)
        }
    };
    write_reply(&conn, format!("{reply}\n").as_bytes(), limits.write_deadline);
}

/// Writes `reply` within one deadline: a peer that stops reading cannot
/// hold its connection's place for longer.
fn write_reply(conn: &UnixStream, mut reply: &[u8], deadline: Duration) {
    let end = Instant::now() + deadline;
    while !reply.is_empty() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_write_timeout(Some(left)).is_err() {
            return;
        }
        match (&*conn).write(reply) {
            Ok(0) => return,
            Ok(n) => reply = &reply[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
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
/// the JSON reply. The server may answer before reading everything (a
/// refusal, `busy`, a request over the limit) and close: the write then
/// fails, and the reply is read all the same.
pub fn request(path: &Path, request: &str, timeout: Duration) -> std::io::Result<serde_json::Value> {
    use std::io::{Error, ErrorKind};
    let mut conn = UnixStream::connect(path)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    let sent = conn.write_all(request.as_bytes()).and_then(|()| conn.shutdown(std::net::Shutdown::Write));
    let mut reply = Vec::new();
    // On an error, what was read before it is in `reply`.
    let read = conn.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    if let Some(line) = text.lines().next().filter(|_| text.ends_with('\n')) {
        return serde_json::from_str(line)
            .map_err(|e| Error::new(ErrorKind::InvalidData, format!("the reply is not JSON ({e}): {text:?}")));
    }
    match (sent, read) {
        (Err(e), _) => Err(e),
        // Sent whole: the server may still apply it; saying it failed
        // would be wrong.
        (Ok(()), Err(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Err(Error::new(
            ErrorKind::TimedOut,
            format!(
                "no reply within {} s; the request was sent and may still be applied (check with `test` or `list`)",
                timeout.as_secs_f64()
            ),
        )),
        (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(_)) => Err(Error::new(ErrorKind::UnexpectedEof, format!("the reply was cut short: {text:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A stand-in product's command: any line, kept as it is; `del` needs
    /// the admin role.
    #[derive(Debug)]
    struct Line(String);

    impl Protocol for Line {
        fn parse_line(line: &str) -> Result<Option<Line>, String> {
            let w = crate::command::words(line);
            Ok((!w.is_empty()).then(|| Line(w.join(" "))))
        }
        fn name(&self) -> &'static str {
            "line"
        }
        fn batchable(&self) -> bool {
            true
        }
        fn role(&self) -> Role {
            if self.0.starts_with("del") {
                Role::Admin
            } else {
                Role::Add
            }
        }
    }

    /// A socket served with `limits`, and a stand-in product that answers
    /// every request `ok` and keeps its lines (what was applied).
    struct Served {
        dir: tempfile::TempDir,
        path: PathBuf,
        serving: Option<Serving>,
        counters: Arc<SocketCounters>,
        applied: Arc<Mutex<Vec<String>>>,
    }

    impl Drop for Served {
        fn drop(&mut self) {
            if let Some(s) = self.serving.take() {
                s.stop();
            }
        }
    }

    fn served(limits: SocketLimits) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let (tx, rx) = channel::<CtlRequest<Line>>();
        let counters = Arc::new(SocketCounters::default());
        let access = Access { uid: rustix::process::geteuid().as_raw(), ..Access::default() };
        let deliver: Deliver<Line> = Arc::new(move |r| tx.send(r).is_ok());
        let serving = serve_with(&path, access, deliver, Arc::clone(&counters), limits).unwrap();
        let applied = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&applied);
        std::thread::spawn(move || {
            for req in rx {
                let lines: Vec<String> = req.commands.into_iter().map(|(_, l)| l.0).collect();
                log.lock().unwrap().push(lines.join("\n"));
                let _ = req.reply.send(r#"{"ok":true}"#.to_owned());
            }
        });
        Served { dir, path, serving: Some(serving), counters, applied }
    }

    fn ask(path: &Path, text: &str) -> serde_json::Value {
        request(path, text, Duration::from_secs(10)).unwrap()
    }

    /// A connection that has sent part of a request and holds its place.
    fn holder(path: &Path) -> UnixStream {
        let mut c = UnixStream::connect(path).unwrap();
        c.write_all(b"add s 10.0.0.0/2").unwrap();
        c
    }

    #[test]
    fn a_request_over_the_limit_is_refused_whole_and_one_at_it_is_served() {
        let s = served(SocketLimits { max_request: 1000, ..SocketLimits::default() });
        // The limit falls inside the last line: cut there, `/24` would be
        // read as `/2`.
        let head = format!("{}\n", "#".repeat(1000 - "add s 10.0.0.0/2".len() - 1));
        let over = format!("{head}add s 10.0.0.0/24\n");
        assert_eq!(&over.as_bytes()[..1000], format!("{head}add s 10.0.0.0/2").as_bytes());
        let r = ask(&s.path, &over);
        let e = r["error"].as_str().unwrap_or_default();
        assert!(r["ok"] == false && e.starts_with("request over 0 MiB (1000 bytes)"), "{r}");
        assert!(e.contains("nothing applied"), "{r}");
        assert!(s.applied.lock().unwrap().is_empty(), "nothing of it reached the controller");
        assert_eq!(s.counters.too_large.load(Ordering::Relaxed), 1);
        let at = format!("{}\nsets", "#".repeat(1000 - "\nsets".len()));
        assert_eq!(at.len(), 1000);
        assert_eq!(ask(&s.path, &at)["ok"], true);
        assert_eq!(*s.applied.lock().unwrap(), vec!["sets".to_owned()], "the comment is not a command");
        assert_eq!(SocketLimits::default().max_request, 64 << 20);
    }

    #[test]
    fn beyond_max_connections_a_client_is_told_busy_at_once() {
        let s = served(SocketLimits {
            max_connections: 2,
            read_deadline: Duration::from_secs(20),
            ..SocketLimits::default()
        });
        let held = [holder(&s.path), holder(&s.path)];
        let t = Instant::now();
        let r = ask(&s.path, "sets");
        assert_eq!(r, serde_json::json!({ "ok": false, "error": "busy: 2 requests in progress; try again" }));
        assert!(t.elapsed() < Duration::from_secs(2), "answered at once: {:?}", t.elapsed());
        assert_eq!(s.counters.busy.load(Ordering::Relaxed), 1);
        // Closed instead of ended, the held requests are not applied, and
        // their places are free again.
        drop(held);
        let end = Instant::now() + Duration::from_secs(5);
        while ask(&s.path, "sets")["ok"] != true {
            assert!(Instant::now() < end, "the places were not given back");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(*s.applied.lock().unwrap(), vec!["sets".to_owned()]);
    }

    #[test]
    fn a_client_that_closes_mid_request_changes_nothing() {
        let s = served(SocketLimits::default());
        drop(holder(&s.path));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(ask(&s.path, "sets")["ok"], true);
        assert_eq!(*s.applied.lock().unwrap(), vec!["sets".to_owned()], "the cut request was not applied");
    }

    #[test]
    fn the_whole_request_has_one_deadline() {
        let s = served(SocketLimits { read_deadline: Duration::from_secs(1), ..SocketLimits::default() });
        let mut c = UnixStream::connect(&s.path).unwrap();
        let mut w = c.try_clone().unwrap();
        // A byte every 200 ms: never 10 s without one, for 6 s.
        let trickle = std::thread::spawn(move || {
            for b in b"add s 10.0.0.0/24 timeout 60 # and so on".iter().cycle().take(30) {
                if w.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let t = Instant::now();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = String::new();
        let _ = c.read_to_string(&mut reply);
        let took = t.elapsed();
        assert!(took > Duration::from_millis(800) && took < Duration::from_millis(2500), "cut after {took:?}");
        assert!(reply.contains("did not arrive whole within 1 s"), "{reply}");
        assert_eq!(s.counters.timed_out.load(Ordering::Relaxed), 1);
        assert!(s.applied.lock().unwrap().is_empty());
        drop(c);
        trickle.join().unwrap();
    }

    #[test]
    fn only_a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let at = |n: &str| dir.path().join(n);
        let deliver: Deliver<Line> = Arc::new(|_| false);
        let try_serve = |p: &Path| serve(p, Access::default(), Arc::clone(&deliver), Arc::default()).map(Serving::stop);
        let not_a_socket = |p: &Path| match try_serve(p) {
            Err(e @ SocketError::NotASocket(_)) => {
                assert_eq!(
                    e.to_string().split(" (").next().unwrap(),
                    format!("control socket {}: exists and is not a socket", p.display())
                );
            }
            other => panic!("{}: {other:?}", p.display()),
        };
        std::fs::write(at("file"), "keep me").unwrap();
        not_a_socket(&at("file"));
        assert_eq!(std::fs::read_to_string(at("file")).unwrap(), "keep me");
        std::fs::create_dir(at("dir")).unwrap();
        not_a_socket(&at("dir"));
        assert!(at("dir").is_dir());
        for (link, to) in [("to-file", "file"), ("dangling", "nowhere")] {
            std::os::unix::fs::symlink(at(to), at(link)).unwrap();
            not_a_socket(&at(link));
            assert!(std::fs::symlink_metadata(at(link)).unwrap().file_type().is_symlink());
        }
        assert_eq!(std::fs::read_to_string(at("file")).unwrap(), "keep me");
        // A socket nobody listens on is a previous run's: replaced.
        drop(UnixListener::bind(at("stale")).unwrap());
        assert!(UnixStream::connect(at("stale")).is_err());
        try_serve(&at("stale")).unwrap();
        let live = UnixListener::bind(at("live")).unwrap();
        assert!(matches!(try_serve(&at("live")), Err(SocketError::InUse(_))));
        drop(live);
    }

    /// The peer side of [`a_refused_peer_is_answered_without_reading_its_request`],
    /// run as another user by re-running this test binary.
    #[test]
    fn refused_peer_helper() {
        let Ok(path) = std::env::var("SLUICE_TEST_REFUSED_PEER") else { return };
        let mut c = UnixStream::connect(path).unwrap();
        // Part of a request, never ended: only a server that does not wait
        // for it answers.
        let _ = c.write_all(&vec![b'#'; 64 << 10]);
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reply = Vec::new();
        let _ = c.read_to_end(&mut reply);
        println!("REPLY {}", String::from_utf8_lossy(&reply).trim());
    }

    #[test]
    fn a_refused_peer_is_answered_without_reading_its_request() {
        use std::os::unix::process::CommandExt;
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: a_refused_peer_is_answered_without_reading_its_request: not root");
            return;
        }
        let s = served(SocketLimits::default());
        // Opened up by mistake: SO_PEERCRED still refuses other users.
        std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&s.path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let t = Instant::now();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "socket::tests::refused_peer_helper", "--nocapture", "--test-threads", "1"])
            .env("SLUICE_TEST_REFUSED_PEER", &s.path)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let reply = stdout.lines().find_map(|l| l.split_once("REPLY ")).map_or("", |(_, r)| r);
        assert!(reply.contains("refused: uid 65534"), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert!(t.elapsed() < Duration::from_secs(4), "answered without waiting: {:?}", t.elapsed());
        assert_eq!(s.counters.refused.load(Ordering::Relaxed), 1);
        assert!(s.applied.lock().unwrap().is_empty());
    }

    #[test]
    fn a_malformed_request_is_answered_by_the_socket_and_never_applied() {
        let s = served(SocketLimits::default());
        // The stand-in parses every line; a batch of one, then an empty one.
        assert_eq!(ask(&s.path, "add s 10.0.0.1")["ok"], true);
        let r = ask(&s.path, "# only a comment\n");
        assert_eq!((r["ok"].clone(), r["line"].clone()), (serde_json::json!(false), serde_json::json!(0)), "{r}");
        assert!(r["error"].as_str().unwrap().contains("empty request"), "{r}");
        assert_eq!(s.counters.malformed.load(Ordering::Relaxed), 1);
        assert_eq!(*s.applied.lock().unwrap(), vec!["add s 10.0.0.1".to_owned()]);
    }

    /// The peer side of [`a_member_of_the_add_group_may_only_add`]: sends
    /// each request in `SLUICE_TEST_ADD_PEER_REQUESTS` (split on `|`) and
    /// prints each reply.
    #[test]
    fn add_group_peer_helper() {
        let (Ok(path), Ok(requests)) =
            (std::env::var("SLUICE_TEST_ADD_PEER"), std::env::var("SLUICE_TEST_ADD_PEER_REQUESTS"))
        else {
            return;
        };
        for r in requests.split('|') {
            let reply = request(Path::new(&path), &r.replace(';', "\n"), Duration::from_secs(5));
            println!("REPLY {}", reply.map_or_else(|e| e.to_string(), |v| v.to_string()));
        }
    }

    #[test]
    fn a_member_of_the_add_group_may_only_add_test_and_list() {
        use std::os::unix::process::CommandExt;
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: a_member_of_the_add_group_may_only_add_test_and_list: not root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("ctl.sock");
        let (tx, rx) = channel::<CtlRequest<Line>>();
        let counters = Arc::new(SocketCounters::default());
        // uid 65534's group is 65534 (nogroup): the add group.
        let access = Access { uid: 0, group: None, add_group: Some(65534) };
        let deliver: Deliver<Line> = Arc::new(move |r| tx.send(r).is_ok());
        let serving = serve(&path, access, deliver, Arc::clone(&counters)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, 65534), "the add group's socket");
        let applied = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for req in rx {
                seen.extend(req.commands.into_iter().map(|(_, l)| l.0));
                let _ = req.reply.send(r#"{"ok":true}"#.to_owned());
            }
            seen
        });
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "socket::tests::add_group_peer_helper", "--nocapture", "--test-threads", "1"])
            .env("SLUICE_TEST_ADD_PEER", &path)
            .env("SLUICE_TEST_ADD_PEER_REQUESTS", "add s 192.0.2.1|add s 192.0.2.2;del s 192.0.2.1|del s 192.0.2.1")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let replies: Vec<&str> = stdout.lines().filter_map(|l| l.split_once("REPLY ").map(|(_, r)| r)).collect();
        assert_eq!(replies.len(), 3, "{stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(replies[0], r#"{"ok":true}"#);
        for r in &replies[1..] {
            assert!(r.contains("is refused to this peer") && r.contains("--control-add-group"), "{r}");
        }
        assert!(replies[1].contains(r#""line":2"#), "the batch's refused line: {}", replies[1]);
        assert_eq!(counters.forbidden.load(Ordering::Relaxed), 2);
        serving.stop();
        assert_eq!(applied.join().unwrap(), vec!["add s 192.0.2.1".to_owned()], "only the allowed request ran");
    }

    #[test]
    fn peer_groups_are_the_peers() {
        let (a, _b) = UnixStream::pair().unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let ours: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .unwrap()
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect();
        assert_eq!(peer_groups(&a).unwrap(), ours);
    }
}
