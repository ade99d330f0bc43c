"""Every dataset can be evaluated, and datasets carry class names.

`tower convert` and the NumPy / CSV uploads of a real `tower serve` take a test file or a seeded,
class-stratified holdout fraction (read back with TensorFlow's TFRecord reader: train + test is the input,
each example once, each class's share kept); a NumPy 3-D volume regression (seed 001's kind) uploaded with
validation_split trains with eval metrics in its event file (read by TensorBoard's loader); a run on a
dataset without a test split says so at submission and on `tower train`'s first lines; class names are
parsed, checked (400 naming the problem) and shown on datasets and runs; the demo dataset has
Fashion-MNIST's ten names."""
import collections
import json
import subprocess

import numpy as np
import pytest
import requests

from conftest import FASHION
from helpers import poll
from test_server import submit, wait_dataset, wait_run
from test_train import blob_volumes  # seed 001's kind: 3-D volumes, the cube's side is the target

tf = pytest.importorskip("tensorflow")

FASHION_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot"]


def read_examples(path):
    """[(id, label)] of a converted NumPy TFRecord, in file order, through TensorFlow's reader: the id is
    the example's first float32 feature value."""
    out = []
    for rec in tf.data.TFRecordDataset(str(path)):
        ex = tf.train.Example.FromString(rec.numpy())
        f = ex.features.feature
        first = np.frombuffer(f["image_raw"].bytes_list.value[0][:4], "<f4")[0]
        label = f["label"].int64_list.value[0] if f["label"].int64_list.value else f["label"].float_list.value[0]
        out.append((int(first), label))
    return out


