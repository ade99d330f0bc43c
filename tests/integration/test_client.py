"""The `tower` client commands (runs, submit, logs, cancel, resume, download, upload, compare) against a
real `tower serve`: the real trainer where a run's numbers matter, the fake trainer (tests/tools/
tw_faketrain) where a run need not train; errors (the server's error envelope, exit 1; usage, exit 2);
`submit --dataset` with examples/seed_mlp.json as it is; and the progress line on a pseudo-terminal
(`tower train`, `submit --follow`) against the JSON lines a pipe gets."""
import json
import os
import pty
import re
import subprocess

import numpy as np
import pytest
import requests
from safetensors.numpy import load_file

from conftest import FASHION, ROOT, start_server
from helpers import poll

SEED = ROOT / "examples" / "seed_mlp.json"
IDX = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
       "t10k-labels-idx1-ubyte.gz"]
COLUMNS = ["ID", "NAME", "STATUS", "STEP", "LOSS", "EVAL_ACCURACY_EMA", "DATASET", "CREATED"]


def client(tower_bin, server, *args, token=None, timeout=300):
    """Runs `tower ARGS --server URL` with its stdout piped -> CompletedProcess."""
    env = {k: v for k, v in os.environ.items() if k not in ("TOWER_URL", "TOWER_TOKEN")}
    if token:
        env["TOWER_TOKEN"] = token
    return subprocess.run([str(tower_bin), *map(str, args), "--server", server.url], capture_output=True,
                          text=True, timeout=timeout, env=env)


