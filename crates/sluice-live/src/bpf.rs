//! Raw `bpf()` system calls: an XSKMAP, the six-instruction redirect
//! program, and its attachment to an interface through a BPF link.
//!
//! The program is
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)        ; ctx->rx_queue_index
//! r1 = map_fd ll                ; BPF_LD_IMM64, src = BPF_PSEUDO_MAP_FD (two slots)
//! r3 = 2                        ; XDP_PASS: the action when the slot is empty
//! call 51                       ; bpf_redirect_map(map, index, flags)
//! exit                          ; r0 = XDP_REDIRECT or XDP_PASS
//! ```
//!
//! which is `return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);`:
//! frames of a queue with a socket in the map go to that socket, everything
//! else goes on to the kernel stack. No ELF, no BTF, no relocation beyond the
//! map fd in the `ld_imm64`.
//!
//! Attaching uses `BPF_LINK_CREATE` (Linux 5.9+): the link belongs to its
//! file descriptor, so the program is detached when the descriptor is
//! closed, even if the process dies; and the kernel refuses (EBUSY/EEXIST)
//! to replace a program someone else attached, which we turn into
//! [`LiveError::XdpBusy`] naming the interface and the program found there.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{LiveError, Result, XdpModeName, NEEDS_BPF};
use crate::netlink;

// enum bpf_cmd
const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_MAP_DELETE_ELEM: i32 = 3;
const BPF_MAP_GET_NEXT_KEY: i32 = 4;
const BPF_PROG_LOAD: i32 = 5;
const BPF_OBJ_PIN: i32 = 6;
const BPF_OBJ_GET: i32 = 7;
const BPF_PROG_TEST_RUN: i32 = 10;
const BPF_PROG_GET_FD_BY_ID: i32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
const BPF_MAP_UPDATE_BATCH: i32 = 26;
const BPF_LINK_CREATE: i32 = 28;
const BPF_LINK_UPDATE: i32 = 29;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
/// enum bpf_attach_type: BPF_XDP.
const BPF_XDP: u32 = 37;
const BPF_ANY: u64 = 0;
/// Update only an element that exists (an LPM trie: exactly this key).
const BPF_EXIST: u64 = 2;
/// Create only an element that does not exist.
const BPF_NOEXIST: u64 = 1;

/// `XDP_FLAGS_SKB_MODE`.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// XDP actions.
pub const XDP_ABORTED: u32 = 0;
/// XDP actions.
pub const XDP_DROP: u32 = 1;
/// XDP actions.
pub const XDP_PASS: u32 = 2;
/// XDP actions.
pub const XDP_REDIRECT: u32 = 4;

/// `BPF_FUNC_redirect_map`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: the imm of an `ld_imm64` is a map fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// How the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic XDP, after the skb is built: works on every interface.
    Skb,
    /// Native XDP in the driver, before any skb (veth, most 10G+ NICs).
    Driver,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Skb => XDP_FLAGS_SKB_MODE,
            XdpMode::Driver => XDP_FLAGS_DRV_MODE,
        }
    }

    fn name(self) -> XdpModeName {
        match self {
            XdpMode::Skb => XdpModeName::Skb,
            XdpMode::Driver => XdpModeName::Driver,
        }
    }
}

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// dst_reg in the low nibble, src_reg in the high one.
    pub regs: u8,
    /// Signed offset.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// An instruction from its parts (`dst`, `src`: registers 0-10).
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { code, regs: (src << 4) | (dst & 0x0f), off, imm }
    }
}

// Opcode parts (linux/bpf_common.h, linux/bpf.h).
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_JMP: u8 = 0x05;
const BPF_ALU64: u8 = 0x07;
const BPF_W: u8 = 0x00;
const BPF_DW: u8 = 0x18;
const BPF_IMM: u8 = 0x00;
const BPF_MEM: u8 = 0x60;
const BPF_MOV: u8 = 0xb0;
const BPF_K: u8 = 0x00;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;

