"""TensorBoard's HPARAMS tab over Tower's runs, read through stock TensorBoard (the Rust data server,
--load_fast=true) and its HParams HTTP API, with the request bodies its frontend sends
(tensorboard/plugins/hparams/api.proto: GetExperimentRequest, ListSessionGroupsRequest).

Short seed-MLP runs on Fashion-MNIST with `tower train`: two that differ only in seed (one group, the
metrics averaged), one with another learning rate (a group of its own), one stopped by SIGTERM and
resumed (one session, its hparams unchanged); two finished runs of one config that differ in seed beside a
third stopped mid-run (the stopped one is never averaged into their row); and runs through a real `tower
serve`: completed (SUCCESS, linked to its status page), past its deadline (FAILURE, written by the server,
a row of its own) and cancelled (not a session: it may be resumed). The config in the TEXT tab is indented JSON in a code block."""
import html
import json
import re
import signal
import subprocess

import pytest
import requests

import helpers
from conftest import start_server
from helpers import poll
from test_server import seed_config, submit, upload_fashion, wait_run
from test_train import fashion, mlp_config, train  # noqa: F401 (fashion is a fixture)

STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]
HPARAMS = ["optimizer", "learning_rate", "lr_decay", "batch_size", "towers", "l2", "ema_decay", "steps",
           "model", "dataset", "seed"]
# (group, tag): the raw evaluation in the run itself, the EMA one under the same tag in its eval_ema sub-run
METRICS = [("", "eval/accuracy"), ("eval_ema", "eval/accuracy"), ("", "eval/loss")]
STEPS = 200
LONG_STEPS = 4000  # the run stopped mid-way: long enough that SIGTERM lands before its end


def config(fashion, **over):
    c = mlp_config(fashion, steps=STEPS, summary_every=50, eval_every=100, checkpoint_every=1000,
                   lr_decay={"type": "exponential", "decay_steps": 100, "decay_rate": 0.5, "staircase": True})
    c.update(over)
    return c


def last_eval(lines):
    """The final evaluation line's metrics by TensorBoard (group, tag)."""
    ev = [l for l in lines if "eval_accuracy" in l][-1]
    return {("", "eval/accuracy"): ev["eval_accuracy"], ("eval_ema", "eval/accuracy"): ev["eval_accuracy_ema"],
            ("", "eval/loss"): ev["eval_loss"]}


def stop_mid_run(tower_bin, tmp_path, cfg, name):
    """Starts `tower train`, sends SIGTERM after its first progress line past step 0, waits for it."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.Popen([str(tower_bin), "train", path, "--logdir", tmp_path / name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("{") and json.loads(line).get("step", 0) > 0:
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    final = json.loads(out.strip().splitlines()[-1])
    assert final["status"] == "cancelled" and final["step"] < LONG_STEPS, final


@pytest.fixture(scope="module")
def local(tmp_path_factory, tower_bin, fashion):  # noqa: F811
    """logdir with runs seed1, seed2 (same config but the seed), lr (another learning rate) and
    resumed (SIGTERM, then --resume). Returns (logdir, {run: final eval metrics}, {run: config})."""
    root = tmp_path_factory.mktemp("hp")
    cfgs = {"seed1": config(fashion, seed=1), "seed2": config(fashion, seed=2),
            "lr": config(fashion, seed=1, optimizer={"type": "sgd", "learning_rate": 0.1}),
            "resumed": config(fashion, seed=3, steps=LONG_STEPS, eval_every=1000)}
    finals = {}
    for name in ("seed1", "seed2", "lr"):
        _, lines, _, _ = train(tower_bin, root, cfgs[name], name=name)
        finals[name] = last_eval(lines)
    stop_mid_run(tower_bin, root, cfgs["resumed"], "resumed")
    _, lines, _, _ = train(tower_bin, root, cfgs["resumed"], "--resume", name="resumed")
    assert any("resumed_from" in l for l in lines), lines[:3]
    finals["resumed"] = last_eval(lines)
    return root, finals, cfgs


def post(base, route, body, ready):
    """POSTs the JSON body to the hparams plugin's route until it answers 200 and ready(json) holds."""
    def attempt():
        r = requests.post(f"{base}/data/plugin/hparams/{route}", data=json.dumps(body),
                          headers={"Content-Type": "application/json"}, timeout=30)
        if r.status_code != 200:
            return None
        got = r.json()
        return got if ready(got) else None
    return poll(f"hparams/{route}", attempt)


def experiment(base, ready=lambda e: True):
    return post(base, "experiment", {"experimentName": "", "includeMetrics": True, "hparamsLimit": 1000},
                ready)


