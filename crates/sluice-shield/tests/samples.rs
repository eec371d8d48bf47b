//! Drop samples in the kernel: a dropped frame run through the loaded
//! program (`BPF_PROG_TEST_RUN`) leaves one ring buffer record naming the
//! counter slot that dropped it and holding the frame's first bytes; a
//! passed frame leaves none; a full ring loses the sample, never the
//! verdict. Without sampling the program has no sampling instruction (nor,
//! without interfaces, any for the counters' interface rows).
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
use common::can_load;
use sluice_live::bpf::{BpfMap, MapType};
use sluice_live::ringbuf::RingReader;
use sluice_rules::parse_rules;
use sluice_shield::program::{record, SampleTap, XDP_DROP, XDP_PASS};
use sluice_shield::{Compiled, Options};
use std::os::fd::AsRawFd;

/// An Ethernet + IPv4 + UDP frame from `src` to 192.0.2.1:`dport`, `pad`
/// bytes of payload (each its index).
fn udp(src: [u8; 4], dport: u16, pad: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = (20 + 8 + pad) as u16;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[192, 0, 2, 1]);
    f.extend_from_slice(&[0x30, 0x39, (dport >> 8) as u8, dport as u8]);
    f.extend_from_slice(&[((8 + pad) >> 8) as u8, (8 + pad) as u8, 0, 0]);
    f.extend((0..pad).map(|i| i as u8));
    f
}

struct Ring {
    ring: BpfMap,
    lost: BpfMap,
    cap: BpfMap,
}

impl Ring {
    fn new(bytes: u32) -> Ring {
        Ring {
            ring: BpfMap::new(MapType::RingBuf, 0, 0, bytes, 0, "test_samples").unwrap(),
            lost: BpfMap::new(MapType::PercpuArray, 4, 16, 2, 0, "test_lost").unwrap(),
            cap: BpfMap::new(MapType::Array, 4, 8, 1, 0, "test_cap").unwrap(),
        }
    }

    fn tap(&self, rate: u32) -> SampleTap {
        self.capped(rate, 0)
    }

    fn capped(&self, rate: u32, max_pps: u64) -> SampleTap {
        SampleTap {
            ring_fd: self.ring.as_raw_fd(),
            lost_fd: self.lost.as_raw_fd(),
            rate,
            max_pps,
            cap_fd: self.cap.as_raw_fd(),
        }
    }

    fn counted(&self, key: u32) -> u64 {
        let v = self.lost.lookup(&key.to_ne_bytes()).unwrap().unwrap();
        v.chunks_exact(16).map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap())).sum()
    }

    fn lost(&self) -> u64 {
        self.counted(0)
    }

    fn over_cap(&self) -> u64 {
        self.counted(1)
    }
}

fn u32_at(r: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(r[at..at + 4].try_into().unwrap())
}

const RULES: &str = "pass saddr 10.0.0.9\ndrop saddr 10.0.0.0/8\ndrop udp dport 53\n";

fn compiled(ring: &Ring, rate: u32, undecodable_drop: bool) -> Compiled {
    with_tap(ring.tap(rate), undecodable_drop)
}

fn with_tap(tap: SampleTap, undecodable_drop: bool) -> Compiled {
    let file = parse_rules("t.rules", RULES, std::path::Path::new(".")).unwrap();
    let opts = Options { sample: Some(tap), undecodable_drop, ..Options::default() };
    Compiled::new(&file, &[], &opts).unwrap()
}

#[test]
fn a_dropped_frame_leaves_a_record_with_its_rule_and_bytes_a_passed_one_none() {
    if !can_load() {
        return;
    }
    let ring = Ring::new(64 * 1024);
    let prog = compiled(&ring, 1, true);
    let mut reader = RingReader::new(&ring.ring).unwrap();
    let mut records: Vec<Vec<u8>> = Vec::new();

    // Passed by rule 0, and by the default: nothing sampled.
    assert_eq!(prog.test_run(&udp([10, 0, 0, 9], 80, 10)).unwrap(), XDP_PASS as u32);
    assert_eq!(prog.test_run(&udp([172, 16, 0, 1], 80, 10)).unwrap(), XDP_PASS as u32);
    assert_eq!(reader.drain(|r| records.push(r.to_vec())), 0);

    // Dropped by rule 1 (short: copied whole), rule 2 (long: cut at SNAP).
    let short = udp([10, 1, 2, 3], 80, 10);
    let long = udp([172, 16, 0, 1], 53, 300);
    assert_eq!(prog.test_run(&short).unwrap(), XDP_DROP as u32);
    assert_eq!(prog.test_run(&long).unwrap(), XDP_DROP as u32);
    // Undecodable (a truncated IPv4 header), dropped: the slot past the default's.
    let broken = &short[..20];
    assert_eq!(prog.test_run(broken).unwrap(), XDP_DROP as u32);
    assert_eq!(reader.drain(|r| records.push(r.to_vec())), 3);
    assert_eq!(reader.drain(|r| records.push(r.to_vec())), 0, "each record is read once");

    for (r, (slot, frame)) in records.iter().zip([(1, &short[..]), (2, &long[..]), (3 + 1, broken)]) {
        assert_eq!(r.len(), record::SIZE);
        assert_eq!(u32_at(r, record::SLOT), slot);
        assert_eq!(u32_at(r, record::LEN) as usize, frame.len());
        let n = frame.len().min(record::SNAP);
        assert_eq!(&r[record::DATA..record::DATA + n], &frame[..n]);
        // BPF_PROG_TEST_RUN runs on the loopback device, queue 0.
        assert_eq!(u32_at(r, record::IFINDEX), 1);
        assert_eq!(u32_at(r, record::QUEUE), 0);
    }
    assert_eq!(ring.lost(), 0);
}