/// The redirect program for the XSKMAP open at `map_fd` (6 instruction slots).
pub fn redirect_program(map_fd: RawFd) -> [Insn; 6] {
    [
        // r2 = *(u32 *)(r1 + 16): ctx->rx_queue_index
        Insn::new(BPF_LDX | BPF_MEM | BPF_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        // r1 = map (ld_imm64 takes two slots; the second holds the high 32 bits: 0)
        Insn::new(BPF_LD | BPF_DW | BPF_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        Insn::new(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: the action when the map has no socket for this queue
        Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, XDP_PASS as i32),
        // r0 = bpf_redirect_map(r1, r2, r3)
        Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // return r0
        Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    ]
}

// The `union bpf_attr` members we use, each as its own struct; the kernel
// zero-fills whatever lies past the size we pass.

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct GetByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_map_info` (the kernel fills what fits).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
}

/// `struct xdp_md` as `BPF_PROG_TEST_RUN` takes it in `ctx_in`: the frame
/// is all data (no metadata), `data_end` its length.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ObjAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// Marker for the attr structs above.
trait BpfAttr: Copy {}
impl BpfAttr for MapCreateAttr {}
impl BpfAttr for MapElemAttr {}
impl BpfAttr for BatchAttr {}
impl BpfAttr for GetByIdAttr {}
impl BpfAttr for InfoAttr {}
impl BpfAttr for ProgLoadAttr {}
impl BpfAttr for TestRunAttr {}
impl BpfAttr for LinkCreateAttr {}
impl BpfAttr for LinkUpdateAttr {}
impl BpfAttr for ObjAttr {}

/// `BPF_FS_MAGIC`: what `statfs` says of a bpffs mount.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `dir` is on a bpffs mount (where BPF objects can be pinned).
pub fn is_bpffs(dir: &std::path::Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    let mut st: libc::statfs = unsafe_zeroed_statfs();
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statfs for the call.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    // `f_type`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as i64;
    rc == 0 && f_type == BPF_FS_MAGIC
}

fn unsafe_zeroed_statfs() -> libc::statfs {
    // SAFETY: statfs is plain old data; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Pins the object `fd` at `path` (on a bpffs mount).
fn obj_pin(fd: RawFd, path: &std::path::Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    let mut attr = ObjAttr { pathname: c.as_ptr() as u64, bpf_fd: fd as u32, file_flags: 0 };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { sys_bpf(BPF_OBJ_PIN, &mut attr) }.map(|_| ())
}

/// Opens the object pinned at `path`.
fn obj_get(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    let mut attr = ObjAttr { pathname: c.as_ptr() as u64, ..Default::default() };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { sys_bpf(BPF_OBJ_GET, &mut attr) }.map(owned_fd)
}

/// `bpf(cmd, attr, sizeof attr)`; returns the non-negative result.
///
/// # Safety
/// Every address inside `attr` (instructions, license, log buffer, key,
/// value, data) must point to memory valid for the access `cmd` makes, for
/// the duration of the call.
unsafe fn sys_bpf<A: BpfAttr>(cmd: i32, attr: &mut A) -> io::Result<i64> {
    // SAFETY: `attr` is a live `#[repr(C)]` bpf_attr member of the given size; the caller
    // vouches for the addresses inside it.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, cmd as libc::c_long, attr as *mut A, std::mem::size_of::<A>() as libc::c_long)
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned_fd(rc: i64) -> OwnedFd {
    // SAFETY: the bpf() commands we call with this return a new descriptor that nobody else owns.
    unsafe { OwnedFd::from_raw_fd(rc as RawFd) }
}

fn obj_name(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

/// An XSKMAP: queue index -> AF_XDP socket.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    entries: u32,
}

impl XskMap {
    /// Creates a map with one slot per queue.
    pub fn new(queues: u32) -> Result<XskMap> {
        if queues == 0 {
            return Err(LiveError::Config("an XSKMAP needs at least one entry".into()));
        }
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queues,
            map_name: obj_name("sluice_xsks"),
            ..Default::default()
        };
        // SAFETY: the attr holds no addresses.
        let rc = unsafe { sys_bpf(BPF_MAP_CREATE, &mut attr) };
        let rc = match rc {
            Ok(rc) => rc,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // Kernels before 5.x reject map names with some characters; retry without one.
                attr.map_name = [0; 16];
                // SAFETY: as above.
                unsafe { sys_bpf(BPF_MAP_CREATE, &mut attr) }
                    .map_err(|e| LiveError::io("BPF_MAP_CREATE (XSKMAP)", NEEDS_BPF, e))?
            }
            Err(e) => return Err(map_create_error(e, queues)),
        };
        Ok(XskMap { fd: owned_fd(rc), entries: queues })
    }

    /// The number of slots.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Puts the AF_XDP socket `xsk` in slot `queue`.
    pub fn set(&self, queue: u32, xsk: RawFd) -> Result<()> {
        let key = queue;
        let value = xsk as u32;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: BPF_ANY,
            ..Default::default()
        };
        // SAFETY: `key` and `value` are live u32s for the call; the kernel reads 4 bytes of each.
        unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }
            .map_err(|e| LiveError::io("BPF_MAP_UPDATE_ELEM (XSKMAP)", NEEDS_BPF, e))?;
        Ok(())
    }

    /// Empties slot `queue`: its frames go to the kernel stack again.
    pub fn clear(&self, queue: u32) -> Result<()> {
        let key = queue;
        let mut attr =
            MapElemAttr { map_fd: self.fd.as_raw_fd() as u32, key: &key as *const u32 as u64, ..Default::default() };
        // SAFETY: `key` is a live u32 for the call.
        match unsafe { sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(LiveError::io("BPF_MAP_DELETE_ELEM (XSKMAP)", NEEDS_BPF, e)),
        }
    }
}

