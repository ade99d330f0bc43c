"""`tower serve` end to end: curl uploads, runs with the real trainer, SSE, stock TensorBoard, the
checkpoint through the `safetensors` package, cancel/delete rules, pagination, the OpenAPI document
against the route table, kill -9 of the server during a run, and the Prometheus text."""
import json
import os
import pathlib
import re
import signal
import sqlite3
import subprocess

import pytest
import requests

import helpers
from conftest import FASHION, ROOT
from helpers import poll

FILES = {"images": "train-images-idx3-ubyte.gz", "labels": "train-labels-idx1-ubyte.gz",
         "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}


def curl_upload(server, name, fields, token=None):
    """Uploads with curl -F field=@path; returns (http_status, json)."""
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}"]
    for field, path in fields.items():
        cmd += ["-F", f"{field}=@{path}"]
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    out = subprocess.run(cmd + [server.api(f"/datasets?name={name}")], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    body, code = out.rsplit("\n", 1)
    return int(code), json.loads(body)


def upload_fashion(server, name="fashion-mnist"):
    code, d = curl_upload(server, name, {k: FASHION / v for k, v in FILES.items()}, server.token)
    assert code == 202, d
    assert d["status"] == "converting" and d["name"] == name
    return wait_dataset(server, d["id"])


def wait_dataset(server, dataset_id):
    def ready():
        d = requests.get(server.api(f"/datasets/{dataset_id}"), timeout=10).json()
        return d if d["status"] != "converting" else None
    return poll("the dataset to convert", ready)


def seed_config(**over):
    cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    cfg["dataset"] = "fashion-mnist"
    cfg.update(over)
    return cfg


def submit(server, cfg, headers=None):
    return requests.post(server.api("/runs"), json=cfg, headers={**server.headers(), **(headers or {})},
                         timeout=30)


def wait_run(server, run_id, states=("succeeded", "failed", "cancelled"), deadline_s=120):
    def done():
        r = requests.get(server.api(f"/runs/{run_id}"), timeout=10).json()
        return r if r["status"] in states else None
    return poll(f"run {run_id} to reach {states}", done, deadline_s)


def sse_events(server, run_id):
    """Yields the run objects of /runs/{id}/events until the stream ends."""
    with requests.get(server.api(f"/runs/{run_id}/events"), stream=True, timeout=60) as resp:
        assert resp.status_code == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        event = None
        for line in resp.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "run":
                yield json.loads(line[6:])


@pytest.fixture(scope="module")
def trained(tower_bin, tmp_path_factory):
    """One server with Fashion-MNIST uploaded by curl and a short seed-MLP run followed over SSE."""
    from conftest import start_server
    data = tmp_path_factory.mktemp("served") / "data"
    server = start_server(tower_bin, data)
    try:
        dataset = upload_fashion(server)
        r = submit(server, seed_config(name="seed-short", steps=3000, summary_every=250, eval_every=1000,
                                       checkpoint_every=1000))
        assert r.status_code == 201, r.text
        created = r.json()
        events = list(sse_events(server, created["id"]))
        yield server, dataset, created, events
    finally:
        server.proc.kill()
        server.proc.wait()


def test_upload_converts_fashion_mnist(trained):
    _, dataset, _, _ = trained
    assert dataset["status"] == "ready", dataset
    assert dataset["train_examples"] == 60000 and dataset["test_examples"] == 10000
    assert dataset["shape"] == [28, 28, 1]
    assert sum(dataset["label_histogram"]["train"].values()) == 60000


def test_samples_decode_pixels(trained):
    server, dataset, _, _ = trained
    s = requests.get(server.api(f"/datasets/{dataset['id']}/samples?n=4"), timeout=10).json()
    assert s["shape"] == [28, 28, 1] and len(s["samples"]) == 4
    first = s["samples"][0]
    assert len(first["pixels"]) == 784 and max(first["pixels"]) > 0 and 0 <= first["label"] <= 9


def test_submit_reply_and_sse_progress(trained):
    server, _, created, events = trained
    assert created["status"] == "queued" and created["id"].startswith("r")
    # a named run's folder, TensorBoard's name for it: the name and the id's first 7 characters
    assert created["logdir"] == str(server.data.resolve() / "runs" / f"seed-short-{created['id'][:7]}")
    steps = [e["step"] for e in events]
    assert steps == sorted(steps) and len(set(steps)) >= 2, steps
    assert events[-1]["status"] == "succeeded" and events[-1]["step"] == 3000
    assert {"queued", "running"} & {e["status"] for e in events[:-1]}


def test_run_record_after_success(trained):
    server, dataset, created, _ = trained
    run = requests.get(server.api(f"/runs/{created['id']}"), timeout=10).json()
    assert run["status"] == "succeeded" and run["reason"] is None and run["error"] is None
    assert run["name"] == "seed-short" and run["dataset"] == {"id": dataset["id"], "name": "fashion-mnist"}
    assert run["devices"] == ["cpu"] and run["restarts"] == 0
    assert 0.5 < run["metrics"]["eval_accuracy_ema"] <= 1
    assert run["finished"] >= run["started"] >= run["created"]
    assert run["config"]["steps"] == 3000


def test_metrics_route_reads_event_files(trained):
    server, _, created, _ = trained
    scalars = requests.get(server.api(f"/runs/{created['id']}/metrics"), timeout=10).json()["scalars"]
    assert [p[0] for p in scalars["loss"]] == list(range(250, 3001, 250))
    assert [p[0] for p in scalars["eval/accuracy_ema"]] == [0, 1000, 2000, 3000]


def test_stock_tensorboard_lists_the_run(trained, tmp_path):
    server, _, created, _ = trained
    folder = pathlib.Path(created["logdir"]).name  # the run's name and the start of its id
    with helpers.tensorboard(server.data / "runs", tmp_path) as (base, _):
        def tags():
            r = requests.get(base + "/data/plugin/scalars/tags", timeout=10)
            body = r.json() if r.status_code == 200 else {}
            return body if "train/loss" in body.get(folder, {}) else None
        got = poll("tensorboard to list the run's scalars", tags)
        assert {"train/loss", "train/learning_rate", "eval/accuracy", "eval/loss"} <= set(got[folder])
        ema_tags = set(got[folder + "/eval_ema"])  # the raw evaluation's tags, none of training's
        assert {"eval/accuracy", "eval/loss"} <= ema_tags <= {t for t in got[folder] if t.startswith("eval")}
        r = requests.get(base + "/data/plugin/scalars/scalars",
                         params={"run": folder, "tag": "train/loss"}, timeout=10).json()
        assert [p[1] for p in r] == list(range(250, 3001, 250))


def test_checkpoint_downloads_and_loads(trained, tmp_path):
    from safetensors.numpy import load
    server, _, created, _ = trained
    listing = requests.get(server.api(f"/runs/{created['id']}/checkpoints"), timeout=10).json()
    assert listing["latest"] == 3000
    assert {c["step"] for c in listing["checkpoints"]} >= {3000}
    r = requests.get(server.api(f"/runs/{created['id']}/checkpoints/latest"), timeout=30)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/octet-stream"
    tensors = load(r.content)
    assert tensors["layer1/weights"].shape == (784, 500)
    assert tensors["layer2/biases"].shape == (10,)


def test_log_tail(trained):
    server, _, created, _ = trained
    r = requests.get(server.api(f"/runs/{created['id']}/log?tail=3"), timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    lines = r.text.strip().split("\n")
    assert len(lines) == 3 and "completed" in r.text


def test_prometheus_text(trained):
    server, _, _, _ = trained
    text = requests.get(server.url + "/metrics", timeout=10).text
    assert re.search(r'^tower_runs\{state="succeeded"\} 1$', text, re.M)
    assert re.search(r"^tower_queue_length 0$", text, re.M)
    assert re.search(r'^tower_http_requests_total\{code="200"\} [1-9]\d*$', text, re.M)


def test_status_page_and_chartjs_served(trained):
    server, _, _, _ = trained
    page = requests.get(server.url + "/", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    chart = requests.get(server.url + "/static/chart.js", timeout=10)
    assert chart.status_code == 200 and len(chart.content) > 100000
    assert requests.get(server.url + "/static/nope.js", timeout=10).status_code == 404


# ---------------------------------------------------------------- routes and the envelope

def route_table():
    """(method, pattern) of every entry of server/routes.c."""
    text = (ROOT / "server" / "routes.c").read_text()
    return set(re.findall(r'\{"(GET|POST|DELETE)", "([^"]+)"', text))


def route_queries():
    """{(method, pattern): {query parameter: required}} from the last field of each server/routes.c entry."""
    text = (ROOT / "server" / "routes.c").read_text()
    out = {}
    for m, p, rest in re.findall(r'\{"(GET|POST|DELETE)", "([^"]+)",(.*?)\},\n', text, re.S):
        last = re.search(r'(NULL|"([^"]*)")\s*$', rest).group(2) or ""
        out[(m, p)] = {w.lstrip("!"): w.startswith("!") for w in last.split()}
    return out


def test_openapi_matches_the_route_table(serve):
    server = serve()
    doc = requests.get(server.api("/openapi.json"), timeout=10).json()
    assert doc["openapi"].startswith("3.")
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == route_table()
    queries = route_queries()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert params == set(re.findall(r"\{(\w+)\}", path)), (method, path)
            query = {p["name"]: p["required"] for p in op.get("parameters", []) if p["in"] == "query"}
            assert query == queries[(method.upper(), path)], (method, path)
            assert op["summary"]
    assert queries[("POST", "/api/v1/datasets")] == {"name": True, "label_column": False, "validation_split": False,
                                                    "split_seed": False, "test_first": False, "test_last": False,
                                                    "class_names": False, "image_size": False, "channels": False,
                                                    "resize": False, "shape": False}


def test_unknown_route_and_method(serve):
    server = serve()
    r = requests.get(server.api("/nope"), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = requests.put(server.api("/runs"), timeout=10)
    assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    r = requests.get(server.api("/runs/r0000000000000000"), timeout=10)
    assert r.status_code == 404 and "r0000000000000000" in r.json()["error"]["message"]


# ---------------------------------------------------------------- cancel, delete, pagination

def ready_dataset(server):
    return upload_fashion(server)


def test_cancel_delete_rules(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=20"})
    dataset = ready_dataset(server)
    long_run = submit(server, seed_config(steps=100000)).json()
    queued = submit(server, seed_config(steps=10)).json()
    running = wait_run(server, long_run["id"], ("running",))
    assert running["devices"] == ["cpu"]
    assert requests.get(server.api(f"/runs/{queued['id']}"), timeout=10).json()["status"] == "queued"
    # delete rules: unfinished runs and datasets in use are refused
    r = requests.delete(server.api(f"/runs/{long_run['id']}"), timeout=10)
    assert r.status_code == 409 and r.json()["error"]["code"] == "CONFLICT"
    r = requests.delete(server.api(f"/datasets/{dataset['id']}"), timeout=10)
    assert r.status_code == 409
    # cancel the queued one (immediate) and the running one (SIGTERM: it checkpoints and stops)
    assert requests.post(server.api(f"/runs/{queued['id']}/cancel"), timeout=10).status_code == 202
    assert requests.get(server.api(f"/runs/{queued['id']}"), timeout=10).json()["status"] == "cancelled"
    poll("a step of the long run", lambda: True if requests.get(server.api(f"/runs/{long_run['id']}"),
                                                                timeout=10).json()["step"] > 0 else None)
    assert requests.post(server.api(f"/runs/{long_run['id']}/cancel"), timeout=10).status_code == 202
    done = wait_run(server, long_run["id"])
    assert done["status"] == "cancelled" and 0 < done["step"] < 100000
    assert (helpers.run_dir(server.data, long_run["id"]) / "checkpoints" / "latest").exists()
    r = requests.post(server.api(f"/runs/{long_run['id']}/cancel"), timeout=10)
    assert r.status_code == 409
    # finished: both delete; files go too
    for run in (long_run, queued):
        assert requests.delete(server.api(f"/runs/{run['id']}"), timeout=10).status_code == 204
        assert not helpers.run_dir(server.data, run["id"]).exists()
    assert requests.delete(server.api(f"/datasets/{dataset['id']}"), timeout=10).status_code == 204
    assert requests.get(server.api(f"/datasets/{dataset['id']}"), timeout=10).status_code == 404


def test_pagination_and_status_filter(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=1"})
    ready_dataset(server)
    ids = [submit(server, seed_config(steps=3, name=f"p{i}")).json()["id"] for i in range(5)]
    for run_id in ids:
        wait_run(server, run_id)
    pages = [requests.get(server.api(f"/runs?limit=2&offset={o}"), timeout=10).json() for o in (0, 2, 4)]
    assert [p["total"] for p in pages] == [5, 5, 5]
    assert [r["id"] for p in pages for r in p["runs"]] == ids[::-1]
    assert pages[2]["limit"] == 2 and pages[2]["offset"] == 4 and len(pages[2]["runs"]) == 1
    ok = requests.get(server.api("/runs?status=succeeded"), timeout=10).json()
    assert ok["total"] == 5
    assert requests.get(server.api("/runs?status=running"), timeout=10).json()["total"] == 0
    for bad in ("limit=0", "limit=x", "offset=-1", "status=done"):
        r = requests.get(server.api(f"/runs?{bad}"), timeout=10)
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT", bad


def test_idempotency_key_returns_the_same_run(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=1"})
    ready_dataset(server)
    a = submit(server, seed_config(steps=2), headers={"Idempotency-Key": "k-1"})
    b = submit(server, seed_config(steps=2), headers={"Idempotency-Key": "k-1"})
    assert a.status_code == 201 and b.status_code == 200 and a.json()["id"] == b.json()["id"]
    assert requests.get(server.api("/runs"), timeout=10).json()["total"] == 1


def test_bad_configs_name_the_key(serve):
    server = serve()
    ready_dataset(server)
    cases = [({"batch_size": 0}, "batch_size"), ({"optimizr": {}}, "optimizr"),
             ({"model": {"layers": [{"type": "dense", "units": -1}]}}, "units"),
             ({"dataset": "nope"}, "dataset"), ({"name": "../x"}, "name"),
             ({"max_restarts": 1000}, "max_restarts")]
    for change, key in cases:
        r = submit(server, seed_config(**change))
        want = (404, "NOT_FOUND") if "dataset" in change else (400, "INVALID_ARGUMENT")  # names what is not there
        assert (r.status_code, r.json()["error"]["code"]) == want, (change, r.text)
        assert key in r.json()["error"]["message"]
    assert requests.get(server.api("/runs"), timeout=10).json()["total"] == 0
    assert os.listdir(server.data / "runs") == []


# ---------------------------------------------------------------- kill -9 of the server

def child_pids(server_pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid:
                    out.append(int(entry))
            except (OSError, ValueError):
                pass
    return out


def pid_alive(pid):
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def test_kill_9_during_a_run_resumes_and_completes(serve, tool):
    server = serve()
    ready_dataset(server)
    run = submit(server, seed_config(steps=8000, summary_every=100, eval_every=4000,
                                     checkpoint_every=1000)).json()
    def past_checkpoint():
        r = requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()
        return r if r["status"] == "running" and r["step"] >= 2500 else None
    poll("two checkpoints", past_checkpoint)
    children = child_pids(server.proc.pid)
    assert children
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    poll("the trainer to die with the server", lambda: True if not any(map(pid_alive, children)) else None)
    again = serve(data=server.data)
    done = wait_run(again, run["id"], deadline_s=180)
    assert done["status"] == "succeeded" and done["step"] == 8000 and done["restarts"] == 1  # the crash counts
    log = requests.get(again.api(f"/runs/{run['id']}/log?tail=1000"), timeout=10).text
    assert "resumed_from" in log
    out = subprocess.run([tool("tw_scalars"), helpers.run_dir(server.data, run["id"])], capture_output=True,
                         text=True, check=True).stdout
    steps = [p[0] for p in json.loads(out)["train/loss"]]
    assert steps == list(range(100, 8001, 100))
    db = sqlite3.connect(server.data / "tower.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
