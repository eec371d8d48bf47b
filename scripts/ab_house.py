#!/usr/bin/env python3
"""A/B of two sluice binaries (issue 60: before 4ad3b0f, after main), alternating rounds:
`scripts/ab_house.py filter` or `scripts/ab_house.py guard`, one JSON line per binary.
filter: wall and CPU of `sluice filter` over a 2M-frame capture with the embedded FireHOL list.
guard: req/s and p99 of `sluice http-load` (closed loop) through `sluice http-guard` to `sluice http-serve`."""
import json, os, resource, statistics, subprocess, sys, time, socket
# SLUICE_BEFORE and SLUICE_AFTER: the two binaries (e.g. a worktree at the old commit, built).
B = {"before": os.environ["SLUICE_BEFORE"], "after": os.environ.get("SLUICE_AFTER", "target/release/sluice")}
ROUNDS = int(os.environ.get("ROUNDS", "7"))
CAP = os.environ.get("SLUICE_CAP", "/tmp/ab.pcap")
LIST = os.environ.get("SLUICE_LIST", "crates/sluice-rules/data/firehol_level1.netset")
if not os.path.exists(CAP):
    subprocess.run([B["after"], "gen", "--count", "2000000", "--listed", "0.1", "--out", CAP], check=True, stderr=subprocess.DEVNULL)
def filt(b):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([b, "filter", "--in", CAP, "--drop-src", LIST, "--json"], check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    j = json.loads(out.strip().splitlines()[-1])
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), j.get("dropped")
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def guard(b, up):
    port = free_port()
    g = subprocess.Popen([b, "http-guard", "--listen", f"127.0.0.1:{port}", "--upstream", up, "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close(); break
        except OSError:
            time.sleep(0.02)
    out = subprocess.run([B["after"], "http-load", "--url", f"http://127.0.0.1:{port}/", "--connections", "8", "--threads", "1", "--duration", "4", "--json"], check=True, capture_output=True, text=True).stdout
    g.terminate(); g.wait()
    j = json.loads(out)
    return j["rps"] if "rps" in j else j["requests"] / 4.0, j["latency_us"]["p99"], sum(v for v in j["errors"].values() if isinstance(v, int))
def main():
    what = sys.argv[1]
    res = {k: [] for k in B}
    srv = None
    if what == "guard":
        up = f"127.0.0.1:{free_port()}"
        srv = subprocess.Popen([B["after"], "http-serve", "--listen", up], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    for r in range(ROUNDS):
        for k in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            res[k].append(filt(B[k]) if what == "filter" else guard(B[k], up))
    if srv: srv.terminate()
    for k, v in res.items():
        cols = list(zip(*v))
        print(json.dumps({"bench": f"ab_{what}", "binary": k, "rounds": len(v), "median": [statistics.median(c) if isinstance(c[0], (int, float)) else c[0] for c in cols], "all": v}))
main()
