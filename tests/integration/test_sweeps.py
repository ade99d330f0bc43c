"""Sweeps run by the server (server/sweeps.c, server/api_sweeps.c, server/searcher.c), driven by the fake
trainer's objective switch: its eval_loss is a known function of optimizer.learning_rate, the first layer's
units and the step (tests/tools/tw_faketrain.c). A grid visits every point once; random draws are the
seed's; ASHA's starts, promotions and results equal a reference written from the paper's Algorithm 2, fed
the same objective; a server killed with SIGKILL at seeded points of a sweep trains every step once, takes
no decision twice and ends with the uninterrupted sweep's trials and best; bad sweeps are 400s naming the
key."""
import json
import math
import os
import random
import sqlite3

import pytest
import requests

import helpers
from helpers import poll
from test_runs_control import upload_csv
from test_server import child_pids, pid_alive

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1")


def objective(lr, units, step):
    """The fake trainer's loss with the objective switch (tw_faketrain.c)."""
    return 2.3 * math.exp(-step / 200) + 0.05 + (math.log10(lr) + 2) ** 2 + (math.log2(units) - 5) ** 2 / 10


def base(**over):
    c = {"dataset": "tab",
         "model": {"layers": [{"type": "dense", "units": 32, "activation": "relu"}, {"type": "dense", "units": 2}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.05}, "batch_size": 16, "steps": 64, "seed": 5,
         "summary_every": 8, "eval_every": 8, "checkpoint_every": 8, "max_restarts": 50}
    c.update(over)
    return c


SPACE = {"optimizer.learning_rate": {"type": "log_uniform", "min": 1e-4, "max": 1},
         "model.layers[0].units": [8, 16, 32, 64]}


def sweep_body(name, searcher, space=SPACE, **over):
    body = {"name": name, "config": base(), "space": space, "searcher": searcher, "metric": "eval_loss"}
    body.update(over)
    return body


def start(serve, tool, fake="step_ms=2,objective", data=None):
    server = serve("--trainer", tool("tw_faketrain"), *FAST, env={"TW_FAKE": fake}, data=data)
    if data is None:
        upload_csv(server)
    return server


def create(server, body):
    r = requests.post(server.api("/sweeps"), json=body, timeout=60)
    assert r.status_code == 201, r.text
    return r.json()


def get(server, name):
    return requests.get(server.api(f"/sweeps/{name}"), timeout=30).json()


def wait_sweep(server, name, deadline_s=240):
    return poll(f"sweep {name} to end",
                lambda: (lambda s: s if s["status"] != "running" else None)(get(server, name)), deadline_s)


def run_config(server, run_id):
    return requests.get(server.api(f"/runs/{run_id}"), timeout=30).json()["config"]


def at(cfg, key):
    node = cfg
    for part in key.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


# ---- grid and random ----

def test_grid_visits_every_point_once_and_finds_the_optimum(serve, tool):
    server = start(serve, tool)
    space = {"optimizer.learning_rate": [0.001, 0.01, 0.1], "model.layers[0].units": [16, 32]}
    done = wait_sweep(server, create(server, sweep_body("grid", {"type": "grid", "max_concurrent": 2},
                                                        space=space))["name"])
    assert done["status"] == "succeeded"
    points = sorted((t["values"]["optimizer.learning_rate"], t["values"]["model.layers[0].units"])
                    for t in done["trials"])
    assert points == sorted((lr, u) for lr in space["optimizer.learning_rate"] for u in space["model.layers[0].units"])
    for t in done["trials"]:  # each trial's run trained the point it names, to the base config's steps
        cfg = run_config(server, t["run"]["id"])
        assert (cfg["optimizer"]["learning_rate"], cfg["model"]["layers"][0]["units"]) == \
            (t["values"]["optimizer.learning_rate"], t["values"]["model.layers[0].units"])
        assert t["run"]["name"] == f"grid-t{t['trial']}" and t["run"]["step"] == 64
        want = objective(t["values"]["optimizer.learning_rate"], t["values"]["model.layers[0].units"], 64)
        assert t["results"] == [pytest.approx(want, rel=1e-5)]
    runs = requests.get(server.api("/runs?limit=100"), timeout=30).json()["runs"]
    assert sorted(r["name"] for r in runs) == sorted(f"grid-t{i}" for i in range(6))  # one run per point
    assert done["best"]["values"] == {"optimizer.learning_rate": 0.01, "model.layers[0].units": 32}
    assert done["steps_trained"] == done["steps_full"] == 6 * 64


def test_random_draws_are_the_seeds(serve, tool):
    server = start(serve, tool)
    values = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        sweep = create(server, sweep_body(name, {"type": "random", "seed": seed, "max_trials": 5}))
        values[name] = [t["values"] for t in wait_sweep(server, sweep["name"])["trials"]]
    assert values["a"] == values["b"] and values["a"] != values["c"]
    for v in values["a"]:
        assert 1e-4 <= v["optimizer.learning_rate"] <= 1 and v["model.layers[0].units"] in (8, 16, 32, 64)


# ---- ASHA against a reference ----

def reference_asha(values, max_steps, eta, rungs, max_trials):
    """ASHA (Li et al. 2020, Algorithm 2) with one worker: each decision is taken when the one running job
    ends. get_job: promote from the highest rung k a trial in the top 1/eta of rung k's results that has not
    been promoted; else start a new trial at rung 0. Returns [(trial, rung reached, [result per rung])]."""
    steps = [max(1, max_steps // eta ** (rungs - 1 - k)) for k in range(rungs)]
    results, rung, order = {}, {}, []

    def result(i, k):
        lr, u = values[i]["optimizer.learning_rate"], values[i]["model.layers[0].units"]
        return objective(lr, u, steps[k])

    def next_job():
        for k in range(rungs - 2, -1, -1):
            done = sorted((results[i][k], i) for i in results if len(results[i]) > k)
            for _, i in done[:len(done) // eta]:
                if rung[i] == k:
                    return i, k + 1
        return (len(results), 0) if len(results) < max_trials else None

    while (job := next_job()) is not None:
        i, k = job
        results.setdefault(i, [])
        rung[i] = k
        results[i].append(result(i, k))
        order.append(job)
    return [(i, rung[i], results[i]) for i in sorted(results)], order


def trial_table(sweep):
    return [(t["trial"], t["rung"], t["results"]) for t in sorted(sweep["trials"], key=lambda t: t["trial"])]


def assert_matches_reference(sweep, searcher):
    values = [t["values"] for t in sorted(sweep["trials"], key=lambda t: t["trial"])]
    want, _ = reference_asha(values, searcher["max_steps"], searcher["reduction_factor"], searcher["rungs"],
                             searcher["max_trials"])
    got = trial_table(sweep)
    assert [(i, k) for i, k, _ in got] == [(i, k) for i, k, _ in want]
    for (_, _, r), (_, _, w) in zip(got, want):
        assert r == pytest.approx(w, rel=1e-5)


ASHA = {"type": "asha", "seed": 3, "max_trials": 12, "max_steps": 64, "reduction_factor": 2, "rungs": 3,
        "max_concurrent": 1}


def test_asha_equals_the_reference_algorithm(serve, tool):
    server = start(serve, tool)
    done = wait_sweep(server, create(server, sweep_body("asha", ASHA))["name"])
    assert done["status"] == "succeeded" and done["rung_steps"] == [16, 32, 64]
    assert_matches_reference(done, ASHA)
    for t in done["trials"]:  # a trial's run stopped at its rung's steps, resumed for each promotion
        assert t["run"]["step"] == done["rung_steps"][t["rung"]] and t["run"]["status"] == "succeeded"
    assert done["steps_trained"] == sum(t["run"]["step"] for t in done["trials"]) < done["steps_full"]
    best = min(done["trials"], key=lambda t: (-t["rung"], t["results"][-1]))
    assert done["best"]["trial"] == best["trial"]


# ---- TensorBoard ----

def test_each_sweep_is_one_hparams_experiment_in_stock_tensorboard(serve, tool, tmp_path):
    from test_hparams import experiment, session_groups, sessions_of, metric
    server = start(serve, tool)
    done = wait_sweep(server, create(server, sweep_body("asha", ASHA))["name"])
    other = wait_sweep(server, create(server, sweep_body("grid", {"type": "grid"},
                                                         space={"model.layers[0].units": [8, 16]}))["name"])
    assert done["tensorboard"] == f"tensorboard --logdir {done['logdir']}" and done["logdir"] != other["logdir"]
    keys = sorted(SPACE)
    with helpers.tensorboard(done["logdir"], tmp_path) as (base, _):
        exp = experiment(base, lambda e: len(e.get("hparamInfos", [])) == len(keys))
        assert sorted(h["name"] for h in exp["hparamInfos"]) == keys
        assert [(m["name"]["group"], m["name"]["tag"]) for m in exp["metricInfos"]] == [("", "eval_loss")]
        groups = session_groups(base, keys, [("", "eval_loss")],
                                lambda g: len(sessions_of(g["sessionGroups"])) == ASHA["max_trials"])
    sessions = sessions_of(groups)
    assert sorted(sessions) == sorted(t["run"]["name"] for t in done["trials"])
    for t in done["trials"]:  # the searched values, and the metric at the trial's highest rung
        group, session = sessions[t["run"]["name"]]
        assert group["hparams"] == pytest.approx(t["values"])
        assert metric(session["metricValues"], ("", "eval_loss")) == pytest.approx(t["results"][-1], rel=1e-6)
        assert session["status"] == "STATUS_SUCCESS"
        assert session["modelUri"].endswith(f"/{t['run']['name']}-{t['run']['id'][:7]}/checkpoints")
    requests.delete(server.api("/sweeps/grid"), timeout=30)
    assert not os.path.exists(other["logdir"])  # a deleted sweep's experiment goes with it


# ---- a server killed mid-sweep ----

def steps_log(server, run_id):
    return (helpers.run_dir(server.data, run_id) / "steps.log").read_text().split()[1::2]


def test_kill_9_of_the_server_loses_nothing_and_decides_nothing_twice(serve, tool, tmp_path):
    uninterrupted = start(serve, tool, data=tmp_path / "calm")
    upload_csv(uninterrupted)
    calm = wait_sweep(uninterrupted, create(uninterrupted, sweep_body("asha", ASHA))["name"])
    uninterrupted.proc.kill()

    server = start(serve, tool, fake="step_ms=8,objective")
    create(server, sweep_body("asha", ASHA))
    rng = random.Random(11)
    kills = 0
    total = calm["steps_trained"]
    while kills < 5:  # at seeded points of the sweep's progress
        goal = min(total - 1, get(server, "asha")["steps_trained"] + rng.randint(5, 60))
        state = poll("the sweep's progress", lambda: (lambda s: s if s["steps_trained"] >= goal or
                                                      s["status"] != "running" else None)(get(server, "asha")))
        if state["status"] != "running":
            break
        children = child_pids(server.proc.pid)
        server.proc.kill()
        server.proc.wait()
        kills += 1
        poll("the children to die with the server", lambda: True if not any(map(pid_alive, children)) else None)
        server = start(serve, tool, fake="step_ms=8,objective", data=server.data)
    assert kills >= 3, "the sweep ended before the server was killed three times"
    done = wait_sweep(server, "asha")
    assert done["status"] == "succeeded"
    assert trial_table(done) == trial_table(calm)  # every start, promotion and result as without a crash
    assert done["best"]["trial"] == calm["best"]["trial"]
    for t in done["trials"]:  # each step of each trial trained once (steps redone after a crash replace theirs)
        assert steps_log(server, t["run"]["id"]) == [str(k) for k in range(1, t["run"]["step"] + 1)]
    db = sqlite3.connect(server.data / "tower.db")
    names = [n for (n,) in db.execute("SELECT name FROM runs WHERE name LIKE 'asha-t%'")]
    assert sorted(names) == sorted(f"asha-t{i}" for i in range(ASHA["max_trials"]))  # no trial started twice


# ---- control and refusals ----

def test_cancel_resume_and_delete(serve, tool):
    server = start(serve, tool, fake="step_ms=40,objective")
    create(server, sweep_body("slow", {**ASHA, "max_concurrent": 2}))
    poll("a trial running", lambda: True if any(t["run"]["status"] == "running"
                                                for t in get(server, "slow")["trials"]) else None)
    r = requests.delete(server.api("/sweeps/slow"), timeout=30)
    assert r.status_code == 409 and "cancel it first" in r.json()["error"]["message"]
    r = requests.post(server.api("/sweeps/slow/cancel"), timeout=30)
    assert r.status_code == 202 and r.json()["status"] == "cancelled", r.text
    poll("its trials stopped", lambda: True if all(t["run"]["status"] in ("cancelled", "succeeded")
                                                   for t in get(server, "slow")["trials"]) else None)
    assert requests.post(server.api("/sweeps/slow/cancel"), timeout=30).status_code == 409
    r = requests.post(server.api("/sweeps/slow/resume"), timeout=30)
    assert r.status_code == 202 and r.json()["status"] == "running"
    requests.post(server.api("/sweeps/slow/cancel"), timeout=30)
    assert requests.delete(server.api("/sweeps/slow"), timeout=30).status_code in (200, 204)
    assert requests.get(server.api("/sweeps/slow"), timeout=30).status_code == 404
    assert any(r["name"].startswith("slow-t") for r in
               requests.get(server.api("/runs?limit=100"), timeout=30).json()["runs"])  # its runs stay


@pytest.mark.parametrize("change,names", [
    ({"searcher": {"type": "asha", "reduction_factor": 1}}, "searcher.reduction_factor"),
    ({"searcher": {"type": "grid", "max_trials": 3}}, "searcher.max_trials"),
    ({"searcher": {"type": "bayes"}}, "searcher"),
    ({"space": {"optimizer.learning_rate": {"type": "log_uniform", "min": 0, "max": 1}}},
     "optimizer.learning_rate"),
    ({"space": {"model.layers[5].units": [1, 2]}}, "model.layers[5]"),
    ({"space": {"model.layers[0].units": [8, -1]}}, "units"),
    ({"space": {"batch_size": {"type": "int", "min": 0, "max": 4}}}, "batch_size"),
    ({"metric": 3}, "metric"),
    ({"colour": "red"}, "colour"),
    ({"name": "a/b"}, "name"),
])
def test_bad_sweeps_are_400s_naming_the_key(serve, tool, change, names):
    server = start(serve, tool)
    r = requests.post(server.api("/sweeps"), json=sweep_body("bad", {"type": "random", "max_trials": 4}) | change,
                      timeout=30)
    assert r.status_code == 400, r.text
    assert names in r.json()["error"]["message"], r.json()
    assert requests.get(server.api("/sweeps"), timeout=30).json()["sweeps"] == []


def test_a_space_whose_end_does_not_fit_in_memory_is_refused(serve, tool):
    """Each key's ends are checked besides the trials: the widest layer the space allows must fit."""
    server = serve("--trainer", tool("tw_faketrain"), "--memory-limit", str(256 << 20),
                   env={"TW_FAKE": "step_ms=2,objective"})
    upload_csv(server)
    body = sweep_body("wide", {"type": "random", "max_trials": 1, "seed": 1},
                      space={"model.layers[0].units": {"type": "log_uniform", "min": 1, "max": 65536}})
    body["space"]["model.layers[0].units"]["type"] = "int"
    body["config"]["model"]["layers"].insert(1, {"type": "dense", "units": 4096, "activation": "relu"})
    r = requests.post(server.api("/sweeps"), json=body, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "units" in message and "memory" in message and "256.0 MiB" in message, message
    body["space"]["model.layers[0].units"]["max"] = 64
    assert requests.post(server.api("/sweeps"), json=body, timeout=60).status_code == 201


# ---- a real sweep ----

def test_a_real_fashion_sweep_through_tower_sweep_is_one_experiment_of_16_sessions(serve, tower_bin, tmp_path):
    """The seed MLP's learning rate and width, 16 trials, ASHA, trained by the real trainer on Fashion-MNIST and
    driven through `tower sweep create --follow`; stock TensorBoard lists one experiment with 16 sessions."""
    from test_client import client
    from test_hparams import experiment, metric, session_groups, sessions_of
    from test_server import seed_config, upload_fashion
    server = serve()
    upload_fashion(server)
    cfg = seed_config(steps=160, eval_every=0, summary_every=40, checkpoint_every=0)
    spec = {"name": "fashion", "config": cfg, "metric": "eval_accuracy_ema",
            "space": {"optimizer.learning_rate": [0.01, 0.03, 0.1, 0.3], "model.layers[1].units": [32, 64, 128, 256]},
            "searcher": {"type": "asha", "sample": "grid", "seed": 1, "reduction_factor": 4, "rungs": 3,
                         "max_concurrent": 1}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = client(tower_bin, server, "sweep", "create", tmp_path / "spec.json", "--follow", timeout=1200)
    assert r.returncode == 0, r.stderr
    done = get(server, "fashion")
    assert done["status"] == "succeeded" and len(done["trials"]) == 16 and done["rung_steps"] == [10, 40, 160]
    assert sorted((t["values"]["optimizer.learning_rate"], t["values"]["model.layers[1].units"]) for t in done["trials"]) \
        == sorted((lr, u) for lr in spec["space"]["optimizer.learning_rate"] for u in spec["space"]["model.layers[1].units"])
    assert done["best"]["rung"] == 2 and done["steps_trained"] < done["steps_full"] * 0.35
    keys = sorted(spec["space"])
    with helpers.tensorboard(done["logdir"], tmp_path) as (base, _):
        exp = experiment(base, lambda e: len(e.get("hparamInfos", [])) == 2)
        assert sorted(h["name"] for h in exp["hparamInfos"]) == keys
        groups = session_groups(base, keys, [("", "eval_accuracy_ema")],
                                lambda g: len(sessions_of(g["sessionGroups"])) == 16)
    sessions = sessions_of(groups)
    for t in done["trials"]:
        assert metric(sessions[t["run"]["name"]][1]["metricValues"], ("", "eval_accuracy_ema")) == \
            pytest.approx(t["results"][-1], rel=1e-6)
