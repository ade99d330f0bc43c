"""Driving runs through the API: resume of a stopped run (bit-exact against an
uninterrupted run, through the event files), queue priority (highest first, FIFO within one, with the fake
trainer on the one CPU device), "cancelling" until the child is gone, any kept checkpoint by step, names for
ids, init_from (a fine-tune's step-0 evaluation is its parent's last; mismatches are 400s naming the variable;
`tower train` with a checkpoint path), and `tower train --logdir` creating missing parent folders."""
import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest
import requests

import helpers
from test_server import submit, wait_dataset, wait_run

CSV = "a,b,label\n" + "".join(f"{i % 7}.5,{i % 3}.25,{i % 2}\n" for i in range(64))
BIG_CSV = "a,b,label\n" + "".join(f"{i % 7}.5,{i % 5}.25,{int(i % 7 + i % 5 > 5)}\n" for i in range(400))


def upload_csv(server, name="tab"):
    r = requests.post(server.api(f"/datasets?name={name}&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv", **server.headers()}, timeout=30)
    assert r.status_code in (201, 202), r.text
    assert wait_dataset(server, r.json()["id"])["status"] == "ready"


def config(**over):
    c = {"dataset": "tab",
         "model": {"layers": [{"type": "dense", "units": 4, "activation": "relu"}, {"type": "dense", "units": 2}]},
         "optimizer": {"type": "momentum", "learning_rate": 0.05, "momentum": 0.9}, "batch_size": 16,
         "steps": 20, "seed": 5, "summary_every": 1, "eval_every": 0, "checkpoint_every": 5,
         "keep_checkpoints": 3}
    c.update(over)
    return c


def post(server, path, body=None):
    return requests.post(server.api(path), json=body if body is not None else {}, timeout=30)


def error(r, status, code):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code, err
    return err["message"]


def the_child(server, run_id):
    """The pid of the run's trainer, as the log's attempt line names it (the server has other children),
    looked for every 5 ms: a fast engine trains a short run in well under a second."""
    end = time.monotonic() + helpers.DEADLINE_S
    while time.monotonic() < end:
        log = requests.get(server.api(f"/runs/{run_id}/log"), timeout=10).text
        found = re.findall(r"== attempt \d+: pid (\d+) ==", log)
        if found:
            return int(found[-1])
        time.sleep(0.005)  # a look again, not a wait for an event
    pytest.fail("timed out waiting for the run's child")


