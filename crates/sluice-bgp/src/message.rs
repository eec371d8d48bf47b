//! BGP messages as a receive-only speaker reads them (RFC 4271), with the
//! parts a FlowSpec and RTBH feed needs: OPEN's capabilities (RFC 5492:
//! multiprotocol, route refresh, graceful restart, 4-octet AS), UPDATE's
//! path attributes (communities, extended communities, MP_REACH_NLRI and
//! MP_UNREACH_NLRI of RFC 4760), KEEPALIVE, NOTIFICATION, ROUTE-REFRESH.
//!
//! Errors are what RFC 7606 says to do about them: a message whose header
//! or frame is wrong, or an UPDATE whose NLRI cannot be found, resets the
//! session (with the NOTIFICATION to send); an attribute that is wrong
//! inside an UPDATE whose NLRI can still be read makes its routes
//! withdrawn ("treat-as-withdraw"), never half installed; an attribute
//! sluice does not use is skipped, its length checked.

use crate::flowspec::{Family, Flow, FlowError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The largest message without RFC 8654's extended messages.
pub const MAX_MESSAGE: usize = 4096;
pub const HEADER: usize = 19;

/// Message types.
pub const OPEN: u8 = 1;
pub const UPDATE: u8 = 2;
pub const NOTIFICATION: u8 = 3;
pub const KEEPALIVE: u8 = 4;
pub const ROUTE_REFRESH: u8 = 5;

/// The BLACKHOLE community (RFC 7999), 65535:666.
pub const BLACKHOLE: u32 = 0xffff_029a;

/// AFI/SAFI pairs this speaker takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AfiSafi {
    pub afi: u16,
    pub safi: u8,
}

impl AfiSafi {
    pub const IPV4_UNICAST: AfiSafi = AfiSafi { afi: 1, safi: 1 };
    pub const IPV6_UNICAST: AfiSafi = AfiSafi { afi: 2, safi: 1 };
    pub const IPV4_FLOWSPEC: AfiSafi = AfiSafi { afi: 1, safi: 133 };
    pub const IPV6_FLOWSPEC: AfiSafi = AfiSafi { afi: 2, safi: 133 };

    /// `ipv4-flowspec`, as GoBGP names families.
    pub fn name(self) -> String {
        let afi = match self.afi {
            1 => "ipv4".to_owned(),
            2 => "ipv6".to_owned(),
            n => format!("afi{n}"),
        };
        let safi = match self.safi {
            1 => "unicast".to_owned(),
            133 => "flowspec".to_owned(),
            n => format!("safi{n}"),
        };
        format!("{afi}-{safi}")
    }
}

/// An OPEN's capabilities (those sluice reads; others are skipped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub multiprotocol: Vec<AfiSafi>,
    pub route_refresh: bool,
    /// The 4-octet AS (RFC 6793).
    pub as4: Option<u32>,
    /// Graceful restart (RFC 4724): restart time, and the families whose
    /// forwarding state was kept.
    pub graceful_restart: Option<(u16, Vec<AfiSafi>)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Open {
    pub version: u8,
    /// The 2-octet AS field (AS_TRANS 23456 when the AS is 4-octet).
    pub my_as: u16,
    pub hold_time: u16,
    pub router_id: Ipv4Addr,
    pub capabilities: Capabilities,
}

impl Open {
    /// The peer's AS: the 4-octet capability's, else the field's.
    pub fn asn(&self) -> u32 {
        self.capabilities.as4.unwrap_or(u32::from(self.my_as))
    }
}

/// A FlowSpec action (extended communities of RFC 8955 §7).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FlowAction {
    /// traffic-rate-bytes: bytes per second (0: discard).
    RateBytes(f32),
    /// traffic-rate-packets (RFC 8955 §7.1, subtype 0x0c).
    RatePackets(f32),
    /// traffic-action: sample, terminal.
    Action { sample: bool, terminal: bool },
    /// redirect (any of its forms).
    Redirect,
    /// traffic-marking: the DSCP to set.
    Marking(u8),
}

