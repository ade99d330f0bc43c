"""Following a run that waits in the queue behind another (the README's first-week path: the demo trains,
the user's run queues): its event stream, with curl -N and with `tower submit --follow` piped, stays open
however long it waits, past several connection time-outs, and ends normally when the run has finished."""
import json
import subprocess
import threading

import requests

from helpers import poll
from test_client import client

CONN_TIMEOUT = 3  # a silent connection is cut after this many seconds; keep-alives every second then


def run(server, ref):
    return requests.get(server.api(f"/runs/{ref}"), timeout=10).json()


def test_a_queued_runs_stream_outlives_the_connection_timeout(serve, tool, tower_bin, tmp_path):
    procs = []
    try:
        follow_queued(serve, tool, tower_bin, tmp_path, procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def follow_queued(serve, tool, tower_bin, tmp_path, procs):
    server = serve("--trainer", tool("tw_faketrain"), "--conn-timeout", CONN_TIMEOUT,
                   env={"TW_FAKE": "step_ms=5", "CUDA_VISIBLE_DEVICES": ""})
    text = "a,label\n" + "".join(f"{i},{i % 2}\n" for i in range(40))
    r = requests.post(server.api("/datasets?name=tiny"), data=text, headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    poll("the dataset", lambda: run_ready(server))
    base = {"dataset": "tiny", "model": {"layers": [{"type": "dense", "units": 2}]},
            "loss": "softmax_cross_entropy", "batch_size": 4}
    long_id = requests.post(server.api("/runs"), json={**base, "steps": 100_000_000}, timeout=30).json()["id"]
    poll("the long run training", lambda: run(server, long_id)["status"] == "running" or None)
    cfg = tmp_path / "short.json"
    cfg.write_text(json.dumps({**base, "steps": 50, "name": "short"}))
    follow = subprocess.Popen([str(tower_bin), "submit", str(cfg), "--follow", "--server", server.url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(follow)
    short_id = follow.stdout.readline().strip()
    assert run(server, short_id)["status"] == "queued"
    curl = subprocess.Popen(["curl", "-sSN", server.api(f"/runs/{short_id}/events")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    procs.append(curl)
    seen = {"keepalive": 0, "lines": []}
    done = threading.Event()

    def read():
        for line in curl.stdout:
            seen["lines"].append(line)
            if line.startswith(": keep-alive"):  # the queued run's own object does not change meanwhile
                seen["keepalive"] += 1
                if seen["keepalive"] >= 4 * CONN_TIMEOUT:  # > 3 connection time-outs of silence otherwise
                    done.set()
        done.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert done.wait(60) and seen["keepalive"] >= 4 * CONN_TIMEOUT, seen
    assert curl.poll() is None and follow.poll() is None  # both still open, the run still queued
    assert run(server, short_id)["status"] == "queued"
    # the long run goes; the short one runs and succeeds; both followers end normally
    assert client(tower_bin, server, "cancel", long_id).returncode == 0
    out, err = follow.communicate(timeout=120)
    assert follow.returncode == 0, err
    statuses = [json.loads(line)["status"] for line in out.splitlines()]
    assert statuses[0] == "queued" and statuses[-1] == "succeeded", statuses
    reader.join(60)  # the reader owns curl's stdout: it ends at the stream's end
    assert not reader.is_alive() and curl.wait(timeout=60) == 0, curl.stderr.read()
    events = [json.loads(l[5:]) for l in seen["lines"] if l.startswith("data:")]
    assert events[-1]["status"] == "succeeded" and events[-1]["id"] == short_id


def run_ready(server):
    return requests.get(server.api("/datasets/tiny"), timeout=10).json()["status"] == "ready" or None