impl AsRawFd for XskMap {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn map_create_error(e: io::Error, queues: u32) -> LiveError {
    match e.raw_os_error() {
        // Before Linux 5.11 a map over RLIMIT_MEMLOCK failed with EPERM even with the
        // capabilities; with all of them in hand (CAP_BPF and CAP_NET_ADMIN, or
        // CAP_SYS_ADMIN), EPERM means the limit.
        Some(libc::EPERM) if NEEDS_BPF.lacking().is_empty() => LiveError::Memlock {
            what: "BPF_MAP_CREATE (XSKMAP)",
            asked: u64::from(queues) * 8 + 4096,
            limit: crate::error::memlock_limit_text(),
        },
        _ => LiveError::io("BPF_MAP_CREATE (XSKMAP)", NEEDS_BPF, e),
    }
}

/// `enum bpf_map_type` values a program of ours may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// `BPF_MAP_TYPE_HASH`.
    Hash = 1,
    /// `BPF_MAP_TYPE_ARRAY`.
    Array = 2,
    /// `BPF_MAP_TYPE_PERCPU_HASH` (other tools' maps: xdp-filter's).
    PercpuHash = 5,
    /// `BPF_MAP_TYPE_PERCPU_ARRAY`: one value per CPU, no atomics needed.
    PercpuArray = 6,
    /// `BPF_MAP_TYPE_LPM_TRIE`.
    LpmTrie = 11,
    /// `BPF_MAP_TYPE_RINGBUF` (key and value size 0, entries: the data
    /// area's bytes, a power of two pages): read with [`crate::ringbuf::RingReader`].
    RingBuf = 27,
}

/// `BPF_F_NO_PREALLOC`: an LPM trie must be created with it.
pub const BPF_F_NO_PREALLOC: u32 = 1 << 0;
/// `BPF_F_MMAPABLE`: an array map user space may map and write directly.
pub const BPF_F_MMAPABLE: u32 = 1 << 10;

/// A BPF map of any type, owned by its descriptor.
#[derive(Debug)]
pub struct BpfMap {
    fd: OwnedFd,
    map_type: MapType,
    key_size: u32,
    value_size: u32,
    entries: u32,
    flags: u32,
}