def in_pty(argv, timeout=300):
    """Runs argv with its stdout (and stderr) on a pseudo-terminal -> (exit status, output bytes)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def short_config(tmp_path, name, **over):
    """examples/seed_mlp.json with its file paths kept (--dataset replaces them) and fewer steps."""
    cfg = json.loads(SEED.read_text())
    cfg.update({"steps": 300, "summary_every": 100, "eval_every": 150, "checkpoint_every": 150}, **over)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


def get_run(server, run_id):
    return requests.get(server.api(f"/runs/{run_id}"), timeout=10).json()


def has_route(server, method, path):
    doc = requests.get(server.api("/openapi.json"), timeout=10).json()
    return method.lower() in doc["paths"].get(path, {})


@pytest.fixture(scope="module")
def real(tower_bin, tmp_path_factory):
    """A server with the real trainer and Fashion-MNIST uploaded by `tower upload --wait` (IDX pairs)."""
    data = tmp_path_factory.mktemp("client") / "data"
    server = start_server(tower_bin, data)
    try:
        r = client(tower_bin, server, "upload", "fashion-mnist", *(FASHION / f for f in IDX), "--wait")
        assert r.returncode == 0, r.stderr
        dataset_id, name, status = r.stdout.split()[:3]
        assert (name, status) == ("fashion-mnist", "ready:"), r.stdout
        d = requests.get(server.api(f"/datasets/{dataset_id}"), timeout=10).json()
        assert d["source"] == "idx" and d["train_examples"] == 60000 and d["test_examples"] == 10000
        yield server
    finally:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="module")
def finished(real, tower_bin, tmp_path_factory):
    """Two short real runs followed to their end with `submit --follow` (piped), differing in the
    learning rate and the seed: (run ids, the first follow's CompletedProcess)."""
    tmp = tmp_path_factory.mktemp("configs")
    follows = []
    for name, lr, seed in (("lr-a", 0.001, 1), ("lr-b", 0.01, 2)):
        cfg = short_config(tmp, name, optimizer={"type": "sgd", "learning_rate": lr}, seed=seed)
        follows.append(client(tower_bin, real, "submit", cfg, "--dataset", "fashion-mnist", "--name", name,
                              "--follow"))
    for f in follows:
        assert f.returncode == 0, f.stderr
    return [f.stdout.splitlines()[0] for f in follows], follows[0]


# ---------------------------------------------------------------- submit, follow, runs

def test_submit_follow_piped_prints_json_lines_to_the_end(finished, real):
    ids, follow = finished
    lines = follow.stdout.splitlines()
    assert re.fullmatch(r"r[0-9a-f]{15}", lines[0])
    runs = [json.loads(line) for line in lines[1:]]
    assert runs and all(r["id"] == ids[0] for r in runs)
    assert runs[-1]["status"] == "succeeded" and runs[-1]["step"] == 300
    assert "\r" not in follow.stdout
    assert get_run(real, ids[0])["status"] == "succeeded"


def test_dataset_option_submits_the_example_config_as_it_is(real, tower_bin):
    r = client(tower_bin, real, "submit", SEED, "--dataset", "fashion-mnist", "--name", "as-is")
    assert r.returncode == 0, r.stderr
    run = get_run(real, r.stdout.strip())
    assert run["name"] == "as-is" and run["dataset"]["name"] == "fashion-mnist"
    # the example's overrides are kept, its paths replaced by the dataset's
    assert run["config"]["dataset"]["shuffle_buffer"] == 10000
    assert run["config"]["steps"] == 30000
    # the same file without --dataset: the server refuses its paths, naming the key; exit 1
    bad = client(tower_bin, real, "submit", SEED)
    assert bad.returncode == 1 and "dataset.train" in bad.stderr and "INVALID_ARGUMENT" in bad.stderr
    # cancel it (running or queued), then resume it
    c = client(tower_bin, real, "cancel", run["id"])
    assert c.returncode == 0, c.stderr
    assert c.stdout.split()[0] == run["id"]
    poll("the run to stop", lambda: True if get_run(real, run["id"])["status"] == "cancelled" else None)
    again = client(tower_bin, real, "cancel", run["id"])
    assert again.returncode == 1 and "CONFLICT" in again.stderr
    resumed = client(tower_bin, real, "resume", run["id"])
    if has_route(real, "POST", "/api/v1/runs/{id}/resume"):
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.split()[0] == run["id"]
        assert client(tower_bin, real, "cancel", run["id"]).returncode == 0
        poll("the resumed run to stop",
             lambda: True if get_run(real, run["id"])["status"] == "cancelled" else None)
    else:  # the route is missing: the server's envelope, cleanly
        assert resumed.returncode == 1 and resumed.stdout == ""
        assert re.search(r"\(HTTP 40[45] (NOT_FOUND|METHOD_NOT_ALLOWED)\)", resumed.stderr), resumed.stderr
        assert resumed.stderr.count("\n") == 1


def test_runs_table(finished, real, tower_bin):
    ids, _ = finished
    r = client(tower_bin, real, "runs")
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split() == COLUMNS
    by_id = {row.split()[0]: row.split() for row in rows}
    for run_id, name in zip(ids, ("lr-a", "lr-b")):
        row = by_id[run_id]
        assert row[1:4] == [name, "succeeded", "300/300"]
        float(row[4])  # loss
        # the headline accuracy is the EMA weights' evaluation (README: "raw and EMA")
        assert float(row[5]) == pytest.approx(get_run(real, run_id)["metrics"]["eval_accuracy_ema"], abs=1e-4)
        assert row[6] == "fashion-mnist"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", row[7]) and re.fullmatch(r"\d\d:\d\d:\d\d", row[8])


# ---------------------------------------------------------------- logs, download, compare

def test_logs_and_follow(finished, real, tower_bin):
    run_id = finished[0][0]
    r = client(tower_bin, real, "logs", run_id)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines[-1]["status"] == "completed" and any("eval_accuracy" in line for line in lines)
    f = client(tower_bin, real, "logs", run_id, "-f")  # a finished run: everything, then the end
    assert f.returncode == 0 and f.stdout == r.stdout


def test_download_latest_and_by_step(finished, real, tower_bin, tmp_path):
    run_id = finished[0][0]
    out = tmp_path / "latest.safetensors"
    r = client(tower_bin, real, "download", run_id, "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    tensors = load_file(str(out))
    assert tensors and all(np.isfinite(t).all() for t in tensors.values())
    step = tmp_path / "step150.safetensors"
    r = client(tower_bin, real, "download", run_id, "--step", 150, "-o", step)
    if has_route(real, "GET", "/api/v1/runs/{id}/checkpoints/{step}"):
        assert r.returncode == 0, r.stderr
        assert load_file(str(step)).keys() == tensors.keys()
    else:  # the route is missing: the envelope, and no file left behind
        assert r.returncode == 1 and "(HTTP 404 NOT_FOUND)" in r.stderr
        assert not step.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["latest.safetensors"] or step.exists()


def test_compare_shows_differing_hparams_and_final_metrics(finished, real, tower_bin):
    ids, _ = finished
    r = client(tower_bin, real, "compare", *ids)
    assert r.returncode == 0, r.stderr
    head, config, final = re.split(r"\n(?:Config|Final metrics)\b[^\n]*\n", r.stdout)
    rows = {line.split()[0]: line.split()[1:] for line in head.splitlines() if line.strip()}
    assert rows["id"] == ids and rows["name"] == ["lr-a", "lr-b"]
    assert r.stdout.count("lr-a") == 1  # the name once, not again among the config keys
    rows = {line.split()[0]: line.split()[1:] for line in config.splitlines() if line.strip()}
    assert rows["optimizer.learning_rate"] == ["0.001", "0.01"] and rows["seed"] == ["1", "2"]
    assert "batch_size" not in rows and "steps" not in rows  # the same in both
    rows = {line.split()[0]: line.split()[1:] for line in final.splitlines() if line.strip()}
    runs = [get_run(real, i)["metrics"] for i in ids]
    for metric in ("eval_accuracy", "eval_accuracy_ema", "eval_loss", "eval_loss_ema", "loss"):
        cells = rows[metric]
        assert [float(c.rstrip("*")) for c in cells] == pytest.approx([m[metric] for m in runs], abs=1e-4)
        values = [m[metric] for m in runs]
        best = values.index(max(values) if "accuracy" in metric else min(values))
        if values[0] != values[1]:  # the best, and only it, is marked
            assert [c.endswith("*") for c in cells] == [i == best for i in range(2)], (metric, cells)


# ---------------------------------------------------------------- errors, usage, token

def test_errors_print_the_envelope_and_exit_1(real, tower_bin, tmp_path):
    for args in (("cancel", "r0000000000000000"), ("logs", "r0000000000000000"),
                 ("download", "r0000000000000000", "-o", tmp_path / "x"),
                 ("compare", "r0000000000000000", "r0000000000000001")):
        r = client(tower_bin, real, *args)
        assert r.returncode == 1, args
        assert "r0000000000000000" in r.stderr and "(HTTP 404 NOT_FOUND)" in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()
    r = client(tower_bin, real, "submit", SEED, "--dataset", "no-such-dataset")
    assert r.returncode == 1 and "dataset" in r.stderr and "(HTTP 404 NOT_FOUND)" in r.stderr, r.stderr


def test_usage_errors_exit_2(tower_bin, tmp_path):
    cases = [("runs", "extra"), ("submit",), ("cancel",), ("download", "r1", "--step"),
             ("runs", "--bogus"), ("compare", "r1"), ("upload", "x", tmp_path / "file.bin"),
             ("runs", "--server", "ftp://x")]
    for args in cases:
        r = subprocess.run([str(tower_bin), *map(str, args)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith(f"tower {args[0]}: ")
    h = subprocess.run([str(tower_bin), "submit", "--help"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and "exit status: 0" in h.stdout and "2 a usage error" in h.stdout


def test_unreachable_server_and_missing_file_exit_1(tower_bin):
    r = subprocess.run([str(tower_bin), "runs", "--server", "http://127.0.0.1:9"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and "cannot reach the server at http://127.0.0.1:9" in r.stderr
    r = subprocess.run([str(tower_bin), "upload", "x", "/nonexistent/d.csv", "--server", "http://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "/nonexistent/d.csv: cannot read the file" in r.stderr


@pytest.fixture
def fake(serve, tool):
    return serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=5"}, token="s3cret")


def test_token_and_uploads_by_file_kind(fake, tower_bin, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(40, dtype=np.float32).reshape(10, 4))
    np.save(tmp_path / "y_labels.npy", np.arange(10, dtype=np.int64) % 2)
    (tmp_path / "d.csv").write_text("a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(20)))
    r = client(tower_bin, fake, "upload", "n", tmp_path / "y_labels.npy", tmp_path / "x.npy", "--wait")
    assert r.returncode == 1 and "(HTTP 401 UNAUTHENTICATED)" in r.stderr  # no TOWER_TOKEN
    r = client(tower_bin, fake, "upload", "n", tmp_path / "y_labels.npy", tmp_path / "x.npy", "--wait",
               token="s3cret")
    assert r.returncode == 0, r.stderr + r.stdout
    nid = r.stdout.split()[0]
    assert requests.get(fake.api(f"/datasets/{nid}"), timeout=10).json()["source"] == "npy"
    r = client(tower_bin, fake, "upload", "c", tmp_path / "d.csv", "--label-column", "label", "--wait",
               token="s3cret")
    assert r.returncode == 0, r.stderr + r.stdout
    cid = r.stdout.split()[0]
    d = requests.get(fake.api(f"/datasets/{cid}"), timeout=10).json()
    assert d["source"] == "csv" and d["train_examples"] == 20
    # a config naming the dataset directly, on the fake trainer: submit, cancel, logs
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"dataset": "c", "model": {"layers": [{"type": "dense", "units": 2}]},
                               "loss": "softmax_cross_entropy", "optimizer": {"type": "sgd",
                               "learning_rate": 0.1}, "batch_size": 4, "steps": 100000}))
    r = client(tower_bin, fake, "submit", cfg, token="s3cret")
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip()
    poll("a step", lambda: True if get_run(fake, run_id)["step"] > 0 else None)
    assert client(tower_bin, fake, "cancel", run_id).returncode == 1  # no token
    c = client(tower_bin, fake, "cancel", run_id, token="s3cret")
    assert c.returncode == 0 and c.stdout.split()[0] == run_id, c.stderr
    poll("the cancel", lambda: True if get_run(fake, run_id)["status"] == "cancelled" else None)
    logs = client(tower_bin, fake, "logs", run_id, "--follow")
    assert logs.returncode == 0 and '"status":"cancelled"' in logs.stdout


# ---------------------------------------------------------------- the terminal's progress line

def test_submit_follow_on_a_terminal_draws_a_progress_line(real, tower_bin, tmp_path):
    cfg = short_config(tmp_path, "tty")
    status, out = in_pty([str(tower_bin), "submit", str(cfg), "--dataset", "fashion-mnist", "--follow",
                          "--server", real.url])
    text = out.decode()
    assert status == 0, text
    assert "\r\x1b[Kstep " in text and "/300" in text and "loss " in text
    assert "{" not in text  # no JSON
    assert re.search(r"r[0-9a-f]{15} succeeded at step 300: eval accuracy 0\.\d{4}", text), text


def test_train_on_a_terminal_vs_a_pipe(real, tower_bin, tmp_path):
    dataset = next((real.data / "datasets").iterdir())
    cfg = json.loads(SEED.read_text())
    cfg["dataset"].update(train=str(dataset / "train.tfrecord"), test=str(dataset / "test.tfrecord"))
    cfg.update(steps=200, summary_every=50, eval_every=100, checkpoint_every=100)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(cfg))
    status, out = in_pty([str(tower_bin), "train", str(path), "--logdir", str(tmp_path / "tty")])
    text = out.decode()
    assert status == 0, text
    assert "\r\x1b[Kstep " in text and "/200" in text and " ex/s" in text and "ETA " in text
    assert "eval at step 100: loss " in text and " accuracy 0." in text
    assert "{" not in text and "heartbeat" not in text
    piped = subprocess.run([str(tower_bin), "train", str(path), "--logdir", str(tmp_path / "pipe")],
                           capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    lines = [json.loads(line) for line in piped.stdout.splitlines()]
    assert "\r" not in piped.stdout and lines[0]["backend"] == "cpu"
    assert lines[-1]["status"] == "completed" and any("eval_accuracy" in line for line in lines)


def test_convert_on_a_terminal_vs_a_pipe(tower_bin, tmp_path):
    args = ["convert", "--images", FASHION / IDX[2], "--labels", FASHION / IDX[3]]
    status, out = in_pty([str(tower_bin), *map(str, args), "-o", str(tmp_path / "tty.tfrecord")])
    text = out.decode()
    assert status == 0, text
    assert "\r\x1b[Kconverted 8192 examples  " in text and " ex/s" in text
    assert text.endswith("\r\x1b[Ktower convert: wrote 10000 examples to " + str(tmp_path / "tty.tfrecord")
                         + " (idx, compression none); meta: " + str(tmp_path / "tty.meta.json") + "\r\n")
    piped = subprocess.run([str(tower_bin), *map(str, args), "-o", tmp_path / "pipe.tfrecord", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "\r" not in piped.stdout
    assert json.loads(piped.stdout)["train"]["count"] == 10000
