"""A real HTTP/2 client (python3-h2) for tests/python_peer.rs: it speaks
HTTP/2 over stdin/stdout (stdout carries the client's bytes to the server
under test, stdin the server's bytes back) and reports on stderr.

  conformance: a GET and a POST with a 100 000-byte body (sent as flow
               control allows); checks both responses; prints them.
  rapid_reset: HEADERS then RST_STREAM, 1000 times; prints the GOAWAY code.
"""
import os
import sys

import h2.config
import h2.connection
import h2.events

POST_BODY = bytes(i % 251 for i in range(100_000))


def report(*args):
    print(*args, file=sys.stderr, flush=True)


def flush(conn):
    data = conn.data_to_send()
    if data:
        try:
            os.write(1, data)
        except BrokenPipeError:
            pass


def req(method, path, extra=()):
    return [(b":method", method), (b":scheme", b"https"), (b":path", path),
            (b":authority", b"example.test")] + list(extra)


def conformance():
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.send_headers(1, req(b"GET", b"/get", [(b"accept", b"*/*")]), end_stream=True)
    conn.send_headers(3, req(b"POST", b"/post", [(b"content-length", str(len(POST_BODY)).encode())]))
    sent = 0

    def send_more():
        nonlocal sent
        while sent < len(POST_BODY):
            room = min(conn.local_flow_control_window(3), conn.max_outbound_frame_size)
            if room <= 0:
                return
            chunk = POST_BODY[sent:sent + room]
            sent += len(chunk)
            conn.send_data(3, chunk, end_stream=sent == len(POST_BODY))

    send_more()
    flush(conn)
    heads, bodies, ended = {}, {1: b"", 3: b""}, set()
    while len(ended) < 2:
        data = os.read(0, 65536)
        if not data:
            report("server closed early")
            return 1
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                heads[ev.stream_id] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                bodies[ev.stream_id] += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                ended.add(ev.stream_id)
            elif isinstance(ev, h2.events.WindowUpdated):
                send_more()
            elif isinstance(ev, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                report("unexpected", ev)
                return 1
        send_more()
        flush(conn)
    conn.close_connection()
    flush(conn)
    ok = True
    for sid in (1, 3):
        h = heads.get(sid, {})
        report("stream %d status %s content-type %s bytes %d" % (
            sid, h.get(b":status", b"?").decode(), h.get(b"content-type", b"?").decode(), len(bodies[sid])))
    expect_get = bytes(i % 253 for i in range(200_000))
    if heads.get(1, {}).get(b":status") != b"200" or bodies[1] != expect_get:
        report("GET response wrong")
        ok = False
    if heads.get(3, {}).get(b":status") != b"201" or bodies[3] != b"received %d bytes" % len(POST_BODY):
        report("POST response wrong")
        ok = False
    report("conformance ok" if ok else "conformance FAILED")
    return 0 if ok else 1


def rapid_reset():
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    for i in range(1000):
        sid = 1 + 2 * i
        conn.send_headers(sid, req(b"GET", b"/"), end_stream=False)
        conn.reset_stream(sid)
    flush(conn)
    while True:
        data = os.read(0, 65536)
        if not data:
            report("closed without GOAWAY")
            return 1
        try:
            events = conn.receive_data(data)
        except Exception as e:  # frames for streams it reset: irrelevant here
            report("client error", type(e).__name__)
            events = []
        for ev in events:
            if isinstance(ev, h2.events.ConnectionTerminated):
                report("goaway %d last_stream %d" % (ev.error_code, ev.last_stream_id))
                return 0


if __name__ == "__main__":
    sys.exit({"conformance": conformance, "rapid_reset": rapid_reset}[sys.argv[1]]())
