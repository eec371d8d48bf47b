//! Typed errors for live I/O. Each one says what went wrong and what to do
//! about it: the CLI prints them as they are.

use std::io;

use crate::sys;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, LiveError>;

/// The XDP attach mode that was asked for, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpModeName {
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`).
    Skb,
    /// Native XDP in the driver (`XDP_FLAGS_DRV_MODE`).
    Driver,
}

impl std::fmt::Display for XdpModeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpModeName::Skb => "skb (generic)",
            XdpModeName::Driver => "driver (native)",
        })
    }
}

/// Everything that can go wrong opening or running a live port.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A port's interface was deleted or renamed while the bridge ran.
    #[error(
        "interface {iface} is gone (deleted or renamed): the bridge stops (exit 5); a service manager \
         restarts it once the interface is back"
    )]
    InterfaceGone {
        /// The name the port had.
        iface: String,
    },
    /// EPERM / EACCES from a call that needs privileges.
    #[error(
        "{op}: permission denied: {needs}{lacking}; run as root, or grant the capabilities \
         (AmbientCapabilities= in a systemd unit, or `setcap cap_net_raw,cap_net_admin,cap_bpf,cap_ipc_lock+ep \
         <binary>`; AF_PACKET needs only cap_net_raw)"
    )]
    Permission {
        /// What was being done.
        op: &'static str,
        /// Which capabilities the call needs.
        needs: &'static str,
        /// Which of them this process does not hold when refused:
        /// " (this process lacks CAP_NET_ADMIN)", or "" when it holds them all.
        lacking: String,
    },

    /// The interface name does not resolve to an index (ENODEV).
    #[error("interface {name:?} does not exist: check the name with `ip link`")]
    NoSuchInterface {
        /// The name given.
        name: String,
    },

    /// The interface exists but is administratively down.
    #[error("interface {name} is down: bring it up with `ip link set dev {name} up`")]
    InterfaceDown {
        /// The interface.
        name: String,
    },

    /// An interface name that cannot be one (empty, too long, NUL).
    #[error("{name:?} is not a valid interface name (1 to 15 bytes, no NUL or '/')")]
    BadInterfaceName {
        /// The name given.
        name: String,
    },

    /// BPF_PROG_LOAD failed; the verifier log says why.
    #[error("the kernel refused the XDP program ({source}); verifier log:\n{log}")]
    XdpRefused {
        /// The errno of BPF_PROG_LOAD.
        source: io::Error,
        /// The verifier's log (may be empty).
        log: String,
    },

    /// Attaching the program failed in a way that is not "busy".
    #[error("cannot attach XDP in {mode} mode to {iface}: {source}{hint}")]
    XdpAttach {
        /// The interface.
        iface: String,
        /// The mode asked for.
        mode: XdpModeName,
        /// The errno.
        source: io::Error,
        /// A hint on what to try instead (may be empty).
        hint: &'static str,
    },

    /// The interface already carries another XDP program.
    #[error(
        "interface {iface} already carries an XDP program{detail}: detach it first \
         (`ip link set dev {iface} xdp off`, or `xdpgeneric off` for skb mode) or use another interface"
    )]
    XdpBusy {
        /// The interface.
        iface: String,
        /// What netlink could tell about it: " (id 42, skb mode)" or "".
        detail: String,
    },

    /// The kernel refused zero-copy for this driver/queue.
    #[error("{iface} queue {queue}: zero-copy AF_XDP is not supported by this driver ({source}); use copy mode")]
    ZeroCopyUnsupported {
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
        /// The errno of bind().
        source: io::Error,
    },

    /// Memory the kernel must lock is over RLIMIT_MEMLOCK.
    #[error(
        "{what}: {asked} bytes must be locked but RLIMIT_MEMLOCK is {limit}: raise it \
         (`ulimit -l unlimited`, or LimitMEMLOCK= in a systemd unit), run with CAP_IPC_LOCK, \
         or use fewer or smaller frames"
    )]
    Memlock {
        /// What needed the memory.
        what: &'static str,
        /// Bytes asked for.
        asked: u64,
        /// The soft limit in force, as text ("unlimited" or a byte count).
        limit: String,
    },

    /// A configuration that cannot work (sizes not powers of two, ...).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A frame larger than the ring slot / UMEM frame.
    #[error("frame of {len} bytes does not fit a slot of {max} bytes")]
    FrameTooBig {
        /// The frame's length.
        len: usize,
        /// The most that fits.
        max: usize,
    },

    /// Any other system call failure, with the call named.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The errno.
        source: io::Error,
    },
}

/// What an operation needs, for [`LiveError::Permission`]: the text shown,
/// and the capabilities (all of them) to look for in this process when the
/// kernel refuses it, so the error names the one that is missing.
#[derive(Debug)]
pub(crate) struct Needs {
    text: &'static str,
    caps: &'static [(u32, &'static str)],
    /// CAP_SYS_ADMIN stands in for every one of `caps`.
    or_sys_admin: bool,
}

const RAW: (u32, &str) = (sys::CAP_NET_RAW, "CAP_NET_RAW");
const ADMIN: (u32, &str) = (sys::CAP_NET_ADMIN, "CAP_NET_ADMIN");
const BPF: (u32, &str) = (sys::CAP_BPF, "CAP_BPF");

/// The capabilities an operation needs, for [`LiveError::Permission`].
pub(crate) const NEEDS_RAW: &Needs = &Needs { text: "AF_PACKET needs CAP_NET_RAW", caps: &[RAW], or_sys_admin: false };
pub(crate) const NEEDS_XSK: &Needs = &Needs { text: "AF_XDP needs CAP_NET_RAW", caps: &[RAW], or_sys_admin: false };
/// The XSKMAP and the XDP program: CAP_NET_ADMIN for both (XSKMAP is a
/// networking map, XDP a networking program), CAP_BPF for the program (and
/// for any map while `kernel.unprivileged_bpf_disabled` is set).
pub(crate) const NEEDS_BPF: &Needs = &Needs {
    text: "loading XDP needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN)",
    caps: &[BPF, ADMIN],
    or_sys_admin: true,
};
pub(crate) const NEEDS_ADMIN: &Needs = &Needs { text: "this needs CAP_NET_ADMIN", caps: &[ADMIN], or_sys_admin: false };
pub(crate) const NEEDS_NETNS: &Needs = &Needs {
    text: "entering a network namespace needs CAP_SYS_ADMIN",
    caps: &[(sys::CAP_SYS_ADMIN, "CAP_SYS_ADMIN")],
    or_sys_admin: false,
};

impl Needs {
    /// " (this process lacks CAP_X and CAP_Y)" for those of `caps` not in
    /// this thread's effective set, or "" when it holds them all.
    pub(crate) fn lacking(&self) -> String {
        if self.or_sys_admin && sys::has_cap(sys::CAP_SYS_ADMIN) {
            return String::new();
        }
        let missing: Vec<&str> = self.caps.iter().filter(|c| !sys::has_cap(c.0)).map(|c| c.1).collect();
        if missing.is_empty() {
            String::new()
        } else {
            format!(" (this process lacks {})", missing.join(" and "))
        }
    }
}

impl LiveError {
    /// Wraps an `io::Error` from `op`, turning EPERM/EACCES into
    /// [`LiveError::Permission`] and ENODEV into nothing special (callers
    /// that know the interface name map ENODEV themselves).
    pub(crate) fn io(op: &'static str, needs: &'static Needs, source: io::Error) -> LiveError {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => LiveError::permission(op, needs),
            _ => LiveError::Io { op, source },
        }
    }

    /// [`LiveError::Permission`] for `op`, naming what this process lacks.
    pub(crate) fn permission(op: &'static str, needs: &'static Needs) -> LiveError {
        LiveError::Permission { op, needs: needs.text, lacking: needs.lacking() }
    }

    /// Like [`LiveError::io`], but ENODEV / ENXIO name the interface.
    pub(crate) fn io_iface(op: &'static str, needs: &'static Needs, iface: &str, source: io::Error) -> LiveError {
        match source.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => LiveError::NoSuchInterface { name: iface.to_owned() },
            Some(libc::ENETDOWN) => LiveError::InterfaceDown { name: iface.to_owned() },
            _ => LiveError::io(op, needs, source),
        }
    }

    /// True for [`LiveError::Permission`]: tests use it to skip.
    pub fn is_permission(&self) -> bool {
        matches!(self, LiveError::Permission { .. })
    }
}

/// The soft RLIMIT_MEMLOCK as text, for [`LiveError::Memlock`].
pub(crate) fn memlock_limit_text() -> String {
    match crate::sys::memlock_limit() {
        Some(v) => format!("{v} bytes"),
        None => "unlimited".to_owned(),
    }
}
