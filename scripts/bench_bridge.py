#!/usr/bin/env python3
"""Live bridge benchmark: sluice bridge against a Linux bridge with nftables.

Topology (built here, torn down at exit), the same as the bridge tests':

    ns_a:a0 <-> a1 [device under test] b1 <-> ns_b:b0

Offered load: `sluice send` from ns_a, as fast as it goes, of a generated
capture (64-byte-class UDP frames, IPv4, a known share of sources from the
list). Delivered: b0's receive counter in ns_b. Contenders, one after the
other on the same topology and capture:

- linux_bridge: `ip link add type bridge`, no filtering (expects every frame);
- linux_bridge_nft: the same bridge with an nftables bridge-family set of
  the same list (`ip saddr @blocked drop`);
- sluice_afxdp, sluice_afpacket: `sluice bridge --drop-src LIST`.

Reload gap, with traffic at a fixed rate: sluice reloads the list on
SIGHUP (built off the fast path, swapped atomically); nftables replaces the
set with one `nft -f` transaction (flush + add), and the way many scripts
do it, flush then refill. For each: how long the reload took, and how many
frames from listed sources got through (leaked) or unlisted ones were lost.

Drop sampling (`--only sampling` runs this case alone): the same
afpacket bridge and capture, alternately without sampling and with
`--sample-drops` at every drop (rate 1) capped at 1000 samples a second, a
flood far over the cap; delivered rate with over without (goal >= 0.95).

Per-queue workers (`--only queues` runs this case alone): on 4-queue veths,
the Linux bridge with nftables; sluice with one thread receiving every
queue (alone, and handing off to 2 workers); a worker per queue with 2048-
and 1920-byte frames; and a worker per queue on one CPU (delivered Mpps
beside the seed's netmap bridge, 14 Mpps on one core), alternating rounds
(`--queue-runs`); ratios per queue over receive thread, 1920 over 2048,
and each over nftables (issue 22).

UMEM frame size (`--only frame-size` runs this case alone): the AF_XDP
bridge (drv mode) with `--frame-size 2048` and with the seed's 1920
(unaligned chunks), and the Linux bridge with nftables, in alternating
rounds (`--frame-runs`); delivered rates and their ratios (issue 22).

Prints one JSON object. Needs root, iproute2, nftables, and a release
build of sluice (built if missing). Numbers are from one run on whatever
machine runs it; on 2 cores the sender, the device under test and the
kernel's veth work share them, so compare ratios, not absolute rates.

Usage: scripts/bench_bridge.py [--entries N] [--frames N] [--reload-rate PPS] [--reload-secs S]
"""