/// The routes an UPDATE brings and takes away.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Update {
    /// Unicast prefixes announced (IPv4 from the NLRI field, IPv6 from
    /// MP_REACH) and withdrawn.
    pub announced: Vec<(IpAddr, u8)>,
    pub withdrawn: Vec<(IpAddr, u8)>,
    pub flows_announced: Vec<Flow>,
    pub flows_withdrawn: Vec<Flow>,
    pub communities: Vec<u32>,
    pub flow_actions: Vec<FlowAction>,
    /// Extended communities sluice does not read, as 8 bytes each.
    pub other_extended: Vec<[u8; 8]>,
    /// Set when an attribute was malformed and RFC 7606 says to treat the
    /// announcements as withdrawals: they are moved to `withdrawn` and
    /// `flows_withdrawn`, and this says why.
    pub treat_as_withdraw: Option<String>,
    /// An End-of-RIB marker (RFC 4724 section 2), and for which family: an
    /// UPDATE with nothing in it (IPv4 unicast), or with only an empty
    /// MP_UNREACH_NLRI of that family. A peer that restarted has sent that
    /// family's routes again; its other families may still be coming.
    pub end_of_rib: Option<AfiSafi>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Open(Open),
    Update(Update),
    Notification { code: u8, subcode: u8, data: Vec<u8> },
    Keepalive,
    RouteRefresh(AfiSafi),
}

/// A message that ends the session: the NOTIFICATION to send (RFC 4271
/// §6) and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} (NOTIFICATION {code}/{subcode})")]
pub struct SessionError {
    pub code: u8,
    pub subcode: u8,
    pub message: String,
}

fn reset(code: u8, subcode: u8, message: impl Into<String>) -> SessionError {
    SessionError { code, subcode, message: message.into() }
}

/// NOTIFICATION codes.
pub const HEADER_ERROR: u8 = 1;
pub const OPEN_ERROR: u8 = 2;
pub const UPDATE_ERROR: u8 = 3;
pub const HOLD_TIMER_EXPIRED: u8 = 4;
pub const FSM_ERROR: u8 = 5;
pub const CEASE: u8 = 6;

/// How many bytes the next message takes, once its header is in `buf`
/// (None: not yet 19 bytes). A bad marker or length is a session error.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, SessionError> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    if buf[..16].iter().any(|&b| b != 0xff) {
        return Err(reset(HEADER_ERROR, 1, "the header's marker is not all ones"));
    }
    let len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
    if !(HEADER..=MAX_MESSAGE).contains(&len) {
        return Err(reset(HEADER_ERROR, 2, format!("message length {len} is not 19 to {MAX_MESSAGE}")));
    }
    Ok(Some(len))
}

