#!/usr/bin/env python3
"""Craft TSO and cut-options captures with scapy. Usage: tso.py OUT.pcap

Packets, in order (sources in 203.0.113.0/24 are the listed ones):
0: IPv4 TCP, total length 0 (TSO capture), listed source, 3000 bytes of payload
1: IPv4 TCP, total length 0, unlisted source
2: IPv4 UDP with 12 bytes of options, captured only to 4 bytes into them, listed source
3: IPv4 UDP with options, captured to the end of the addresses (no option byte), unlisted source
4: an ordinary IPv4 UDP packet (a DNS query), listed source
5: an ordinary IPv4 UDP packet (a DNS query), unlisted source
6: IPv4 TCP, total length 0, BIG TCP: 70000 bytes of payload, more than the field can say, listed source
"""
import struct
import sys
from scapy.all import DNS, DNSQR, Ether, IP, IPOption, TCP, UDP, Raw

out = sys.argv[1]
eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
opts = [IPOption(b"\x94\x04\x00\x00"), IPOption(b"\x01" * 8)]  # router alert, 8 NOPs: 12 bytes

packets = [
    (bytes(eth / IP(src="203.0.113.5", dst="198.51.100.1", len=0) / TCP(sport=40000, dport=443, flags="A") / Raw(b"a" * 3000)), None),
    (bytes(eth / IP(src="192.0.2.7", dst="198.51.100.1", len=0) / TCP(sport=40001, dport=443, flags="A") / Raw(b"b" * 2000)), None),
    (bytes(eth / IP(src="203.0.113.6", dst="198.51.100.2", options=opts) / UDP(sport=5000, dport=53) / Raw(b"c" * 40)), 14 + 24),
    (bytes(eth / IP(src="192.0.2.8", dst="198.51.100.2", options=opts) / UDP(sport=5001, dport=53) / Raw(b"d" * 40)), 14 + 20),
    # A real query, so that tshark's DNS dissector does not call them malformed.
    (bytes(eth / IP(src="203.0.113.7", dst="198.51.100.3") / UDP(sport=6000, dport=53) / DNS(rd=1, qd=DNSQR(qname="example.com"))), None),
    (bytes(eth / IP(src="192.0.2.9", dst="198.51.100.3") / UDP(sport=6001, dport=53) / DNS(rd=1, qd=DNSQR(qname="example.org"))), None),
    (bytes(eth / IP(src="203.0.113.8", dst="198.51.100.4", len=0) / TCP(sport=40002, dport=443, flags="A") / Raw(b"g" * 70000)), None),
]
# Written by hand: a record's captured length below its original length is
# what a snap length does, and scapy's writer would not cut mid-header.
with open(out, "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
    for i, (frame, cut) in enumerate(packets):
        data = frame if cut is None else frame[:cut]
        f.write(struct.pack("<IIII", 1700000000 + i, 0, len(data), len(frame)))
        f.write(data)