import argparse
import socket
import threading
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, check=True, capture=True):
    r = subprocess.run(args, capture_output=capture, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"bench_bridge: {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout if capture else ""


def quiet(*args):
    subprocess.run(args, capture_output=True)


class Topology:
    def __init__(self, tag, queues=1):
        p = tag
        self.queues = queues
        mq = ["numtxqueues", str(queues), "numrxqueues", str(queues)] if queues > 1 else []
        self.na, self.nb = p + "na", p + "nb"
        self.a0, self.a1, self.b0, self.b1 = p + "a0", p + "a1", p + "b0", p + "b1"
        self.br = p + "br"
        for ns in (self.na, self.nb):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for near, far, ns in ((self.a1, self.a0, self.na), (self.b1, self.b0, self.nb)):
            sh("ip", "link", "add", near, *mq, "type", "veth", "peer", "name", far, *mq, "netns", ns)
            sh("sysctl", "-qw", f"net.ipv6.conf.{near}.disable_ipv6=1")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{far}.disable_ipv6=1")
            sh("ip", "link", "set", near, "up")
            sh("ip", "-n", ns, "link", "set", far, "up")

    def close(self):
        quiet("ip", "link", "del", self.br)
        for d in (self.a1, self.b1):
            quiet("ip", "link", "del", d)
        for ns in (self.na, self.nb):
            quiet("ip", "netns", "del", ns)

    def rx_b0(self):
        return int(sh("ip", "netns", "exec", self.nb, "cat", f"/sys/class/net/{self.b0}/statistics/rx_packets"))

    def bridge_up(self):
        sh("ip", "link", "add", self.br, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        sh("sysctl", "-qw", f"net.ipv6.conf.{self.br}.disable_ipv6=1")
        for d in (self.a1, self.b1):
            sh("ip", "link", "set", d, "master", self.br)
        sh("ip", "link", "set", self.br, "up")
        time.sleep(0.5)

    def bridge_down(self):
        for d in (self.a1, self.b1):
            quiet("ip", "link", "set", d, "nomaster")
        quiet("ip", "link", "del", self.br)


def write_lists(work, entries):
    """`entries` distinct IPv4 addresses: a sluice list and nftables files."""
    rng = random.Random(7)
    chosen = set()
    while len(chosen) < entries:
        a = rng.getrandbits(32)
        if (a >> 24) in (0, 10, 127) or (a >> 28) >= 14:
            continue
        chosen.add(a)
    ips = [f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}" for a in sorted(chosen)]
    with open(os.path.join(work, "list.txt"), "w") as f:
        f.write("\n".join(ips) + "\n")
    adds = []
    for i in range(0, len(ips), 20000):
        adds.append("add element bridge sbbench blocked { " + ", ".join(ips[i : i + 20000]) + " }\n")
    table = (
        "table bridge sbbench {\n"
        f" set blocked {{ type ipv4_addr; size {2 * entries}; }}\n"
        " chain sbfwd { type filter hook forward priority 0; policy accept; ip saddr @blocked drop; }\n"
        "}\n"
    )
    with open(os.path.join(work, "load.nft"), "w") as f:
        f.write(table + "".join(adds))
    with open(os.path.join(work, "replace.nft"), "w") as f:
        f.write("flush set bridge sbbench blocked\n" + "".join(adds))
    with open(os.path.join(work, "refill.nft"), "w") as f:
        f.write("".join(adds))


def gen(sluice, work, name, count, seed):
    out = os.path.join(work, name)
    st = json.loads(
        sh(sluice, "gen", "--out", out, "--count", str(count), "--seed", str(seed), "--listed", "0.3",
           "--list", os.path.join(work, "list.txt"), "--mix", "0:1:0", "--size", "60", "--json")
    )
    return out, st["packets"], st["listed"]


def send(sluice, topo, cap, rate=None):
    args = ["ip", "netns", "exec", topo.na, sluice, "send", "--iface", topo.a0, "--in", cap, "--json"]
    if rate:
        args += ["--rate", str(rate)]
    if topo.queues > 1:
        # Through the qdisc: the flows spread over the veth's queues by hash.
        args.append("--through-qdisc")
    return args


def offer(sluice, topo, cap, expected):
    before = topo.rx_b0()
    s = json.loads(sh(*send(sluice, topo, cap)))
    time.sleep(1.0)
    delivered = topo.rx_b0() - before
    return {
        "offered_pps": round(s["pps"]),
        "sent": s["sent"],
        "delivered": delivered,
        "expected": expected,
        "delivered_pps": round(delivered / s["elapsed_s"]) if s["elapsed_s"] > 0 else 0,
        "loss": round(1 - delivered / expected, 4) if expected else 0,
        "leaked": max(0, delivered - expected),
    }


class SluiceBridge:
    def __init__(self, sluice, topo, work, io, rules=None, extra=()):
        source = ["--rules", rules] if rules else ["--drop-src", os.path.join(work, "list.txt")]
        self.p = subprocess.Popen(
            [sluice, "bridge", "--iface", topo.a1, "--iface", topo.b1, *source, "--io", io, "--json", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.lines = []
        t0 = time.time()
        while True:
            line = self.p.stderr.readline()
            if not line:
                raise SystemExit("bench_bridge: sluice bridge did not start: " + "".join(self.lines))
            self.lines.append(line)
            if line.startswith("sluice: bridging"):
                break
        self.startup_s = time.time() - t0
        m = re.search(r"built in ([0-9.]+) ms", line)
        self.build_ms = float(m.group(1)) if m else None

    def wait_line(self, pattern, timeout):
        end = time.time() + timeout
        while time.time() < end:
            line = self.p.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        return None

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        out, err = self.p.communicate(timeout=30)
        self.lines.append(err)
        return json.loads(out) if out.strip() else None


class UpdatePump(threading.Thread):
    """Adds `rate` addresses a second to the bridge's dynamic set `blocks`
    over its control socket, in batches of 1,000 (addresses in 198.18.0.0/15,
    never in the traffic, each with a 60 s timeout)."""

    def __init__(self, sock, rate):
        super().__init__(daemon=True)
        self.sock, self.rate, self.stop, self.sent, self.failed = sock, rate, threading.Event(), 0, 0

    def run(self):
        k = 0
        t0 = time.time()
        while not self.stop.is_set():
            lines = []
            for _ in range(1000):
                k += 1
                lines.append(f"add blocks 198.{18 + (k >> 16 & 1)}.{k >> 8 & 255}.{k & 255} timeout 60\n")
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(self.sock)
            c.sendall("".join(lines).encode())
            c.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := c.recv(65536):
                reply += chunk
            c.close()
            if json.loads(reply).get("ok"):
                self.sent += 1000
            else:
                self.failed += 1
            # Pace to `rate`.
            ahead = self.sent / self.rate - (time.time() - t0)
            if ahead > 0:
                time.sleep(ahead)


def reload_case(sluice, topo, cap, expected, rate, action):
    """Traffic at `rate` while `action()` replaces the rules one second in;
    returns the action's own numbers plus leaked and lost frames."""
    before = topo.rx_b0()
    sender = subprocess.Popen(send(sluice, topo, cap, rate), stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    numbers = action()
    out, _ = sender.communicate(timeout=600)
    time.sleep(1.0)
    delivered = topo.rx_b0() - before
    s = json.loads(out)
    numbers.update({
        "sent": s["sent"],
        "rate": rate,
        "delivered": delivered,
        "expected": expected,
        "leaked": max(0, delivered - expected),
        "lost": max(0, expected - delivered),
    })
    return numbers


def sampling_case(a, topo, work, cap, expected_pass):
    """Forwarding with drop samples (a flood over the cap) against without."""
    runs = {"without": [], "with": []}
    samples = os.path.join(work, "samples.pcapng")
    written = over_cap = drops_seen = 0
    for _ in range(a.sampling_runs):
        for case in ("without", "with"):
            extra = ["--sample-drops", samples, "--sample-rate", "1", "--sample-max-pps", "1000"] if case == "with" else []
            b = SluiceBridge(a.sluice, topo, work, "afpacket", extra=extra)
            runs[case].append(offer(a.sluice, topo, cap, expected_pass))
            summary = b.stop() or {}
            s = summary.get("samples")
            if s:
                written += s["written"]
                over_cap += s["over_cap"]
                drops_seen += s["drops_seen"]
    med = lambda v: sorted(v)[len(v) // 2]
    without = med([r["delivered_pps"] for r in runs["without"]])
    with_ = med([r["delivered_pps"] for r in runs["with"]])
    return {
        "io": "afpacket",
        "sample_rate": 1,
        "sample_max_pps": 1000,
        "runs": runs,
        "drops_seen": drops_seen,
        "samples_written": written,
        "samples_over_cap": over_cap,
        "delivered_pps_without": without,
        "delivered_pps_with": with_,
        "ratio_with_over_without": round(with_ / without, 3) if without else None,
    }


def nft_offer(a, topo, work, cap, expected_pass):
    """One offer through the Linux bridge with the nftables set loaded,
    both torn down after."""
    topo.bridge_up()
    sh("nft", "-f", os.path.join(work, "load.nft"))
    r = offer(a.sluice, topo, cap, expected_pass)
    quiet("nft", "delete", "table", "bridge", "sbbench")
    topo.bridge_down()
    return r


def frame_size_case(a, topo, work, cap, expected_pass):
    """The AF_XDP bridge with 2048- and 1920-byte UMEM frames against the
    Linux bridge with nftables, alternating round by round."""
    runs = {"linux_bridge_nft": [], "sluice_afxdp_2048": [], "sluice_afxdp_1920": []}
    for _ in range(a.frame_runs):
        runs["linux_bridge_nft"].append(nft_offer(a, topo, work, cap, expected_pass))
        for size in (2048, 1920):
            b = SluiceBridge(a.sluice, topo, work, "afxdp", extra=["--xdp-mode", "drv", "--frame-size", str(size)])
            r = offer(a.sluice, topo, cap, expected_pass)
            summary = b.stop() or {}
            r["io"] = summary.get("io")
            runs[f"sluice_afxdp_{size}"].append(r)
    med = lambda v: sorted(v)[len(v) // 2]
    rate = {k: med([r["delivered_pps"] for r in v]) for k, v in runs.items()}
    nft = rate["linux_bridge_nft"]
    return {
        "runs": runs,
        "delivered_pps": rate,
        "ratio_1920_over_2048": round(rate["sluice_afxdp_1920"] / rate["sluice_afxdp_2048"], 3)
        if rate["sluice_afxdp_2048"] else None,
        "ratio_2048_over_nft": round(rate["sluice_afxdp_2048"] / nft, 2) if nft else None,
        "ratio_1920_over_nft": round(rate["sluice_afxdp_1920"] / nft, 2) if nft else None,
        # The seed's netmap bridge: about 14 Mpps on one core at 10G line
        # rate, on hardware; here veth, the sender and the bridge share 2 CPUs.
        "seed_netmap_bridge_mpps": 14.0,
        "delivered_mpps_2048": round(rate["sluice_afxdp_2048"] / 1e6, 3),
        "delivered_over_seed_netmap": round(rate["sluice_afxdp_2048"] / 14e6, 3),
    }


def cpu_seconds(pid):
    """User + system CPU time of process `pid` and its threads so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def queues_case(a, work, cap, expected_pass):
    """On 4-queue veths (drv mode, flows spread by the sender's qdisc), in
    alternating rounds: the Linux bridge with nftables; sluice with one
    thread receiving every queue (today's path, `--workers 1`) and with it
    handing off to 2 software-RSS workers; a worker per queue
    (`--workers auto`) with 2048- and 1920-byte frames; and a worker per
    queue with every lane pinned to one CPU (`--cpus 1`): delivered Mpps on
    one core, beside the seed's netmap bridge."""
    topo = Topology(f"sbq{os.getpid() % 100000}", queues=a.queues)
    extra = {
        "sluice_receive_thread": ["--workers", "1"],
        "sluice_receive_thread_2_workers": ["--workers", "2"],
        "sluice_per_queue_2048": ["--workers", "auto"],
        "sluice_per_queue_1920": ["--workers", "auto", "--frame-size", "1920"],
        "sluice_per_queue_one_core": ["--workers", "auto", "--cpus", "1"],
    }
    runs = {"linux_bridge_nft": [], **{k: [] for k in extra}}
    try:
        for _ in range(a.queue_runs):
            runs["linux_bridge_nft"].append(nft_offer(a, topo, work, cap, expected_pass))
            for name, args in extra.items():
                b = SluiceBridge(a.sluice, topo, work, "afxdp", extra=["--xdp-mode", "drv", *args])
                cpu = cpu_seconds(b.p.pid)
                r = offer(a.sluice, topo, cap, expected_pass)
                # The bridge's own CPU per frame it handled: what it costs,
                # whatever the sender (which shares the CPUs) managed.
                r["bridge_cpu_ns_per_frame"] = round((cpu_seconds(b.p.pid) - cpu) * 1e9 / max(r["sent"], 1))
                summary = b.stop() or {}
                r["io"] = summary.get("io")
                r["per_queue_rx"] = [q["rx_packets"] for q in summary.get("per_queue", [])]
                r["workers"] = summary.get("workers")
                r["fragments_resteered"] = summary.get("fragments_resteered")
                r["frames_per_batch"] = round(summary["packets"] / summary["batches"], 1) if summary.get("batches") else None
                runs[name].append(r)
    finally:
        quiet("nft", "delete", "table", "bridge", "sbbench")
        topo.close()
    med = lambda v: sorted(v)[len(v) // 2]
    rate = {k: med([r["delivered_pps"] for r in v]) for k, v in runs.items()}
    nft = rate["linux_bridge_nft"]
    ratio = lambda x, y: round(rate[x] / rate[y], 3) if rate[y] else None
    one_core = rate["sluice_per_queue_one_core"]
    cpu = {k: med([r["bridge_cpu_ns_per_frame"] for r in v]) for k, v in runs.items() if k != "linux_bridge_nft"}
    fill = {k: med([r["frames_per_batch"] or 0 for r in v]) for k, v in runs.items() if k != "linux_bridge_nft"}
    return {
        "bridge_cpu_ns_per_frame": cpu,
        "frames_per_batch": fill,
        "queues": a.queues,
        "runs": runs,
        "delivered_pps": rate,
        "ratio_per_queue_over_receive_thread": ratio("sluice_per_queue_2048", "sluice_receive_thread"),
        "ratio_per_queue_over_receive_thread_2_workers": ratio("sluice_per_queue_2048", "sluice_receive_thread_2_workers"),
        "ratio_1920_over_2048": ratio("sluice_per_queue_1920", "sluice_per_queue_2048"),
        "over_nft": {k: ratio(k, "linux_bridge_nft") for k in extra},
        # The seed's netmap bridge: about 14 Mpps on one core at 10G line
        # rate, on hardware; here veth in copy mode, and the sender and the
        # kernel's veth work share the 2 CPUs with the bridge.
        "seed_netmap_bridge_mpps": 14.0,
        "one_core_mpps": round(one_core / 1e6, 3),
        "one_core_over_seed_netmap": round(one_core / 14e6, 3),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--frames", type=int, default=300_000)
    ap.add_argument("--reload-rate", type=int, default=20_000)
    ap.add_argument("--reload-secs", type=float, default=6.0)
    ap.add_argument("--sluice", default=os.path.join(ROOT, "target", "release", "sluice"))
    ap.add_argument("--update-rate", type=int, default=100_000,
                    help="runtime set adds a second during the forwarding-under-updates case")
    ap.add_argument("--only", choices=["sampling", "frame-size", "queues"], help="run one case alone")
    ap.add_argument("--frame-runs", type=int, default=3)
    ap.add_argument("--queues", type=int, default=4, help="queues of the veths in the per-queue case")
    ap.add_argument("--queue-runs", type=int, default=3)
    ap.add_argument("--sampling-runs", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_bridge: needs root (network namespaces, XDP, nftables)")
    for tool in ("ip", "nft"):
        if not shutil.which(tool):
            raise SystemExit(f"bench_bridge: {tool} is missing (apt-get install iproute2 nftables)")
    if not os.path.exists(a.sluice):
        sh("cargo", "build", "--release", "-p", "sluice-cli", capture=False)

    work = tempfile.mkdtemp(prefix="sluice-bench-bridge-")
    topo = Topology(f"sbb{os.getpid() % 100000}")
    result = {"entries": a.entries, "frames": a.frames, "cpus": os.cpu_count(), "kernel": os.uname().release}
    try:
        t = time.time()
        write_lists(work, a.entries)
        result["list_write_s"] = round(time.time() - t, 2)
        cap, packets, listed = gen(a.sluice, work, "load.pcap", a.frames, 1)
        result["listed_frames"] = listed
        expected_pass = packets - listed
        contenders = {}
        if a.only == "frame-size":
            result["frame_size"] = frame_size_case(a, topo, work, cap, expected_pass)
            print(json.dumps(result, indent=1))
            return
        if a.only == "queues":
            result["per_queue"] = queues_case(a, work, cap, expected_pass)
            print(json.dumps(result, indent=1))
            return
        result["sampling"] = sampling_case(a, topo, work, cap, expected_pass)
        if a.only == "sampling":
            print(json.dumps(result, indent=1))
            return

        topo.bridge_up()
        contenders["linux_bridge"] = offer(a.sluice, topo, cap, packets)
        t = time.time()
        sh("nft", "-f", os.path.join(work, "load.nft"))
        load_s = time.time() - t
        contenders["linux_bridge_nft"] = offer(a.sluice, topo, cap, expected_pass)
        contenders["linux_bridge_nft"]["set_load_s"] = round(load_s, 3)

        # Reload gap on the nftables side, while the set is loaded.
        rcap, rpackets, rlisted = gen(a.sluice, work, "reload.pcap", int(a.reload_rate * a.reload_secs), 2)
        rexpected = rpackets - rlisted

        def nft_atomic():
            t = time.time()
            sh("nft", "-f", os.path.join(work, "replace.nft"))
            return {"reload_s": round(time.time() - t, 3)}

        def nft_flush_refill():
            t = time.time()
            sh("nft", "flush", "set", "bridge", "sbbench", "blocked")
            sh("nft", "-f", os.path.join(work, "refill.nft"))
            return {"reload_s": round(time.time() - t, 3)}

        reloads = {
            "nft_atomic_replace": reload_case(a.sluice, topo, rcap, rexpected, a.reload_rate, nft_atomic),
            "nft_flush_then_refill": reload_case(a.sluice, topo, rcap, rexpected, a.reload_rate, nft_flush_refill),
        }
        quiet("nft", "delete", "table", "bridge", "sbbench")
        topo.bridge_down()

        for io in ("afxdp", "afpacket"):
            b = SluiceBridge(a.sluice, topo, work, io)
            c = offer(a.sluice, topo, cap, expected_pass)
            c["startup_s"] = round(b.startup_s, 3)
            c["build_ms"] = b.build_ms
            if io == "afxdp":

                def sighup(b=b):
                    t = time.time()
                    b.p.send_signal(signal.SIGHUP)
                    line = b.wait_line(r"^sluice: reload", 120)
                    m = re.search(r"built in ([0-9.]+) ms", line or "")
                    return {
                        "reload_s": round(time.time() - t, 3),
                        "build_ms": float(m.group(1)) if m else None,
                        "log": (line or "").strip(),
                    }

                reloads["sluice_sighup"] = reload_case(a.sluice, topo, rcap, rexpected, a.reload_rate, sighup)
            summary = b.stop()
            if summary:
                c["bridge_packets"] = summary["packets"]
                c["ring_drops"] = sum(p["rx_ring_drops"] + p["tx_ring_full"] for p in summary["per_port"])
            contenders["sluice_" + io] = c

        # Forwarding while the control socket takes --update-rate adds a
        # second into a dynamic set, against the same bridge without them.
        rules = os.path.join(work, "updates.rules")
        with open(rules, "w") as f:
            f.write('set blocked from "list.txt"\nset blocks dynamic\ndrop saddr @blocked\ndrop saddr @blocks\n')
        sock = os.path.join(work, "ctl.sock")
        b = SluiceBridge(a.sluice, topo, work, "afpacket", rules=rules, extra=["--control", sock])
        runs = {"without": [], "with": []}
        pumped = 0
        for _ in range(2):
            runs["without"].append(offer(a.sluice, topo, cap, expected_pass))
            pump = UpdatePump(sock, a.update_rate)
            pump.start()
            t = time.time()
            runs["with"].append(offer(a.sluice, topo, cap, expected_pass))
            pump.stop.set()
            pump.join()
            pumped += pump.sent
            runs["with"][-1]["updates_per_s"] = round(pump.sent / (time.time() - t))
        b.stop()
        med = lambda v: sorted(v)[len(v) // 2] if len(v) % 2 else sum(sorted(v)[len(v) // 2 - 1:len(v) // 2 + 1]) / 2
        without = med([r["delivered_pps"] for r in runs["without"]])
        with_ = med([r["delivered_pps"] for r in runs["with"]])
        result["updates"] = {
            "io": "afpacket",
            "runs": runs,
            "updates_applied": pumped,
            "delivered_pps_without": without,
            "delivered_pps_with": with_,
            "ratio_with_over_without": round(with_ / without, 3) if without else None,
        }

        result["contenders"] = contenders
        result["reload"] = reloads
        nft = contenders["linux_bridge_nft"]["delivered_pps"]
        result["ratios"] = {
            name: round(contenders[name]["delivered_pps"] / nft, 2) if nft else None
            for name in ("sluice_afxdp", "sluice_afpacket", "linux_bridge")
        }
    finally:
        quiet("nft", "delete", "table", "bridge", "sbbench")
        topo.close()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
