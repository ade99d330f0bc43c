"""`tower sweep` (create, list, show, cancel, resume, delete) against a real `tower serve` whose trainer is the
fake one with its objective switch: eval_loss = 2.3 exp(-k/200) + 0.05 + (log10(lr) + 2)^2 +
(log2(units) - 5)^2 / 10, so a grid over the learning rate [0.001, 0.01, 0.1] and the first layer's units
[16, 32] has its best at lr 0.01 and 32 units (eval_loss 1.8412 at step 50). What `create --follow` prints
piped (JSON lines) and on a terminal (a line per trial, the best last), `show` piped against GET
/api/v1/sweeps/NAME, the list's row, cancel and resume on a slower trainer, and the server's refusals."""
import json
import re
import subprocess

import pytest
import requests

from conftest import BUILD, start_server
from helpers import poll
from test_client import client, in_pty
from test_runs_control import upload_csv

LR, UNITS = "optimizer.learning_rate", "model.layers[0].units"
BEST = {LR: 0.01, UNITS: 32}


def base_config(steps=50):
    return {"dataset": "tab",
            "model": {"layers": [{"type": "dense", "units": 4, "activation": "relu"}, {"type": "dense", "units": 2}]},
            "optimizer": {"type": "sgd", "learning_rate": 0.05}, "batch_size": 16, "steps": steps,
            "eval_every": 25, "checkpoint_every": 25}


def spec(name="grid", **searcher):
    return {"name": name, "config": base_config(),
            "space": {LR: [0.001, 0.01, 0.1], UNITS: [16, 32]},
            "searcher": {"type": "grid", **searcher}, "metric": "eval_loss", "maximize": False}


