"""What stock TensorBoard (the Rust data server, through its HTTP API) shows for `tensorboard --logdir
DATA/runs` of a real `tower serve`: runs named by their names (DATA/runs/NAME-rXXXXXX), the training
scalars under train/ and the evaluation under eval/, the EMA evaluation as the same tags in the sub-run
<folder>/eval_ema (one chart with the raw one), every session in the HParams API with its metrics (the
EMA one included), a cancelled and resumed run once with no point twice, and a run an older Tower made
(its folder the bare id, the database of version 3) still served."""
import pathlib
import sqlite3

import pytest
import requests

import helpers
from conftest import start_server
from helpers import poll
from test_hparams import HPARAMS, METRICS, metric, session_groups, sessions_of
from test_server import seed_config, submit, upload_fashion, wait_run

SHORT = dict(steps=200, eval_every=100, summary_every=50, checkpoint_every=1000)


def stop(server):
    server.proc.terminate()
    server.proc.wait(timeout=60)


def make_old(data, run):
    """The data folder as an older Tower left it: the run's folder its bare id, no folder column."""
    pathlib.Path(run["logdir"]).rename(data / "runs" / run["id"])
    db = sqlite3.connect(data / "tower.db")
    db.executescript("DROP INDEX runs_folder; ALTER TABLE runs DROP COLUMN folder;"  # the columns after v3
                     "ALTER TABLE runs DROP COLUMN processes; ALTER TABLE runs DROP COLUMN hosts;"
                     "ALTER TABLE runs DROP COLUMN attempts;"
                     "PRAGMA user_version = 3;")
    db.close()


def cancel_mid_run(server, run_id):
    poll("the run to make progress", lambda: True if requests.get(
        server.api(f"/runs/{run_id}"), timeout=10).json().get("step", 0) > 0 else None)
    assert requests.post(server.api(f"/runs/{run_id}/cancel"), timeout=10).status_code < 300
    assert wait_run(server, run_id)["status"] == "cancelled"


def tb_get(base, route, ready, **params):
    def attempt():
        r = requests.get(f"{base}/data/{route}", params=params, timeout=10)
        return r.json() if r.status_code == 200 and ready(r.json()) else None
    return poll(f"tensorboard's /data/{route}", attempt)


def steps_of(base, run, tag):
    return [p[1] for p in tb_get(base, "plugin/scalars/scalars", lambda b: bool(b), run=run, tag=tag)]


def test_tensorboard_names_runs_by_name_and_charts_raw_and_ema_together(tmp_path, tower_bin):
    data = tmp_path / "data"
    server = start_server(tower_bin, data)
    try:  # a run of an older Tower: made here, then put back in the old layout
        upload_fashion(server)
        old = submit(server, seed_config(name="legacy", **SHORT)).json()
        assert old["logdir"] == str(data.resolve() / "runs" / f"legacy-{old['id'][:7]}"), old
        assert wait_run(server, old["id"])["status"] == "succeeded"
    finally:
        stop(server)
    make_old(data, old)
    server = start_server(tower_bin, data)
    try:
        shown = requests.get(server.api(f"/runs/{old['id']}"), timeout=10).json()
        assert shown["folder"] == old["id"] and shown["logdir"] == str(data.resolve() / "runs" / old["id"])
        scalars = requests.get(server.api(f"/runs/{old['id']}/metrics"), timeout=10).json()["scalars"]
        assert [p[0] for p in scalars["eval/accuracy_ema"]] == [0, 100, 200]
        assert requests.get(server.api(f"/runs/{old['id']}/checkpoints"), timeout=10).status_code == 200
        runs = {}
        for name, batch in (("mnist-a", 32), ("mnist-b", 1024)):  # b: seconds long, so a cancel lands mid-run
            runs[name] = submit(server, seed_config(name=name, batch_size=batch, **SHORT)).json()
        assert wait_run(server, runs["mnist-a"]["id"])["status"] == "succeeded"
        b = runs["mnist-b"]["id"]  # cancelled mid-run, then resumed to its end
        cancel_mid_run(server, b)
        assert requests.post(server.api(f"/runs/{b}/resume"), json={}, timeout=10).status_code < 300
        done = {name: wait_run(server, r["id"]) for name, r in runs.items()}
        done["legacy"] = shown
        assert done["mnist-b"]["status"] == "succeeded", done["mnist-b"]
        folders = {name: r["folder"] for name, r in done.items()}
        assert folders["mnist-b"] == f"mnist-b-{b[:7]}"
        with helpers.tensorboard(data / "runs", tmp_path) as (base, _):
            want = {f for n in folders.values() for f in (n, n + "/eval_ema")}
            listed = tb_get(base, "runs", lambda b: set(b) >= want)
            assert set(listed) == want
            tags = tb_get(base, "plugin/scalars/tags", lambda b: set(b) >= want)
            for name, folder in folders.items():
                # the training scalars, the evaluation and its per-class details: three groups
                assert {t.split("/")[0] for t in tags[folder]} == {"train", "eval", "eval_per_class"}, (name, tags[folder])
                ema_tags = set(tags[folder + "/eval_ema"])  # the same evaluation tags, none of training's
                assert {"eval/accuracy", "eval/loss"} <= ema_tags <= {t for t in tags[folder] if t.startswith("eval")}, name
                for run, tag in ((folder, "train/loss"), (folder, "eval/accuracy"),
                                 (folder + "/eval_ema", "eval/accuracy")):
                    steps = steps_of(base, run, tag)
                    assert steps == sorted(set(steps)), (run, tag, steps)  # no point twice, resumed or not
                    assert steps[-1] == 200, (run, tag, steps)
                ema = steps_of(base, folder + "/eval_ema", "eval/accuracy")
                assert ema == [0, 100, 200], name
            groups = session_groups(base, HPARAMS, METRICS, lambda g: len(sessions_of(g["sessionGroups"])) == 3)
        sessions = {n: s for n, (_, s) in sessions_of(groups).items()}
        assert sorted(sessions) == sorted(folders.values())
        for name, folder in folders.items():
            m = done[name]["metrics"]
            for key, value in ((("", "eval/accuracy"), m["eval_accuracy"]),
                               (("eval_ema", "eval/accuracy"), m["eval_accuracy_ema"]),
                               (("", "eval/loss"), m["eval_loss"])):
                assert metric(sessions[folder]["metricValues"], key) == pytest.approx(value, rel=1e-5), (name, key)
    finally:
        stop(server)