impl BpfMap {
    /// Creates a map (`name`: at most 15 bytes shown by `bpftool map`).
    pub fn new(
        map_type: MapType,
        key_size: u32,
        value_size: u32,
        entries: u32,
        flags: u32,
        name: &str,
    ) -> Result<BpfMap> {
        let mut attr = MapCreateAttr {
            map_type: map_type as u32,
            key_size,
            value_size,
            max_entries: entries,
            map_flags: flags,
            map_name: obj_name(name),
            ..Default::default()
        };
        // SAFETY: the attr holds no addresses.
        let rc = unsafe { sys_bpf(BPF_MAP_CREATE, &mut attr) }.map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) if NEEDS_BPF.lacking().is_empty() => LiveError::Memlock {
                what: "BPF_MAP_CREATE",
                asked: u64::from(value_size) * u64::from(entries),
                limit: crate::error::memlock_limit_text(),
            },
            _ => LiveError::io("BPF_MAP_CREATE", NEEDS_BPF, e),
        })?;
        Ok(BpfMap { fd: owned_fd(rc), map_type, key_size, value_size, entries, flags })
    }

    /// The map pinned at `path` by another tool (its sizes asked of the
    /// kernel); only the types of [`MapType`].
    pub fn open_pinned(path: &std::path::Path) -> Result<BpfMap> {
        let fd = obj_get(path).map_err(|e| LiveError::io("BPF_OBJ_GET", NEEDS_BPF, e))?;
        let mut info = MapInfo::default();
        let mut attr = InfoAttr {
            bpf_fd: fd.as_raw_fd() as u32,
            info_len: std::mem::size_of::<MapInfo>() as u32,
            info: std::ptr::from_mut(&mut info) as u64,
        };
        // SAFETY: `info` is writable and `info_len` bytes long for the call.
        unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }
            .map_err(|e| LiveError::io("BPF_OBJ_GET_INFO_BY_FD", NEEDS_BPF, e))?;
        let map_type = [MapType::Hash, MapType::Array, MapType::PercpuHash, MapType::PercpuArray, MapType::LpmTrie]
            .into_iter()
            .find(|t| *t as u32 == info.map_type)
            .ok_or_else(|| LiveError::Config(format!("{}: a map of type {}", path.display(), info.map_type)))?;
        Ok(BpfMap {
            fd,
            map_type,
            key_size: info.key_size,
            value_size: info.value_size,
            entries: info.max_entries,
            flags: info.map_flags,
        })
    }

    /// The number of entries it was created with.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Its value size.
    pub fn value_size(&self) -> u32 {
        self.value_size
    }

    /// Its type.
    pub fn map_type(&self) -> MapType {
        self.map_type
    }

    /// Writes `value` under `key` (`BPF_ANY`). Both must have the map's sizes
    /// (a per-CPU map's value: one rounded-up value per possible CPU).
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.update_flags(key, value, BPF_ANY)?.map_err(|e| LiveError::io("BPF_MAP_UPDATE_ELEM", NEEDS_BPF, e))
    }

    /// Writes `value` under `key` only if the map holds exactly `key`
    /// (`BPF_EXIST`): false when it does not.
    pub fn update_existing(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        match self.update_flags(key, value, BPF_EXIST)? {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(LiveError::io("BPF_MAP_UPDATE_ELEM", NEEDS_BPF, e)),
        }
    }

    /// Writes `value` under `key` only if the map lacks `key`
    /// (`BPF_NOEXIST`): false when it has it.
    pub fn insert_new(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        match self.update_flags(key, value, BPF_NOEXIST)? {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(LiveError::io("BPF_MAP_UPDATE_ELEM", NEEDS_BPF, e)),
        }
    }

    /// `BPF_MAP_UPDATE_ELEM` with `flags`: the sizes checked, then the
    /// call's own result.
    fn update_flags(&self, key: &[u8], value: &[u8], flags: u64) -> Result<io::Result<()>> {
        self.check_sizes(key, value.len())?;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            value: value.as_ptr() as u64,
            flags,
            ..Default::default()
        };
        // SAFETY: `key` and `value` are live and as long as the map reads (checked above).
        Ok(unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(|_| ()))
    }

    /// Writes many elements in one call (`BPF_MAP_UPDATE_BATCH`, `BPF_ANY`):
    /// `keys` and `values` the elements' keys and values end to end, as
    /// many of one as of the other.
    pub fn update_batch(&self, keys: &[u8], values: &[u8]) -> Result<()> {
        let n = keys.len() / (self.key_size as usize).max(1);
        if keys.len() != n * self.key_size as usize || values.len() != n * self.value_len() {
            return Err(LiveError::Config(format!(
                "BPF map batch: {} bytes of keys and {} of values for {}-byte keys and {}-byte values",
                keys.len(),
                values.len(),
                self.key_size,
                self.value_len()
            )));
        }
        let mut attr = BatchAttr {
            keys: keys.as_ptr() as u64,
            values: values.as_ptr() as u64,
            count: n as u32,
            map_fd: self.fd.as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: `keys` and `values` are live and hold `count` keys and values (checked above).
        unsafe { sys_bpf(BPF_MAP_UPDATE_BATCH, &mut attr) }
            .map_err(|e| LiveError::io("BPF_MAP_UPDATE_BATCH", NEEDS_BPF, e))?;
        Ok(())
    }

    /// Deletes `key` (absent: fine).
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.remove(key).map(drop)
    }

    /// Deletes `key`: whether it was there.
    pub fn remove(&self, key: &[u8]) -> Result<bool> {
        self.check_sizes(key, self.value_len())?;
        let mut attr =
            MapElemAttr { map_fd: self.fd.as_raw_fd() as u32, key: key.as_ptr() as u64, ..Default::default() };
        // SAFETY: `key` is live and `key_size` bytes long.
        match unsafe { sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(LiveError::io("BPF_MAP_DELETE_ELEM", NEEDS_BPF, e)),
        }
    }

    /// Every key, in the map's own order (`BPF_MAP_GET_NEXT_KEY`, one call
    /// per key: for maps that are small, or read rarely).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>> {
        let size = self.key_size as usize;
        let mut out: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut next = vec![0u8; size];
            let mut attr = MapElemAttr {
                map_fd: self.fd.as_raw_fd() as u32,
                // No key: the first.
                key: out.last().map_or(0, |k| k.as_ptr() as u64),
                value: next.as_mut_ptr() as u64,
                ..Default::default()
            };
            // SAFETY: the key (when given) and `next` are live and `key_size` bytes long.
            match unsafe { sys_bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
                Ok(_) => out.push(next),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
                Err(e) => return Err(LiveError::io("BPF_MAP_GET_NEXT_KEY", NEEDS_BPF, e)),
            }
        }
    }

    /// Reads `key`'s value (a per-CPU map's: every possible CPU's, each
    /// rounded up to 8 bytes); None when absent.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = vec![0u8; self.value_len()];
        self.check_sizes(key, value.len())?;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            value: value.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `key` is live; `value` is writable and as long as the kernel writes.
        match unsafe { sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
            Ok(_) => Ok(Some(value)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(LiveError::io("BPF_MAP_LOOKUP_ELEM", NEEDS_BPF, e)),
        }
    }

    /// The bytes one value takes in user space.
    pub fn value_len(&self) -> usize {
        match self.map_type {
            MapType::PercpuArray | MapType::PercpuHash => {
                possible_cpus() * (self.value_size as usize).next_multiple_of(8)
            }
            _ => self.value_size as usize,
        }
    }

    fn check_sizes(&self, key: &[u8], value: usize) -> Result<()> {
        if key.len() != self.key_size as usize || value != self.value_len() {
            return Err(LiveError::Config(format!(
                "BPF map: key of {} bytes and value of {value} for a map of {}-byte keys and {}-byte values",
                key.len(),
                self.key_size,
                self.value_len()
            )));
        }
        Ok(())
    }

    /// Maps an array created with [`BPF_F_MMAPABLE`] into this process,
    /// to write its values in place.
    pub fn mmap(&self) -> Result<MappedArray> {
        if self.map_type != MapType::Array || self.flags & BPF_F_MMAPABLE == 0 {
            return Err(LiveError::Config("only an array map created mmapable can be mapped".into()));
        }
        let len = (self.value_size as usize).next_multiple_of(8) * self.entries as usize;
        let len = len.next_multiple_of(crate::sys::page_size()).max(crate::sys::page_size());
        // SAFETY: a shared mapping of the map's descriptor, of at most its size, owned by the result.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LiveError::io("mmap (BPF array map)", NEEDS_BPF, io::Error::last_os_error()));
        }
        Ok(MappedArray { ptr: ptr.cast(), len })
    }
}

