//! Generated traffic written to a pcap file (`sluice gen`, the demo's
//! `--keep`, the benchmarks' inputs), and the demo's traffic mix.

use crate::{ConfigError, FrameSize, GenConfig, GenStats, Generator, ProtoMix};
use sluice_pcap::{CaptureWriter, Interface, OutputFormat, PcapError, PcapHeader, Record, Timestamp, TsResolution};
use sluice_rules::Prefix;
use sluice_wire::LinkType;
use std::path::Path;

/// Why a capture could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot create {path}: {error}")]
    Create { path: String, error: PcapError },
    #[error("writing {path}: {error}")]
    Write { path: String, error: PcapError },
    #[error("timestamp {0} ns is past what pcap can hold")]
    Timestamp(u64),
}

/// How often (in frames) [`write_capture`] reports progress.
pub const PROGRESS_EVERY: u64 = 1 << 14;

/// Generate `cfg` into a pcap file at `out` (`-`: standard output), with
/// microsecond or (`nanos`) nanosecond timestamps; `progress` hears the
/// frames written so far every [`PROGRESS_EVERY`].
pub fn write_capture(
    cfg: GenConfig,
    out: &Path,
    nanos: bool,
    mut progress: impl FnMut(u64),
) -> Result<GenStats, CaptureError> {
    let path = || out.display().to_string();
    let mut gen = Generator::new(cfg)?;
    let header = PcapHeader::new(LinkType::ETHERNET, 65_535, nanos);
    let mut w = CaptureWriter::create(out, OutputFormat::Pcap, Some(header))
        .map_err(|error| CaptureError::Create { path: path(), error })?;
    let interface = Interface {
        link_type: LinkType::ETHERNET,
        snaplen: header.snaplen,
        ts_resolution: if nanos { TsResolution::NANOS } else { TsResolution::MICROS },
    };
    let mut buf = Vec::with_capacity(16_384);
    while let Some(info) = gen.next_frame(&mut buf) {
        let secs = info.timestamp_ns / 1_000_000_000;
        let sub = info.timestamp_ns % 1_000_000_000;
        let secs = u32::try_from(secs).map_err(|_| CaptureError::Timestamp(info.timestamp_ns))?;
        let rec = Record {
            index: info.index,
            offset: 0,
            timestamp: Timestamp::Split { secs, frac: if nanos { sub } else { sub / 1000 } as u32, nanos },
            orig_len: buf.len() as u32,
            data: &buf,
            interface_id: 0,
            interface,
        };
        w.write(&rec).map_err(|error| CaptureError::Write { path: path(), error })?;
        if info.index % PROGRESS_EVERY == 0 {
            progress(info.index);
        }
    }
    w.finish().map_err(|error| CaptureError::Write { path: path(), error })?;
    Ok(*gen.stats())
}

/// The demo's traffic: a realistic mix (IMIX sizes, 20% IPv6, VLAN and QinQ
/// tags, 2% fragmented) with 10% of sources drawn from `list`.
pub fn demo_config(packets: u64, seed: u64, list: Vec<Prefix>) -> GenConfig {
    GenConfig {
        count: packets,
        seed,
        flows: None,
        ipv6_share: 0.2,
        mix: ProtoMix { tcp: 6, udp: 3, icmp: 1 },
        size: FrameSize::Imix,
        vlan_share: 0.1,
        qinq_share: 0.05,
        listed_share: 0.1,
        list,
        frag_share: 0.02,
        ..GenConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_pcap::CaptureReader;

    #[test]
    fn a_written_capture_reads_back_frame_for_frame() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("g.pcap");
        let list: Vec<Prefix> = vec!["10.0.0.0/8".parse().unwrap()];
        let cfg = demo_config(5000, 7, list);
        let mut reported = Vec::new();
        let stats = write_capture(cfg.clone(), &out, true, |n| reported.push(n)).unwrap();
        assert_eq!(stats.packets, 5000);
        assert_eq!(reported, [0], "one report per {PROGRESS_EVERY} frames, from the first");
        let mut gen = Generator::new(cfg).unwrap();
        let mut r = CaptureReader::open(&out).unwrap();
        let mut buf = Vec::new();
        let mut n = 0;
        while let Some(rec) = r.next_record().unwrap() {
            gen.next_frame(&mut buf).unwrap();
            assert_eq!(rec.data, &buf[..], "frame {n}");
            n += 1;
        }
        assert_eq!(n, 5000);
        assert!(gen.next_frame(&mut buf).is_none());
    }

    #[test]
    fn an_unwritable_path_is_named() {
        let list = vec!["10.0.0.0/8".parse().unwrap()];
        let err = write_capture(demo_config(1, 1, list), Path::new("/nonexistent/dir/x.pcap"), false, |_| {})
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot create /nonexistent/dir/x.pcap: "), "{err}");
    }
}
