#!/usr/bin/env python3
"""Frames on a veth end, both ways, over AF_PACKET (so no checksum offload
gets in the way): `send IFACE SPEC` sends the frames SPEC (JSON) describes,
paced; `count IFACE SECONDS` counts what arrives, by kind, as JSON.

A kind is "proto:dst:dport:flags"; SPEC is a list of
{"dst": "10.77.0.2", "proto": 17|6, "dport": N, "flags": N, "count": N,
 "size": IP_BYTES, "pps": N (0: back to back)}.
"""
import json
import socket
import struct
import sys
import time


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src_mac, dst, proto, dport, flags, size):
    src = socket.inet_aton("10.77.0.1")
    dsta = socket.inet_aton(dst)
    if proto == 17:
        l4 = struct.pack("!HHHH", 40000, dport, 8, 0)
    else:
        l4 = struct.pack("!HHIIBBHHH", 40000, dport, 1, 0, 5 << 4, flags, 65535, 0, 0)
    pad = max(0, size - 20 - len(l4))
    l4 += b"\0" * pad
    if proto == 17:
        l4 = l4[:4] + struct.pack("!H", len(l4)) + l4[6:]
    pseudo = src + dsta + struct.pack("!BBH", 0, proto, len(l4))
    c = csum(pseudo + l4)
    at = 6 if proto == 17 else 16
    l4 = l4[:at] + struct.pack("!H", c or 0xFFFF) + l4[at + 2:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0x4000, 64, proto, 0, src, dsta)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return b"\xff" * 6 + src_mac + b"\x08\x00" + ip + l4


def send(iface, spec):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    mac = s.getsockname()[4]
    for item in spec:
        f = frame(mac, item["dst"], item["proto"], item["dport"], item.get("flags", 0), item.get("size", 64))
        gap = 1.0 / item["pps"] if item.get("pps") else 0
        start = time.monotonic()
        for i in range(item["count"]):
            if gap:
                wait = start + i * gap - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            s.send(f)


def count(iface, seconds):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    s.bind((iface, 0))
    s.settimeout(0.1)
    out = {}
    end = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < end:
        try:
            f, addr = s.recvfrom(65535)
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING or len(f) < 38:
            continue
        ip = f[14:]
        proto, dst = ip[9], socket.inet_ntoa(ip[16:20])
        ihl = (ip[0] & 15) * 4
        dport = struct.unpack("!H", ip[ihl + 2:ihl + 4])[0]
        flags = ip[ihl + 13] if proto == 6 else 0
        k = "%d:%s:%d:%d" % (proto, dst, dport, flags)
        n = out.setdefault(k, [0, 0, None, None])
        now = time.monotonic()
        n[0] += 1
        n[1] += len(f)
        n[2] = n[2] or now
        n[3] = now
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], json.loads(sys.argv[3]))
    else:
        count(sys.argv[2], float(sys.argv[3]))