def session_groups(base, hparams, metrics, ready):
    cols = [{"hparam": h, "order": "ORDER_UNSPECIFIED", "includeInResult": True} for h in hparams]
    cols += [{"metric": {"group": g, "tag": t}, "order": "ORDER_UNSPECIFIED", "includeInResult": True}
             for g, t in metrics]
    body = {"experimentName": "", "allowedStatuses": STATUSES, "colParams": cols,
            "aggregationType": "AGGREGATION_AVG", "startIndex": 0, "sliceSize": 1000, "includeMetrics": True}
    return post(base, "session_groups", body, ready)["sessionGroups"]


def sessions_of(groups):
    """{session (run) name: (its group, the session)}."""
    return {s["name"]: (g, s) for g in groups for s in g["sessions"]}


def metric(values, name):
    group, tag = name
    (v,) = [m["value"] for m in values if m["name"] == {"group": group, "tag": tag}]
    return v


@pytest.fixture(scope="module")
def local_tb(local, tmp_path_factory):
    root, _, _ = local
    with helpers.tensorboard(root, tmp_path_factory.mktemp("tblog")) as (base, _):
        yield base


def test_experiment_lists_the_hparams_and_the_eval_metrics(local_tb):
    exp = experiment(local_tb, lambda e: len(e.get("hparamInfos", [])) == len(HPARAMS))
    assert sorted(h["name"] for h in exp["hparamInfos"]) == sorted(HPARAMS)
    types = {h["name"]: h["type"] for h in exp["hparamInfos"]}
    assert types["optimizer"] == types["model"] == types["lr_decay"] == "DATA_TYPE_STRING"
    assert types["learning_rate"] == types["seed"] == "DATA_TYPE_FLOAT64"
    names = {(m["name"]["group"], m["name"]["tag"]) for m in exp["metricInfos"]}
    assert set(METRICS) <= names


def test_every_run_is_a_session_with_its_hparams_and_final_metrics(local_tb, local, fashion):  # noqa: F811
    _, finals, cfgs = local
    groups = session_groups(local_tb, HPARAMS, METRICS, lambda g: len(sessions_of(g["sessionGroups"])) == 4)
    sessions = sessions_of(groups)
    assert sorted(sessions) == ["lr", "resumed", "seed1", "seed2"]
    for name, (group, session) in sessions.items():
        cfg = cfgs[name]
        want = {"optimizer": "sgd", "learning_rate": cfg["optimizer"]["learning_rate"], "lr_decay": "0.5/100 staircase",
                "batch_size": 32.0, "towers": 1.0, "l2": 0.0001, "ema_decay": 0.99,
                "steps": float(cfg["steps"]), "model": "dense64-dense10", "dataset": fashion[0].parent.name,
                "seed": float(cfg["seed"])}
        # A group shows the hparams of its earliest HParams session: the seeds of a group differ there only.
        seeds = sorted(cfgs[s["name"]]["seed"] for s in group["sessions"])
        shown = dict(group["hparams"])
        assert shown.pop("seed") in seeds and want.pop("seed") in seeds
        assert shown == want, name
        assert session["status"] == "STATUS_SUCCESS", name
        assert session["modelUri"].endswith(f"/{name}/checkpoints"), session["modelUri"]
        for tag in METRICS:
            assert metric(session["metricValues"], tag) == pytest.approx(finals[name][tag], rel=1e-6), (name, tag)


def test_two_seeds_of_one_config_form_one_group(local_tb):
    groups = session_groups(local_tb, HPARAMS, METRICS, lambda g: len(sessions_of(g["sessionGroups"])) == 4)
    members = {g["name"]: sorted(s["name"] for s in g["sessions"]) for g in groups}
    assert sorted(members.values()) == [["lr"], ["resumed"], ["seed1", "seed2"]]
    (pair,) = [g for g in groups if len(g["sessions"]) == 2]
    for tag in METRICS:  # the group's value is the average of its sessions'
        mean = sum(metric(s["metricValues"], tag) for s in pair["sessions"]) / 2
        assert metric(pair["metricValues"], tag) == pytest.approx(mean, rel=1e-6)


def test_resumed_run_has_one_session(local):
    root, _, _ = local
    files = sorted((root / "resumed").glob("events.out.tfevents.*"))
    assert len(files) == 2  # the first attempt's and the resumed one's
    starts = [f.read_bytes().count(b"_hparams_/session_start_info") for f in files]
    ends = [f.read_bytes().count(b"_hparams_/session_end_info") for f in files]
    # the session (start and end info together) in the resumed attempt's file only, written when the run
    # ended for good; the stopped attempt wrote none (names may sort either way within one second)
    assert sorted(zip(starts, ends)) == [(0, 0), (1, 1)]


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory, tower_bin, fashion):  # noqa: F811
    """logdir with done1, done2 (one config, seeds 1 and 2, trained to the end) and stopped (the same
    config, seed 3, stopped by SIGTERM mid-run: cancelled, as a person's cancel leaves it)."""
    root = tmp_path_factory.mktemp("unfinished")
    cfg = config(fashion, steps=LONG_STEPS, eval_every=1000)
    for name, seed in (("done1", 1), ("done2", 2)):
        train(tower_bin, root, {**cfg, "seed": seed}, name=name)
    stop_mid_run(tower_bin, root, {**cfg, "seed": 3}, "stopped")
    return root