impl AsRawFd for BpfMap {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An mmapable array map's values, mapped into this process.
#[derive(Debug)]
pub struct MappedArray {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; the kernel
// side only reads it concurrently (as it reads any map value).
unsafe impl Send for MappedArray {}
// SAFETY: through `&self` the mapping is reached only by atomics
// (`atomic_u8` ...); plain writes need `&mut self`.
unsafe impl Sync for MappedArray {}

impl MappedArray {
    /// The values as bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` writable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The mapping's length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it maps nothing (never: a mapping is at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The byte at `at`, to change while a program reads the map: a store
    /// through it is one store the program sees whole, in the order the
    /// orderings given say (the program's loads are plain loads).
    #[inline]
    pub fn atomic_u8(&self, at: usize) -> &std::sync::atomic::AtomicU8 {
        assert!(at < self.len, "byte {at} of a {}-byte mapping", self.len);
        // SAFETY: in bounds (checked), any alignment, and the mapping lives
        // as long as the borrow; every access from this side is atomic.
        unsafe { std::sync::atomic::AtomicU8::from_ptr(self.ptr.add(at)) }
    }

    /// The 4-byte word at `at` (4-aligned), as [`MappedArray::atomic_u8`].
    #[inline]
    pub fn atomic_u32(&self, at: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(at.is_multiple_of(4) && at + 4 <= self.len, "word {at} of a {}-byte mapping", self.len);
        // SAFETY: in bounds and aligned (checked; the mapping is page-aligned).
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.ptr.add(at).cast()) }
    }

    /// The 8-byte word at `at` (8-aligned), as [`MappedArray::atomic_u8`].
    #[inline]
    pub fn atomic_u64(&self, at: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= self.len, "word {at} of a {}-byte mapping", self.len);
        // SAFETY: in bounds and aligned (checked; the mapping is page-aligned).
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.add(at).cast()) }
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `mmap` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The number of possible CPUs (per-CPU maps hold one value for each).
pub fn possible_cpus() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .ok()
            .and_then(|s| parse_cpu_list(s.trim()))
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// "0-3,5" -> 6 (the highest CPU number plus one).
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.split(',') {
        let last = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        max = max.max(Some(last));
    }
    max.map(|m| m + 1)
}

/// A loaded XDP program.
#[derive(Debug)]
pub struct XdpProgram {
    fd: OwnedFd,
}

/// The license string handed to the kernel: `bpf_redirect_map` is
/// available to every license, GPL-compatible is the conventional choice.
const LICENSE: &[u8] = b"Dual MIT/GPL\0";

/// Why `BPF_PROG_LOAD` refused a program.
enum Refused {
    /// No permission, and no log to say more.
    Denied,
    /// The verifier's errno and log (`(empty)` when it wrote none).
    Verifier { source: io::Error, log: String },
}