def write(tmp_path, name, doc):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def get_sweep(server, ref):
    r = requests.get(server.api(f"/sweeps/{ref}"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def rows_of(table):
    """A piped table's lines -> (header cells, [row cells]) split on runs of spaces."""
    header, *rows = table.strip("\n").splitlines()
    return header.split(), [row.split() for row in rows]


@pytest.fixture(scope="module")
def fast(tower_bin, tmp_path_factory):
    """A server whose fake trainer steps every 2 ms, with the CSV dataset "tab"."""
    data = tmp_path_factory.mktemp("sweeps") / "data"
    server = start_server(tower_bin, data, "--trainer", BUILD / "tests" / "tools" / "tw_faketrain",
                          env={"TW_FAKE": "step_ms=2,objective"})
    try:
        upload_csv(server)
        yield server
    finally:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="module")
def grid(fast, tower_bin, tmp_path_factory):
    """The grid followed to its end with `sweep create --follow`, piped: its CompletedProcess."""
    path = write(tmp_path_factory.mktemp("specs"), "grid", spec("ignored"))
    r = client(tower_bin, fast, "sweep", "create", path, "--name", "grid", "--follow")
    assert r.returncode == 0, r.stderr
    return r


# ---------------------------------------------------------------- create --follow

def test_create_follow_piped_prints_json_lines_and_ends_with_the_best(grid, fast):
    first, *lines = grid.stdout.splitlines()
    sweep = get_sweep(fast, "grid")
    assert first == f"{sweep['id']} grid running: grid, 6 trials planned, each trained to 50 steps"
    objects = [json.loads(line) for line in lines]
    *trials, end = objects
    assert trials and all(set(t) == {"trial", "values", "rung", "results", "run"} for t in trials)
    last = {t["trial"]: t for t in trials}  # the last line of each trial is how it ended
    assert sorted(last) == list(range(6))
    assert all(t["run"]["status"] == "succeeded" and t["run"]["step"] == 50 for t in last.values())
    assert "trials" not in end and end["name"] == "grid" and end["status"] == "succeeded"
    assert end["best"]["values"] == BEST and end["best"]["run"]["name"] == f"grid-t{end['best']['trial']}"
    assert end["best"]["results"][0] == pytest.approx(1.841242, abs=1e-4)
    assert [last[t["trial"]] == t for t in sweep["trials"]] == [True] * 6  # what the server shows at the end
    assert "\r" not in grid.stdout and grid.stderr == ""


def test_create_follow_on_a_terminal_draws_trial_lines_and_the_best(fast, tower_bin, tmp_path):
    path = write(tmp_path, "tty", spec("grid-tty"))
    status, out = in_pty([str(tower_bin), "sweep", "create", str(path), "--follow", "--server", fast.url])
    text = out.decode()
    assert status == 0, text
    assert "{" not in text  # no JSON
    assert re.search(r"trial 3  grid-tty-t3  succeeded\s+50/50\s+eval_loss 1\.8412 @50  "
                     r"optimizer\.learning_rate=0\.01 model\.layers\[0\]\.units=32\r\n", text), text
    assert "\r\x1b[Kgrid-tty: " in text and " trials started, " in text  # the progress line
    assert text.endswith("\r\x1b[Ksweep grid-tty succeeded: 300 steps trained (100% of 300)\r\n"
                         "best: trial 3 (grid-tty-t3) eval_loss 1.8412 with optimizer.learning_rate=0.01, "
                         "model.layers[0].units=32\r\n"), text


# ---------------------------------------------------------------- show, list

def test_show_piped_matches_the_api(grid, fast, tower_bin):
    r = client(tower_bin, fast, "sweep", "show", "grid")
    assert r.returncode == 0, r.stderr
    head, trials = r.stdout.split("\nTrials (* the best)\n")
    facts = dict(line.split(None, 1) for line in head.strip().splitlines())
    sweep = get_sweep(fast, "grid")
    assert facts["sweep"] == f"grid ({sweep['id']})" and facts["status"] == "succeeded"
    assert facts["searcher"] == "grid" and facts["metric"] == "eval_loss, lowest is best"
    assert facts["rungs"] == "50 steps" and facts["trials"] == "6 started of 6 planned"
    assert facts["steps"] == "300 steps trained (100% of 300: every trial to 50 steps)"
    assert facts["best"] == (f"trial {sweep['best']['trial']} (grid-t{sweep['best']['trial']}): eval_loss 1.8412 "
                             "with optimizer.learning_rate=0.01, model.layers[0].units=32")
    header, rows = rows_of(trials)
    assert header == ["TRIAL", LR, UNITS, "RUNG", "EVAL_LOSS", "RUN", "STATUS", "STEP"]
    assert len(rows) == 6
    for row, t in zip(rows, sweep["trials"]):
        assert row[0].rstrip("*") == str(t["trial"])
        assert row[0].endswith("*") == (t["trial"] == sweep["best"]["trial"])  # the best, and only it, marked
        assert float(row[1]) == pytest.approx(t["values"][LR]) and int(row[2]) == t["values"][UNITS]
        assert int(row[3]) == t["rung"] and float(row[4]) == pytest.approx(t["results"][0], abs=1e-4)
        assert row[5:] == [t["run"]["name"], t["run"]["status"], f"{t['run']['step']}/{t['run']['steps']}"]
    best = next(row for row in rows if row[0].endswith("*"))
    assert [float(best[1]), int(best[2])] == [BEST[LR], BEST[UNITS]]


def test_show_json_is_the_servers_json(grid, fast, tower_bin):
    r = client(tower_bin, fast, "sweep", "show", "grid", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == get_sweep(fast, "grid")


def test_list_row(grid, fast, tower_bin):
    r = client(tower_bin, fast, "sweep", "list")
    assert r.returncode == 0, r.stderr
    header, rows = rows_of(r.stdout)
    assert header == ["ID", "NAME", "STATUS", "SEARCHER", "METRIC", "TRIALS", "BEST"]
    sweep = get_sweep(fast, "grid")
    row = next(row for row in rows if row[1] == "grid")
    assert row[:6] == [sweep["id"], "grid", "succeeded", "grid", "eval_loss", "6/6"]
    assert float(row[6]) == pytest.approx(sweep["best"]["results"][0], abs=1e-4)


def test_config_and_dataset_options_override_the_spec(fast, tower_bin, tmp_path):
    body = spec("from-files")
    del body["config"]
    run = {**base_config(), "dataset": {"train": "/nowhere/train.tfrecord", "shape": [2], "shuffle_buffer": 64}}
    r = client(tower_bin, fast, "sweep", "create", write(tmp_path, "spec", body), "--config",
               write(tmp_path, "run", run), "--dataset", "tab", "--follow")
    assert r.returncode == 0, r.stderr
    sweep = get_sweep(fast, "from-files")
    assert sweep["config"]["dataset"] == {"shuffle_buffer": 64, "name": "tab"}  # the paths replaced
    assert sweep["config"]["steps"] == 50 and json.loads(r.stdout.splitlines()[-1])["best"]["values"] == BEST


# ---------------------------------------------------------------- errors, usage

def test_a_bad_spec_prints_the_servers_message_naming_the_key(fast, tower_bin, tmp_path):
    for searcher, key in (({"type": "asha", "reduction_factor": 1}, "searcher.reduction_factor"),
                          ({"type": "bayes"}, "searcher.type")):
        r = client(tower_bin, fast, "sweep", "create", write(tmp_path, "bad", {**spec("bad"), "searcher": searcher}))
        assert r.returncode == 1 and r.stdout == "", r.stdout
        assert r.stderr.startswith("tower sweep create: searcher") and key in r.stderr, r.stderr
        assert r.stderr.endswith("(HTTP 400 INVALID_ARGUMENT)\n") and r.stderr.count("\n") == 1
    r = client(tower_bin, fast, "sweep", "show", "no-such-sweep")
    assert r.returncode == 1 and "no-such-sweep" in r.stderr and "(HTTP 404 NOT_FOUND)" in r.stderr
    r = client(tower_bin, fast, "sweep", "create", write(tmp_path, "grid", spec("grid")))
    assert r.returncode == 1 and "(HTTP 409 CONFLICT)" in r.stderr  # the name is taken


def test_sweep_usage_errors_exit_2(tower_bin, tmp_path):
    (tmp_path / "broken.json").write_text("{")
    cases = [(), ("bogus",), ("show",), ("list", "extra"), ("list", "--json"), ("create", tmp_path / "broken.json"),
             ("create", tmp_path / "missing.json"), ("cancel", "a", "b")]
    for args in cases:
        r = subprocess.run([str(tower_bin), "sweep", *map(str, args)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("tower sweep") and "tower sweep" in r.stderr.splitlines()[-1], r.stderr
    h = subprocess.run([str(tower_bin), "sweep", "--help"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and all(f"tower sweep {c}" in h.stdout
                                     for c in ("create", "list", "show", "cancel", "resume", "delete"))
    h = subprocess.run([str(tower_bin), "sweep", "create", "--help"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and h.stdout.startswith("usage: tower sweep create SPEC.json") and "--follow" in h.stdout


# ---------------------------------------------------------------- cancel, resume, delete

@pytest.fixture
def slow(serve, tool):
    """A server whose fake trainer steps every 50 ms: a trial of 50 steps trains for 2.5 s."""
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=50,objective"})
    upload_csv(server)
    return server


def a_trial_runs(server, name):
    return lambda: True if any(t["run"]["status"] == "running" for t in get_sweep(server, name)["trials"]) else None


def test_cancel_resume_and_delete_change_the_status(slow, tower_bin, tmp_path):
    r = client(tower_bin, slow, "sweep", "create", write(tmp_path, "slow", spec("slow")))
    assert r.returncode == 0, r.stderr
    sweep_id = r.stdout.split()[0]
    poll("a trial to run", a_trial_runs(slow, "slow"))
    c = client(tower_bin, slow, "sweep", "cancel", "slow")
    assert (c.returncode, c.stdout) == (0, f"{sweep_id} slow cancelled\n"), c.stderr
    assert get_sweep(slow, "slow")["status"] == "cancelled"
    again = client(tower_bin, slow, "sweep", "cancel", "slow")
    assert again.returncode == 1 and "only a running sweep can be cancelled (HTTP 409 CONFLICT)" in again.stderr
    row = next(r.split() for r in client(tower_bin, slow, "sweep", "list").stdout.splitlines() if " slow " in r)
    assert row[2] == "cancelled"
    r = client(tower_bin, slow, "sweep", "resume", sweep_id)
    assert (r.returncode, r.stdout) == (0, f"{sweep_id} slow running\n"), r.stderr
    assert get_sweep(slow, "slow")["status"] == "running"
    d = client(tower_bin, slow, "sweep", "delete", "slow")
    assert d.returncode == 1 and "cancel it first" in d.stderr and "(HTTP 409 CONFLICT)" in d.stderr
    assert client(tower_bin, slow, "sweep", "cancel", "slow").returncode == 0
    d = client(tower_bin, slow, "sweep", "delete", "slow")
    assert (d.returncode, d.stdout) == (0, "slow deleted\n"), d.stderr
    assert requests.get(slow.api("/sweeps/slow"), timeout=10).status_code == 404
    assert " slow " not in client(tower_bin, slow, "sweep", "list").stdout


def test_follow_of_a_cancelled_sweep_exits_1(slow, tower_bin, tmp_path):
    path = write(tmp_path, "followed", spec("followed"))
    follow = subprocess.Popen([str(tower_bin), "sweep", "create", str(path), "--follow", "--server", slow.url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll("the sweep", lambda: True if requests.get(slow.api("/sweeps/followed"), timeout=10).ok else None)
        poll("a trial to run", a_trial_runs(slow, "followed"))
        assert client(tower_bin, slow, "sweep", "cancel", "followed").returncode == 0
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 1, err
    end = json.loads(out.splitlines()[-1])
    assert end["name"] == "followed" and end["status"] == "cancelled" and err == ""
