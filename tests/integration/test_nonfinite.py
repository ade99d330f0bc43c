"""Non-finite numbers never pass silently.

1. `tower convert` refuses a NaN or Inf float feature of a CSV, a float32 .npy or a TFRecord written by
   TensorFlow itself, naming the file, the record or row and the column or feature, and writes nothing;
   with --allow-nonfinite it converts, and TensorFlow reads the NaN back where it was. An upload of such a
   CSV fails with that message.
2. Training on a dataset with a NaN feature stops with the diverged exit status at the first step that
   sees it (the ReLU passes the NaN on to the loss, as TensorFlow's does), and every checkpoint file
   written holds finite values only.
(The checkpoint writer's own refusal and the activations' NaN rules are unit tests: tests/unit/
test_checkpoint.c and test_elementwise.c.)"""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from test_server import curl_upload, wait_dataset

DIVERGED = 10  # engine/trainer.h TW_EXIT_DIVERGED


def tf():
    import tensorflow
    return tensorflow


def read_examples(path):
    """The records of a TFRecord file as tf.train.Example messages, read by TensorFlow."""
    t = tf()
    return [t.train.Example.FromString(r.numpy()) for r in t.data.TFRecordDataset(str(path))]


def make_csv(d):
    path = d / "cells.csv"
    path.write_text("a,b,label\n1,2,0\n3,nan,1\n4,-inf,0\n")
    return ["--csv", path, "--label-column", "label"], [path.name, ":3:", "data row 2", "column 2 ('b')",
                                                        "'nan'"]


def check_csv(examples):
    f = [list(e.features.feature["features"].float_list.value) for e in examples]
    assert f[0] == [1.0, 2.0] and np.isnan(f[1][1]) and f[2][1] == -np.inf


def make_npy(d):
    x = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
    x[2, 1, 0] = np.nan
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", np.arange(4, dtype=np.int64))
    return (["--npy-features", d / "x.npy", "--npy-labels", d / "y.npy"],
            ["x.npy", "row 2, element 3 (index (2, 1, 0)) is NaN"])


def check_npy(examples):
    raw = examples[2].features.feature["image_raw"].bytes_list.value[0]
    v = np.frombuffer(raw, dtype="<f4").reshape(2, 3)
    assert np.isnan(v[1, 0]) and np.isfinite(np.delete(v.ravel(), 3)).all()


def make_tfrecord(d):
    t = tf()
    path = d / "tf.tfrecord"
    with t.io.TFRecordWriter(str(path)) as w:
        for i in range(3):
            values = [0.5, 1.5, float("nan") if i == 1 else 2.5]
            ex = t.train.Example(features=t.train.Features(feature={
                "features": t.train.Feature(float_list=t.train.FloatList(value=values)),
                "label": t.train.Feature(int64_list=t.train.Int64List(value=[i]))}))
            w.write(ex.SerializeToString())
    return ["--tfrecord", path], [path.name, "record 1: feature 'features' value 2 is NaN"]


def check_tfrecord(examples):
    assert np.isnan(examples[1].features.feature["features"].float_list.value[2])


SOURCES = {"csv": (make_csv, check_csv), "npy": (make_npy, check_npy),
           "tfrecord": (make_tfrecord, check_tfrecord)}


@pytest.mark.parametrize("source", SOURCES)
def test_convert_refuses_nonfinite_unless_allowed(run_tower, tmp_path, source):
    make, check = SOURCES[source]
    args, words = make(tmp_path)
    out = tmp_path / "out.tfrecord"
    res = run_tower("convert", *args, "-o", out)
    assert res.returncode == 1, res.stderr
    for w in words:
        assert w in res.stderr, (w, res.stderr)
    assert "--allow-nonfinite" in res.stderr
    assert not out.exists() and not (tmp_path / "out.meta.json").exists()
    assert not list(tmp_path.glob("*.tmp.*"))

    res = run_tower("convert", *args, "-o", out, "--allow-nonfinite")
    assert res.returncode == 0, res.stderr
    check(read_examples(out))


def test_csv_inf_cell_is_refused_too(run_tower, tmp_path):
    path = tmp_path / "inf.csv"
    path.write_text("a,b,label\n1,2,0\n3,4,1\nInfinity,5,0\n")
    res = run_tower("convert", "--csv", path, "--label-column", "label", "-o", tmp_path / "o.tfrecord",
                    "--json")
    assert res.returncode == 1
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "INVALID_ARGUMENT"
    assert "inf.csv:4: data row 3, column 1 ('a'): 'Infinity'" in err["message"], err


