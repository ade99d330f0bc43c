"""Hardening of `tower serve`, tried as an attacker would: a page on another origin must never act
(CSRF through "simple" requests), a JSON body must say it is JSON, a run config cannot name a file, one data
folder has one server, every query parameter is declared, event streams and idle sockets cannot lock other
local clients out."""
import json
import os
import signal
import socket
import sqlite3
import subprocess

import pytest
import requests

from conftest import start_server
import helpers
from helpers import poll
from test_server import seed_config, submit, wait_dataset, wait_run
from test_server_inputs import error_of

FOREIGN = "http://evil.example"
CSV = "a,b,label\n" + "".join(f"{i % 7}.5,{i % 3}.25,{i % 2}\n" for i in range(30))


def upload_csv(server, name="tab", headers=None):
    r = requests.post(server.api(f"/datasets?name={name}&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv", **server.headers(), **(headers or {})}, timeout=30)
    return r


def csv_dataset(server):
    r = upload_csv(server)
    assert r.status_code in (201, 202), r.text
    d = wait_dataset(server, r.json()["id"])
    assert d["status"] == "ready", d
    return d


def csv_config(**over):
    return seed_config(**{"dataset": "tab", **over})


def own_origin(server):
    return server.url  # http://127.0.0.1:PORT, as the status page's browser sends it


def runs_total(server):
    return requests.get(server.api("/runs"), timeout=10).json()["total"]


# ---------------------------------------------------------------- §2: cross-origin requests never act

@pytest.fixture
def faked(serve, tool):
    """A server whose runs are the fake trainer (slow steps: a run stays running), with a CSV dataset."""
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=50"})
    return server, csv_dataset(server)


@pytest.mark.parametrize("origin,site", [
    (FOREIGN, None), ("null", None), (None, "cross-site"), (None, "same-site"), (FOREIGN, "cross-site"),
    ("http://127.0.0.1:1", None),  # another port of this machine is another origin
])
def test_cross_origin_simple_requests_never_act(faked, origin, site):
    server, dataset = faked
    foreign = {k: v for k, v in (("Origin", origin), ("Sec-Fetch-Site", site)) if v}
    before = runs_total(server)
    # a run as text/plain: a "simple" request, no CORS preflight
    r = requests.post(server.api("/runs"), data=json.dumps(csv_config()),
                      headers={"Content-Type": "text/plain", **foreign}, timeout=10)
    e = error_of(r, 403, "PERMISSION_DENIED")
    assert (site or origin) in e["message"]
    # the same as JSON (a page can only send that after a preflight it never gets)
    error_of(requests.post(server.api("/runs"), json=csv_config(), headers=foreign, timeout=10), 403,
             "PERMISSION_DENIED")
    assert runs_total(server) == before
    # a dataset as multipart/form-data: also simple
    r = requests.post(server.api("/datasets?name=evil&label_column=label"), files={"csv": ("x.csv", CSV)},
                      headers=foreign, timeout=10)
    error_of(r, 403, "PERMISSION_DENIED")
    names = [d["name"] for d in requests.get(server.api("/datasets"), timeout=10).json()["datasets"]]
    assert names == ["tab"]
    assert sorted(os.listdir(server.data / "datasets")) == [dataset["id"]]
    # cancel and delete of a running run
    run = submit(server, csv_config(steps=100000)).json()
    wait_run(server, run["id"], ("running",))
    error_of(requests.post(server.api(f"/runs/{run['id']}/cancel"), headers=foreign, timeout=10), 403,
             "PERMISSION_DENIED")
    error_of(requests.delete(server.api(f"/datasets/{dataset['id']}"), headers=foreign, timeout=10), 403,
             "PERMISSION_DENIED")
    assert requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()["status"] == "running"
    # reads stay open, and no reply ever grants CORS
    r = requests.get(server.api("/runs"), headers=foreign, timeout=10)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    r = requests.options(server.api("/runs"), headers={**foreign, "Access-Control-Request-Method": "POST"},
                         timeout=10)
    assert r.status_code == 405 and "Access-Control-Allow-Origin" not in r.headers


