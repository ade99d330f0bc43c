"""A person's first week with Tower, end to end: one scenario against a real `tower serve` (a fresh data
folder, a free port), driven with the `tower` client binary the way a person types it (piped, and once on a
pseudo-terminal), asserting at each step what that person checks:

1. `tower upload` a CSV with its label column, a validation split and class names: it waits for the
   conversion and shows the dataset ready, 80 % / 20 %, with the names; a wrong label column exits 1 and
   lists the file's columns.
2. A long run trains; two short experiments submitted with `tower submit --follow` queue behind it, each
   stream saying where it stands in the queue and staying open longer than the server's connection timeout,
   then (the long run cancelled) running and succeeding.
3. `tower compare` of the two: what differs in the config, the final metrics raw and EMA, the better run
   (by the EMA evaluation, the figure Tower answers with) marked.
4. A run cancelled and resumed with more steps (followed on a terminal): it continues where it stopped, and
   its attempts and total time say so.
5. A fine-tune of the better run (`"init_from"`): its first evaluation is already the parent's.
6. Classifying held-out rows with the fine-tuned run (POST /runs/{id}/predict): EMA weights by default,
   the class names, the right classes.
7. `tower download --format onnx`: a valid ONNX graph (EMA weights by default) that onnxruntime scores on
   the validation rows as the run reported.

The validation rows are read back from the dataset's test.tfrecord with TensorFlow's reader. The server
trains on its one CPU device (one run at a time), so queued runs wait.
"""
import json
import re
import subprocess
import threading
import time

import numpy as np
import pytest
import requests

from helpers import poll
from test_client import client, in_pty

tf = pytest.importorskip("tensorflow")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

CONN_TIMEOUT = 5  # the server's --conn-timeout: a silent event stream is cut after this many seconds
NAME = "shapes"
CLASSES = ["circle", "square", "star"]
COLUMNS = ["f1", "f2", "kind", "f3", "f4"]  # "kind" is the label; the others are features, in this order
ROWS, HOLDOUT = 300, 60                       # --validation-split 0.2 holds out 60 rows

COMMON = {"loss": "softmax_cross_entropy", "ema_decay": 0.99, "batch_size": 32, "seed": 1,
          "summary_every": 1000, "eval_every": 5000, "checkpoint_every": 5000}
LINEAR = {**COMMON, "model": {"layers": [{"type": "dense", "units": 3, "name": "logits"}]},
          "optimizer": {"type": "sgd", "learning_rate": 0.05}, "steps": 20000}
MLP = {**COMMON, "model": {"layers": [{"type": "dense", "units": 32, "activation": "relu", "name": "hidden"},
                                      {"type": "dense", "units": 3, "name": "logits"}]},
       "optimizer": {"type": "adam", "learning_rate": 0.01}, "steps": 20000}
# the run that holds the one device while the experiments queue: far more steps than the test waits for
LONG = {**MLP, "steps": 10_000_000, "eval_every": 0, "checkpoint_every": 1_000_000, "summary_every": 100_000}
# the run cancelled and resumed: long enough to be caught running (its progress is stored once a second)
CANCELLED = {**MLP, "steps": 1_000_000, "eval_every": 250_000, "checkpoint_every": 250_000,
             "summary_every": 50_000}


def write_csv(path):
    """ROWS rows of COLUMNS, classes 0-2 in turn. In (f1, f2) classes 0 and 1 lie in an XOR of four clusters
    and class 2 in a fifth, so an MLP tells them apart (about 95 %) and a linear model only partly (about
    70 %, still twice chance); f3 and f4 are noise."""
    rng = np.random.default_rng(0)
    label, half = np.arange(ROWS) % 3, np.arange(ROWS) // 3 % 2
    centres = np.array([[0, 0], [3, 3], [3, 0], [0, 3], [6, 6]], dtype=float)
    cluster = np.where(label == 2, 4, 2 * label + half)  # class 0: (0,0) or (3,3); class 1: (3,0) or (0,3)
    f12 = centres[cluster] + rng.normal(0, 0.8, (ROWS, 2))
    f34 = rng.normal(0, 1, (ROWS, 2))
    with open(path, "w") as f:
        f.write(",".join(COLUMNS) + "\n")
        for (f1, f2), (f3, f4), y in zip(f12, f34, label):
            f.write(f"{f1:.4f},{f2:.4f},{y},{f3:.4f},{f4:.4f}\n")


