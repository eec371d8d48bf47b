#!/usr/bin/env python3
"""CrowdSec bouncers: how long until 100,000 imported decisions are enforced.

Everything runs in one network namespace of its own (torn down at exit):
a CrowdSec Local API (Debian's `crowdsec -c CONFIG -no-cs`, sqlite, on the
namespace's loopback), `sluice bridge` as a bouncer (`--crowdsec-url`, on a
veth pair made there) and Debian's `crowdsec-firewall-bouncer` in nftables
mode (its tables in that namespace), both pulling every second.

`cscli decisions import` adds N ban decisions for distinct IPs; then both
bouncers are polled: sluice's set through its control socket (`sluice ctl
sets`), the firewall bouncer's nft set (`nft -j list set`), until each
holds all N (or --timeout passes). Prints one JSON object: the import's
time, each bouncer's time from the import's end to all N enforced, or, for
one that never gets them all, how many it has and when its count last
changed; and the ratio (the firewall bouncer's time, complete or not, over
sluice's).

The binaries: crowdsec, cscli and crowdsec-firewall-bouncer from PATH or
--crowdsec-bin / --bouncer-bin (`apt-get download crowdsec
crowdsec-firewall-bouncer && dpkg-deb -x` each: their post-install scripts
register online and fail offline). Needs root, iproute2, nftables, and a
release build of sluice (built if missing).

Usage: scripts/bench_crowdsec.py [--decisions N] [--timeout S]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NS = f"sluice-csb-{os.getpid()}"
PORT = 18099


def sh(*args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def nsx(*args):
    return ["ip", "netns", "exec", NS, *args]


def find(name, override):
    if override:
        p = os.path.join(override, name)
        if os.path.exists(p):
            return p
    p = shutil.which(name)
    if not p:
        sys.exit(f"{name} not found: put it on PATH or pass its directory")
    return p


def lapi_config(d):
    for sub in ["data", "hub", "notifications", "plugins"]:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    open(os.path.join(d, "acquis.yaml"), "w").close()
    with open(os.path.join(d, "simulation.yaml"), "w") as f:
        f.write("simulation: false\n")
    with open(os.path.join(d, "profiles.yaml"), "w") as f:
        f.write("name: default_ip_remediation\nfilters:\n - Alert.Remediation == true && Alert.GetScope() == \"Ip\"\n"
                "decisions:\n - type: ban\n   duration: 4h\non_success: break\n")
    cfg = f"""common:
  daemonize: false
  log_media: stdout
  log_level: warning
  working_dir: .
config_paths:
  config_dir: {d}/
  data_dir: {d}/data/
  simulation_path: {d}/simulation.yaml
  hub_dir: {d}/hub/
  index_path: {d}/hub/.index.json
  notification_dir: {d}/notifications/
  plugin_dir: {d}/plugins/
crowdsec_service:
  acquisition_path: {d}/acquis.yaml
cscli:
  output: human
db_config:
  log_level: warning
  type: sqlite
  db_path: {d}/data/crowdsec.db
  use_wal: true
api:
  client:
    insecure_skip_verify: false
    credentials_path: {d}/local_api_credentials.yaml
  server:
    log_level: warning
    listen_uri: 127.0.0.1:{PORT}
    profiles_path: {d}/profiles.yaml
    trusted_ips:
      - 127.0.0.1
prometheus:
  enabled: false
"""
    path = os.path.join(d, "config.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--crowdsec-bin", help="directory of crowdsec and cscli")
    ap.add_argument("--bouncer-bin", help="directory of crowdsec-firewall-bouncer")
    ap.add_argument("--no-firewall-bouncer", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (a network namespace, nftables)")
    crowdsec, cscli = find("crowdsec", a.crowdsec_bin), find("cscli", a.crowdsec_bin)
    fwb = None if a.no_firewall_bouncer else find("crowdsec-firewall-bouncer", a.bouncer_bin)
    sluice = os.path.join(ROOT, "target", "release", "sluice")
    if not os.path.exists(sluice):
        subprocess.run(["cargo", "build", "--release", "-p", "sluice-cli"], cwd=ROOT, check=True)

    d = tempfile.mkdtemp(prefix="sluice-csb-")
    procs = []

    def cleanup(*_):
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)

    signal.signal(signal.SIGTERM, lambda *_: (cleanup(), sys.exit(1)))
    try:
        cfg = lapi_config(d)
        url = f"http://127.0.0.1:{PORT}"
        # cscli talks to the LAPI, which listens in the namespace.
        sh("ip", "netns", "add", NS)
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        cs = lambda *args: sh(*nsx(cscli, "-c", cfg, *args))
        cs("machines", "add", "bench", "--password", "bench-password-123", "-f",
           os.path.join(d, "local_api_credentials.yaml"), "--url", url)
        sluice_key = cs("bouncers", "add", "sluice", "-o", "raw").strip()
        fw_key = cs("bouncers", "add", "firewall", "-o", "raw").strip()
        procs.append(subprocess.Popen(nsx(crowdsec, "-c", cfg, "-no-cs"), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        for _ in range(200):
            if subprocess.run(nsx("bash", "-c", f"echo > /dev/tcp/127.0.0.1/{PORT}"), capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            sys.exit("the LAPI did not come up")

        # sluice: a bridge over a veth pair in the namespace.
        sh("ip", "-n", NS, "link", "add", "x0", "type", "veth", "peer", "name", "y0")
        sh("ip", "-n", NS, "link", "add", "x1", "type", "veth", "peer", "name", "y1")
        for dev in ["x0", "x1", "y0", "y1"]:
            sh("ip", "-n", NS, "link", "set", dev, "up")
        key_file = os.path.join(d, "sluice.key")
        with open(key_file, "w") as f:
            f.write(sluice_key)
        sock = os.path.join(d, "ctl.sock")
        procs.append(subprocess.Popen(
            nsx(sluice, "bridge", "--iface", "x0", "--iface", "x1", "--io", "afpacket",
                "--crowdsec-url", url, "--crowdsec-key-file", key_file, "--crowdsec-interval", "1",
                "--control", sock),
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "sluice.log"), "w")))

        # The firewall bouncer, nftables mode, 1 s, in the namespace.
        if fwb:
            fw_cfg = os.path.join(d, "fw.yaml")
            with open(fw_cfg, "w") as f:
                f.write(f"""mode: nftables