def test_an_unfinished_run_is_never_averaged_with_finished_ones(unfinished, tmp_path_factory):
    with helpers.tensorboard(unfinished, tmp_path_factory.mktemp("tblog")) as (base, _):
        groups = session_groups(base, HPARAMS, METRICS,
                                lambda g: {"done1", "done2"} <= set(sessions_of(g["sessionGroups"])))
    members = [sorted(s["name"] for s in g["sessions"]) for g in groups]
    assert ["done1", "done2"] in members, members
    assert not any("stopped" in m and len(m) > 1 for m in members), members
    (pair,) = [g for g in groups if len(g["sessions"]) == 2]
    for tag in METRICS:  # the row's figure is the two finished runs' mean, and nothing else's
        mean = sum(metric(s["metricValues"], tag) for s in pair["sessions"]) / 2
        assert metric(pair["metricValues"], tag) == pytest.approx(mean, rel=1e-6)


def test_config_text_is_indented_json_in_a_code_block(local_tb, local):
    _, _, cfgs = local

    def text():
        r = requests.get(f"{local_tb}/data/plugin/text/text?run=seed1&tag=config", timeout=10)
        return r.json() if r.status_code == 200 and r.json() else None
    (row,) = text()
    assert "<pre><code" in row["text"]
    shown = json.loads(html.unescape(re.search(r"<code[^>]*>(.*)</code>", row["text"], re.S).group(1)))
    assert shown["seed"] == 1 and shown["optimizer"]["learning_rate"] == pytest.approx(0.05)
    assert "\n  " in html.unescape(row["text"])  # indented, one key a line


# ---- through `tower serve` ----

@pytest.fixture(scope="module")
def served(tmp_path_factory, tower_bin):
    """A real server with Fashion-MNIST: a run that completes, one past its deadline and one cancelled
    mid-run. Returns (server, {kind: run id})."""
    tmp = tmp_path_factory.mktemp("served")
    server = start_server(tower_bin, tmp / "data")
    try:
        upload_fashion(server)
        short = dict(eval_every=100, summary_every=50, checkpoint_every=1000)
        ids = {}
        r = submit(server, seed_config(steps=STEPS, **short))
        assert r.status_code == 201, r.text
        ids["completed"] = r.json()["id"]
        assert wait_run(server, ids["completed"])["status"] == "succeeded"
        # SIGTERM at the deadline: the trainer writes its start info and checkpoints before it stops.
        r = submit(server, seed_config(steps=10 ** 6, deadline_s=2, max_restarts=0, **short))
        assert r.status_code == 201, r.text
        ids["deadline"] = r.json()["id"]
        failed = wait_run(server, ids["deadline"])
        assert (failed["status"], failed["reason"]) == ("failed", "deadline"), failed
        r = submit(server, seed_config(steps=10 ** 6, **short))
        assert r.status_code == 201, r.text
        ids["cancelled"] = r.json()["id"]
        poll("the run to make progress", lambda: True if requests.get(
            server.api(f"/runs/{ids['cancelled']}"), timeout=10).json().get("step", 0) > 0 else None)
        assert requests.post(server.api(f"/runs/{ids['cancelled']}/cancel"), timeout=10).status_code < 300
        assert wait_run(server, ids["cancelled"])["status"] == "cancelled"
        yield server, ids
    finally:
        server.proc.kill()
        server.proc.wait()


def test_served_runs_end_with_the_right_status(served, tmp_path_factory):
    server, ids = served
    with helpers.tensorboard(server.data / "runs", tmp_path_factory.mktemp("tblog")) as (base, _):
        groups = session_groups(base, HPARAMS, METRICS, lambda g: len(sessions_of(g["sessionGroups"])) == 2)
    sessions = {name: s for name, (_, s) in sessions_of(groups).items()}
    # a cancelled run may be resumed: it is not a session until it ends for good
    assert ids["cancelled"] not in sessions
    got = {kind: sessions[run_id]["status"] for kind, run_id in ids.items() if kind != "cancelled"}
    assert got == {"completed": "STATUS_SUCCESS", "deadline": "STATUS_FAILURE"}
    for kind in ("completed", "deadline"):
        run_id = ids[kind]
        assert sessions[run_id]["monitorUrl"] == f"{server.url}/#/runs/{run_id}", kind
        assert sessions[run_id]["modelUri"] == str(helpers.run_dir(server.data.resolve(), run_id) / "checkpoints")
    # The server's end info is a small event file of its own next to the trainer's.
    assert len(list(helpers.run_dir(server.data, ids["deadline"]).glob("events.out.tfevents.*"))) == 2
