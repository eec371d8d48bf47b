#!/usr/bin/env python3
"""Craft fragment test captures with scapy. Usage: fragments.py OUTDIR"""
import sys
from scapy.all import Ether, IP, IPv6, IPv6ExtHdrFragment, UDP, Raw, fragment, wrpcap

out = sys.argv[1]
eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")

def v4frag(ident, off_units, payload, more, src="192.0.2.1", dst="198.51.100.1"):
    flags = "MF" if more else 0
    return eth / IP(src=src, dst=dst, id=ident, proto=17, flags=flags, frag=off_units) / Raw(payload)

# 1. A valid datagram in 4 fragments, shuffled, one duplicated; then a plain packet.
dgram = IP(src="192.0.2.1", dst="198.51.100.1", id=100) / UDP(sport=5000, dport=53) / Raw(bytes(range(256)) * 4)
frags = [eth / f for f in fragment(dgram, fragsize=256)]
assert len(frags) >= 4
shuffled = [frags[2], frags[0], frags[3], frags[0], frags[1]] + frags[4:]
plain = eth / IP(src="192.0.2.9", dst="198.51.100.9") / UDP(sport=1, dport=2) / Raw(b"x" * 20)
wrpcap(f"{out}/valid.pcap", [plain] + shuffled + [plain])

# 2. The Novak-style overlap pattern (offsets in 8-byte units 0,4,6,1,6,9).
novak = [
    v4frag(200, 0, b"1" * 24, True),
    v4frag(200, 4, b"2" * 16, True),
    v4frag(200, 6, b"3" * 24, True),
    v4frag(200, 1, b"4" * 32, True),
    v4frag(200, 6, b"5" * 24, True),
    v4frag(200, 9, b"6" * 24, False),
]
wrpcap(f"{out}/novak.pcap", [plain] + novak + [plain])

# 3. IPv6: overlapping fragments (RFC 5722) and an atomic fragment (RFC 6946).
s6, d6 = "2001:db8::1", "2001:db8::2"
def v6frag(ident, off_units, payload, more):
    return eth / IPv6(src=s6, dst=d6) / IPv6ExtHdrFragment(id=ident, offset=off_units, m=1 if more else 0, nh=17) / Raw(payload)
v6 = [
    v6frag(7, 0, b"a" * 64, True),
    v6frag(7, 4, b"b" * 64, True),   # overlaps bytes 32-63 of the first
    v6frag(7, 16, b"c" * 16, False),
    eth / IPv6(src=s6, dst=d6) / IPv6ExtHdrFragment(id=8, offset=0, m=0, nh=17) / UDP(sport=7, dport=8) / Raw(b"atomic"),
]
wrpcap(f"{out}/v6.pcap", v6)

# 4. Incomplete: first fragments whose rest never comes.
incomplete = [v4frag(300 + i, 0, b"z" * 64, True) for i in range(5)] + [plain]
wrpcap(f"{out}/incomplete.pcap", incomplete)

# 5. A flood of distinct incomplete datagrams (memory-limit test).
flood = [v4frag(i, 0, b"f" * 512, True, src=f"10.{i >> 8 & 255}.{i & 255}.1") for i in range(3000)]
wrpcap(f"{out}/flood.pcap", flood)