def test_own_origin_acts_and_json_needs_its_media_type(faked):
    server, dataset = faked
    own = {"Origin": own_origin(server), "Sec-Fetch-Site": "same-origin"}
    # text/plain from our own page: 415, and nothing created
    r = requests.post(server.api("/runs"), data=json.dumps(csv_config()),
                      headers={"Content-Type": "text/plain", **own}, timeout=10)
    e = error_of(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert "application/json" in e["message"]
    error_of(requests.post(server.api("/runs"), data=json.dumps(csv_config()), timeout=10), 415,
             "UNSUPPORTED_MEDIA_TYPE")  # no Content-Type at all
    assert runs_total(server) == 0
    r = requests.post(server.api("/runs"), data=json.dumps(csv_config(steps=100000)),
                      headers={"Content-Type": "application/json; charset=utf-8", **own}, timeout=10)
    assert r.status_code == 201, r.text
    run = r.json()
    wait_run(server, run["id"], ("running",))
    assert requests.post(server.api(f"/runs/{run['id']}/cancel"), headers=own, timeout=10).status_code == 202
    assert wait_run(server, run["id"])["status"] == "cancelled"
    assert upload_csv(server, "tab2", headers=own).status_code in (201, 202)
    # curl and scripts send no Origin: they act as before
    assert submit(server, csv_config(steps=10)).status_code == 201


def test_origin_rule_with_a_token_and_an_allowed_proxy_origin(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), "--origin", "https://tower.example.org",
                   env={"TW_FAKE": "step_ms=50"}, token="s3cret")
    csv_dataset(server)
    auth = server.headers()
    # a token does not make a foreign page's request act
    error_of(requests.post(server.api("/runs"), json=csv_config(), headers={**auth, "Origin": FOREIGN},
                           timeout=10), 403, "PERMISSION_DENIED")
    for origin in (own_origin(server), "https://tower.example.org"):
        r = requests.post(server.api("/runs"), json=csv_config(steps=10), headers={**auth, "Origin": origin},
                          timeout=10)
        assert r.status_code == 201, (origin, r.text)
    # without the token the own origin still needs it
    error_of(requests.post(server.api("/runs"), json=csv_config(), headers={"Origin": own_origin(server)},
                           timeout=10), 401, "UNAUTHENTICATED")