#[test]
fn a_full_ring_loses_samples_not_verdicts_and_the_rate_keeps_about_one_in_n() {
    if !can_load() {
        return;
    }
    // The smallest ring (one page) holds 4096 / (8 + SIZE) records.
    let page = 4096;
    let ring = Ring::new(page);
    let prog = compiled(&ring, 1, false);
    let frame = udp([10, 1, 2, 3], 80, 10);
    let fits = page as usize / (8 + record::SIZE).next_multiple_of(8);
    for _ in 0..fits + 10 {
        assert_eq!(prog.test_run(&frame).unwrap(), XDP_DROP as u32);
    }
    assert_eq!(ring.lost(), 10);
    let mut reader = RingReader::new(&ring.ring).unwrap();
    assert_eq!(reader.drain(|_| {}), fits);
    // Rounds of a little more than half the ring: records run over its
    // end, and are read whole (the data area is mapped twice).
    for round in 0..6u8 {
        let frame = udp([10, 1, 2, round], 80, 40 + usize::from(round));
        for _ in 0..fits / 2 + 3 {
            assert_eq!(prog.test_run(&frame).unwrap(), XDP_DROP as u32);
        }
        let mut n = 0;
        reader.drain(|r| {
            assert_eq!((u32_at(r, record::SLOT), u32_at(r, record::LEN) as usize), (1, frame.len()));
            assert_eq!(&r[record::DATA..record::DATA + frame.len()], &frame[..], "round {round}");
            n += 1;
        });
        assert_eq!(n, fits / 2 + 3, "round {round}");
    }
    assert_eq!(ring.lost(), 10);

    // 1 in 4 at random: 2000 drops give about 500 (far from 2000 or 0).
    let ring = Ring::new(1 << 20);
    let prog = compiled(&ring, 4, false);
    for _ in 0..2000 {
        assert_eq!(prog.test_run(&frame).unwrap(), XDP_DROP as u32);
    }
    let n = RingReader::new(&ring.ring).unwrap().drain(|_| {});
    assert!((350..=650).contains(&n), "{n} of 2000 sampled at 1 in 4");
}

#[test]
fn without_sampling_the_program_has_no_sampling_instruction() {
    use sluice_shield::program::{generate, Plan};
    let file = parse_rules("t.rules", "drop udp dport 53\n", std::path::Path::new(".")).unwrap();
    let plan = |sample: Option<SampleTap>| Plan {
        rules: &file.rules,
        addr_sets: vec![Vec::new()],
        default_drop: true,
        undecodable_drop: true,
        v4mapped: false,
        dry_run: false,
        counters_fd: 3,
        scratch_fd: 4,
        sample,
        police: vec![None],
        buckets_fd: -1,
        over_fd: -1,
        ifindexes: Vec::new(),
        skip_to: Vec::new(),
        origin_counts_fd: None,
        ifaces: Vec::new(),
    };
    // Helper calls: 7 prandom, 131-133 ringbuf, 189 xdp_load_bytes.
    let calls = |insns: &[sluice_live::bpf::Insn]| -> Vec<i32> {
        insns.iter().filter(|i| i.code == 0x85 && [7, 131, 132, 133, 189].contains(&i.imm)).map(|i| i.imm).collect()
    };
    let off = generate(&plan(None)).unwrap();
    assert!(calls(&off).is_empty());
    let tap = |rate, max_pps| SampleTap { ring_fd: 5, lost_fd: 6, rate, max_pps, cap_fd: 7 };
    let on = generate(&plan(Some(tap(1, 0)))).unwrap();
    assert_eq!(calls(&on), [131, 189, 132, 133], "one sampling block, no random draw at 1 in 1");
    let on = generate(&plan(Some(tap(8, 0)))).unwrap();
    assert_eq!(calls(&on)[0], 7);
    // A cap: the clock read (5) before the ring is reserved.
    let capped = generate(&plan(Some(tap(8, 100)))).unwrap();
    let clock = capped.iter().position(|i| i.code == 0x85 && i.imm == 5).expect("the cap reads the clock");
    let reserve = capped.iter().position(|i| i.code == 0x85 && i.imm == 131).unwrap();
    assert!(clock < reserve);
}

