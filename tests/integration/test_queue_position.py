"""A queued run says where it stands: `queue_position` (1-based, in the order the scheduler starts runs:
priority, then submission) and `expected_start` (epoch seconds from the running run's ETA; null when not
known) on GET /runs/{id}, the list and the event stream, and `tower runs` shows "queued #N". A real
`tower serve` on its one CPU device, the real trainer on a tiny CSV holding the device with a long run."""
import json
import re
import subprocess
import time

import pytest
import requests

from helpers import poll
from test_client import client

CSV = "a,b,label\n" + "".join(f"{i % 7},{(i * 3) % 5},{i % 2}\n" for i in range(60))
MLP = {"dataset": "tab", "loss": "softmax_cross_entropy", "batch_size": 8, "seed": 1,
       "model": {"layers": [{"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense", "units": 2}]},
       "optimizer": {"type": "sgd", "learning_rate": 0.05}, "eval_every": 0, "checkpoint_every": 0,
       "summary_every": 100}


def get(server, path):
    r = requests.get(server.api(path), timeout=30)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def submit(server, **over):
    r = requests.post(server.api("/runs"), json={**MLP, **over}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def first_event(server, run_id):
    """The run object of the first `event: run` of curl -N …/runs/{id}/events."""
    proc = subprocess.Popen(["curl", "-sS", "-N", server.api(f"/runs/{run_id}/events")], stdout=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stdout:
            if line.startswith("data: "):
                return json.loads(line[len("data: "):])
    finally:
        proc.kill()
        proc.wait()
    pytest.fail("the stream ended without an event")


def test_queued_runs_show_their_place_and_expected_start(serve, tower_bin):
    server = serve(env={"CUDA_VISIBLE_DEVICES": ""})
    assert len(get(server, "/devices")["devices"]) == 1  # one run at a time
    r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    poll("the dataset to convert", lambda: True if get(server, "/datasets/tab")["status"] == "ready" else None)
    long_id = submit(server, steps=10_000_000, name="long")
    running = poll("the long run's ETA", lambda: (lambda x: x if x["eta_s"] is not None else None)(
        get(server, f"/runs/{long_id}")))
    a, b = submit(server, steps=100, name="a"), submit(server, steps=100, name="b")
    urgent = submit(server, steps=100, name="urgent", priority=5)  # jumps the queue

    runs = {name: get(server, f"/runs/{name}") for name in ("long", "a", "b", "urgent")}
    assert {n: run["queue_position"] for n, run in runs.items()} == {"long": None, "urgent": 1, "a": 2, "b": 3}
    # the first in line starts when the running run ends: its ETA from now (the ETA moves as it trains)
    eta = get(server, f"/runs/{long_id}")["eta_s"]
    assert runs["urgent"]["expected_start"] == pytest.approx(time.time() + eta, abs=max(10, running["eta_s"] * 0.5))
    # the others wait for runs whose durations are not known yet; the running run starts no more
    assert runs["a"]["expected_start"] is None and runs["b"]["expected_start"] is None
    assert runs["long"]["expected_start"] is None

    listed = {run["name"]: run for run in get(server, "/runs")["runs"]}
    assert {n: listed[n]["queue_position"] for n in runs} == {"long": None, "urgent": 1, "a": 2, "b": 3}
    assert listed["urgent"]["expected_start"] is not None
    picked = get(server, "/runs?fields=name,queue_position,expected_start")["runs"]
    assert {run["name"]: run["queue_position"] for run in picked}["b"] == 3
    assert first_event(server, b)["queue_position"] == 3

    out = client(tower_bin, server, "runs")
    assert out.returncode == 0, out.stderr
    rows = {line.split()[1]: line for line in out.stdout.splitlines()[1:] if line.strip()}
    assert re.search(r"\bqueued #1\b", rows["urgent"]) and re.search(r"\bqueued #3\b", rows["b"]), out.stdout
    assert "#" not in rows["long"], out.stdout

    # the queue moves up as the run ahead is cancelled
    requests.post(server.api(f"/runs/{urgent}/cancel"), timeout=30)
    assert (get(server, f"/runs/{a}")["queue_position"], get(server, f"/runs/{b}")["queue_position"]) == (1, 2)