/// Bytes read with bounds, naming what ends too soon.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }
    fn u16(&mut self) -> Option<u16> {
        let s = self.take(2)?;
        Some(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        let s = self.take(4)?;
        Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        let s = &self.b[self.at..end];
        self.at = end;
        Some(s)
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

/// Decodes one whole message (`bytes` is exactly [`frame_len`] long).
/// `as4`: whether both sides sent the 4-octet AS capability (AS_PATH is
/// then 4-octet; it is only checked here, not kept).
pub fn decode(bytes: &[u8], as4: bool) -> Result<Message, SessionError> {
    let len = frame_len(bytes)?.ok_or_else(|| reset(HEADER_ERROR, 2, "a message shorter than its header"))?;
    if len != bytes.len() {
        return Err(reset(HEADER_ERROR, 2, format!("message length {len}, but {} bytes", bytes.len())));
    }
    let body = &bytes[HEADER..];
    let bad_len = |what: &str| reset(HEADER_ERROR, 2, format!("a {what} of {len} bytes"));
    match bytes[18] {
        OPEN => decode_open(body).map(Message::Open),
        UPDATE => decode_update(body, as4).map(Message::Update),
        NOTIFICATION => {
            let (code, subcode) = match body {
                [c, s, ..] => (*c, *s),
                _ => return Err(bad_len("NOTIFICATION")),
            };
            Ok(Message::Notification { code, subcode, data: body[2..].to_vec() })
        }
        KEEPALIVE if body.is_empty() => Ok(Message::Keepalive),
        KEEPALIVE => Err(bad_len("KEEPALIVE")),
        ROUTE_REFRESH => match body {
            [a, b, _, safi] => Ok(Message::RouteRefresh(AfiSafi { afi: u16::from_be_bytes([*a, *b]), safi: *safi })),
            _ => Err(bad_len("ROUTE-REFRESH")),
        },
        t => Err(reset(HEADER_ERROR, 3, format!("message type {t}"))),
    }
}

fn decode_open(body: &[u8]) -> Result<Open, SessionError> {
    let short = || reset(OPEN_ERROR, 0, "an OPEN that ends too soon");
    let mut c = Cursor { b: body, at: 0 };
    let version = c.u8().ok_or_else(short)?;
    if version != 4 {
        return Err(reset(OPEN_ERROR, 1, format!("BGP version {version}; this speaker has 4")));
    }
    let my_as = c.u16().ok_or_else(short)?;
    let hold_time = c.u16().ok_or_else(short)?;
    if hold_time == 1 || hold_time == 2 {
        return Err(reset(OPEN_ERROR, 6, format!("hold time {hold_time} s (0 or at least 3)")));
    }
    let router_id = Ipv4Addr::from(c.u32().ok_or_else(short)?);
    let mut params_len = usize::from(c.u8().ok_or_else(short)?);
    // RFC 9072: 255 then 255 marks a 2-byte length, and 2-byte parameter lengths.
    let extended = params_len == 255 && c.b.get(c.at) == Some(&255);
    if extended {
        c.u8();
        params_len = usize::from(c.u16().ok_or_else(short)?);
    }
    let params = c.take(params_len).ok_or_else(short)?;
    if !c.done() {
        return Err(reset(OPEN_ERROR, 0, "bytes after the OPEN's parameters"));
    }
    let mut p = Cursor { b: params, at: 0 };
    let mut caps = Capabilities::default();
    while !p.done() {
        let kind = p.u8().ok_or_else(short)?;
        let n = if extended { p.u16().map(usize::from) } else { p.u8().map(usize::from) };
        let value = p.take(n.ok_or_else(short)?).ok_or_else(short)?;
        if kind != 2 {
            return Err(reset(OPEN_ERROR, 4, format!("optional parameter {kind}")));
        }
        capabilities(value, &mut caps)?;
    }
    Ok(Open { version, my_as, hold_time, router_id, capabilities: caps })
}

fn capabilities(value: &[u8], caps: &mut Capabilities) -> Result<(), SessionError> {
    let bad = |what: &str| reset(OPEN_ERROR, 0, format!("a malformed {what} capability"));
    let mut c = Cursor { b: value, at: 0 };
    while !c.done() {
        let code = c.u8().ok_or_else(|| bad("capability"))?;
        let n = usize::from(c.u8().ok_or_else(|| bad("capability"))?);
        let v = c.take(n).ok_or_else(|| bad("capability"))?;
        match code {
            1 => match v {
                [a, b, _, safi] => caps.multiprotocol.push(AfiSafi { afi: u16::from_be_bytes([*a, *b]), safi: *safi }),
                _ => return Err(bad("multiprotocol")),
            },
            2 => caps.route_refresh = true,
            64 => {
                if v.len() < 2 || (v.len() - 2) % 4 != 0 {
                    return Err(bad("graceful restart"));
                }
                let time = u16::from_be_bytes([v[0], v[1]]) & 0x0fff;
                let fams = v[2..].chunks(4).map(|f| AfiSafi { afi: u16::from_be_bytes([f[0], f[1]]), safi: f[2] });
                caps.graceful_restart = Some((time, fams.collect()));
            }
            65 => match v {
                [a, b, c, d] => caps.as4 = Some(u32::from_be_bytes([*a, *b, *c, *d])),
                _ => return Err(bad("4-octet AS")),
            },
            _ => {}
        }
    }
    Ok(())
}

/// Unicast prefixes as NLRI encodes them (a length, then its bytes).
fn prefixes(mut b: &[u8], v6: bool) -> Option<Vec<(IpAddr, u8)>> {
    let width = if v6 { 128 } else { 32 };
    let mut out = Vec::new();
    while let [len, rest @ ..] = b {
        if *len > width {
            return None;
        }
        let n = usize::from(*len).div_ceil(8);
        let bytes = rest.get(..n)?;
        let mut full = [0u8; 16];
        full[..n].copy_from_slice(bytes);
        let addr = if v6 {
            IpAddr::V6(Ipv6Addr::from(full))
        } else {
            IpAddr::V4(Ipv4Addr::new(full[0], full[1], full[2], full[3]))
        };
        // Host bits past the length are cleared (a peer may leave them set).
        out.push((mask(addr, *len), *len));
        b = &rest[n..];
    }
    Some(out)
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)))
        }
        IpAddr::V6(a) => {
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)))
        }
    }
}