def get(server, path):
    r = requests.get(server.api(path), timeout=30)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def run_when(server, run_id, status, also=lambda run: True):
    """Polls run run_id until it has that status (and `also` holds) -> the run object."""
    def check():
        run = get(server, f"/runs/{run_id}")
        return run if run["status"] == status and also(run) else None
    return poll(f"run {run_id} to be {status}", check)


def tower(tower_bin, server, *args):
    """`tower ARGS --server URL`, piped; asserts it exited 0 -> its stdout."""
    r = client(tower_bin, server, *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def write_config(tmp_path, name, cfg):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"dataset": NAME, **cfg}))
    return path


class Follow:
    """`tower submit CONFIG --dataset NAME --name N --follow` running piped: its stdout lines as they come
    (the run id, then one JSON run object per change)."""

    def __init__(self, tower_bin, server, config, name):
        self.proc = subprocess.Popen([str(tower_bin), "submit", str(config), "--dataset", NAME, "--name", name,
                                      "--follow", "--server", server.url], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def runs(self):
        return [json.loads(line) for line in list(self.lines)[1:]]

    def first(self):
        """The first run object once it is there (else None, the follow still running)."""
        runs = self.runs()
        return runs[0] if runs or not self.alive() else None

    def alive(self):
        assert self.proc.poll() is None, f"the follow ended ({self.proc.returncode}): {self.proc.stderr.read()}"
        return True

    def finish(self):
        """Waits for the end -> (exit status, run objects, stderr)."""
        rc = self.proc.wait(timeout=300)
        self.reader.join()
        return rc, self.runs(), self.proc.stderr.read()


def scalars(server, run_id):
    return get(server, f"/runs/{run_id}/metrics")["scalars"]


def compare_sections(text):
    """`tower compare`'s output -> {heading: [lines]} for its headed sections (a heading is a line that
    starts with "Config" or "Final metrics", in any case)."""
    sections, current = {}, None
    for line in text.splitlines():
        m = re.match(r"\W*(config|final metrics)\b", line, re.I)
        if m:
            current = sections.setdefault(m.group(1).lower(), [])
        elif current is not None and line.strip():
            current.append(line)
    return sections


def metric_row(lines, ema):
    """The accuracy row of the final metrics, EMA or raw: (its numbers as fractions, per run in order,
    and whether each is marked, e.g. "0.9667 *", "*0.9667" or "0.9667 (best)")."""
    rows = [line for line in lines if "accuracy" in line.lower() and "top" not in line.lower()
            and ("ema" in line.lower()) == ema and len(re.findall(r"\d+(?:\.\d+)?", line)) >= 2]
    assert rows, (ema, lines)
    row = rows[0]
    found = list(re.finditer(r"(\S*?)(\d+(?:\.\d+)?)(%?)(\S*)", row[row.find(" "):]))
    values, marked = [], []
    for i, m in enumerate(found):
        after = row[row.find(" "):][m.end():found[i + 1].start() if i + 1 < len(found) else None]
        values.append(float(m.group(2)) / (100 if m.group(3) else 1))
        marked.append(bool(m.group(1) or m.group(4) or after.strip()))
    return values, marked


def read_validation_rows(server, dataset_id):
    """The held-out rows as the trainer evaluates them: (features [n, 4] float32, labels [n]) from the
    dataset's test.tfrecord, through TensorFlow's reader."""
    spec = {"features": tf.io.VarLenFeature(tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}
    xs, ys = [], []
    for rec in tf.data.TFRecordDataset(str(server.data / "datasets" / dataset_id / "test.tfrecord")):
        ex = tf.io.parse_single_example(rec, spec)
        xs.append(tf.sparse.to_dense(ex["features"]).numpy())
        ys.append(int(ex["label"]))
    return np.array(xs, dtype=np.float32), np.array(ys)


def test_a_first_week_with_tower(serve, tower_bin, tmp_path):
    server = serve("--conn-timeout", CONN_TIMEOUT, env={"CUDA_VISIBLE_DEVICES": ""})
    # the server trains one run at a time: one device
    assert len(get(server, "/devices")["devices"]) == 1

    # ---- 1. upload: waits for the conversion, shows the dataset ready with its split and names
    csv = tmp_path / "data.csv"
    write_csv(csv)
    out = tower(tower_bin, server, "upload", NAME, csv, "--label-column", "kind", "--validation-split", "0.2",
                "--split-seed", "1", "--class-names", ",".join(CLASSES))
    assert re.search(r"\bready\b", out), out
    assert re.search(rf"\b{ROWS - HOLDOUT}\b", out) and re.search(rf"\b{HOLDOUT}\b", out), out
    assert all(re.search(rf"\b{c}\b", out) for c in CLASSES), out
    dataset = get(server, f"/datasets/{NAME}")
    assert dataset["status"] == "ready" and dataset["source"] == "csv"
    assert (dataset["train_examples"], dataset["test_examples"]) == (ROWS - HOLDOUT, HOLDOUT)
    assert dataset["test_split"] == {"method": "fraction", "fraction": 0.2, "seed": 1, "stratified": True}
    assert dataset["class_names"] == CLASSES
    assert dataset["feature_names"] == [c for c in COLUMNS if c != "kind"]
    # a wrong label column: exit 1, the file's columns listed and the option to use, no server path
    bad = client(tower_bin, server, "upload", "typo", csv, "--label-column", "nope")
    said = bad.stdout + bad.stderr
    assert bad.returncode == 1, said
    assert "nope" in said and all(re.search(rf"\b{c}\b", said) for c in COLUMNS), said
    assert re.search(r"label[-_]column", said) and "data.csv" in said and str(server.data) not in said, said

    # ---- 2. a long run trains; two experiments queue behind it, each followed
    long_id = tower(tower_bin, server, "submit", write_config(tmp_path, "long", LONG), "--name", "long").split()[0]
    run_when(server, long_id, "running")
    a = Follow(tower_bin, server, write_config(tmp_path, "linear", LINEAR), "linear")
    first_a = poll("the linear run's first event", a.first)
    b = Follow(tower_bin, server, write_config(tmp_path, "mlp", MLP), "mlp")
    first_b = poll("the mlp run's first event", b.first)
    queued_at = time.monotonic()
    # each says it is queued and where it stands, and the first when it should start (after the long run)
    assert first_a["status"] == first_b["status"] == "queued", (first_a, first_b)
    assert (first_a["queue_position"], first_b["queue_position"]) == (1, 2), (first_a, first_b)
    expected = poll("the first queued run's expected start", lambda: get(server, "/runs/linear")["expected_start"])
    assert expected >= first_a["created"], (expected, first_a)
    # the streams stay open while queued longer than the server's connection timeout

    def waited():
        assert a.alive() and b.alive()
        assert get(server, f"/runs/{long_id}")["status"] == "running"
        return True if time.monotonic() - queued_at > CONN_TIMEOUT + 2 else None
    poll("the queued runs to wait past the connection timeout", waited)
    assert [r["status"] for r in a.runs() + b.runs()] == ["queued"] * len(a.runs() + b.runs())
    # the long run gives way: cancelled, the two run in turn and succeed
    assert tower(tower_bin, server, "cancel", long_id).split()[0] == long_id
    for follow in (a, b):
        rc, runs, err = follow.finish()
        assert rc == 0, err
        statuses = [r["status"] for r in runs]
        assert statuses[0] == "queued" and statuses[-1] == "succeeded" and "running" in statuses, statuses
        assert statuses == sorted(statuses, key=["queued", "running", "succeeded"].index), statuses
        assert runs[-1]["queue_position"] is None and runs[-1]["step"] == 20000
    assert get(server, f"/runs/{long_id}")["status"] == "cancelled"
    runs = {name: get(server, f"/runs/{name}") for name in ("linear", "mlp")}
    assert runs["linear"]["started"] < runs["mlp"]["started"]  # in the order they queued

    # ---- 3. compare: what differs, final metrics raw and EMA, the better one marked
    ema = {name: run["metrics"]["eval_accuracy_ema"] for name, run in runs.items()}
    assert min(ema.values()) > 0.6 and ema["mlp"] != ema["linear"], ema  # both learnt: chance is 1/3
    better = max(ema, key=ema.get)
    out = tower(tower_bin, server, "compare", "linear", "mlp")
    sections = compare_sections(out)
    assert {"config", "final metrics"} <= set(sections), out
    keys = [line.split()[0].rstrip(":") for line in sections["config"]]
    assert "optimizer.learning_rate" in keys and "batch_size" not in keys, out  # only what differs
    assert [line.split()[0] for line in out.splitlines() if line.strip()].count("name") <= 1, out
    for weights, key in ((False, "eval_accuracy"), (True, "eval_accuracy_ema")):
        values, marked = metric_row(sections["final metrics"], ema=weights)
        assert values == pytest.approx([runs[n]["metrics"][key] for n in ("linear", "mlp")], abs=0.005), out
        if weights:  # the EMA figure decides: the better run, and only it, is marked
            assert marked == [n == better for n in ("linear", "mlp")], out

    # ---- 4. cancel and resume: the run continues where it stopped, its attempts say so
    run_id = tower(tower_bin, server, "submit", write_config(tmp_path, "long-mlp", CANCELLED),
                   "--name", "long-mlp").split()[0]
    caught = run_when(server, run_id, "running", lambda r: r["step"] > 0)
    assert tower(tower_bin, server, "cancel", run_id).split()[0] == run_id
    stopped = run_when(server, run_id, "cancelled")
    assert caught["step"] <= stopped["step"] < CANCELLED["steps"]
    more = CANCELLED["steps"] + 100_000
    rc, screen = in_pty([str(tower_bin), "resume", run_id, "--steps", str(more), "--follow", "--server", server.url])
    screen = screen.decode()
    assert rc == 0, screen
    assert f"/{more}" in screen, screen  # the progress line: step/steps
    assert re.search(rf"{run_id} succeeded at step {more}\b", screen), screen  # the closing line
    run = get(server, f"/runs/{run_id}")
    assert run["status"] == "succeeded" and run["step"] == more
    first, second = run["attempts"]
    assert (first["attempt"], first["reason"], second["attempt"], second["reason"]) == (1, "cancelled", 2, "succeeded")
    assert first["step_start"] == 0 and first["step_end"] == stopped["step"] > 0
    assert second["step_start"] == first["step_end"] and second["step_end"] == more  # no restart from 0
    spent = sum(att["ended"] - att["started"] for att in run["attempts"])
    assert run["total_time_s"] >= spent - 1e-3, run

    # ---- 5. fine-tune the better run: its first evaluation is already the parent's, not an untrained model's
    tuned = {**(MLP if better == "mlp" else LINEAR), "steps": 2000, "eval_every": 1000, "checkpoint_every": 1000,
             "optimizer": {"type": "sgd", "learning_rate": 0.001}, "init_from": {"run": better, "weights": "ema"}}
    tower(tower_bin, server, "submit", write_config(tmp_path, "tuned", tuned), "--dataset", NAME, "--name",
          "tuned", "--follow")
    step0, untrained = scalars(server, "tuned")["eval/accuracy"][0], scalars(server, better)["eval/accuracy"][0]
    assert step0[0] == untrained[0] == 0 and abs(step0[1] - ema[better]) <= 1 / HOLDOUT, (step0, ema)
    assert step0[1] > untrained[1] + 0.2, (step0, untrained)
    final = get(server, "/runs/tuned")["metrics"]["eval_accuracy_ema"]
    assert final >= ema[better] - 2 / HOLDOUT, (final, ema)

    # ---- 6. classify the held-out rows with the fine-tuned run: EMA weights, class names, right classes
    x, y = read_validation_rows(server, dataset["id"])
    assert len(y) == HOLDOUT
    r = requests.post(server.api("/runs/tuned/predict"), json={"inputs": x.tolist()}, timeout=60)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["weights"] == "ema" and len(reply["predictions"]) == HOLDOUT
    top = [p["top_k"][0] for p in reply["predictions"]]
    assert all(t["name"] == CLASSES[t["class"]] for t in top)
    predicted = np.array([t["class"] for t in top])
    assert abs(np.mean(predicted == y) - final) <= 1 / HOLDOUT, (np.mean(predicted == y), final)

    # ---- 7. export ONNX (EMA weights by default) and score the validation rows with onnxruntime
    model = tmp_path / "model.onnx"
    assert tower(tower_bin, server, "download", "tuned", "--format", "onnx", "-o", model).strip() == str(model)
    proto = onnx.load(str(model))
    onnx.checker.check_model(proto, full_check=True)
    assert {p.key: p.value for p in proto.metadata_props}["tower.weights"] == "ema"
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    probabilities = session.run(["probabilities"], {"input": x})[0]
    assert np.mean(probabilities.argmax(1) == y) == pytest.approx(final, abs=1 / HOLDOUT)
    assert np.sum(probabilities.argmax(1) != predicted) <= 1  # the same answers as the server's
