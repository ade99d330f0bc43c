"""A run's history and what it uses, as a person checks them: every start of its trainer is an attempt
(when, the steps it covered, why it ended) and the run's total time spans them all, a cancel and resume
among them; the log numbers the attempts; a running run's CPU and memory, read by the server from the
child's /proc, on the run object and in /metrics; and a warning when a submitted run would train for more
than a week at the rate this server measured for the same model."""
import re
import time

import numpy as np
import pytest
import requests

from helpers import poll
from test_client import client, in_pty

MODEL = {"layers": [{"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 3}]}


def upload_csv(server, tmp_path, name="blobs"):
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    x = rng.normal(size=(300, 4)) + y[:, None]
    text = "a,b,c,d,label\n" + "".join(",".join(f"{v:.4f}" for v in row) + f",{k}\n" for row, k in zip(x, y))
    r = requests.post(server.api(f"/datasets?name={name}&validation_split=0.2"), data=text,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    poll("the conversion", lambda: requests.get(server.api(f"/datasets/{name}"), timeout=10).json()["status"] == "ready"
         or None)


def config(steps, **over):
    return {"dataset": "blobs", "model": MODEL, "loss": "softmax_cross_entropy", "batch_size": 16, "steps": steps,
            "optimizer": {"type": "sgd", "learning_rate": 0.01}, "eval_every": 0, "summary_every": 100000,
            "checkpoint_every": 200000, **over}


def run(server, ref):
    return requests.get(server.api(f"/runs/{ref}"), timeout=10).json()


def metrics_text(server):
    return requests.get(server.url + "/metrics", timeout=10).text


def test_attempts_total_time_and_resources_across_a_cancel_and_resume(serve, tower_bin, tmp_path):
    server = serve(env={"CUDA_VISIBLE_DEVICES": ""})
    upload_csv(server, tmp_path)
    r = requests.post(server.api("/runs"), json={**config(1_000_000), "name": "long"}, timeout=30)
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    # running: one open attempt, and what its process uses (two samples a second apart give the CPU %)
    live = poll("the run's resources", lambda: (lambda x: x if x["resources"] else None)(run(server, rid)), 60)
    assert live["status"] == "running" and len(live["attempts"]) == 1
    first = live["attempts"][0]
    assert first["attempt"] == 1 and first["ended"] is None and first["reason"] is None and first["step_start"] == 0
    res = live["resources"]
    assert 10 << 20 < res["rss_bytes"] < 8 << 30, res  # a trainer holds more than 10 MiB
    assert res["cpu_percent"] > 0 and res["gpu_utilization_percent"] is None  # no NVML here
    text = metrics_text(server)
    rss = re.search(rf'^tower_run_rss_bytes{{run="{rid}"}} (\S+)$', text, re.M)
    assert rss and float(rss.group(1)) > 10 << 20, text
    assert re.search(rf'^tower_run_cpu_percent{{run="{rid}"}} \S+$', text, re.M), text
    # cancelled: the attempt ends with the reason and the step it reached; nothing runs, no resources
    assert client(tower_bin, server, "cancel", rid).returncode == 0
    stopped = poll("the cancel", lambda: (lambda x: x if x["status"] == "cancelled" else None)(run(server, rid)), 60)
    a1 = stopped["attempts"][0]
    assert a1["reason"] == "cancelled" and a1["ended"] >= a1["started"] and a1["step_end"] == stopped["step"] > 0
    assert stopped["resources"] is None and f'run="{rid}"' not in metrics_text(server)
    assert stopped["total_time_s"] == pytest.approx(a1["ended"] - a1["started"], abs=1e-3)
    # resumed, followed on a terminal: a second attempt continues where the first ended, to the end
    code, out = in_pty([str(tower_bin), "resume", rid, "--follow", "--server", server.url])
    assert code == 0, out
    done = run(server, rid)
    assert done["status"] == "succeeded" and [a["reason"] for a in done["attempts"]] == ["cancelled", "succeeded"]
    a2 = done["attempts"][1]
    assert a2["attempt"] == 2 and a2["step_start"] == a1["step_end"] and a2["step_end"] == done["step"]
    spans = sum(a["ended"] - a["started"] for a in done["attempts"])
    assert done["total_time_s"] == pytest.approx(spans, abs=1e-3) and done["total_time_s"] > 0
    log = requests.get(server.api(f"/runs/{rid}/log"), timeout=10).text
    assert re.findall(r"== attempt (\d+):", log) == ["1", "2"], log


def test_a_run_of_more_than_a_week_is_warned_about(serve, tool, tmp_path):
    # the fake trainer steps every 5 ms: about 200 steps/s, so 1e9 steps are about 58 days
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=5", "CUDA_VISIBLE_DEVICES": ""})
    upload_csv(server, tmp_path)
    first = requests.post(server.api("/runs"), json=config(1_000_000_000), timeout=30).json()
    assert first["warnings"] == []  # nothing measured yet: nothing said
    measured = poll("a measured rate", lambda: (lambda x: x if x["metrics"].get("steps_per_sec", 0) > 0
                                                 else None)(run(server, first["id"])), 60)
    # the running run says so once its own rate is known
    assert any("days" in w and "steps/s" in w for w in measured["warnings"]), measured["warnings"]
    second = requests.post(server.api("/runs"), json=config(1_000_000_000), timeout=30).json()
    days = [w for w in second["warnings"] if "days" in w]
    assert len(days) == 1 and "1000000000 steps to go" in days[0] and "steps/s" in days[0], second["warnings"]
    # a short run of the same model gets no such warning
    short = requests.post(server.api("/runs"), json=config(1000), timeout=30).json()
    assert not [w for w in short["warnings"] if "days" in w], short["warnings"]