/// One MP_REACH or MP_UNREACH NLRI field, into `update`.
fn mp_nlri(fam: AfiSafi, nlri: &[u8], reach: bool, update: &mut Update) -> Result<(), String> {
    match (fam.afi, fam.safi) {
        (1 | 2, 133) => {
            let family = if fam.afi == 1 { Family::V4 } else { Family::V6 };
            let flows = Flow::decode_all(family, nlri).map_err(|e: FlowError| e.to_string())?;
            if reach { &mut update.flows_announced } else { &mut update.flows_withdrawn }.extend(flows);
        }
        (1 | 2, 1) => {
            let p = prefixes(nlri, fam.afi == 2).ok_or_else(|| format!("{}: malformed prefixes", fam.name()))?;
            if reach { &mut update.announced } else { &mut update.withdrawn }.extend(p);
        }
        // Families sluice did not ask for: their routes are not read.
        _ => {}
    }
    Ok(())
}

fn decode_update(body: &[u8], as4: bool) -> Result<Update, SessionError> {
    let malformed = |m: &str| reset(UPDATE_ERROR, 1, format!("malformed attribute list: {m}"));
    let mut c = Cursor { b: body, at: 0 };
    let wlen = usize::from(c.u16().ok_or_else(|| malformed("no withdrawn routes length"))?);
    let withdrawn = c.take(wlen).ok_or_else(|| malformed("withdrawn routes past the message"))?;
    let alen = usize::from(c.u16().ok_or_else(|| malformed("no path attributes length"))?);
    let attrs = c.take(alen).ok_or_else(|| malformed("path attributes past the message"))?;
    let nlri = c.rest();
    let mut u = Update {
        withdrawn: prefixes(withdrawn, false).ok_or_else(|| reset(UPDATE_ERROR, 10, "malformed withdrawn routes"))?,
        announced: prefixes(nlri, false).ok_or_else(|| reset(UPDATE_ERROR, 10, "malformed NLRI"))?,
        ..Update::default()
    };
    // RFC 7606 §4: attributes that cannot be told apart end the session
    // (the NLRI could not be trusted either); a wrong one inside them is
    // treat-as-withdraw.
    let mut a = Cursor { b: attrs, at: 0 };
    let mut seen = [false; 256];
    let mut wrong: Option<String> = None;
    // For End-of-RIB: how many attributes, and an empty MP_UNREACH's family.
    let (mut attributes, mut empty_unreach) = (0usize, None);
    while !a.done() {
        let flags = a.u8().ok_or_else(|| malformed("an attribute header past the list"))?;
        let code = a.u8().ok_or_else(|| malformed("an attribute header past the list"))?;
        let n = if flags & 0x10 != 0 { a.u16().map(usize::from) } else { a.u8().map(usize::from) };
        let v = n.and_then(|n| a.take(n)).ok_or_else(|| malformed(&format!("attribute {code} past the list")))?;
        attributes += 1;
        if std::mem::replace(&mut seen[usize::from(code)], true) {
            // RFC 7606 §3.g: MP_(UN)REACH twice ends the session; others are discarded.
            if code == 14 || code == 15 {
                return Err(malformed(&format!("attribute {code} twice")));
            }
            continue;
        }
        let mut note = |m: String| {
            wrong.get_or_insert(m);
        };
        match code {
            1 if v.len() != 1 || v[0] > 2 => note(format!("ORIGIN of {} bytes or value over 2", v.len())),
            2 if !as_path_ok(v, as4) => note("a malformed AS_PATH".into()),
            3 if v.len() != 4 => note(format!("NEXT_HOP of {} bytes", v.len())),
            8 if v.len() % 4 != 0 => note(format!("COMMUNITIES of {} bytes", v.len())),
            8 => u.communities.extend(v.chunks(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))),
            16 if v.len() % 8 != 0 => note(format!("EXTENDED_COMMUNITIES of {} bytes", v.len())),
            16 => {
                for ec in v.chunks(8) {
                    let ec: [u8; 8] = ec.try_into().expect("chunks of 8");
                    match flow_action(&ec) {
                        Some(act) => u.flow_actions.push(act),
                        None => u.other_extended.push(ec),
                    }
                }
            }
            14 => {
                // AFI, SAFI, next hop, a reserved byte, NLRI.
                let mut m = Cursor { b: v, at: 0 };
                let afi = m.u16();
                let safi = m.u8();
                let nh = m.u8().and_then(|n| m.take(usize::from(n)));
                let reserved = m.u8();
                let (Some(afi), Some(safi), Some(_), Some(_)) = (afi, safi, nh, reserved) else {
                    return Err(reset(UPDATE_ERROR, 9, "MP_REACH_NLRI ends before its NLRI"));
                };
                mp_nlri(AfiSafi { afi, safi }, m.rest(), true, &mut u)
                    .map_err(|e| reset(UPDATE_ERROR, 9, format!("MP_REACH_NLRI: {e}")))?;
            }
            15 => {
                let mut m = Cursor { b: v, at: 0 };
                let (Some(afi), Some(safi)) = (m.u16(), m.u8()) else {
                    return Err(reset(UPDATE_ERROR, 9, "MP_UNREACH_NLRI ends before its NLRI"));
                };
                let nlri = m.rest();
                if nlri.is_empty() {
                    empty_unreach = Some(AfiSafi { afi, safi });
                }
                mp_nlri(AfiSafi { afi, safi }, nlri, false, &mut u)
                    .map_err(|e| reset(UPDATE_ERROR, 9, format!("MP_UNREACH_NLRI: {e}")))?;
            }
            _ => {}
        }
    }
    if withdrawn.is_empty() && nlri.is_empty() {
        u.end_of_rib = match (attributes, empty_unreach) {
            (0, _) => Some(AfiSafi::IPV4_UNICAST),
            (1, Some(f)) => Some(f),
            _ => None,
        };
    }
    if let Some(why) = wrong {
        // Treat-as-withdraw: what it announced is withdrawn instead.
        let announced = std::mem::take(&mut u.announced);
        u.withdrawn.extend(announced);
        let flows = std::mem::take(&mut u.flows_announced);
        u.flows_withdrawn.extend(flows);
        u.treat_as_withdraw = Some(why);
    }
    Ok(u)
}

