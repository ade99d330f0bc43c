"""Uploading a CSV the ways the README and server/API.md say, and the errors a new user meets: the label
column in the query of a multipart upload (curl's documented form and `tower upload`), a test split and
class names from the client, waiting for the conversion by default (piped and on a terminal), a failed
conversion that lists the file's columns, names the file as sent and never a server path, and "did you
mean" for a mistyped run or dataset name."""
import json
import re
import subprocess

import numpy as np
import pytest
import requests

from helpers import poll
from test_client import client, in_pty

COLUMNS = ["f1", "f2", "kind", "f3", "f4"]
CLASSES = ["north", "east", "west"]


def write_csv(path, rows=200, seed=0):
    """A CSV whose label column `kind` (0-2) sits between the features."""
    rng = np.random.default_rng(seed)
    y = np.arange(rows) % 3
    x = rng.normal(size=(rows, 4)) + y[:, None] * 2.0
    lines = [",".join(COLUMNS)]
    for xi, yi in zip(x, y):
        lines.append(",".join([f"{xi[0]:.4f}", f"{xi[1]:.4f}", str(yi), f"{xi[2]:.4f}", f"{xi[3]:.4f}"]))
    path.write_text("\n".join(lines) + "\n")
    return path


def dataset(server, ref):
    return requests.get(server.api(f"/datasets/{ref}"), timeout=10).json()


@pytest.fixture
def server(serve):
    return serve()


def test_curl_multipart_with_options_in_the_query(server, tmp_path):
    csv = write_csv(tmp_path / "data.csv")
    # server/API.md's form: the file as a part, the options in the query
    r = subprocess.run(["curl", "-sS", "-F", f"csv=@{csv}",
                        server.api("/datasets?name=q&label_column=kind&validation_split=0.2&split_seed=4"
                                   "&class_names=north,east,west")], capture_output=True, text=True, timeout=60)
    d = json.loads(r.stdout)
    assert d["status"] == "converting" and d["error"] is None, d
    d = poll("the conversion", lambda: (lambda x: x if x["status"] != "converting" else None)(dataset(server, "q")))
    assert d["status"] == "ready", d
    assert (d["train_examples"], d["test_examples"]) == (160, 40)
    assert d["class_names"] == CLASSES and d["test_split"]["seed"] == 4
    assert d["feature_names"] == ["f1", "f2", "f3", "f4"]
    # the same option given both ways is refused, naming it
    r = requests.post(server.api("/datasets?name=twice&label_column=kind"), files={"csv": ("data.csv", csv.read_bytes())},
                      data={"label_column": "kind"}, timeout=30)
    assert r.status_code == 400 and "'label_column' is given twice" in r.json()["error"]["message"]
    # a query parameter the route does not take: the message lists those it does, plainly
    r = requests.post(server.api("/datasets?name=x&labelcolumn=kind"), files={"csv": ("data.csv", b"a\n")}, timeout=30)
    msg = r.json()["error"]["message"]
    assert r.status_code == 400 and "labelcolumn" in msg and "label_column" in msg and "!" not in msg, msg


def test_tower_upload_with_a_split_and_class_names_waits_and_prints_the_dataset(server, tower_bin, tmp_path):
    csv = write_csv(tmp_path / "data.csv")
    r = client(tower_bin, server, "upload", "blobs", csv, "--label-column", "kind", "--validation-split", "0.25",
               "--split-seed", "7", "--class-names", ",".join(CLASSES))
    assert r.returncode == 0, r.stderr
    assert re.search(r"\bblobs ready: csv, 150 train \+ 50 test examples; features f1, f2, f3, f4; "
                     r"classes north, east, west$", r.stdout.strip()), r.stdout
    d = dataset(server, "blobs")
    assert d["status"] == "ready" and d["test_split"] == {"method": "fraction", "fraction": 0.25, "seed": 7,
                                                         "stratified": True}
    # class names from a file, a test split from a second file given with --test
    names = tmp_path / "names.txt"
    names.write_text("\n".join(CLASSES) + "\n")
    test = write_csv(tmp_path / "held.csv", rows=30, seed=1)
    r = client(tower_bin, server, "upload", "blobs-test", csv, "--test", test, "--label-column", "kind",
               "--class-names", names)
    assert r.returncode == 0, r.stderr
    d = dataset(server, "blobs-test")
    assert (d["train_examples"], d["test_examples"]) == (200, 30) and d["class_names"] == CLASSES
    # on a terminal too: the same line after the conversion
    code, out = in_pty([str(tower_bin), "upload", "blobs-tty", str(csv), "--label-column", "kind",
                        "--server", server.url])
    assert code == 0 and b"blobs-tty ready: csv, 200 train examples" in out, out
    # --no-wait returns at once
    r = client(tower_bin, server, "upload", "later", csv, "--label-column", "kind", "--no-wait")
    assert r.returncode == 0 and r.stdout.split()[1] in ("converting", "ready"), r.stdout


def test_a_failed_conversion_exits_1_and_says_what_to_do(server, tower_bin, tmp_path):
    csv = write_csv(tmp_path / "data.csv")
    r = client(tower_bin, server, "upload", "typo", csv, "--label-column", "nope")
    said = r.stdout + r.stderr
    assert r.returncode == 1, said
    assert "data.csv:1: no column named 'nope'" in said and "f1, f2, kind, f3, f4" in said, said
    assert "--label-column" in said and "label_column=" in said, said
    assert str(server.data) not in said and "/upload/" not in said, said
    d = dataset(server, "typo")
    assert d["status"] == "failed" and str(server.data) not in json.dumps(d), d
    # a raw body has no file name: the message names the part
    r = requests.post(server.api("/datasets?name=raw"), data=csv.read_bytes(), headers={"Content-Type": "text/csv"},
                      timeout=30)
    assert r.status_code == 202, r.text
    d = poll("the conversion", lambda: (lambda x: x if x["status"] != "converting" else None)(dataset(server, "raw")))
    assert d["error"]["message"].startswith("the uploaded csv:1: no column named 'label'"), d
    assert str(server.data) not in d["error"]["message"]


def test_mistyped_names_get_the_closest_one(server, tower_bin, tmp_path):
    csv = write_csv(tmp_path / "data.csv")
    assert client(tower_bin, server, "upload", "fashion-csv", csv, "--label-column", "kind").returncode == 0
    r = requests.get(server.api("/datasets/fashion-cvs"), timeout=10)
    assert r.status_code == 404 and "did you mean 'fashion-csv'?" in r.json()["error"]["message"]
    cfg = {"dataset": "fashon-csv", "model": {"layers": [{"type": "dense", "units": 3}]},
           "loss": "softmax_cross_entropy", "steps": 10}
    r = requests.post(server.api("/runs"), json=cfg, timeout=10)
    assert r.status_code == 404 and "did you mean 'fashion-csv'?" in r.json()["error"]["message"], r.text
    cfg.update(dataset="fashion-csv", name="seed-mlp", steps=10)
    r = requests.post(server.api("/runs"), json=cfg, timeout=10)
    assert r.status_code == 201, r.text
    r = client(tower_bin, server, "logs", "seed-mpl")
    assert r.returncode == 1 and "no run 'seed-mpl' (did you mean 'seed-mlp'?)" in r.stderr, r.stderr
    r = requests.get(server.api("/runs/zzzzzz"), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["message"] == "no run 'zzzzzz'"