/// Loads `insns` as a program of `prog_type`; on failure the verifier is
/// asked again with logging on, for its log.
fn load_program(prog_type: u32, attach: u32, insns: &[Insn], name: &str) -> std::result::Result<OwnedFd, Refused> {
    let load = |log: Option<&mut [u8]>| -> io::Result<OwnedFd> {
        let (log_level, log_size, log_buf) = match log {
            Some(buf) => (1u32, buf.len() as u32, buf.as_mut_ptr() as u64),
            None => (0, 0, 0),
        };
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            log_level,
            log_size,
            log_buf,
            prog_name: obj_name(name),
            expected_attach_type: attach,
            ..Default::default()
        };
        // SAFETY: `insns`, `LICENSE` (NUL-terminated) and the log buffer (if any, `log_size`
        // bytes, writable) outlive the call.
        let rc = unsafe { sys_bpf(BPF_PROG_LOAD, &mut attr) }?;
        Ok(owned_fd(rc))
    };
    let first = match load(None) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let mut log = vec![0u8; 1 << 22];
    match load(Some(&mut log)) {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]).trim_end().to_owned();
            match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) if text.is_empty() => Err(Refused::Denied),
                _ => {
                    Err(Refused::Verifier { source: first, log: if text.is_empty() { "(empty)".into() } else { text } })
                }
            }
        }
    }
}

/// `BPF_PROG_TEST_RUN` of program `fd`: `frame` run `repeat` times, with
/// `ctx` as the `xdp_md` when given; the program's return value and the
/// mean ns per run.
fn test_run_fd(fd: &OwnedFd, frame: &[u8], repeat: u32, ctx: Option<&XdpMd>) -> Result<(u32, u32)> {
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = TestRunAttr {
        prog_fd: fd.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat,
        ..Default::default()
    };
    if let Some(ctx) = ctx {
        attr.ctx_size_in = std::mem::size_of::<XdpMd>() as u32;
        attr.ctx_in = ctx as *const XdpMd as u64;
    }
    // SAFETY: `frame` and `ctx` (read, their sizes given) and `out` (written,
    // `data_size_out` bytes) outlive the call; no `ctx_out` is given.
    unsafe { sys_bpf(BPF_PROG_TEST_RUN, &mut attr) }.map_err(|e| LiveError::io("BPF_PROG_TEST_RUN", NEEDS_BPF, e))?;
    Ok((attr.retval, attr.duration))
}

/// A socket filter program (`BPF_PROG_TYPE_SOCKET_FILTER`), to attach to
/// sockets with `SO_ATTACH_BPF`: it returns how many bytes of each packet
/// the socket keeps, 0 to drop it.
#[derive(Debug)]
pub struct SocketFilter {
    fd: OwnedFd,
}

impl SocketFilter {
    /// Loads `insns` under `name`: the kernel's errno and the verifier's
    /// log when it refuses.
    pub fn load_named(insns: &[Insn], name: &str) -> std::result::Result<SocketFilter, (io::Error, String)> {
        match load_program(BPF_PROG_TYPE_SOCKET_FILTER, 0, insns, name) {
            Ok(fd) => Ok(SocketFilter { fd }),
            Err(Refused::Denied) => Err((io::Error::from_raw_os_error(libc::EPERM), String::new())),
            Err(Refused::Verifier { source, log }) => Err((source, log)),
        }
    }

    /// Attaches it to `socket` (`SO_ATTACH_BPF`); sockets accepted from a
    /// listening one inherit it.
    pub fn attach(&self, socket: &impl AsRawFd) -> io::Result<()> {
        let fd: libc::c_int = self.fd.as_raw_fd();
        // SAFETY: `fd` is a live c_int for the call, its size given.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_BPF,
                std::ptr::from_ref(&fd).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Runs it `repeat` times on `packet` (`BPF_PROG_TEST_RUN`; an Ethernet
    /// frame): its return value and the kernel's mean ns per run.
    pub fn test_run_repeat(&self, packet: &[u8], repeat: u32) -> Result<(u32, u32)> {
        test_run_fd(&self.fd, packet, repeat, None)
    }
}

impl XdpProgram {
    /// Loads `insns` as an XDP program. On failure the verifier is asked
    /// again with logging on, and its log is in the error.
    pub fn load(insns: &[Insn]) -> Result<XdpProgram> {
        Self::load_named(insns, "sluice_xsk")
    }

    /// [`XdpProgram::load`] under `name` (at most 15 bytes shown by
    /// `bpftool prog`).
    pub fn load_named(insns: &[Insn], name: &str) -> Result<XdpProgram> {
        match load_program(BPF_PROG_TYPE_XDP, BPF_XDP, insns, name) {
            Ok(fd) => Ok(XdpProgram { fd }),
            Err(Refused::Denied) => Err(LiveError::permission("BPF_PROG_LOAD", NEEDS_BPF)),
            Err(Refused::Verifier { source, log }) => Err(LiveError::XdpRefused { source, log }),
        }
    }

    /// The loaded program whose id is `id` (`BPF_PROG_GET_FD_BY_ID`): one
    /// another tool loaded, to run beside ours.
    pub fn from_id(id: u32) -> Result<XdpProgram> {
        let mut attr = GetByIdAttr { id, ..Default::default() };
        // SAFETY: the attr holds no addresses.
        let rc = unsafe { sys_bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) }
            .map_err(|e| LiveError::io("BPF_PROG_GET_FD_BY_ID", NEEDS_BPF, e))?;
        Ok(XdpProgram { fd: owned_fd(rc) })
    }

    /// The kernel's run statistics of the program: (total ns, runs). They
    /// count only while `kernel.bpf_stats_enabled` is 1.
    pub fn run_stats(&self) -> Result<(u64, u64)> {
        // `struct bpf_prog_info` up to `run_cnt`: `run_time_ns` and
        // `run_cnt` are its 25th and 26th 8-byte words (linux/bpf.h).
        const RUN_TIME_NS: usize = 24;
        let mut info = [0u64; RUN_TIME_NS + 2];
        let mut attr = InfoAttr {
            bpf_fd: self.fd.as_raw_fd() as u32,
            info_len: std::mem::size_of_val(&info) as u32,
            info: info.as_mut_ptr() as u64,
        };
        // SAFETY: `info` is writable and `info_len` bytes long for the call.
        unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }
            .map_err(|e| LiveError::io("BPF_OBJ_GET_INFO_BY_FD", NEEDS_BPF, e))?;
        Ok((info[RUN_TIME_NS], info[RUN_TIME_NS + 1]))
    }