def classified(tmp_path, n=403, classes=(0.55, 0.3, 0.1, 0.05), seed=0):
    """x: float32 [n, 3] whose first value is the example's id; y: int64 labels, imbalanced."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 3), dtype=np.float32)
    x[:, 0] = np.arange(n)
    y = rng.choice(len(classes), size=n, p=classes).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return x, y


def convert(run_tower, tmp_path, out, *args):
    res = run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels", tmp_path / "y.npy",
                    "-o", tmp_path / f"{out}.tfrecord", *args)
    assert res.returncode == 0, res.stderr
    return json.loads((tmp_path / f"{out}.meta.json").read_text())


def test_convert_fraction_is_stratified_seeded_and_exact(tmp_path, run_tower):
    _, y = classified(tmp_path)
    names = tmp_path / "names.txt"
    names.write_text("cat\ndog\nbird\nfish\n")
    split = {}
    for out, seed in [("a", 7), ("b", 7), ("c", 8)]:
        meta = convert(run_tower, tmp_path, out, "--test-fraction", "0.2", "--seed", seed, "--test-output",
                       tmp_path / f"{out}-test.tfrecord", "--class-names", names)
        assert meta["test_split"] == {"method": "fraction", "fraction": 0.2, "seed": seed, "stratified": True}
        assert meta["class_names"] == ["cat", "dog", "bird", "fish"]
        train, test = read_examples(tmp_path / f"{out}.tfrecord"), read_examples(tmp_path / f"{out}-test.tfrecord")
        assert len(test) == round(0.2 * len(y))  # exact, like the unstratified split
        assert sorted(i for i, _ in train + test) == list(range(len(y)))  # each example exactly once
        assert all(y[i] == label for i, label in train + test)
        assert [i for i, _ in train] == sorted(i for i, _ in train)  # input order kept
        n_c, t_c = collections.Counter(y.tolist()), collections.Counter(label for _, label in test)
        for c, n in n_c.items():
            assert abs(t_c[c] - 0.2 * n) < 1, (c, t_c[c], n)  # each class's share, within one example
        split[out] = [i for i, _ in test]
    assert split["a"] == split["b"]  # deterministic
    assert split["a"] != split["c"]  # and the seed matters


def test_convert_regression_fraction_is_not_stratified(tmp_path, run_tower):
    x, _ = classified(tmp_path)
    np.save(tmp_path / "y.npy", np.linspace(0, 1, len(x)).astype(np.float32))
    meta = convert(run_tower, tmp_path, "r", "--test-fraction", "0.25", "--test-output", tmp_path / "rt.tfrecord")
    assert meta["test_split"] == {"method": "fraction", "fraction": 0.25, "seed": 0, "stratified": False}
    assert len(read_examples(tmp_path / "rt.tfrecord")) == round(0.25 * len(x))


def test_convert_numpy_and_csv_test_files(tmp_path, run_tower):
    classified(tmp_path)
    np.save(tmp_path / "tx.npy", np.zeros((9, 3), np.float32))
    np.save(tmp_path / "ty.npy", np.arange(9) % 4)
    meta = convert(run_tower, tmp_path, "n", "--test-npy-features", tmp_path / "tx.npy", "--test-npy-labels",
                   tmp_path / "ty.npy", "--test-output", tmp_path / "nt.tfrecord")
    assert meta["test_split"] == {"method": "file"} and meta["splits"]["test"]["count"] == 9
    assert len(read_examples(tmp_path / "nt.tfrecord")) == 9
    np.save(tmp_path / "tx.npy", np.zeros((9, 2, 2), np.float32))
    res = run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels", tmp_path / "y.npy", "-o",
                    tmp_path / "m.tfrecord", "--test-npy-features", tmp_path / "tx.npy", "--test-npy-labels",
                    tmp_path / "ty.npy", "--test-output", tmp_path / "mt.tfrecord")
    assert res.returncode == 1 and "per-example shape" in res.stderr
    (tmp_path / "a.csv").write_text("u,v,label\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(30)))
    (tmp_path / "b.csv").write_text("u,v,label\n1,2,0\n3,4,2\n")
    res = run_tower("convert", "--csv", tmp_path / "a.csv", "--label-column", "label", "--test-csv",
                    tmp_path / "b.csv", "-o", tmp_path / "c.tfrecord", "--test-output", tmp_path / "ct.tfrecord")
    assert res.returncode == 0, res.stderr
    assert sum(1 for _ in tf.data.TFRecordDataset(str(tmp_path / "ct.tfrecord"))) == 2
    (tmp_path / "b.csv").write_text("v,u,label\n1,2,0\n")
    res = run_tower("convert", "--csv", tmp_path / "a.csv", "--label-column", "label", "--test-csv",
                    tmp_path / "b.csv", "-o", tmp_path / "d.tfrecord", "--test-output", tmp_path / "dt.tfrecord")
    assert res.returncode == 1 and "column 1 is 'v' but 'u'" in res.stderr


@pytest.mark.parametrize("text,words", [
    ("cat\ndog\ncat\nfish\n", "name 3 ('cat') repeats name 1"),
    ("cat,dog,,fish", "name 3 is empty"),
    ('["cat", 3, "b", "f"]', "name 2 is not a string"),
    ("cat\ndo\x07g\nbird\nfish\n", "name 2 has a control character"),
    ("x" * 129 + ",b,c,d", "name 1 is 129 bytes long"),
    ("cat,dog,bird", "3 class names given, but the labels are 0 to 3: 4 classes"),
])
def test_convert_class_names_refused(tmp_path, run_tower, text, words):
    classified(tmp_path)
    (tmp_path / "names.txt").write_text(text)
    res = run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels", tmp_path / "y.npy", "-o",
                    tmp_path / "o.tfrecord", "--class-names", tmp_path / "names.txt")
    assert res.returncode == 1 and words in res.stderr, res.stderr
    assert not (tmp_path / "o.tfrecord").exists() and not (tmp_path / "o.meta.json").exists()


# ---------------------------------------------------------------- the server

def cnn3d(dataset, steps=20):
    return {"dataset": dataset, "name": "cnn3d",
            "model": {"layers": [{"type": "conv3d", "filters": 4, "kernel": 3, "activation": "relu"},
                                 {"type": "max_pool3d", "pool": 2}, {"type": "flatten"},
                                 {"type": "dense", "units": 1}]},
            "loss": "mean_squared_error", "optimizer": {"type": "adam", "learning_rate": 0.003},
            "batch_size": 16, "steps": steps, "seed": 3, "summary_every": 10, "eval_every": 10,
            "checkpoint_every": steps}


def upload(server, name, fields, values=None):
    """curl -F file fields (path) and value fields (text); returns (status, json)."""
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}"]
    for field, path in fields.items():
        cmd += ["-F", f"{field}=@{path}"]
    for field, value in (values or {}).items():
        cmd += ["--form-string", f"{field}={value}"]
    out = subprocess.run(cmd + [server.api(f"/datasets?name={name}")], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    body, code = out.rsplit("\n", 1)
    return int(code), json.loads(body)


@pytest.fixture
def volumes(tmp_path):
    x, y = blob_volumes(160)
    np.save(tmp_path / "vx.npy", x)
    np.save(tmp_path / "vy.npy", y)
    return {"features": tmp_path / "vx.npy", "labels": tmp_path / "vy.npy"}


def test_numpy_regression_with_validation_split_is_evaluated(serve, volumes, tmp_path):
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    server = serve()
    code, d = upload(server, "vol", volumes, {"validation_split": "0.25", "split_seed": "11"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert d["status"] == "ready", d
    assert (d["train_examples"], d["test_examples"]) == (120, 40)
    assert d["test_split"] == {"method": "fraction", "fraction": 0.25, "seed": 11, "stratified": False}
    r = submit(server, cnn3d("vol"))
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == []
    run = wait_run(server, r.json()["id"])
    assert run["class_names"] is None and run["warnings"] == []
    assert run["status"] == "succeeded", run
    assert "eval_loss" in run["metrics"], run["metrics"]
    acc = pea.EventAccumulator(run["logdir"], size_guidance={"tensors": 0})
    acc.Reload()
    steps = [e.step for e in acc.Tensors("eval/loss")]
    assert steps == [0, 10, 20], steps


def test_run_without_test_split_warns_up_front(serve, volumes, tmp_path, tower_bin):
    server = serve()
    code, d = upload(server, "vol", volumes)
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert d["test_examples"] is None and d["test_split"] == {"method": "none"}
    r = submit(server, cnn3d("vol", steps=2))
    assert r.status_code == 201, r.text
    warnings = r.json()["warnings"]
    assert len(warnings) == 1 and "has no test split: this run is never evaluated" in warnings[0], warnings
    got = requests.get(server.api(f"/runs/{r.json()['id']}"), timeout=10).json()
    assert got["warnings"] == warnings  # the run page shows the same reply
    # `tower submit` prints it on stderr, the run id alone on stdout
    (tmp_path / "s.json").write_text(json.dumps(cnn3d("vol", steps=2)))
    sub = subprocess.run([str(tower_bin), "submit", tmp_path / "s.json", "--name", "again", "--server", server.url],
                         capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0 and sub.stdout.strip().startswith("r"), sub.stderr
    assert f"tower submit: warning: {warnings[0]}" in sub.stderr
    wait_run(server, r.json()["id"])
    wait_run(server, sub.stdout.strip())
    # `tower train` says it on its first lines, as a JSON line the supervisor parses
    cfg = cnn3d({"train": str(server.data / "datasets" / d["id"] / "train.tfrecord"), "shape": [8, 8, 8, 1]},
                steps=2)
    del cfg["name"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    res = subprocess.run([str(tower_bin), "train", tmp_path / "c.json", "--logdir", tmp_path / "log"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert "backend" in lines[0]
    assert lines[1]["warning"] == "NO_TEST_SET" and "nothing is evaluated" in lines[1]["message"], lines[:3]


def test_upload_test_files_numpy_and_csv(serve, volumes, tmp_path):
    server = serve()
    x, y = blob_volumes(24, seed=5)
    np.save(tmp_path / "tx.npy", x)
    np.save(tmp_path / "ty.npy", y)
    code, d = upload(server, "vol", {**volumes, "test_features": tmp_path / "tx.npy",
                                     "test_labels": tmp_path / "ty.npy"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert (d["status"], d["train_examples"], d["test_examples"]) == ("ready", 160, 24), d
    assert d["test_split"] == {"method": "file"}
    (tmp_path / "a.csv").write_text("u,v,label\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(30)))
    (tmp_path / "b.csv").write_text("u,v,label\n1,2,0\n3,4,2\n")
    code, d = upload(server, "csv", {"csv": tmp_path / "a.csv", "test_csv": tmp_path / "b.csv"},
                     {"class_names": "zero, one, two"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert (d["status"], d["train_examples"], d["test_examples"]) == ("ready", 30, 2), d
    assert d["class_names"] == ["zero", "one", "two"]
    # a raw CSV body takes the same options as query parameters
    r = requests.post(server.api("/datasets"), params={"name": "raw", "validation_split": "0.5", "split_seed": "2",
                                                       "class_names": '["a","b","c"]'},
                      data=(tmp_path / "a.csv").read_bytes(), headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    d = wait_dataset(server, r.json()["id"])
    assert (d["train_examples"], d["test_examples"], d["class_names"]) == (15, 15, ["a", "b", "c"]), d
    assert d["label_histogram"]["test"] == {"0": 5, "1": 5, "2": 5}  # stratified


def test_class_names_reach_datasets_and_runs(serve, tmp_path):
    server = serve()
    classified(tmp_path, n=200)
    (tmp_path / "classes.txt").write_text("cat\r\ndog\r\nbird\r\nfish\r\n")
    code, d = upload(server, "pets", {"features": tmp_path / "x.npy", "labels": tmp_path / "y.npy",
                                      "classes": tmp_path / "classes.txt"}, {"validation_split": "0.5"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert d["class_names"] == ["cat", "dog", "bird", "fish"] and d["test_split"]["stratified"] is True
    listed = requests.get(server.api("/datasets"), timeout=10).json()["datasets"][0]
    assert listed["class_names"] == d["class_names"]
    cfg = {"dataset": "pets", "model": {"layers": [{"type": "dense", "units": 4}]}, "batch_size": 8, "steps": 2,
           "summary_every": 1, "eval_every": 2, "checkpoint_every": 2}
    r = submit(server, cfg)
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == []
    run = wait_run(server, r.json()["id"])
    assert run["class_names"] == ["cat", "dog", "bird", "fish"] and run["warnings"] == []
    # a count that does not fit the labels fails the conversion, naming it
    code, d = upload(server, "bad", {"features": tmp_path / "x.npy", "labels": tmp_path / "y.npy"},
                     {"class_names": "cat,dog"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert d["status"] == "failed" and d["error"]["code"] == "INVALID_ARGUMENT"
    assert "2 class names given, but the labels are 0 to 3: 4 classes" in d["error"]["message"], d
    # a TFRecord upload is converted before the reply: the same mismatch is the reply's 400
    tfrecord = server.data / "datasets" / listed["id"] / "train.tfrecord"
    code, body = upload(server, "tfr", {"tfrecord": tfrecord}, {"class_names": "cat,dog"})
    assert code == 400 and "2 class names given, but the labels are 0 to 3" in body["error"]["message"], body
    code, d = upload(server, "tfr", {"tfrecord": tfrecord}, {"class_names": "cat,dog,bird,fish"})
    assert code == 201 and d["class_names"] == ["cat", "dog", "bird", "fish"], d


@pytest.mark.parametrize("values,files,words", [
    ({"validation_split": "0.7"}, {}, "validation_split must be a number in (0, 0.5]"),
    ({"validation_split": "0"}, {}, "validation_split must be a number in (0, 0.5]"),
    ({"validation_split": "abc"}, {}, "validation_split must be a number in (0, 0.5]"),
    ({"validation_split": "0.2", "test_fraction": "0.2"}, {}, "test_fraction and validation_split exclude"),
    ({"validation_split": "0.2", "split_seed": "-1"}, {}, "split_seed must be an integer from 0 to"),
    ({"validation_split": "0.2", "split_seed": "99999999999999999999"}, {}, "split_seed must be an integer"),
    ({"validation_split": "0.2"}, {"test_features": "x", "test_labels": "y"},
     "validation_split and a test file (test_images, test_features, test_csv, test_tfrecord) exclude"),
    ({}, {"test_features": "x"}, "features + labels [+ test_features + test_labels] (NumPy)"),
    ({"class_names": "a,b,a,c"}, {}, "class_names: name 3 ('a') repeats name 1"),
    ({"class_names": "a,,c,d"}, {}, "class_names: name 2 is empty"),
    ({"class_names": "a,b\x1bc,d,e"}, {}, "class_names: name 2 has a control character"),
    ({"class_names": "y" * 200}, {}, "class_names: name 1 is 200 bytes long: at most 128"),
    ({"class_names": '["a", "b"'}, {}, "class_names: not a JSON array of names"),
    ({"class_names": "a,b,c,d"}, {"classes": "names"}, "class_names and classes exclude each other"),
    ({}, {"classes": "empty"}, "classes: no class names given"),
])
def test_bad_upload_options_are_400_naming_the_problem(serve, tmp_path, values, files, words):
    server = serve()
    classified(tmp_path, n=40)
    (tmp_path / "names").write_text("a\nb\nc\nd\n")
    (tmp_path / "empty").write_text("\n")
    fields = {"features": tmp_path / "x.npy", "labels": tmp_path / "y.npy"}
    fields.update({k: tmp_path / ("x.npy" if v == "x" else "y.npy" if v == "y" else v) for k, v in files.items()})
    code, body = upload(server, "bad", fields, values)
    assert code == 400, body
    assert body["error"]["code"] == "INVALID_ARGUMENT" and words in body["error"]["message"], body
    assert requests.get(server.api("/datasets"), timeout=10).json()["total"] == 0


@pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").exists(), reason="needs dataset-fashion-mnist")
def test_demo_dataset_has_fashion_mnist_class_names(serve):
    server = serve(demo=True)
    datasets = requests.get(server.api("/datasets"), timeout=30).json()["datasets"]
    assert [d["name"] for d in datasets] == ["fashion-mnist"]
    assert datasets[0]["class_names"] == FASHION_NAMES
    assert datasets[0]["test_split"] == {"method": "file"}
    runs = poll("the demo run", lambda: requests.get(server.api("/runs"), timeout=10).json()["runs"] or None)
    assert "class_names" not in runs[0]  # the list leaves the dataset's names to the run's own route
    assert requests.get(server.api(f"/runs/{runs[0]['id']}"), timeout=10).json()["class_names"] == FASHION_NAMES


@pytest.mark.parametrize("query,words", [
    ({"split_seed": ""}, "query parameter 'split_seed' is empty"),
    ({"validation_split": "0.9"}, "validation_split must be a number in (0, 0.5]"),
    ({"class_names": "a,a"}, "class_names: name 2 ('a') repeats name 1"),
])
def test_bad_raw_body_options_are_400(serve, query, words):
    server = serve()
    r = requests.post(server.api("/datasets"), params={"name": "raw", **query}, data=b"u,label\n1,0\n2,1\n",
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
    assert requests.get(server.api("/datasets"), timeout=10).json()["total"] == 0
