# An HTTP/2 client for the guard's tests, built of raw frames (Debian's
# python3-h2 brings hyperframe and hpack) so it can send what no polite
# client library would. One mode per run; prints one JSON line: what came
# back (statuses by stream, resets, GOAWAY's code, whether the connection
# closed) and how long it took.
#
#   h2_attacker.py PORT SRC MODE [N]
#
# MODES: get N (N requests, answered one by one), rapid_reset N (N HEADERS
# + RST_STREAM pairs, 1000 a second), continuation (a header block that
# never ends), settings N (N SETTINGS frames), zero_window (a response
# asked for with a window of 0, never opened), smuggle CASE (one malformed
# request: see CASES), burst N (N requests in one write, /size/K of
# several sizes, small to many DATA frames and windows: "intact" counts
# the streams whose body is exactly what the upstream makes for K).
import json
import socket
import ssl
import sys
import time

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame,
                              SettingsFrame, WindowUpdateFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

port, src, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
arg = sys.argv[4] if len(sys.argv) > 4 else "1"

ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["h2"])
raw = socket.create_connection(("127.0.0.1", port), timeout=15, source_address=(src, 0))
sock = ctx.wrap_socket(raw, server_hostname="guard.test")
assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()

enc = hpack.Encoder()
dec = hpack.Decoder()
out = {"statuses": {}, "resets": {}, "goaway": None, "closed": False, "data": {}}
bodies = {}
buf = b""


def send(*frames):
    sock.sendall(b"".join(f.serialize() for f in frames))


def base_headers(path="/", method="GET"):
    return [(":method", method), (":scheme", "https"), (":authority", "guard.test"), (":path", path)]


def headers_frame(stream, headers, end_stream=True, end_headers=True):
    f = HeadersFrame(stream)
    f.data = enc.encode(headers)
    f.flags.add("END_HEADERS") if end_headers else None
    f.flags.add("END_STREAM") if end_stream else None
    return f


def read_frames(until):
    """Read frames until `until()` or the connection ends (or 15 s)."""
    global buf
    deadline = time.time() + 15
    while not until() and time.time() < deadline:
        while len(buf) >= 9:
            f, length = Frame.parse_frame_header(memoryview(buf[:9]))
            if len(buf) < 9 + length:
                break
            f.parse_body(memoryview(buf[9:9 + length]))
            buf = buf[9 + length:]
            on_frame(f)
        if until():
            break
        try:
            chunk = sock.recv(65536)
        except (ConnectionError, ssl.SSLError, socket.timeout, OSError):
            out["closed"] = True
            return
        if not chunk:
            out["closed"] = True
            return
        buf += chunk


def on_frame(f):
    if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
        send(SettingsFrame(0, flags=["ACK"]))
    elif isinstance(f, HeadersFrame):
        for k, v in dec.decode(f.data):
            k = k.decode() if isinstance(k, bytes) else k
            v = v.decode() if isinstance(v, bytes) else v
            if k == ":status":
                out["statuses"][str(f.stream_id)] = int(v)
    elif isinstance(f, DataFrame):
        key = str(f.stream_id)
        out["data"][key] = out["data"].get(key, 0) + len(f.data)
        bodies[key] = bodies.get(key, b"") + bytes(f.data)
        if f.data and mode != "zero_window":
            send(WindowUpdateFrame(0, window_increment=len(f.data)), WindowUpdateFrame(f.stream_id, window_increment=len(f.data)))
    elif isinstance(f, RstStreamFrame):
        out["resets"][str(f.stream_id)] = f.error_code
    elif isinstance(f, GoAwayFrame):
        out["goaway"] = f.error_code


settings = SettingsFrame(0)
if mode == "zero_window":
    settings.settings[SettingsFrame.INITIAL_WINDOW_SIZE] = 0
sock.sendall(PREFACE + settings.serialize())
started = time.time()

if mode == "get":
    n = int(arg)
    for i in range(n):
        sid = 2 * i + 1
        send(headers_frame(sid, base_headers(f"/get/{i}")))
        read_frames(lambda: str(sid) in out["statuses"] or out["closed"] or out["goaway"] is not None)
elif mode == "rapid_reset":
    n = int(arg)
    for i in range(n):
        sid = 2 * i + 1
        try:
            send(headers_frame(sid, base_headers(f"/rr/{i}")), RstStreamFrame(sid, error_code=8))
        except OSError:
            out["closed"] = True
            break
        if i % 10 == 9:
            time.sleep(0.01)  # 1000 pairs a second
    read_frames(lambda: out["closed"] or out["goaway"] is not None)
elif mode == "continuation":
    block = enc.encode(base_headers("/cont"))
    first = HeadersFrame(1)
    first.data = block
    first.flags.add("END_STREAM")
    try:
        send(first)
        for i in range(10000):
            c = ContinuationFrame(1)
            c.data = enc.encode([("x-pad-%d" % i, "a" * 1000)])
            send(c)
    except OSError:
        out["closed"] = True
    read_frames(lambda: out["closed"] or out["goaway"] is not None)
elif mode == "settings":
    try:
        for _ in range(int(arg)):
            send(SettingsFrame(0))
    except OSError:
        out["closed"] = True
    read_frames(lambda: out["closed"] or out["goaway"] is not None)
elif mode == "zero_window":
    send(headers_frame(1, base_headers("/big")))
    read_frames(lambda: out["closed"] or out["goaway"] is not None)
elif mode == "smuggle":
    CASES = {
        "pseudo_after_regular": [(":method", "GET"), (":scheme", "https"), ("x-a", "1"), (":path", "/"),
                                 (":authority", "guard.test")],
        "duplicate_path": base_headers() + [(":path", "/other")],
        "no_method": base_headers()[1:],
        "te_chunked": base_headers() + [("te", "chunked")],
        "transfer_encoding": base_headers() + [("transfer-encoding", "chunked")],
        "connection": base_headers() + [("connection", "keep-alive")],
        "crlf_in_value": base_headers() + [("x-a", "1\r\nx-injected: 1")],
        "upper_case_name": base_headers() + [("X-Upper", "1")],
        "space_in_path": [(":method", "GET"), (":scheme", "https"), (":authority", "guard.test"),
                          (":path", "/a HTTP/1.1\r\nx: y")],
    }
    if arg == "content_length":
        send(headers_frame(1, base_headers("/post", "POST") + [("content-length", "5")], end_stream=False))
        d = DataFrame(1)
        d.data = b"0123456789"
        d.flags.add("END_STREAM")
        send(d)
    else:
        send(headers_frame(1, CASES[arg]))
    read_frames(lambda: "1" in out["resets"] or "1" in out["statuses"] or out["closed"] or out["goaway"] is not None)

elif mode == "burst":
    n = int(arg)
    # The upstream's /size/K body: "K:" repeated, cut to K bytes.
    sizes = {str(2 * i + 1): [100, 5000, 70000, 200000][i % 4] + i for i in range(n)}
    send(*[headers_frame(int(sid), base_headers(f"/size/{k}")) for sid, k in sizes.items()])
    ended = lambda: all(out["data"].get(sid, 0) >= k for sid, k in sizes.items())
    read_frames(lambda: ended() or out["closed"] or out["goaway"] is not None)
    expect = lambda k: ((str(k) + ":").encode() * (k // 2 + 1))[:k]
    out["intact"] = sum(1 for sid, k in sizes.items() if bodies.get(sid) == expect(k))

out["secs"] = round(time.time() - started, 3)
print(json.dumps(out))