/// `--sample-max-pps` in the kernel: under a flood of drops (every one a
/// candidate, a ring with room for all), the ring receives at most the
/// cap's burst and its rate over the time the flood took, and every other
/// candidate is counted over the cap; a full ring loses none.
#[test]
fn the_kernel_caps_samples_at_max_pps_and_counts_the_rest() {
    if !can_load() {
        return;
    }
    const CAP: u64 = 20;
    let ring = Ring::new(1 << 20);
    let prog = with_tap(ring.capped(1, CAP), false);
    let frame = udp([10, 1, 2, 3], 80, 10);
    // A flood for half a second, in runs of 1,000 drops.
    let started = std::time::Instant::now();
    let mut drops = 0u64;
    while started.elapsed() < std::time::Duration::from_millis(500) {
        for _ in 0..1000 {
            assert_eq!(prog.test_run(&frame).unwrap(), XDP_DROP as u32);
        }
        drops += 1000;
    }
    let took = started.elapsed().as_secs_f64();
    let records = RingReader::new(&ring.ring).unwrap().drain(|_| {}) as u64;
    // The burst (CAP back to back), then CAP a second; one more for the
    // bucket's ns rounding down.
    let most = CAP + (CAP as f64 * took).ceil() as u64 + 1;
    eprintln!("{records} records, {} over the cap, of {drops} drops in {took:.3} s at {CAP}/s", ring.over_cap());
    assert!((CAP..=most).contains(&records), "{records} records in {took:.3} s at {CAP}/s");
    assert!(records > CAP, "the bucket refills: {records} in {took:.3} s");
    assert_eq!(records + ring.over_cap(), drops, "every candidate is a record or over the cap");
    assert_eq!(ring.lost(), 0);

    // The bucket is the ring's, not the program's: a new program (a
    // reload) finds it as charged as it was.
    let again = with_tap(ring.capped(1, CAP), false);
    let before = ring.over_cap();
    assert_eq!(again.test_run(&frame).unwrap(), XDP_DROP as u32);
    let took = started.elapsed().as_secs_f64();
    let now = RingReader::new(&ring.ring).unwrap().drain(|_| {}) as u64;
    assert!(records + now <= CAP + (CAP as f64 * took).ceil() as u64 + 1, "{now} more after the reload");
    assert_eq!(now + ring.over_cap() - before, 1);
}

/// Interface rows: a program without interfaces reads no ingress index
/// (not one instruction for the rows); with two, the index is read once at
/// entry and compared with each.
#[test]
fn interface_rows_are_chosen_once_and_cost_nothing_without_interfaces() {
    use sluice_shield::program::{generate, Plan};
    let file = parse_rules("t.rules", "count udp dport 9\ndrop udp dport 53\n", std::path::Path::new(".")).unwrap();
    let plan = |ifaces: Vec<u32>| Plan {
        rules: &file.rules,
        addr_sets: vec![Vec::new(), Vec::new()],
        default_drop: false,
        undecodable_drop: true,
        v4mapped: false,
        dry_run: false,
        counters_fd: 3,
        scratch_fd: 4,
        sample: None,
        police: vec![None, None],
        buckets_fd: -1,
        over_fd: -1,
        ifindexes: Vec::new(),
        skip_to: Vec::new(),
        ifaces,
        origin_counts_fd: None,
    };
    // `ldx w rX, [r1 + 12]`: ctx->ingress_ifindex.
    let reads = |insns: &[sluice_live::bpf::Insn]| {
        insns.iter().filter(|i| i.code == 0x61 && i.regs >> 4 == 1 && i.off == 12).count()
    };
    let (none, two) = (generate(&plan(Vec::new())).unwrap(), generate(&plan(vec![7, 9])).unwrap());
    assert_eq!((reads(&none), reads(&two)), (0, 1));
    // `jne rX, 7` and `jne rX, 9`: one compare per interface.
    let compares =
        |insns: &[sluice_live::bpf::Insn]| insns.iter().filter(|i| i.code == 0x55 && [7, 9].contains(&i.imm)).count();
    assert_eq!((compares(&none), compares(&two)), (0, 2));
}