    /// Another descriptor of the same program.
    pub fn try_clone(&self) -> io::Result<XdpProgram> {
        Ok(XdpProgram { fd: self.fd.try_clone()? })
    }

    /// Loads the redirect program for `map` (see the module doc).
    pub fn redirect(map: &XskMap) -> Result<XdpProgram> {
        Self::load(&redirect_program(map.as_raw_fd()))
    }

    /// Runs the program once on `frame` (`BPF_PROG_TEST_RUN`) and returns its
    /// action: a check that needs no interface.
    pub fn test_run(&self, frame: &[u8]) -> Result<u32> {
        self.test_run_repeat(frame, 1).map(|(action, _)| action)
    }

    /// [`XdpProgram::test_run`] with the frame come in on interface
    /// `ifindex`, queue 0 (`ctx->ingress_ifindex`; the kernel looks the
    /// interface up in the caller's namespace, so it must exist there).
    pub fn test_run_on(&self, frame: &[u8], ifindex: u32) -> Result<u32> {
        let ctx = XdpMd { data_end: frame.len() as u32, ingress_ifindex: ifindex, ..Default::default() };
        self.run_test(frame, 1, Some(&ctx)).map(|(action, _)| action)
    }

    /// Runs the program `repeat` times on `frame`: its action and the
    /// kernel's mean time per run in ns.
    pub fn test_run_repeat(&self, frame: &[u8], repeat: u32) -> Result<(u32, u32)> {
        self.run_test(frame, repeat, None)
    }

    /// `BPF_PROG_TEST_RUN`: `frame` run `repeat` times, with `ctx` as the
    /// `xdp_md` when given (else the kernel's: loopback, queue 0); the
    /// action and the mean ns per run.
    fn run_test(&self, frame: &[u8], repeat: u32, ctx: Option<&XdpMd>) -> Result<(u32, u32)> {
        test_run_fd(&self.fd, frame, repeat, ctx)
    }

    /// Attaches the program to `iface` in `mode` through a BPF link. The
    /// program stays attached as long as the returned [`XdpLink`] lives.
    pub fn attach(&self, iface: &str, mode: XdpMode) -> Result<XdpLink> {
        let ifindex = crate::sys::ifindex(iface)?;
        let mut attr = LinkCreateAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: mode.flags(),
        };
        // SAFETY: the attr holds no addresses.
        match unsafe { sys_bpf(BPF_LINK_CREATE, &mut attr) } {
            Ok(rc) => Ok(XdpLink { fd: owned_fd(rc), iface: iface.to_owned(), ifindex, mode }),
            Err(e) => Err(attach_error(iface, ifindex, mode, e)),
        }
    }
}