def test_origin_option_is_checked(tower_bin, tmp_path):
    r = subprocess.run([str(tower_bin), "serve", "--data", str(tmp_path / "d"), "--origin", "evil.example/x"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--origin" in r.stderr


# ---------------------------------------------------------------- §3: a config cannot name a file

@pytest.mark.parametrize("dataset_over,key", [
    ({"train": "/etc/passwd"}, "dataset.train"),
    ({"test": "/nonexistent/x.tfrecord"}, "dataset.test"),
    ({"train": "../../outside.tfrecord", "test": "/etc/passwd"}, "dataset.train"),
])
def test_path_keys_are_refused_over_the_api(faked, dataset_over, key):
    server, dataset = faked
    r = submit(server, csv_config(dataset={"name": dataset["id"], **dataset_over}))
    e = error_of(r, 400, "INVALID_ARGUMENT")
    assert e["message"].startswith(key + ":"), e["message"]
    assert "file path" in e["message"]
    assert runs_total(server) == 0
    assert os.listdir(server.data / "runs") == []
    # the two answers do not differ for an existing and a missing file: nothing is probed
    other = submit(server, csv_config(dataset={"name": dataset["id"], "train": "/nonexistent"})).json()
    assert other["error"]["message"].split(":")[1:] == e["message"].split(":")[1:]


def test_tower_train_keeps_its_paths(faked, run_tower, tmp_path):
    server, dataset = faked
    cfg = csv_config(steps=2, eval_every=0, checkpoint_every=0)
    cfg["dataset"] = {"train": str(server.data / "datasets" / dataset["id"] / "train.tfrecord"),
                      "shape": [2], "image_feature": "features", "scale": 1.0}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    r = run_tower("train", tmp_path / "c.json", "--logdir", tmp_path / "log")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- §5: one data folder, one server

def test_second_server_on_one_data_folder_refuses(serve, tool, tower_bin, tmp_path):
    first = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=50"})
    csv_dataset(first)
    run = submit(first, csv_config(steps=100000)).json()
    wait_run(first, run["id"], ("running",))
    second = subprocess.run([str(tower_bin), "serve", "--listen", "127.0.0.1:0", "--data", str(first.data),
                             "--no-demo", "--trainer", str(tool("tw_faketrain"))],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "TW_FAKE": "step_ms=50"})
    assert second.returncode != 0
    assert f"pid {first.proc.pid}" in second.stderr and "in use by another tower serve" in second.stderr
    assert second.stdout == ""  # it never listened
    # the first server's run was neither requeued nor started twice
    shown = requests.get(first.api(f"/runs/{run['id']}"), timeout=10).json()
    assert shown["status"] == "running" and shown["restarts"] == 0
    log = (helpers.run_dir(first.data, run["id"]) / "log").read_text()
    assert log.count("== attempt") == 1, log
    # after kill -9 of the first, a new server takes the folder at once and resumes the run
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    third = serve("--trainer", tool("tw_faketrain"), data=first.data, env={"TW_FAKE": "step_ms=50"})
    resumed = wait_run(third, run["id"], ("running",))
    assert resumed["restarts"] == 1  # the kill -9 ended an attempt
    with sqlite3.connect(first.data / "tower.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert (first.data / "tower.lock").read_text().strip() == str(third.proc.pid)


# ---------------------------------------------------------------- §7: query parameters

def test_query_parameters_are_declared(serve):
    server = serve()
    e = error_of(requests.get(server.api("/runs?name=x"), timeout=10), 400, "INVALID_ARGUMENT")
    assert "'name'" in e["message"] and "(it takes: status, limit, offset, fields)" in e["message"]
    error_of(requests.get(server.api("/health?verbose=1"), timeout=10), 400, "INVALID_ARGUMENT")
    assert requests.get(server.api("/runs?status=queued&limit=5&offset=0"), timeout=10).status_code == 200
    e = error_of(requests.get(server.api("/runs?limit=" + "9" * 2000), timeout=10), 400, "INVALID_ARGUMENT")
    assert "bytes" in e["message"]
    many = "&".join(f"status=queued" for _ in range(20))
    error_of(requests.get(server.api("/runs?" + many), timeout=10), 400, "INVALID_ARGUMENT")


def test_nul_in_a_query_parameter_is_refused(serve):
    server = serve()
    r = requests.post(server.api("/datasets?name=a%00b&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv"}, timeout=10)
    e = error_of(r, 400, "INVALID_ARGUMENT")
    assert "NUL" in e["message"]
    assert requests.get(server.api("/datasets"), timeout=10).json()["total"] == 0
    assert os.listdir(server.data / "datasets") == []
    e = error_of(requests.post(server.api("/datasets?label_column=label"), data=CSV,
                               headers={"Content-Type": "text/csv"}, timeout=10), 400, "INVALID_ARGUMENT")
    assert "'name' is required" in e["message"]


# ---------------------------------------------------------------- §7: streams and idle sockets

def connect(server):
    host, port = server.url.split("//")[1].split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def open_stream(server, run_id):
    s = connect(server)
    s.sendall(f"GET /api/v1/runs/{run_id}/events HTTP/1.1\r\nHost: {server.url[7:]}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        got = s.recv(4096)
        assert got, head
        head += got
    return s, head


def test_event_streams_leave_room_for_other_requests(faked_limits):
    server, run = faked_limits
    streams = []
    try:
        for _ in range(4):
            s, head = open_stream(server, run["id"])
            assert head.startswith(b"HTTP/1.1 200"), head[:200]
            streams.append(s)
        s, head = open_stream(server, run["id"])
        s.close()
        assert head.startswith(b"HTTP/1.1 429"), head[:200]
        # ordinary requests from the same address are served while the streams stay open
        for _ in range(8):
            assert requests.get(server.api("/health"), timeout=10).status_code == 200
        streams.pop().close()

        def another_stream():  # the slot comes back once the server sees the stream's end
            s, head = open_stream(server, run["id"])
            if head.startswith(b"HTTP/1.1 200"):
                streams.append(s)
                return True
            s.close()
            return None
        poll("a stream slot to free", another_stream)
    finally:
        for s in streams:
            s.close()


@pytest.fixture
def faked_limits(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), "--per-ip-limit", "8", "--sse-limit", "4",
                   "--conn-timeout", "300", env={"TW_FAKE": "step_ms=50"})
    csv_dataset(server)
    run = submit(server, csv_config(steps=100000)).json()
    return server, run


def test_sse_limit_must_leave_room(tower_bin, tmp_path):
    r = subprocess.run([str(tower_bin), "serve", "--data", str(tmp_path / "d"), "--per-ip-limit", "8",
                        "--sse-limit", "8"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--sse-limit" in r.stderr


def test_headers_have_a_deadline(serve):
    """Sockets that never finish their headers, trickling a byte now and then so that the idle timeout
    (300 s here) never fires, fill the per-address limit; the header deadline (2 s) closes them, and the
    address is served again. Without the deadline they would hold every slot for as long as they trickle."""
    server = serve("--per-ip-limit", "4", "--sse-limit", "2", "--conn-timeout", "300", "--header-timeout", "2")
    stalled = [connect(server) for _ in range(4)]
    for s in stalled:
        s.sendall(b"GET /api/v1/health HTTP/1.1\r\n")
        s.settimeout(0.5)
    open_ones = set(range(4))
    for _ in range(240):  # at most ~2 minutes of trickling; a closed socket reads b"" or resets
        for i in list(open_ones):
            try:
                stalled[i].sendall(b"X")
                if stalled[i].recv(100) == b"":
                    open_ones.discard(i)
            except socket.timeout:
                pass
            except (ConnectionResetError, BrokenPipeError):
                open_ones.discard(i)
        if not open_ones:
            break
    for s in stalled:
        s.close()
    assert not open_ones, "the server kept sockets whose headers never came"

    def served():
        try:
            return requests.get(server.api("/health"), timeout=5).status_code
        except requests.ConnectionError:
            return None
    assert poll("the address to be served again", served) == 200
    # a request that completes its headers in time is served on a kept-alive connection too
    with requests.Session() as session:
        for _ in range(3):
            assert session.get(server.api("/health"), timeout=10).status_code == 200


def test_sigterm_of_an_idle_server_is_a_clean_stop(serve):
    """Threads that libraries start before main (OpenBLAS's workers) took SIGTERM with its default action:
    an idle server died with -15 mid-whatever instead of closing its store. Each stop is clean now."""
    data = None
    for _ in range(3):
        server = serve(data=data)
        data = server.data
        assert requests.get(server.api("/health"), timeout=10).status_code == 200
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0
    log = (data.parent / f"{data.name}.server.log").read_text()
    assert log.count("stopping (signal)") == 3, log
