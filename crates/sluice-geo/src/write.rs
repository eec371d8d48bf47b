//! A small MaxMind DB writer, for tests and fixtures: an IPv6 tree (IPv4
//! networks under `::/96`, as MaxMind's own databases hold them), 32-bit
//! records, and records made of strings, unsigned integers, maps and
//! arrays. Networks may not overlap (a database maps each address to one
//! record); each distinct record is stored once.
//!
//! The format: <https://maxmind.github.io/MaxMind-DB/>. Readers checked
//! against: the `maxminddb` crate and libmaxminddb's `mmdblookup`.

use std::collections::HashMap;
use std::net::IpAddr;

/// A value in a record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Str(String),
    U16(u16),
    U32(u32),
    U64(u64),
    Map(Vec<(String, Value)>),
    Array(Vec<Value>),
}

impl Value {
    /// A map from `(key, value)` pairs.
    pub fn map<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Map(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A string.
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }
}

/// A search-tree record: nothing, another node, or a record's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rec {
    Empty,
    Node(usize),
    Data(usize),
}

/// A database being written.
#[derive(Debug)]
pub struct Writer {
    database_type: String,
    build_epoch: u64,
    /// Node 0 is the root; each node is its (0-bit, 1-bit) records.
    nodes: Vec<[Rec; 2]>,
    values: Vec<Value>,
    value_index: HashMap<Value, usize>,
}

/// Why a network was not inserted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    #[error("prefix length {0} is out of range")]
    Length(u8),
    #[error("{0}/{1} overlaps a network already inserted")]
    Overlap(IpAddr, u8),
}

impl Writer {
    pub fn new(database_type: impl Into<String>, build_epoch: u64) -> Writer {
        Writer {
            database_type: database_type.into(),
            build_epoch,
            nodes: vec![[Rec::Empty; 2]],
            values: Vec::new(),
            value_index: HashMap::new(),
        }
    }

    /// Map `addr/len` (host bits ignored) to `value`.
    pub fn insert(&mut self, addr: IpAddr, len: u8, value: Value) -> Result<(), InsertError> {
        let (bits, depth) = match addr {
            IpAddr::V4(a) if (1..=32).contains(&len) => (u128::from(u32::from(a)), len + 96),
            IpAddr::V6(a) if (1..=128).contains(&len) => (u128::from(a), len),
            _ => return Err(InsertError::Length(len)),
        };
        let data = match self.value_index.get(&value) {
            Some(&i) => i,
            None => {
                self.values.push(value.clone());
                self.value_index.insert(value, self.values.len() - 1);
                self.values.len() - 1
            }
        };
        let mut node = 0;
        for d in 0..depth {
            let bit = ((bits >> (127 - d)) & 1) as usize;
            let last = d + 1 == depth;
            match (self.nodes[node][bit], last) {
                (Rec::Empty, true) => self.nodes[node][bit] = Rec::Data(data),
                (Rec::Empty, false) => {
                    self.nodes.push([Rec::Empty; 2]);
                    let n = self.nodes.len() - 1;
                    self.nodes[node][bit] = Rec::Node(n);
                    node = n;
                }
                (Rec::Node(n), false) => node = n,
                _ => return Err(InsertError::Overlap(addr, len)),
            }
        }
        Ok(())
    }

    /// The database file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let node_count = self.nodes.len();
        let mut data = Vec::new();
        let mut offsets = Vec::with_capacity(self.values.len());
        for v in &self.values {
            offsets.push(data.len());
            encode(v, &mut data);
        }
        let record = |r: Rec| -> u32 {
            let v = match r {
                Rec::Empty => node_count,
                Rec::Node(n) => n,
                Rec::Data(i) => node_count + 16 + offsets[i],
            };
            u32::try_from(v).expect("a test database fits 32-bit records")
        };
        let mut out = Vec::with_capacity(node_count * 8 + 16 + data.len() + 256);
        for n in &self.nodes {
            out.extend_from_slice(&record(n[0]).to_be_bytes());
            out.extend_from_slice(&record(n[1]).to_be_bytes());
        }
        out.extend_from_slice(&[0u8; 16]);
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
        let metadata = Value::map([
            ("binary_format_major_version", Value::U16(2)),
            ("binary_format_minor_version", Value::U16(0)),
            ("build_epoch", Value::U64(self.build_epoch)),
            ("database_type", Value::str(self.database_type.clone())),
            ("description", Value::map([("en", Value::str("written by sluice-geo's test writer"))])),
            ("ip_version", Value::U16(6)),
            ("languages", Value::Array(vec![Value::str("en")])),
            ("node_count", Value::U32(node_count as u32)),
            ("record_size", Value::U16(32)),
        ]);
        encode(&metadata, &mut out);
        out
    }
}

/// A control byte (and extended type byte, and size bytes) for `ty` of `size`.
fn control(out: &mut Vec<u8>, ty: u8, size: usize) {
    let (first, extra): (u8, Vec<u8>) = match size {
        0..29 => (size as u8, vec![]),
        29..285 => (29, vec![(size - 29) as u8]),
        285..65_821 => (30, ((size - 285) as u16).to_be_bytes().to_vec()),
        _ => (31, ((size - 65_821) as u32).to_be_bytes()[1..].to_vec()),
    };
    if ty <= 7 {
        out.push((ty << 5) | first);
    } else {
        out.push(first);
        out.push(ty - 7);
    }
    out.extend_from_slice(&extra);
}

/// An unsigned integer of type `ty`, in its fewest big-endian bytes.
fn unsigned(out: &mut Vec<u8>, ty: u8, v: u64) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    control(out, ty, 8 - skip);
    out.extend_from_slice(&bytes[skip..]);
}

fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Str(s) => {
            control(out, 2, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        Value::U16(n) => unsigned(out, 5, u64::from(*n)),
        Value::U32(n) => unsigned(out, 6, u64::from(*n)),
        Value::U64(n) => unsigned(out, 9, *n),
        Value::Map(pairs) => {
            control(out, 7, pairs.len());
            for (k, v) in pairs {
                encode(&Value::Str(k.clone()), out);
                encode(v, out);
            }
        }
        Value::Array(items) => {
            control(out, 11, items.len());
            for v in items {
                encode(v, out);
            }
        }
    }
}
