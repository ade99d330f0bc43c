"""Clients that send slowly cannot hold the server: a request body has a total deadline derived from its
size (a grace of --header-timeout, then --body-min-rate bytes/s on average), and when the connection places
run short the slowest connections are cut to make room, so that hundreds of trickling connections from
several addresses never keep a client that sends its requests at once out.

Raw sockets against a real `tower serve`; the trickling clients bind to 127.0.0.2 ... 127.0.0.9 (Linux routes
all of 127.0.0.0/8 to the loopback)."""
import socket
import threading
import time

import requests

from helpers import poll

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 10)]


def host_port(server):
    host, port = server.url.split("//")[1].split(":")
    return host, int(port)


def connect(server, source):
    s = socket.create_connection(host_port(server), timeout=5, source_address=(source, 0))
    s.settimeout(5)
    return s


def closed_by_server(s):
    """True once the server has closed s without a reply (end of file or a reset), None while it is open."""
    s.setblocking(False)
    try:
        data = s.recv(4096)
        assert not data, data[:300]  # a reply would be a refusal, not the deadline
        return True
    except BlockingIOError:
        return None
    except OSError:
        return True
    finally:
        s.setblocking(True)


def test_a_trickling_body_is_cut_at_its_deadline_and_a_fast_one_is_not(serve):
    server = serve("--header-timeout", "2", "--body-min-rate", "1000")
    host, port = host_port(server)
    head = (f"POST /api/v1/datasets?name=slow&label_column=label HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: text/csv\r\nContent-Length: 200000\r\n\r\n").encode()
    s = connect(server, ADDRESSES[0])
    s.sendall(head + b"a,label\n")
    start = time.monotonic()
    cut = None
    while cut is None and time.monotonic() - start < 25:  # the idle timeout (30 s) never fires: a byte a second
        try:
            s.sendall(b"1")
        except OSError:
            cut = time.monotonic() - start
            break
        if closed_by_server(s):
            cut = time.monotonic() - start
        time.sleep(0.5)  # the trickle's pace, not a wait for an event
    assert cut is not None, "a body at 2 bytes/s was still open after 25 s"
    assert cut >= 2, cut  # not refused at once: taken until its deadline (2 s of grace, then 1000 bytes/s)
    s.close()
    log = (server.data.parent / f"{server.data.name}.server.log").read_text()
    assert "past their deadline" in log and "127.0.0.2: a body at" in log, log[-2000:]
    # The same body at full speed is taken whole: the deadline grows with what arrives.
    body = "a,label\n" + "".join(f"{i % 10},{i % 2}\n" for i in range(50_000))
    r = requests.post(server.api("/datasets?name=fast&label_column=label"), data=body,
                      headers={"Content-Type": "text/csv"}, timeout=60)
    assert r.status_code == 202, r.text
    names = [d["name"] for d in requests.get(server.api("/datasets"), timeout=10).json()["datasets"]]
    assert "slow" not in names and "fast" in names, names


class Trickler:
    """n connections from each address sending a request's headers a byte a second, reconnecting when cut."""

    def __init__(self, server, n):
        self.server, self.n, self.stop, self.opened, self.cut = server, n, threading.Event(), 0, 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self, source):
        try:
            s = connect(self.server, source)
            s.sendall(b"G")
            self.opened += 1
            return s
        except OSError:
            return None

    def run(self):
        socks = [[a, None] for a in ADDRESSES for _ in range(self.n)]
        while not self.stop.is_set():
            for pair in socks:
                source, s = pair
                try:
                    if s is None:
                        pair[1] = self.open(source)
                    else:
                        s.sendall(b"E")
                except OSError:
                    self.cut += 1
                    s.close()
                    pair[1] = self.open(source)
            self.stop.wait(1.0)  # a byte a second per connection
        for _, s in socks:
            if s:
                s.close()


def test_hundreds_of_trickling_connections_do_not_keep_a_fast_client_out(serve):
    server = serve("--conn-limit", "64", "--per-ip-limit", "16", "--header-timeout", "30", "--conn-timeout", "60")
    trickler = Trickler(server, 40)  # 8 addresses x 40 = 320 connections wanted, 128 allowed by the per-address cap
    trickler.thread.start()
    poll("the server's places to fill", lambda: True if trickler.opened >= 64 else None)
    failures, done = [], 0
    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            r = requests.get(server.api("/health"), timeout=10)
            if r.status_code != 200:
                failures.append(r.status_code)
        except requests.RequestException as e:
            failures.append(repr(e))
        done += 1
    trickler.stop.set()
    trickler.thread.join(30)
    assert done > 20 and not failures, (done, failures[:5])
    assert trickler.cut > 0  # the slow ones were the ones cut