@pytest.fixture
def fake_server(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=5"})
    upload_csv(server)
    return server


# ---- resume ----

def losses(server, run_id):
    """{tag: {step: value}} of the run's loss scalars, from its event files (a point redone after a
    resume replaces the earlier one, as TensorBoard does)."""
    scalars = requests.get(server.api(f"/runs/{run_id}/metrics"), timeout=30).json()["scalars"]
    return {tag: {s: v for s, v, _ in points} for tag, points in scalars.items()
            if "loss" in tag or "entropy" in tag}


STEPS = 600


def frozen_at_first_step(server, run_id, child):
    """Leaves the child SIGSTOPped once the server has seen it report a step: it runs only in slices of
    10 ms between looks at the run, so that a fast engine cannot finish the run between a look that finds
    it going and the stop (600 steps once did, in the 0.2 s between two polls)."""
    os.kill(child, signal.SIGSTOP)
    end = time.monotonic() + helpers.DEADLINE_S
    while not requests.get(server.api(f"/runs/{run_id}"), timeout=10).json()["step"]:
        assert time.monotonic() < end, "timed out waiting for the run's first step"
        os.kill(child, signal.SIGCONT)
        time.sleep(0.01)  # a slice of running, not a wait for an event: the loop looks again
        os.kill(child, signal.SIGSTOP)


def test_a_cancelled_run_resumed_gives_the_losses_of_an_uninterrupted_run(serve):
    """The run is frozen at its first reported step (frozen_at_first_step), so it is still going when the
    test cancels it."""
    server = serve()  # the real trainer
    upload_csv(server)
    big = {"layers": [{"type": "dense", "units": 1024, "activation": "relu"},
                      {"type": "dense", "units": 1024, "activation": "relu"}, {"type": "dense", "units": 2}]}
    cfg = config(model=big, steps=STEPS, checkpoint_every=100)
    first = submit(server, {**cfg, "name": "cut"}).json()["id"]
    child = the_child(server, first)
    frozen_at_first_step(server, first, child)  # frozen mid-way: the cancel below finds it running
    run = requests.get(server.api(f"/runs/{first}"), timeout=10).json()
    assert run["status"] == "running" and 0 < run["step"] < STEPS, run
    error(post(server, f"/runs/{first}/resume"), 409, "CONFLICT")  # still running: nothing to resume
    r = post(server, f"/runs/{first}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelling", r.text
    os.kill(child, signal.SIGCONT)
    cut = wait_run(server, first)
    assert cut["status"] == "cancelled" and cut["step"] < STEPS, cut
    assert "unknown key" in error(post(server, f"/runs/{first}/resume", {"step": 5}), 400, "INVALID_ARGUMENT")
    r = post(server, f"/runs/{first}/resume")
    assert r.status_code == 202 and r.json()["status"] in ("queued", "running"), r.text  # the scheduler may be quick
    assert wait_run(server, first)["status"] == "succeeded"
    whole = submit(server, {**cfg, "name": "whole"}).json()["id"]
    assert wait_run(server, whole)["status"] == "succeeded"
    resumed, uninterrupted = losses(server, first), losses(server, whole)
    assert uninterrupted and all(sorted(v) == list(range(1, STEPS + 1)) for v in uninterrupted.values()), uninterrupted
    assert resumed == uninterrupted  # bit-exact: the same float32 values step for step
    folder = helpers.run_dir(server.data, first)
    events = sorted(f for f in os.listdir(folder) if f.startswith("events.out.tfevents"))
    assert len(events) == 2  # the run's own folder: a second file that starts at the resumed step
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog
    later = max(events, key=lambda f: (folder / f).stat().st_mtime)
    starts = [e.step for e in EventFileLoader(str(folder / later)).Load()
              if e.HasField("session_log") and e.session_log.status == SessionLog.START]
    log = requests.get(server.api(f"/runs/{first}/log?tail=100000"), timeout=10).text
    resumed_at = [int(m) for m in re.findall(r'"resumed_from":\s*"[^"]*",\s*"step":\s*(\d+)', log)]
    assert len(resumed_at) == 1 and starts == [resumed_at[0] + 1], (starts, resumed_at)  # SessionLog START


def test_resume_refusals_and_more_steps_for_a_succeeded_run(fake_server):
    server = fake_server
    run_id = submit(server, config(steps=10)).json()["id"]
    assert wait_run(server, run_id)["status"] == "succeeded"
    assert "more steps" in error(post(server, f"/runs/{run_id}/resume"), 409, "CONFLICT")
    error(post(server, f"/runs/{run_id}/resume", {"steps": 10}), 409, "CONFLICT")
    error(post(server, f"/runs/{run_id}/resume", {"steps": "20"}), 400, "INVALID_ARGUMENT")
    error(post(server, "/runs/r0123456789abcde/resume"), 404, "NOT_FOUND")
    r = post(server, f"/runs/{run_id}/resume", {"steps": 25})
    assert r.status_code == 202 and r.json()["steps"] == 25, r.text
    done = wait_run(server, run_id)
    assert done["status"] == "succeeded" and done["step"] == 25, done
    steps = (helpers.run_dir(server.data, run_id) / "steps.log").read_text().split()[1::2]
    assert steps == [str(k) for k in range(1, 26)]  # continued from step 10's checkpoint, nothing redone
    assert json.loads((helpers.run_dir(server.data, run_id) / "config.json").read_text())["steps"] == 25


# ---- queue priority ----

def test_the_queue_takes_the_highest_priority_first_fifo_within_one(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=5"})
    upload_csv(server)
    blocker = submit(server, config(steps=10 ** 6, name="blocker")).json()["id"]
    wait_run(server, blocker, ("running",))
    names = [("low", None), ("mid1", 5), ("plain", 0), ("mid2", 5), ("moved", 0)]
    ids = {}
    for name, priority in names:
        cfg = config(steps=3, name=name, **({} if priority is None else {"priority": priority}))
        r = submit(server, cfg)
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    assert requests.get(server.api(f"/runs/{ids['mid1']}"), timeout=10).json()["priority"] == 5
    r = post(server, f"/runs/{ids['moved']}/priority", {"priority": 9})
    assert r.status_code == 202 and r.json()["priority"] == 9, r.text
    assert "priority" in error(post(server, f"/runs/{ids['low']}/priority", {"priority": 10 ** 6}), 400,
                               "INVALID_ARGUMENT")
    error(post(server, f"/runs/{ids['low']}/priority", {"priority": 1, "x": 1}), 400, "INVALID_ARGUMENT")
    assert "queued" in error(post(server, f"/runs/{blocker}/priority", {"priority": 1}), 409, "CONFLICT")
    error(submit(server, config(priority=1.5)), 400, "INVALID_ARGUMENT")
    post(server, f"/runs/{blocker}/cancel")
    runs = [wait_run(server, ids[name]) for name, _ in names]
    assert all(r["status"] == "succeeded" for r in runs), runs
    order = [r["name"] for r in sorted(runs, key=lambda r: r["first_started"])]
    assert order == ["moved", "mid1", "mid2", "low", "plain"]


# ---- cancel ----

def test_cancel_says_cancelling_until_the_child_is_gone(fake_server):
    server = fake_server
    run_id = submit(server, config(steps=10 ** 6)).json()["id"]
    wait_run(server, run_id, ("running",))
    child = the_child(server, run_id)
    os.kill(child, signal.SIGSTOP)  # it cannot stop before the checks below
    r = post(server, f"/runs/{run_id}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelling", r.text
    assert requests.get(server.api(f"/runs/{run_id}"), timeout=10).json()["status"] == "cancelling"
    listed = requests.get(server.api("/runs"), timeout=10).json()["runs"]
    assert [x["status"] for x in listed if x["id"] == run_id] == ["cancelling"]
    os.kill(child, signal.SIGCONT)
    assert wait_run(server, run_id)["status"] == "cancelled"
    queued = submit(server, config(steps=10 ** 6)).json()["id"]
    other = submit(server, config(steps=10 ** 6)).json()["id"]
    r = post(server, f"/runs/{other}/cancel")  # queued behind `queued`: cancelled at once
    assert r.status_code == 202 and r.json()["status"] == "cancelled", r.text
    post(server, f"/runs/{queued}/cancel")
    assert wait_run(server, queued)["status"] == "cancelled"


# ---- checkpoints by step ----

def test_download_any_kept_checkpoint_by_step(fake_server):
    server = fake_server
    run_id = submit(server, config(steps=20, checkpoint_every=5)).json()["id"]
    assert wait_run(server, run_id)["status"] == "succeeded"
    listing = requests.get(server.api(f"/runs/{run_id}/checkpoints"), timeout=10).json()
    kept = [c["step"] for c in listing["checkpoints"]]
    assert kept == [10, 15, 20], listing
    for c in listing["checkpoints"]:
        r = requests.get(server.api(f"/runs/{run_id}/checkpoints/{c['step']}"), timeout=10)
        assert r.status_code == 200, r.text
        path = helpers.run_dir(server.data, run_id) / "checkpoints" / c["file"]
        assert r.content == path.read_bytes() and len(r.content) == c["bytes"]
        assert c["file"] in r.headers.get("Content-Disposition", "")
    latest = requests.get(server.api(f"/runs/{run_id}/checkpoints/latest"), timeout=10)
    assert latest.status_code == 200
    assert "step 5" in error(requests.get(server.api(f"/runs/{run_id}/checkpoints/5"), timeout=10), 404,
                             "NOT_FOUND")
    error(requests.get(server.api(f"/runs/{run_id}/checkpoints/x1"), timeout=10), 400, "INVALID_ARGUMENT")
    error(requests.get(server.api("/runs/r0123456789abcde/checkpoints/5"), timeout=10), 404, "NOT_FOUND")


# ---- tower train --logdir ----

def test_train_creates_missing_parent_folders_of_the_logdir(tmp_path, tower_bin):
    np.save(tmp_path / "x.npy", np.arange(64 * 4, dtype=np.uint8).reshape(64, 2, 2, 1))
    np.save(tmp_path / "y.npy", np.arange(64, dtype=np.int64) % 2)
    rec = tmp_path / "train.tfrecord"
    conv = subprocess.run([str(tower_bin), "convert", "--npy-features", str(tmp_path / "x.npy"), "--npy-labels",
                           str(tmp_path / "y.npy"), "-o", str(rec)], capture_output=True, text=True, timeout=60)
    assert conv.returncode == 0, conv.stderr
    layers = [{"type": "flatten"}, {"type": "dense", "units": 2}]
    cfg = config(steps=3, dataset={"train": str(rec), "shape": [2, 2, 1]}, model={"layers": layers})
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    logdir = tmp_path / "a" / "b" / "c"
    res = subprocess.run([str(tower_bin), "train", str(tmp_path / "c.json"), "--logdir", str(logdir)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(logdir))


# ---- names ----

def test_names_work_wherever_ids_do_and_a_shared_name_is_409(fake_server):
    server = fake_server
    solo = submit(server, config(steps=3, name="solo")).json()["id"]
    dups = [submit(server, config(steps=3, name="dup")).json()["id"] for _ in range(2)]
    assert wait_run(server, "solo")["id"] == solo  # GET /runs/{name}
    for d in dups:
        wait_run(server, d)
    assert requests.get(server.api("/runs/solo/checkpoints"), timeout=10).json()["latest"] == 3
    assert requests.get(server.api("/runs/solo/checkpoints/3"), timeout=10).status_code == 200
    r = post(server, "/runs/solo/resume", {"steps": 6})
    assert r.status_code == 202 and r.json()["id"] == solo, r.text
    assert wait_run(server, solo)["step"] == 6
    message = error(requests.get(server.api("/runs/dup"), timeout=10), 409, "CONFLICT")
    assert all(d in message for d in dups), message
    error(requests.delete(server.api("/runs/dup"), timeout=10), 409, "CONFLICT")
    error(requests.get(server.api("/runs/nobody"), timeout=10), 404, "NOT_FOUND")
    assert requests.get(server.api(f"/runs/{dups[0]}"), timeout=10).json()["name"] == "dup"  # ids still work
    assert requests.delete(server.api("/runs/solo"), timeout=10).status_code == 204
    assert requests.get(server.api("/datasets/tab"), timeout=10).json()["name"] == "tab"
    upload_csv(server)  # a second dataset named "tab"
    message = error(requests.get(server.api("/datasets/tab/samples"), timeout=10), 409, "CONFLICT")
    assert "2 datasets" in message, message


# ---- init_from ----

def first_of(server, run_id, word):
    """(step, value) of the first point of the run's eval tag ending in `word` (eval/accuracy)."""
    scalars = requests.get(server.api(f"/runs/{run_id}/metrics"), timeout=30).json()["scalars"]
    tags = [t for t in scalars if t.startswith("eval") and t.endswith(word)]
    assert len(tags) == 1, list(scalars)
    return scalars[tags[0]]


def test_a_fine_tune_starts_from_the_parents_weights(serve):
    server = serve()  # the real trainer
    r = requests.post(server.api("/datasets?name=split"),
                      files={"csv": ("d.csv", BIG_CSV), "label_column": (None, "label"),
                             "test_fraction": (None, "0.25")}, timeout=30)
    assert r.status_code in (201, 202), r.text
    wait_dataset(server, r.json()["id"])
    cfg = config(dataset="split", steps=200, eval_every=100, ema_decay=0.9)
    parent = submit(server, {**cfg, "name": "parent"}).json()["id"]
    assert wait_run(server, parent)["status"] == "succeeded"
    finals = {w: first_of(server, parent, tag)[-1] for w, tag in (("raw", "accuracy"), ("ema", "accuracy_ema"))}
    assert finals["raw"][0] == finals["ema"][0] == 200
    for weights, final in finals.items():  # the child's raw evaluation at step 0 against the parent's last
        child = submit(server, {**cfg, "steps": 1, "name": f"tuned-{weights}",
                                "init_from": {"run": "parent", "checkpoint": "latest", "weights": weights}})
        assert child.status_code == 201, child.text
        assert wait_run(server, child.json()["id"])["status"] == "succeeded"
        step0 = first_of(server, child.json()["id"], "accuracy")[0]
        assert step0[0] == 0 and abs(step0[1] - final[1]) <= 0.005, (weights, step0, final)
    narrow = config(dataset="split", model={"layers": [{"type": "dense", "units": 3}, {"type": "dense", "units": 2}]},
                    init_from={"run": parent, "checkpoint": 200, "weights": "raw"})
    message = error(submit(server, narrow), 400, "INVALID_ARGUMENT")
    assert "init_from" in message and "layer1/weights" in message and "shape" in message, message
    renamed = config(dataset="split", init_from={"run": parent, "weights": "raw"})
    renamed["model"]["layers"][0]["name"] = "other"
    assert "no tensor 'other/weights'" in error(submit(server, renamed), 400, "INVALID_ARGUMENT")
    message = error(submit(server, config(dataset="split", init_from={"run": "nobody", "weights": "raw"})), 404,
                    "NOT_FOUND")  # names a run that is not there
    assert message.startswith("init_from.run"), message
    for bad, key in [({"run": parent, "checkpoint": 7, "weights": "raw"}, "init_from.checkpoint"),
                     ({"run": parent, "checkpoint": "first", "weights": "raw"}, "init_from.checkpoint"),
                     ({"run": parent, "weights": "raw", "extra": 1}, "init_from"),
                     ({"run": parent, "weights": "best"}, "init_from.weights"),
                     ({"checkpoint": "/etc/passwd", "weights": "raw"}, "init_from.checkpoint")]:
        message = error(submit(server, config(dataset="split", init_from=bad)), 400, "INVALID_ARGUMENT")
        assert message.startswith(key), (bad, message)


def test_tower_train_starts_from_a_checkpoint_path(tmp_path, tower_bin):
    np.save(tmp_path / "x.npy", (np.arange(64 * 4) % 251).astype(np.uint8).reshape(64, 2, 2, 1))
    np.save(tmp_path / "y.npy", np.arange(64, dtype=np.int64) % 2)
    conv = subprocess.run([str(tower_bin), "convert", "--npy-features", str(tmp_path / "x.npy"), "--npy-labels",
                           str(tmp_path / "y.npy"), "-o", str(tmp_path / "t.tfrecord")], capture_output=True,
                          text=True, timeout=60)
    assert conv.returncode == 0, conv.stderr
    base = config(dataset={"train": "t.tfrecord", "test": "t.tfrecord", "shape": [2, 2, 1]}, steps=40,
                  eval_every=20, checkpoint_every=20, model={"layers": [{"type": "flatten"}, {"type": "dense", "units": 2}]})

    def train(name, cfg):
        (tmp_path / f"{name}.json").write_text(json.dumps(cfg))
        res = subprocess.run([str(tower_bin), "train", str(tmp_path / f"{name}.json"), "--logdir",
                              str(tmp_path / name)], capture_output=True, text=True, timeout=120)
        evals = [e for e in map(json.loads, res.stdout.splitlines()) if "eval_loss" in e]
        return res, evals
    res, parent = train("parent", base)
    assert res.returncode == 0, res.stderr
    ckpt = "parent/checkpoints/ckpt-0000000040.safetensors"  # relative to the config's folder
    res, child = train("child", {**base, "steps": 1, "init_from": {"checkpoint": ckpt, "weights": "raw"}})
    assert res.returncode == 0, res.stderr
    assert child[0]["step"] == 0 and child[0]["eval_loss"] == parent[-1]["eval_loss"], (child, parent)
    wide = {**base, "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 3}]},
            "init_from": {"checkpoint": ckpt, "weights": "ema"}}
    res, _ = train("wide", wide)
    assert res.returncode == 2 and "init_from" in res.stderr and "shape" in res.stderr, res.stderr
