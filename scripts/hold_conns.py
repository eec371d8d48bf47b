#!/usr/bin/env python3
"""Hold N connections to an HTTP server (the guard) to measure its memory
per connection (docs/service.md, "Memory and tasks").

    hold_conns.py HOST PORT N MODE SECONDS

MODE: `idle` (connect, send nothing), `head` (a request head of 15,000
bytes, never ended: under --max-head 16 KiB), `read` (a whole GET whose
response is never read; receive buffer 4 KiB). The sources are spread over
127.1.x.y, 200 connections each, so that one source's ports do not run out
(loopback only). Prints `holding N MODE connections` once all are open,
then holds them SECONDS and exits.
"""
import resource
import socket
import sys
import time

host, port, n, mode, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 1000, n + 1000))
head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + b"a" * 15000
get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
socks = []
t0 = time.time()
for i in range(n):
    s = socket.socket()
    if mode == "read":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind(("127.1.%d.%d" % (i // 200 // 250, i // 200 % 250 + 1), 0))
    s.connect((host, port))
    if mode == "head":
        s.sendall(head)
    elif mode == "read":
        s.sendall(get)
    socks.append(s)
print("holding %d %s connections (%.1f s to open)" % (n, mode, time.time() - t0), flush=True)
time.sleep(hold)
