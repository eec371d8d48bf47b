use std::fmt;

/// What went wrong reading or writing a capture.
#[derive(Debug, thiserror::Error)]
pub enum PcapErrorKind {
    // Not `#[from]`: that would also make the io::Error the source, and an
    // error chain would print it twice.
    #[error("I/O error: {0}")]
    Io(std::io::Error),
    /// The file could not be opened at all (missing, a directory, no
    /// permission): no record was read, so no position is named.
    #[error("cannot open: {0}")]
    Open(std::io::Error),
    #[error("file is shorter than a capture header ({got} bytes)")]
    TruncatedFileHeader { got: usize },
    #[error("not a pcap or pcapng file (magic number 0x{0:08x})")]
    BadMagic(u32),
    #[error("modified (Kuznetzov) pcap format is not supported")]
    ModifiedPcap,
    #[error("unsupported pcap version {major}.{minor}")]
    UnsupportedVersion { major: u16, minor: u16 },
    #[error("file ends inside a record header ({got} of {need} bytes)")]
    TruncatedRecordHeader { got: usize, need: usize },
    #[error("file ends inside the record data ({got} of {need} bytes)")]
    TruncatedRecordData { got: usize, need: usize },
    #[error("record length {len} exceeds the maximum of {max}")]
    RecordTooLong { len: u32, max: u32 },
    #[error("pcapng block length {0} is invalid (below 12 or not a multiple of 4)")]
    BadBlockLength(u32),
    #[error("pcapng block length {len} exceeds the maximum of {max}")]
    BlockTooLong { len: u32, max: u32 },
    #[error("pcapng block trailer length {trailer} does not match header length {len}")]
    BlockTrailerMismatch { len: u32, trailer: u32 },
    #[error("pcapng section byte-order magic 0x{0:08x} is invalid")]
    BadByteOrderMagic(u32),
    #[error("pcapng file does not start with a section header block (block type 0x{0:08x})")]
    MissingSectionHeader(u32),
    #[error("pcapng packet refers to interface {id} but the section has {count} interfaces")]
    UnknownInterface { id: u32, count: usize },
    #[error("pcapng {block} block is too short for its fields ({len} bytes)")]
    BlockTooShort { block: &'static str, len: u32 },
    #[error("pcapng packet's captured length {caplen} overruns its block")]
    CaplenOverrunsBlock { caplen: u32 },
    #[error("timestamp does not fit pcap's 32-bit seconds (write pcapng instead)")]
    TimestampOutOfRange,
    #[error("pcap output holds one link type; record has {got} but the file was started with {expected} (write pcapng instead)")]
    LinkTypeMismatch { expected: u32, got: u32 },
}

/// An error with the position it happened at, so a caller can say exactly
/// where a capture stopped being readable: every record before `record` was
/// returned intact.
#[derive(Debug)]
pub struct PcapError {
    pub kind: PcapErrorKind,
    /// Index of the packet record that could not be read (= packets read before it).
    pub record: u64,
    /// Byte offset in the file where the bad record, block or header starts.
    pub offset: u64,
}

impl PcapError {
    pub fn new(kind: PcapErrorKind, record: u64, offset: u64) -> Self {
        PcapError { kind, record, offset }
    }

    /// The file at hand could not be opened (`e`), or is a directory.
    pub fn open(e: std::io::Error) -> Self {
        PcapError::new(PcapErrorKind::Open(e), 0, 0)
    }

    /// `file` opened, but not one a capture can be read from (a directory).
    pub fn check_opened(file: &std::fs::File) -> Result<(), PcapError> {
        match file.metadata() {
            Ok(m) if m.is_dir() => Err(Self::open(std::io::Error::from(std::io::ErrorKind::IsADirectory))),
            Ok(_) => Ok(()),
            Err(e) => Err(Self::open(e)),
        }
    }
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            PcapErrorKind::Open(_) => write!(f, "{}", self.kind),
            _ => write!(f, "record {} at byte offset {}: {}", self.record, self.offset, self.kind),
        }
    }
}

impl From<std::io::Error> for PcapErrorKind {
    fn from(e: std::io::Error) -> Self {
        PcapErrorKind::Io(e)
    }
}

// No `source()`: the message already ends with the kind's, and a chain
// printer (anyhow's `{:#}`) would print it again.
impl std::error::Error for PcapError {}