impl AsRawFd for XdpProgram {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn attach_error(iface: &str, ifindex: u32, mode: XdpMode, e: io::Error) -> LiveError {
    match e.raw_os_error() {
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            let detail = match netlink::xdp_query(ifindex) {
                Ok(Some(q)) => format!(" (id {}, {} mode)", q.prog_id, q.mode),
                _ => String::new(),
            };
            LiveError::XdpBusy { iface: iface.to_owned(), detail }
        }
        Some(libc::ENODEV) | Some(libc::ENXIO) => LiveError::NoSuchInterface { name: iface.to_owned() },
        Some(libc::EPERM) | Some(libc::EACCES) => LiveError::permission("BPF_LINK_CREATE (XDP)", NEEDS_BPF),
        Some(libc::EOPNOTSUPP) => LiveError::XdpAttach {
            iface: iface.to_owned(),
            mode: mode.name(),
            source: e,
            hint: if mode == XdpMode::Driver { "; the driver has no native XDP: use skb mode" } else { "" },
        },
        Some(libc::EINVAL) => LiveError::XdpAttach {
            iface: iface.to_owned(),
            mode: mode.name(),
            source: e,
            hint: if mode == XdpMode::Driver {
                "; native XDP may need a smaller MTU or more queues on this driver, or the kernel \
                 is older than 5.9 (no XDP links): try skb mode"
            } else {
                "; the kernel may be older than 5.9 (no XDP links)"
            },
        },
        _ => LiveError::XdpAttach { iface: iface.to_owned(), mode: mode.name(), source: e, hint: "" },
    }
}

/// An attached program. Dropping it closes the link, which detaches the
/// program from the interface.
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
    iface: String,
    ifindex: u32,
    mode: XdpMode,
}

impl XdpLink {
    /// The interface it is attached to.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Its index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The mode it was attached in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Detaches now (the same as dropping it).
    pub fn detach(self) {}

    /// Pins the link at `path` (on bpffs): it stays, and the program with
    /// it, after this process closes the link or ends.
    pub fn pin(&self, path: &std::path::Path) -> Result<()> {
        obj_pin(self.fd.as_raw_fd(), path)
            .map_err(|e| LiveError::Config(format!("pinning the XDP link at {}: {e}", path.display())))
    }

    /// The link pinned at `path` for `iface` (a previous run's, with
    /// `--persist`), to give it a new program with [`XdpLink::update`].
    pub fn from_pinned(path: &std::path::Path, iface: &str) -> Result<XdpLink> {
        let ifindex = crate::sys::ifindex(iface)?;
        let fd = obj_get(path)
            .map_err(|e| LiveError::Config(format!("opening the pinned XDP link {}: {e}", path.display())))?;
        let mode = match netlink::xdp_query(ifindex) {
            Ok(Some(q)) if q.mode == "driver" => XdpMode::Driver,
            Ok(Some(_)) => XdpMode::Skb,
            _ => {
                return Err(LiveError::Config(format!(
                    "{} is pinned, but {iface} carries no XDP program: remove the pin and start again",
                    path.display()
                )))
            }
        };
        Ok(XdpLink { fd, iface: iface.to_owned(), ifindex, mode })
    }

    /// Replaces the attached program with `prog` in one step
    /// (`BPF_LINK_UPDATE`): every packet meets the old or the new.
    pub fn update(&self, prog: &XdpProgram) -> Result<()> {
        let mut attr = LinkUpdateAttr {
            link_fd: self.fd.as_raw_fd() as u32,
            new_prog_fd: prog.as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: the attr holds no addresses.
        unsafe { sys_bpf(BPF_LINK_UPDATE, &mut attr) }
            .map_err(|e| LiveError::io("BPF_LINK_UPDATE (XDP)", NEEDS_BPF, e))?;
        Ok(())
    }
}

impl AsRawFd for XdpLink {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The whole redirect for one port: map, program and link. Register each
/// queue's AF_XDP socket with [`XdpRedirect::register`].
#[derive(Debug)]
pub struct XdpRedirect {
    // Field order is drop order: detach first, then close program and map.
    link: XdpLink,
    prog: XdpProgram,
    map: XskMap,
}

impl XdpRedirect {
    /// Loads a map with `queues` slots and the program, and attaches it to
    /// `iface` in `mode`. Until a socket is registered for a queue, that
    /// queue's frames go on to the kernel stack (`XDP_PASS`).
    pub fn attach(iface: &str, queues: u32, mode: XdpMode) -> Result<XdpRedirect> {
        crate::sys::iface_up(iface)?;
        let map = XskMap::new(queues)?;
        let prog = XdpProgram::redirect(&map)?;
        let link = prog.attach(iface, mode)?;
        Ok(XdpRedirect { link, prog, map })
    }

    /// Sends the frames of `queue` to the AF_XDP socket `xsk`.
    pub fn register(&self, queue: u32, xsk: &impl AsRawFd) -> Result<()> {
        self.map.set(queue, xsk.as_raw_fd())
    }

    /// Stops redirecting `queue`.
    pub fn unregister(&self, queue: u32) -> Result<()> {
        self.map.clear(queue)
    }

    /// The link.
    pub fn link(&self) -> &XdpLink {
        &self.link
    }

    /// The program.
    pub fn program(&self) -> &XdpProgram {
        &self.prog
    }

    /// The map.
    pub fn map(&self) -> &XskMap {
        &self.map
    }
}