pid_dir: {d}/
update_frequency: 1s
daemonize: false
log_mode: file
log_dir: {d}/
log_level: info
api_url: {url}/
api_key: {fw_key}
disable_ipv6: false
deny_action: DROP
deny_log: false
supported_decisions_types:
  - ban
blacklists_ipv4: crowdsec-blacklists
blacklists_ipv6: crowdsec6-blacklists
nftables:
  ipv4:
    enabled: true
    set-only: false
    table: crowdsec
    chain: crowdsec-chain
  ipv6:
    enabled: true
    set-only: false
    table: crowdsec6
    chain: crowdsec6-chain
prometheus:
  enabled: false
""")
            procs.append(subprocess.Popen(nsx(fwb, "-c", fw_cfg), stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))

        def sluice_count():
            r = subprocess.run([sluice, "ctl", "--json", "--socket", sock, "sets"], capture_output=True, text=True)
            if r.returncode != 0:
                return None
            for s in json.loads(r.stdout)["sets"]:
                if s["name"] == "crowdsec":
                    return s["entries"]
            return None

        def fw_count():
            r = subprocess.run(nsx("nft", "-j", "list", "set", "ip", "crowdsec", "crowdsec-blacklists"),
                               capture_output=True, text=True)
            if r.returncode != 0:
                return None
            for o in json.loads(r.stdout)["nftables"]:
                if "set" in o:
                    return len(o["set"].get("elem", []))
            return None

        deadline = time.time() + 30
        while sluice_count() is None or (fwb and fw_count() is None):
            if time.time() > deadline:
                sys.exit(f"the bouncers did not come up; sluice log: {open(os.path.join(d, 'sluice.log')).read()}")
            time.sleep(0.2)

        n = a.decisions
        ips = [f"{10 + (i >> 24)}.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" for i in range(1 << 20, (1 << 20) + n)]
        imp = os.path.join(d, "decisions.csv")
        with open(imp, "w") as f:
            f.write("duration,scope,value\n")
            for ip in ips:
                f.write(f"4h,ip,{ip}\n")
        # The LAPI's sqlite is written by every bouncer's pull too; an import
        # that meets one fails with "database is locked" (nothing written):
        # try again.
        t = time.time()
        for attempt in range(1, 6):
            r = subprocess.run(nsx(cscli, "-c", cfg, "decisions", "import", "-i", imp), capture_output=True, text=True)
            if r.returncode == 0:
                break
            if "database is locked" not in r.stderr or attempt == 5:
                sys.exit(f"cscli decisions import: {r.stderr.strip()[-1000:]}")
            time.sleep(1)
        imported = time.time()
        result = {"bench": "crowdsec", "decisions": n, "import_s": imported - t, "import_attempts": attempt}

        # Per bouncer: when it held all N, and when its count last changed
        # (a bouncer that never gets all N is timed to where it stopped).
        names = ["sluice"] + (["firewall_bouncer"] if fwb else [])
        counters = {"sluice": sluice_count, "firewall_bouncer": fw_count}
        done = {k: None for k in names}
        last = {k: None for k in names}
        changed = {k: None for k in names}
        while time.time() - imported < a.timeout and any(v is None for v in done.values()):
            for k in names:
                if done[k] is None:
                    c = counters[k]()
                    if c != last[k]:
                        last[k], changed[k] = c, time.time() - imported
                    if c is not None and c >= n:
                        done[k] = time.time() - imported
            time.sleep(0.25)
        for k in names:
            result[k] = {"enforced_s": done[k], "entries_at_end": last[k], "last_change_s": changed[k],
                         "missing": n - (last[k] or 0)}
        if fwb:
            fw_t = done["firewall_bouncer"] or changed["firewall_bouncer"]
            if done["sluice"] and fw_t:
                result["ratio_firewall_bouncer_over_sluice"] = fw_t / done["sluice"]
            result["goal_sluice_10x_faster"] = result.get("ratio_firewall_bouncer_over_sluice", 0) >= 10
        print(json.dumps(result))
    finally:
        cleanup()


if __name__ == "__main__":
    main()