/// AS_PATH segments: a type (1 to 4), a count, that many ASes of 2 or 4 bytes.
fn as_path_ok(mut v: &[u8], as4: bool) -> bool {
    let width = if as4 { 4 } else { 2 };
    while let [kind, count, rest @ ..] = v {
        let n = usize::from(*count) * width;
        if !(1..=4).contains(kind) || *count == 0 || rest.len() < n {
            return false;
        }
        v = &rest[n..];
    }
    v.is_empty()
}

/// A FlowSpec action extended community (RFC 8955 §7), if it is one.
fn flow_action(ec: &[u8; 8]) -> Option<FlowAction> {
    let rate = || f32::from_be_bytes([ec[4], ec[5], ec[6], ec[7]]);
    Some(match (ec[0], ec[1]) {
        (0x80, 0x06) => FlowAction::RateBytes(rate()),
        (0x80, 0x0c) => FlowAction::RatePackets(rate()),
        (0x80, 0x07) => FlowAction::Action { sample: ec[7] & 0x02 != 0, terminal: ec[7] & 0x01 != 0 },
        (0x80..=0x82, 0x08) => FlowAction::Redirect,
        (0x80, 0x09) => FlowAction::Marking(ec[7] & 0x3f),
        _ => return None,
    })
}

/// A message's bytes: header and body. For this speaker's own OPEN,
/// KEEPALIVE and NOTIFICATION, and tests.
pub fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0xff; 16];
    m.extend_from_slice(&((HEADER + body.len()) as u16).to_be_bytes());
    m.push(kind);
    m.extend_from_slice(body);
    m
}

