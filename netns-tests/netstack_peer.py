#!/usr/bin/env python3
"""Services and checks for the netstack scenarios (netns-tests/netstack.sh).

  http HOST PORT          an HTTP server: GET /bytes/N sends N bytes of the pattern,
                          PUT /sha256 answers the SHA-256 of the body it read
  udp-echo HOST PORT      echoes every datagram
  pattern N               writes N bytes of the pattern to stdout
  pattern-sha N           prints the SHA-256 of N bytes of the pattern
  udp-check HOST PORT     sends 20 numbered datagrams, exits 0 if at least 15 echoes match
  tcp-echo HOST PORT      echoes every TCP connection's bytes
  tcp-rtt HOST PORT N     N one-byte round trips on one connection; prints the median in us
  tcp-sink HOST PORT W LOG
                          per connection: counts the bytes that arrive in the W seconds after
                          the first and appends "BYTES SECONDS" to LOG, then discards the rest
  tcp-send HOST PORT S K  K connections each sending for S seconds, closing S+2 seconds later
  sink-rate LOG K         the rate the last K lines of a sink's LOG add up to, in bit/s (only
                          what reached the sink in its window: a sender's buffering ahead of
                          the path does not count)
  socks-udp PROXY_PORT HOST PORT
                          SOCKS5 UDP ASSOCIATE through 127.0.0.1:PROXY_PORT, then as udp-check

Byte i of the pattern is (i*31+7) & 0xff: a dropped, doubled or reordered segment changes the
hash. Every server runs until killed; the script's caller bounds it in time.
"""
import hashlib
import http.server
import socket
import socketserver
import struct
import sys