def test_npy_nan_label_is_refused_even_when_allowed(run_tower, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((3, 2), dtype=np.float32))
    np.save(tmp_path / "y.npy", np.array([0.5, np.nan, 1.5]))
    res = run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels", tmp_path / "y.npy",
                    "-o", tmp_path / "o.tfrecord", "--allow-nonfinite")
    assert res.returncode == 1
    assert "y.npy" in res.stderr and "row 1: the label is nan" in res.stderr, res.stderr
    assert not (tmp_path / "o.tfrecord").exists()


def test_upload_of_a_nan_csv_fails_naming_the_cell(serve, tmp_path):
    server = serve()
    path = tmp_path / "upload.csv"
    path.write_text("x,y,label\n" + "".join(f"{i},{i + 1},{i % 2}\n" for i in range(5)) + "7,NaN,1\n")
    code, d = curl_upload(server, "nanny", {"csv": path})
    assert code == 202, d
    done = wait_dataset(server, d["id"])
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "INVALID_ARGUMENT", done
    msg = done["error"]["message"]
    assert "data row 6, column 2 ('y'): 'NaN' is not a finite number" in msg, msg


# ---------------------------------------------------------------- training

X = np.array([[0.1, -0.4, 0.8, 0.3], [0.9, 0.2, -0.5, 0.0], [-0.3, 0.7, 0.1, -0.8],
              [0.5, 0.5, 0.5, 0.5], [-0.9, -0.1, 0.3, 0.6], [0.2, -0.6, -0.2, 0.9],
              [0.0, 0.3, -0.7, -0.4], [0.6, -0.8, 0.4, 0.1]], dtype=np.float32)
Y = [0, 2, 1, 2, 0, 1, 1, 0]


def dataset(run_tower, d, name, nan_at=None):
    rows = ["a,b,c,d,label"]
    for i, (x, y) in enumerate(zip(X, Y)):
        cells = ["nan" if nan_at == (i, j) else repr(float(v)) for j, v in enumerate(x)]
        rows.append(",".join(cells) + f",{y}")
    (d / f"{name}.csv").write_text("\n".join(rows) + "\n")
    res = run_tower("convert", "--csv", d / f"{name}.csv", "--label-column", "label", "-o",
                    d / f"{name}.tfrecord", "--allow-nonfinite")
    assert res.returncode == 0, res.stderr
    return d / f"{name}.tfrecord"


def config(data, steps):
    """A ReLU MLP over the whole 8-row set per step: a step sees every row."""
    return {"dataset": {"train": str(data), "image_feature": "features", "shape": [4]},
            "model": {"layers": [{"type": "dense", "units": 6, "activation": "relu"},
                                 {"type": "dense", "units": 3}]},
            "optimizer": {"type": "sgd", "learning_rate": 0.1}, "ema_decay": 0.99,
            "batch_size": 8, "steps": steps, "seed": 3, "summary_every": 1, "eval_every": 1000,
            "checkpoint_every": 1}


def train(run_tower, d, cfg, *extra):
    path = d / f"cfg{len(list(d.glob('cfg*.json')))}.json"
    path.write_text(json.dumps(cfg))
    res = run_tower("train", path, "--logdir", d / "run", *extra, timeout=120)
    return res.returncode, [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")], res


def test_training_on_a_nan_feature_diverges_at_once_and_checkpoints_stay_finite(run_tower, tmp_path):
    clean = dataset(run_tower, tmp_path, "clean")
    dirty = dataset(run_tower, tmp_path, "dirty", nan_at=(5, 2))
    rc, _, res = train(run_tower, tmp_path, config(clean, 2))
    assert rc == 0, res.stderr
    # resume the same run on the set with the NaN: step 3 is the first to see it
    rc, lines, res = train(run_tower, tmp_path, config(dirty, 6), "--resume")
    assert rc == DIVERGED, (rc, res.stdout, res.stderr)
    errors = [l for l in lines if "error" in l and isinstance(l["error"], str)]
    assert errors and errors[0]["error"] == "LOSS_NAN" and errors[0]["step"] == 3, lines
    ckpts = tmp_path / "run" / "checkpoints"
    files = sorted(ckpts.glob("ckpt-*.safetensors"))
    assert [f.name for f in files] == ["ckpt-0000000001.safetensors", "ckpt-0000000002.safetensors"]
    assert (ckpts / "latest").read_text() == "ckpt-0000000002.safetensors\n"
    for f in files:
        for name, value in load_file(str(f)).items():
            assert np.isfinite(value).all(), (f.name, name)