/// This speaker's OPEN: AS (AS_TRANS in the 2-octet field when it does not
/// fit), hold time, router id, and the capabilities: the families, route
/// refresh, 4-octet AS, and graceful restart as a receiver (its restart
/// time, no forwarding state kept).
pub fn open(asn: u32, hold_time: u16, router_id: Ipv4Addr, families: &[AfiSafi], restart_time: u16) -> Vec<u8> {
    let mut caps = Vec::new();
    for f in families {
        caps.extend_from_slice(&[1, 4]);
        caps.extend_from_slice(&f.afi.to_be_bytes());
        caps.extend_from_slice(&[0, f.safi]);
    }
    caps.extend_from_slice(&[2, 0]);
    caps.extend_from_slice(&[65, 4]);
    caps.extend_from_slice(&asn.to_be_bytes());
    caps.extend_from_slice(&[64, 2]);
    caps.extend_from_slice(&(restart_time & 0x0fff).to_be_bytes());
    let mut body = vec![4];
    let two = u16::try_from(asn).unwrap_or(23456);
    body.extend_from_slice(&two.to_be_bytes());
    body.extend_from_slice(&hold_time.to_be_bytes());
    body.extend_from_slice(&router_id.octets());
    body.push((caps.len() + 2) as u8);
    body.extend_from_slice(&[2, caps.len() as u8]);
    body.extend_from_slice(&caps);
    frame(OPEN, &body)
}

pub fn keepalive() -> Vec<u8> {
    frame(KEEPALIVE, &[])
}

/// An UPDATE announcing IPv4 FlowSpec `nlri` (encoded flows, as
/// [`Flow::to_bytes`] writes them) with traffic-rate 0 (discard), ORIGIN
/// `origin` (0, IGP; over 2 is malformed, for tests of RFC 7606) and an
/// empty AS_PATH. What a peer sends; sluice never announces, so this is
/// for its tests and benches (one encoder, not one per test).
pub fn flowspec_discard(nlri: &[u8], origin: u8) -> Vec<u8> {
    let mut mp = vec![0, 1, 133, 0, 0];
    mp.extend_from_slice(nlri);
    let mut attrs = vec![0x40, 1, 1, origin, 0x40, 2, 0, 0x90, 14];
    attrs.extend_from_slice(&(mp.len() as u16).to_be_bytes());
    attrs.extend_from_slice(&mp);
    // Extended community traffic-rate (0x8006), AS 0, rate 0.0.
    attrs.extend_from_slice(&[0xc0, 16, 8, 0x80, 0x06, 0, 0, 0, 0, 0, 0]);
    let mut body = vec![0, 0];
    body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(&attrs);
    frame(UPDATE, &body)
}

/// [`flowspec_discard`] UPDATEs (each at most 4,096 bytes, RFC 4271's
/// limit) announcing the IPv4 `flows`.
pub fn flowspec_discards(flows: &[Flow]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut nlri = Vec::new();
    for f in flows {
        let b = f.to_bytes();
        if !nlri.is_empty() && nlri.len() + b.len() > 4000 {
            out.push(flowspec_discard(&nlri, 0));
            nlri.clear();
        }
        nlri.extend_from_slice(&b);
    }
    if !nlri.is_empty() {
        out.push(flowspec_discard(&nlri, 0));
    }
    out
}

pub fn notification(code: u8, subcode: u8, data: &[u8]) -> Vec<u8> {
    let mut body = vec![code, subcode];
    body.extend_from_slice(data);
    frame(NOTIFICATION, &body)
}

#[cfg(test)]
mod tests;
