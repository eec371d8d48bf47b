#!/usr/bin/env python3
"""Craft encapsulation test captures with scapy. Usage: encap.py OUTDIR

OUTDIR/all.pcap: every encapsulation, with header variants (MPLS label
stacks, GRE key/sequence/checksum, VXLAN with an inner VLAN tag, Geneve with
options, GTP-U with the E flag and an extension header, IPv6 inside).

OUTDIR/listed-NAME.pcap, one per encapsulation: two packets, the first with
a listed source (203.0.113.7 or 2001:db8:bad::7) in its innermost header,
the second with one that is not; tunnels' outer addresses are never listed.
"""
import sys
from scapy.all import Ether, Dot1Q, IP, IPv6, UDP, TCP, ICMP, Raw, wrpcap
from scapy.contrib.mpls import MPLS
from scapy.contrib.geneve import GENEVE
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
from scapy.layers.l2 import GRE
from scapy.layers.ppp import PPPoE, PPP
from scapy.layers.vxlan import VXLAN

out = sys.argv[1]
eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
O4 = dict(src="192.0.2.1", dst="192.0.2.2")
O6 = dict(src="2001:db8:ffff::1", dst="2001:db8:ffff::2")


def v4(src="10.1.1.1", dst="10.2.2.2"):
    return IP(src=src, dst=dst)


def v6(src="2001:db8:1::1", dst="2001:db8:2::2"):
    return IPv6(src=src, dst=dst)


def udp(sport=1111, dport=53):
    return UDP(sport=sport, dport=dport) / Raw(b"udp payload")


def tcp(sport=40000, dport=443):
    return TCP(sport=sport, dport=dport, flags="S")


def inner_eth():
    return Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:02")


def mpls(inner, labels=(100,)):
    stack = None
    for i, label in enumerate(labels):
        m = MPLS(label=label, s=1 if i == len(labels) - 1 else 0, ttl=64)
        stack = m if stack is None else stack / m
    return Ether(src=eth.src, dst=eth.dst, type=0x8847) / stack / inner


def pppoe(inner, full=False):
    proto = 0x0057 if isinstance(inner, IPv6) else 0x0021
    # scapy compresses the PPP protocol field to one byte (RFC 1661 PFC);
    # `full` writes the two bytes most gear sends.
    ppp = Raw(proto.to_bytes(2, "big")) if full else PPP(proto=proto)
    return Ether(src=eth.src, dst=eth.dst, type=0x8864) / PPPoE(sessionid=0x1234) / ppp / inner


def gre(inner, outer=None, **flags):
    outer = outer if outer is not None else IP(**O4)
    return eth / outer / GRE(**flags) / inner


def vxlan(frame):
    return eth / IP(**O4) / UDP(sport=49152, dport=4789) / VXLAN(vni=5000, flags=0x08) / frame


def geneve(payload, proto, options=b""):
    g = GENEVE(vni=77, proto=proto, optionlen=len(options) // 4)
    return eth / IP(**O4) / UDP(sport=49153, dport=6081) / g / Raw(options) / payload


def gtpu(inner, **hdr):
    return eth / IP(**O4) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=0x1234, gtp_type=255, **hdr) / inner


def gtpu_ext(inner):
    # E flag, next extension type 0x85: a PDU session container (QFI 9).
    h = GTP_U_Header(teid=0x99, gtp_type=255, E=1, next_ex=0x85)
    c = GTPPDUSessionContainer(type=1, QFI=9, NextExtHdr=0)
    return eth / IP(**O4) / UDP(sport=2152, dport=2152) / h / c / inner


cases = [
    mpls(v4() / udp()),
    mpls(v6() / tcp(), labels=(100, 200)),
    mpls(v4() / ICMP(), labels=(16, 17, 18)),
    pppoe(v4() / tcp()),
    pppoe(v6() / udp(), full=True),
    pppoe(v4() / udp(), full=True),
    gre(v4() / udp()),
    gre(v6() / tcp(), key_present=1, key=0xDEADBEEF, seqnum_present=1, seqence_number=42),
    gre(v4() / tcp(), outer=IPv6(**O6), chksum_present=1, key_present=1, key=7),
    gre(inner_eth() / v4() / udp(), proto=0x6558),
    eth / IP(**O4) / v4() / tcp(),
    eth / IP(**O4) / v6() / udp(),
    eth / IPv6(**O6) / v4() / udp(),
    eth / IPv6(**O6) / v6() / tcp(),
    vxlan(inner_eth() / v4() / udp()),
    vxlan(inner_eth() / Dot1Q(vlan=42) / v6() / tcp()),
    geneve(inner_eth() / v4() / tcp(), 0x6558),
    geneve(v6() / udp(), 0x86DD, options=bytes([0x01, 0x02, 0x80, 0x01, 0, 0, 0, 5])),
    gtpu(v4() / udp()),
    gtpu(v6() / tcp(), S=1, seq=7),
    gtpu_ext(v4() / tcp()),
    gtpu_ext(v6() / udp()),
]
wrpcap(f"{out}/all.pcap", cases)

L4, L6 = "203.0.113.7", "2001:db8:bad::7"
N4, N6 = "10.9.9.9", "2001:db8:9::9"


def pair(build, six=False):
    listed = v6(src=L6) if six else v4(src=L4)
    clean = v6(src=N6) if six else v4(src=N4)
    return [build(listed / udp()), build(clean / udp())]


listed = {
    "mpls": pair(lambda p: mpls(p, labels=(100, 200))),
    "pppoe": pair(lambda p: pppoe(p, full=True)),
    "gre": pair(lambda p: gre(p, key_present=1, key=1, seqnum_present=1, seqence_number=2)),
    "ipip": pair(lambda p: eth / IP(**O4) / p),
    "6in4": pair(lambda p: eth / IP(**O4) / p, six=True),
    "4in6": pair(lambda p: eth / IPv6(**O6) / p),
    "6in6": pair(lambda p: eth / IPv6(**O6) / p, six=True),
    "vxlan": pair(lambda p: vxlan(inner_eth() / Dot1Q(vlan=42) / p)),
    "geneve": pair(lambda p: geneve(inner_eth() / p, 0x6558)),
    "gtpu": pair(gtpu_ext),
}
for name, pkts in listed.items():
    wrpcap(f"{out}/listed-{name}.pcap", pkts)