CHUNK = 1 << 16
PERIOD = bytes(((i * 31 + 7) & 0xFF) for i in range(256))
BLOCK = PERIOD * (CHUNK // 256)


def pattern(n):
    """Yields n bytes of the pattern in blocks (the pattern repeats every 256 bytes)."""
    while n > 0:
        k = min(n, CHUNK)
        yield BLOCK[:k]
        n -= k


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        parts = self.path.split("/")
        if len(parts) != 3 or parts[1] != "bytes" or not parts[2].isdigit():
            self.send_error(404)
            return
        n = int(parts[2])
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        for b in pattern(n):
            self.wfile.write(b)

    def do_PUT(self):
        if self.path != "/sha256":
            self.send_error(404)
            return
        h = hashlib.sha256()
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                left = size
                while left:
                    b = self.rfile.read(min(left, CHUNK))
                    if not b:
                        raise ConnectionError("body cut short")
                    h.update(b)
                    left -= len(b)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                b = self.rfile.read(min(left, CHUNK))
                if not b:
                    raise ConnectionError("body cut short")
                h.update(b)
                left -= len(b)
        body = (h.hexdigest() + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def serve_http(host, port):
    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        address_family = family(host)

    Server((host, port), Handler).serve_forever()


def udp_echo(host, port):
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.bind((host, port))
    while True:
        data, addr = s.recvfrom(65535)
        s.sendto(data, addr)


def tcp_echo(host, port):
    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                b = self.request.recv(CHUNK)
                if not b:
                    return
                self.request.sendall(b)

    class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
        daemon_threads = True
        allow_reuse_address = True
        address_family = family(host)

    Server((host, port), Echo).serve_forever()


def tcp_rtt(host, port, n):
    import time
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(n + 5):
        t = time.perf_counter()
        s.sendall(b"x")
        if recv_exact(s, 1) != b"x":
            raise SystemExit("echo mismatch")
        times.append(time.perf_counter() - t)
    times = sorted(times[5:])
    print("%.0f" % (times[len(times) // 2] * 1e6))


def tcp_sink(host, port, window, log):
    import threading
    import time
    lock = threading.Lock()

    class Sink(socketserver.BaseRequestHandler):
        def handle(self):
            buf = bytearray(1 << 20)
            n = self.request.recv_into(buf)
            if not n:
                return
            got, t0 = n, time.monotonic()
            self.request.settimeout(0.2)
            while time.monotonic() - t0 < window:
                try:
                    n = self.request.recv_into(buf)
                except socket.timeout:
                    continue
                if not n:
                    break
                got += n
            with lock, open(log, "a") as f:
                f.write("%d %.6f\n" % (got, time.monotonic() - t0))
            self.request.settimeout(30)
            try:
                while self.request.recv_into(buf):
                    pass
            except OSError:
                pass

    class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
        daemon_threads = True
        allow_reuse_address = True
        address_family = family(host)

    Server((host, port), Sink).serve_forever()


def tcp_send(host, port, secs, k):
    import threading
    import time
    block = bytes(1 << 20)

    def one():
        s = socket.create_connection((host, port), timeout=60)
        end = time.monotonic() + secs + 0.5
        try:
            while time.monotonic() < end:
                s.sendall(block)
        except OSError:
            pass
        # Held open a while longer: a forwarder that drops what it buffered when the client
        # closes (onetun) still gets to deliver the sink's window.
        time.sleep(secs + 2)
        s.close()

    threads = [threading.Thread(target=one) for _ in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def sink_rate(log, k):
    with open(log) as f:
        lines = f.read().split("\n")
    rows = [tuple(float(x) for x in line.split()) for line in lines if line.strip()][-k:]
    if len(rows) != k:
        raise SystemExit("the sink logged %d of %d streams" % (len(rows), k))
    print("%.0f" % (sum(g for g, _ in rows) * 8 / max(t for _, t in rows)))


def udp_check(send, recv):
    """Sends 20 numbered datagrams through `send`, counts matching echoes from `recv`."""
    got = 0
    for i in range(20):
        msg = b"netstack udp %d" % i
        send(msg)
        try:
            if recv() == msg:
                got += 1
        except socket.timeout:
            pass
    print("udp echoes: %d/20" % got)
    return got >= 15


def plain_udp_check(host, port):
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.settimeout(1.0)
    s.connect((host, port))
    return udp_check(s.send, lambda: s.recv(65535))


def socks_addr(host, port):
    try:
        return b"\x01" + socket.inet_pton(socket.AF_INET, host) + struct.pack("!H", port)
    except OSError:
        pass
    try:
        return b"\x04" + socket.inet_pton(socket.AF_INET6, host) + struct.pack("!H", port)
    except OSError:
        return b"\x03" + bytes([len(host)]) + host.encode() + struct.pack("!H", port)


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        b = s.recv(n - len(data))
        if not b:
            raise ConnectionError("proxy closed")
        data += b
    return data


def socks_udp_check(proxy_port, host, port):
    ctl = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
    ctl.sendall(b"\x05\x01\x00")
    if recv_exact(ctl, 2) != b"\x05\x00":
        raise SystemExit("SOCKS5 method refused")
    ctl.sendall(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00")
    head = recv_exact(ctl, 4)
    if head[1] != 0:
        raise SystemExit("UDP ASSOCIATE refused: %d" % head[1])
    if head[3] == 1:
        relay = (socket.inet_ntop(socket.AF_INET, recv_exact(ctl, 4)),)
    else:
        relay = (socket.inet_ntop(socket.AF_INET6, recv_exact(ctl, 16)),)
    relay += struct.unpack("!H", recv_exact(ctl, 2))
    u = socket.socket(family(relay[0]), socket.SOCK_DGRAM)
    u.settimeout(1.0)
    header = b"\x00\x00\x00" + socks_addr(host, port)

    def recv():
        data = u.recv(65535)
        # RSV RSV FRAG, then the sender's address: skip to the payload.
        atyp = data[3]
        skip = {1: 4 + 4 + 2, 4: 4 + 16 + 2}.get(atyp, 5 + (data[4] if len(data) > 4 else 0) + 2)
        return data[skip:]

    ok = udp_check(lambda m: u.sendto(header + m, relay), recv)
    ctl.close()
    return ok


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "http":
        serve_http(argv[2], int(argv[3]))
    elif cmd == "udp-echo":
        udp_echo(argv[2], int(argv[3]))
    elif cmd == "pattern":
        out = sys.stdout.buffer
        for b in pattern(int(argv[2])):
            out.write(b)
    elif cmd == "pattern-sha":
        h = hashlib.sha256()
        for b in pattern(int(argv[2])):
            h.update(b)
        print(h.hexdigest())
    elif cmd == "tcp-echo":
        tcp_echo(argv[2], int(argv[3]))
    elif cmd == "tcp-rtt":
        tcp_rtt(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "tcp-sink":
        tcp_sink(argv[2], int(argv[3]), float(argv[4]), argv[5])
    elif cmd == "tcp-send":
        tcp_send(argv[2], int(argv[3]), float(argv[4]), int(argv[5]))
    elif cmd == "sink-rate":
        sink_rate(argv[2], int(argv[3]))
    elif cmd == "udp-check":
        sys.exit(0 if plain_udp_check(argv[2], int(argv[3])) else 1)
    elif cmd == "socks-udp":
        sys.exit(0 if socks_udp_check(int(argv[2]), argv[3], int(argv[4])) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
