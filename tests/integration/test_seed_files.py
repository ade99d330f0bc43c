"""The seed programs' own files train as they are.

The seed's converter (create_tfrecord.py) writes tf.train.Example records of three features only: size,
label and image_raw, with no height or width. The test writes such a file with TensorFlow from Fashion-MNIST's
60,000 training images in the converter's own way, uploads it over REST as a raw body holding out the last
5,000 examples (the seed trains on the first 55,000 and keeps the last 5,000), and checks with TensorFlow's
TFRecord reader that the held-out split is exactly those records, byte for byte and in order; a run trains on
it and a REST evaluation of its checkpoint reproduces the run's own accuracy. `tower convert` names the rule
that gave the shape; a --shape the records do not hold, a count past the file's, and a shape for an IDX
upload are refused naming what was wrong."""
import gzip
import json

import numpy as np
import pytest
import requests

from conftest import FASHION
from helpers import poll
from test_server import submit, wait_dataset, wait_run

tf = pytest.importorskip("tensorflow")

TRAIN_N, HELD = 60000, 5000


def idx_images_labels():
    with gzip.open(FASHION / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read()[16:], np.uint8).reshape(-1, 784)
    with gzip.open(FASHION / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read()[8:], np.uint8)
    return images, labels


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory):
    """output.tfrecord as the seed's converter writes it (its features and their order, one record per
    training image), and the serialized records in file order."""
    images, labels = idx_images_labels()
    path = tmp_path_factory.mktemp("seed") / "output.tfrecord"

    def int64_feature(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def bytes_feature(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    records = []
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(TRAIN_N):
            example = tf.train.Example(features=tf.train.Features(feature={
                "size": int64_feature(images.shape[1]), "label": int64_feature(int(labels[i])),
                "image_raw": bytes_feature(images[i].tobytes())}))
            records.append(example.SerializeToString())
            writer.write(records[-1])
    return path, records


def upload_raw(server, path, **query):
    return requests.post(server.api("/datasets"), params={"name": "seed", **query}, data=path.read_bytes(),
                         headers={"Content-Type": "application/octet-stream"}, timeout=120)


def tf_records(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(str(path))]


def wait_job(server, run_id, job_id):
    def done():
        j = requests.get(server.api(f"/runs/{run_id}/evaluations/{job_id}"), timeout=10).json()
        return j if j["status"] in ("succeeded", "failed") else None
    return poll(f"evaluation {job_id}", done, 120)


def test_the_seed_converters_file_uploads_trains_and_evaluates(serve, seed_file):
    path, records = seed_file
    server = serve()
    r = upload_raw(server, path, test_last=HELD)
    assert r.status_code in (201, 202), r.text
    d = wait_dataset(server, r.json()["id"])
    assert d["status"] == "ready", d
    assert d["shape"] == [28, 28, 1] and d["dtype"] == "uint8"
    assert d["shape_rule"] == "the feature size: 784 = 28 x 28, a square image of one channel"
    assert d["test_split"] == {"method": "last", "count": HELD}
    assert (d["train_examples"], d["test_examples"]) == (TRAIN_N - HELD, HELD)
    # exactly the last 5,000 records are held out, in order, and the first 55,000 are the training split
    folder = server.data / "datasets" / d["id"]
    assert tf_records(folder / "test.tfrecord") == records[-HELD:]
    assert tf_records(folder / "train.tfrecord") == records[:-HELD]

    cfg = {"name": "seed-mlp", "dataset": "seed",
           "model": {"layers": [{"type": "flatten"},
                                {"type": "dense", "units": 500, "activation": "relu", "name": "layer1"},
                                {"type": "dense", "units": 10, "name": "layer2"}]},
           "loss": "softmax_cross_entropy", "optimizer": {"type": "sgd", "learning_rate": 0.05},
           "batch_size": 32, "steps": 400, "eval_every": 400, "checkpoint_every": 400, "ema_decay": 0.99}
    r = submit(server, cfg)
    assert r.status_code == 201, r.text
    run = wait_run(server, r.json()["id"])
    assert run["status"] == "succeeded", run
    assert run["metrics"]["eval_examples"] == HELD
    assert run["metrics"]["eval_accuracy"] > 0.7
    r = requests.post(server.api(f"/runs/{run['id']}/evaluate"),
                      json={"dataset": "seed", "checkpoint": 400, "weights": "raw"}, timeout=30)
    assert r.status_code == 202, r.text
    job = wait_job(server, run["id"], r.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["raw"]["examples"] == HELD
    assert job["result"]["raw"]["accuracy"] == pytest.approx(run["metrics"]["eval_accuracy"], abs=1e-6)


def test_bad_shapes_and_counts_are_refused_naming_them(serve, seed_file, run_tower, tmp_path):
    path, _ = seed_file
    server = serve()
    r = upload_raw(server, path, shape="28x28x3")
    assert r.status_code == 400, r.text
    assert ("record 0: the shape given, 28x28x3, is 2352 values: image_raw must hold 2352 bytes (uint8) or 9408 "
            "(float32), but its image_raw holds 784 bytes") in r.json()["error"]["message"]
    r = upload_raw(server, path, test_last=TRAIN_N + 1)
    assert r.status_code == 400, r.text
    assert "a test split of the last 60001 examples: the source holds only 60000" in r.json()["error"]["message"]
    r = upload_raw(server, path, test_first=10, test_last=10)
    assert r.status_code == 400 and "test_first and test_last exclude each other" in r.text, r.text
    r = upload_raw(server, path, test_last="5k")
    assert r.status_code == 400 and "test_last must be an integer from 1 to" in r.text, r.text
    r = upload_raw(server, path, shape="28by28")
    assert r.status_code == 400 and "shape: '28by28' is not a shape" in r.text, r.text
    files = {"images": open(FASHION / "t10k-images-idx3-ubyte.gz", "rb"),
             "labels": open(FASHION / "t10k-labels-idx1-ubyte.gz", "rb")}
    r = requests.post(server.api("/datasets"), params={"name": "idx", "shape": "784"}, files=files, timeout=60)
    assert r.status_code == 400 and "shape is for a TFRecord upload" in r.text, r.text
    # the command line: the shape given is taken, the rule named, and the first N held out
    res = run_tower("convert", "--tfrecord", path, "--shape", "784", "--test-first", "100", "-o",
                    tmp_path / "flat.tfrecord", "--test-output", tmp_path / "first.tfrecord")
    assert res.returncode == 0, res.stderr
    assert "each example is 784 (given)" in res.stdout
    meta = json.loads((tmp_path / "flat.meta.json").read_text())
    assert meta["shape"] == [784] and meta["test_split"] == {"method": "first", "count": 100}
    assert tf_records(tmp_path / "first.tfrecord") == seed_file[1][:100]
