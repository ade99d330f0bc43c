"""`tower export` and GET /runs/{id}/export , checked by the real readers: TensorFlow's
tf.train.load_checkpoint and a tf.compat.v1 Saver restoring into the seed MLP's own graph, onnx.checker and
onnxruntime against Tower's own forward pass (`tower export --verify`, the CPU engine the trainer evaluates
with), on all 10,000 Fashion-MNIST test images. Training is short: what is checked is that the exported
weights compute what Tower computes, not that they are good."""
import gzip
import io
import json
import os
import tarfile

import numpy as np
import pytest
import requests

import helpers
from conftest import FASHION, ROOT
from test_server import submit, upload_fashion, wait_run
from test_train import blob_volumes, fashion, train  # noqa: F401 (fashion: the converted dataset fixture)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def fashion_test_split():
    """The Fashion-MNIST test split as stored: uint8 [10000, 28, 28, 1], labels [10000]."""
    with gzip.open(FASHION / "t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
    with gzip.open(FASHION / "t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return x, y


def config_of(path, fashion_files, **over):
    c = json.loads((ROOT / "examples" / path).read_text())
    c["dataset"]["train"], c["dataset"]["test"] = map(str, fashion_files)
    c.update(over)
    return c


def checkpoint_of(logdir):
    ckpts = sorted((logdir / "checkpoints").glob("ckpt-*.safetensors"))
    assert ckpts, f"no checkpoint in {logdir}"
    return ckpts[-1]


# ---------------------------------------------------------------- TensorFlow

@pytest.fixture(scope="module")
def seed_run(tmp_path_factory, tower_bin, fashion):  # noqa: F811
    """The seed MLP (examples/seed_mlp.json: 784-500-10, EMA 0.99), trained 200 steps and evaluated at the
    end: (logdir, the evaluation line of the last step)."""
    tmp = tmp_path_factory.mktemp("seed")
    c = config_of("seed_mlp.json", fashion, steps=200, summary_every=100, eval_every=200, checkpoint_every=200,
                  optimizer={"type": "sgd", "learning_rate": 0.1})
    _, lines, logdir, _ = train(tower_bin, tmp, c, name="seed")
    ev = [l for l in lines if "eval_accuracy" in l and l["step"] == 200]
    assert ev, lines
    return logdir, ev[0], c


def seed_graph(tf, scale):
    """The seed's inference graph (shared/seeds/000: two dense layers, relu, logits), its variables named as
    Tower names them (layer1/weights, layer1/biases; the seed says w and bias), and global_step."""
    x = tf.compat.v1.placeholder(tf.uint8, [None, 784])
    h = tf.cast(x, tf.float32) * tf.constant(scale, tf.float32)
    for name, units, relu in (("layer1", 500, True), ("layer2", 10, False)):
        with tf.compat.v1.variable_scope(name):
            w = tf.compat.v1.get_variable("weights", [h.shape[1], units], dtype=tf.float32,
                                          initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1))
            b = tf.compat.v1.get_variable("biases", [units], dtype=tf.float32)
            h = tf.matmul(h, w) + b
            h = tf.nn.relu(h) if relu else h
    global_step = tf.compat.v1.Variable(0, trainable=False, name="global_step", dtype=tf.int64)
    return x, h, global_step


def test_tf_checkpoint_restores_into_the_seed_graph(seed_run, run_tower, tmp_path):
    import tensorflow as tf
    from safetensors.numpy import load_file
    logdir, ev, c = seed_run
    ckpt = checkpoint_of(logdir)
    prefix = tmp_path / "tf" / "model.ckpt-200"  # its folder is made, as TensorFlow's savers make it
    res = run_tower("export", logdir, "--format", "tf", "-o", prefix)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "tf" / "checkpoint").read_text() == (
        'model_checkpoint_path: "model.ckpt-200"\nall_model_checkpoint_paths: "model.ckpt-200"\n')

    # load_checkpoint lists every variable, the EMA shadows and global_step with the safetensors' values
    reader = tf.train.load_checkpoint(str(prefix))
    assert tf.train.latest_checkpoint(str(tmp_path / "tf")) == str(prefix)
    stored = load_file(ckpt)
    names = [f"layer{k}/{v}{s}" for k in (1, 2) for v in ("weights", "biases")
             for s in ("", "/ExponentialMovingAverage")]
    shapes = reader.get_variable_to_shape_map()
    assert set(shapes) == set(names) | {"global_step"}
    assert shapes["layer1/weights"] == [784, 500] and shapes["layer2/biases"] == [10]
    for n in names:
        np.testing.assert_array_equal(reader.get_tensor(n), stored[n])
    assert reader.get_variable_to_dtype_map()["global_step"] == tf.int64
    assert reader.get_tensor("global_step") == 200

    # a Saver over the seed graph's variables restores them; on the 10,000 test images the accuracy is
    # exactly what Tower reported, with raw weights and with the EMA (the seed's variables_to_restore)
    images, labels = fashion_test_split()
    flat = images.reshape(-1, 784)
    for weights, key in (("raw", "eval_accuracy"), ("ema", "eval_accuracy_ema")):
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            x, logits, _ = seed_graph(tf, np.float32(c["dataset"]["scale"]))
            if weights == "raw":
                saver = tf.compat.v1.train.Saver()
            else:
                ema = tf.compat.v1.train.ExponentialMovingAverage(c["ema_decay"])
                restore = ema.variables_to_restore()
                assert "layer1/weights/ExponentialMovingAverage" in restore
                saver = tf.compat.v1.train.Saver(restore)
            saver.restore(sess, str(prefix))
            out = sess.run(logits, {x: flat})
        correct = int((out.argmax(1) == labels).sum())
        assert correct == round(ev[key] * len(labels)), (weights, correct, ev)


def test_tf_checkpoint_of_a_deeper_cnn(tower_bin, run_tower, tmp_path, fashion):  # noqa: F811
    """29 keys (over one restart interval of the table: prefix compression restarts), 4-D conv weights
    [kh, kw, in, filters] as TF lays them out, and a run without an EMA exporting none."""
    import tensorflow as tf
    from safetensors.numpy import load_file
    layers = [{"type": "conv2d", "filters": 4, "kernel": 3, "padding": "same", "activation": "relu"}] * 6
    c = {"dataset": {"train": str(fashion[0]), "shape": [28, 28, 1]},
         "model": {"layers": layers + [{"type": "flatten"}, {"type": "dense", "units": 10}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.01}, "ema_decay": 0.9, "batch_size": 4, "steps": 2,
         "summary_every": 2, "eval_every": 0, "checkpoint_every": 0}
    for ema in (0.9, 0):
        c["ema_decay"] = ema
        _, _, logdir, _ = train(tower_bin, tmp_path, c, name=f"deep{ema}")
        prefix = tmp_path / f"deep{ema}" / "model.ckpt-2"
        res = run_tower("export", logdir, "--format", "tf", "-o", prefix)
        assert res.returncode == 0, res.stderr
        reader = tf.train.load_checkpoint(str(prefix))
        shapes = reader.get_variable_to_shape_map()
        assert len(shapes) == (29 if ema else 15), sorted(shapes)
        assert shapes["layer1/weights"] == [3, 3, 1, 4] and shapes["layer6/weights"] == [3, 3, 4, 4]
        for name, value in load_file(checkpoint_of(logdir)).items():
            if ema or not name.endswith("/ExponentialMovingAverage"):
                np.testing.assert_array_equal(reader.get_tensor(name), value)


def test_tf_export_usage_errors(seed_run, run_tower, tmp_path):
    logdir, _, _ = seed_run
    res = run_tower("export", logdir, "--format", "tf", "-o", tmp_path / "m", "--weights", "ema")
    assert res.returncode == 2 and "--weights" in res.stderr
    res = run_tower("export", logdir, "--format", "keras", "-o", tmp_path / "m")
    assert res.returncode == 2 and "--format" in res.stderr
    res = run_tower("export", tmp_path / "missing.safetensors", "--format", "tf", "-o", tmp_path / "m")
    assert res.returncode != 0 and "missing.safetensors" in res.stderr
    assert not list(tmp_path.glob("m*"))
    (tmp_path / "plain").write_text("a file, not a folder")
    res = run_tower("export", logdir, "--format", "tf", "-o", tmp_path / "plain" / "sub" / "m")
    assert res.returncode == 1, res.stderr
    assert f"{tmp_path / 'plain' / 'sub'}: cannot create the output folder" in res.stderr, res.stderr


# ---------------------------------------------------------------- ONNX

def onnx_matches_tower(run_tower, tmp_path, ckpt, x, weights, *extra):
    """Exports ckpt with the weights, checks the graph, and compares onnxruntime on x (the stored values,
    uint8) with Tower's own forward pass: the same top-1 everywhere and the same outputs within 1e-5
    (relative to the logit's size where it is over 1). Returns Tower's outputs."""
    import onnx
    import onnxruntime as ort
    model, xs, ys = tmp_path / "out" / f"m-{weights}.onnx", tmp_path / "x.npy", tmp_path / "out" / f"y-{weights}.npy"
    np.save(xs, x)
    res = run_tower("export", ckpt, "--format", "onnx", "-o", model, "--weights", weights,
                    "--verify", xs, "--verify-out", ys, *extra)
    assert res.returncode == 0, res.stderr
    m = onnx.load(str(model))
    onnx.checker.check_model(m, full_check=True)
    assert [o.name for o in m.graph.output][0] in ("logits", "predictions")
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    outs = sess.run(None, {"input": x.astype(np.float32)})
    tower = np.load(ys)
    assert outs[0].shape == tower.shape
    assert np.all(np.abs(outs[0] - tower) <= 1e-5 * np.maximum(1, np.abs(tower))), np.abs(outs[0] - tower).max()
    if tower.shape[1] > 1:
        assert np.array_equal(outs[0].argmax(1), tower.argmax(1))
        np.testing.assert_allclose(outs[1].sum(1), 1, atol=1e-5)  # the probabilities
    return tower


def predict_top1(run_tower, tmp_path, ckpt, x, weights):
    """`tower predict`'s top-1 class of every row of x (uint8), in batches of its input cap."""
    top = []
    for i in range(0, len(x), 1000):
        chunk = tmp_path / "chunk.npy"
        np.save(chunk, x[i:i + 1000])
        res = run_tower("predict", ckpt, chunk, "--weights", weights, "--top-k", "1", "--json")
        assert res.returncode == 0, res.stderr
        top += [p["top_k"][0]["class"] for p in json.loads(res.stdout)["predictions"]]
    return np.array(top)


def test_onnx_mlp_matches_tower(seed_run, run_tower, tmp_path):
    logdir, ev, _ = seed_run
    images, labels = fashion_test_split()
    for weights, key in (("raw", "eval_accuracy"), ("ema", "eval_accuracy_ema")):
        tower = onnx_matches_tower(run_tower, tmp_path, checkpoint_of(logdir), images, weights)
        assert int((tower.argmax(1) == labels).sum()) == round(ev[key] * len(labels))
        # onnxruntime's top-1 (equal to tower.argmax above) is `tower predict`'s on all 10,000 images
        assert np.array_equal(predict_top1(run_tower, tmp_path, checkpoint_of(logdir), images, weights),
                              tower.argmax(1))


def test_onnx_fashion_cnn_matches_tower(tower_bin, run_tower, tmp_path, fashion):  # noqa: F811
    """examples/fashion_cnn.json as it is (conv 5x5 SAME, max pool, conv, pool, flatten, dense 1024,
    dropout, dense), a few steps, no evaluation (the comparison is the check)."""
    c = config_of("fashion_cnn.json", fashion, steps=6, batch_size=16, summary_every=6, eval_every=0,
                  checkpoint_every=0)
    del c["dataset"]["test"]
    _, _, logdir, _ = train(tower_bin, tmp_path, c, name="cnn")
    images, _ = fashion_test_split()
    tower = onnx_matches_tower(run_tower, tmp_path, checkpoint_of(logdir), images, "ema")
    # onnxruntime's top-1 (equal to tower.argmax) is `tower predict`'s on all 10,000 images
    assert np.array_equal(predict_top1(run_tower, tmp_path, checkpoint_of(logdir), images, "ema"), tower.argmax(1))


def test_onnx_3d_cnn_regression_matches_tower(tower_bin, run_tower, tmp_path):
    """Seed 001's kind: a 3-D CNN regressing a number from uint8 volumes (conv3d VALID and SAME, strided
    pool, flatten, dense, dropout, dense 1), through NumPy and tower convert."""
    x, y = blob_volumes(512, seed=1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    res = run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels", tmp_path / "y.npy",
                    "-o", tmp_path / "train.tfrecord")
    assert res.returncode == 0, res.stderr
    c = {"dataset": {"train": str(tmp_path / "train.tfrecord"), "shape": [8, 8, 8, 1]},
         "model": {"layers": [
             {"type": "conv3d", "filters": 4, "kernel": 3, "activation": "relu"},
             {"type": "max_pool3d", "pool": 2, "strides": [2, 2, 2], "padding": "same"},
             {"type": "conv3d", "filters": 8, "kernel": [3, 2, 2], "padding": "same", "activation": "tanh"},
             {"type": "flatten"},
             {"type": "dense", "units": 16, "activation": "sigmoid"},
             {"type": "dropout", "rate": 0.2},
             {"type": "dense", "units": 1}]},
         "loss": "mean_squared_error", "optimizer": {"type": "adam", "learning_rate": 0.003},
         "ema_decay": 0.9, "batch_size": 16, "steps": 20, "seed": 3, "summary_every": 20, "eval_every": 0,
         "checkpoint_every": 0}
    _, _, logdir, _ = train(tower_bin, tmp_path, c, name="cnn3d")
    xs, _ = blob_volumes(256, seed=2)
    outs = {w: onnx_matches_tower(run_tower, tmp_path, checkpoint_of(logdir), xs[..., None], w)
            for w in ("raw", "ema")}
    np.save(tmp_path / "volumes.npy", xs[..., None])  # `tower predict`'s outputs: onnxruntime's within 1e-5
    res = run_tower("predict", checkpoint_of(logdir), tmp_path / "volumes.npy", "--weights", "ema", "--json")
    assert res.returncode == 0, res.stderr
    predicted = np.array([p["outputs"] for p in json.loads(res.stdout)["predictions"]], dtype=np.float32)
    assert np.all(np.abs(predicted - outs["ema"]) <= 1e-5 * np.maximum(1, np.abs(outs["ema"])))
    # --input scaled: no Mul, the graph takes the values as the model sees them (here: pixels * 1/255)
    scaled = xs[..., None].astype(np.float32) * np.float32(1 / 255)
    out = onnx_matches_tower(run_tower, tmp_path, checkpoint_of(logdir), scaled, "raw", "--input", "scaled")
    np.testing.assert_array_equal(out, outs["raw"])


# ---------------------------------------------------------------- the download route

@pytest.fixture(scope="module")
def served_run(tower_bin, tmp_path_factory):
    """A server with Fashion-MNIST and a short seed-MLP run checkpointed at steps 10 and 20."""
    from conftest import start_server
    data = tmp_path_factory.mktemp("export") / "data"
    server = start_server(tower_bin, data)
    try:
        upload_fashion(server)
        cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
        cfg.update(dataset="fashion-mnist", name="export", steps=20, summary_every=10, eval_every=0,
                   checkpoint_every=10)
        r = submit(server, cfg)
        assert r.status_code == 201, r.text
        run = wait_run(server, r.json()["id"])
        assert run["status"] == "succeeded", run
        yield server, run["id"]
    finally:
        server.proc.kill()
        server.proc.wait()


def test_route_returns_what_the_cli_writes(served_run, run_tower, tmp_path):
    server, run_id = served_run
    ckdir = helpers.run_dir(server.data, run_id) / "checkpoints"
    # TF: one tar of the three files the CLI writes for the prefix model.ckpt-<step>
    r = requests.get(server.api(f"/runs/{run_id}/export?format=tf"), timeout=120)
    assert r.status_code == 200, r.text
    assert 'filename="model.ckpt-20.tar"' in r.headers["Content-Disposition"]
    res = run_tower("export", ckdir / "ckpt-0000000020.safetensors", "--format", "tf", "-o",
                    tmp_path / "model.ckpt-20")
    assert res.returncode == 0, res.stderr
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    assert set(members) == {"model.ckpt-20.index", "model.ckpt-20.data-00000-of-00001", "checkpoint"}
    for name, data in members.items():
        assert data == (tmp_path / name).read_bytes(), name
    # ONNX of an older step, EMA weights
    r = requests.get(server.api(f"/runs/{run_id}/export?format=onnx&step=10&weights=ema"), timeout=120)
    assert r.status_code == 200, r.text
    res = run_tower("export", ckdir / "ckpt-0000000010.safetensors", "--format", "onnx", "--weights", "ema",
                    "-o", tmp_path / "m.onnx")
    assert res.returncode == 0, res.stderr
    assert r.content == (tmp_path / "m.onnx").read_bytes()
    res = run_tower("download", run_id, "--server", server.url, "--format", "onnx", "--step", "10", "--weights",
                    "ema", "-o", tmp_path / "client.onnx")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "client.onnx").read_bytes() == r.content
    res = run_tower("download", run_id, "--server", server.url, "--format", "tf", "--weights", "ema")
    assert res.returncode == 2 and "--weights" in res.stderr
    # the weights not named: the EMA (README, "Raw and EMA"), as `tower export` chooses them
    r = requests.get(server.api(f"/runs/{run_id}/export?format=onnx&step=latest"), timeout=120)
    assert r.status_code == 200 and 'filename="model-20-ema.onnx"' in r.headers["Content-Disposition"]
    res = run_tower("export", ckdir / "ckpt-0000000020.safetensors", "--format", "onnx", "-o", tmp_path / "d.onnx")
    assert res.returncode == 0, res.stderr
    assert r.content == (tmp_path / "d.onnx").read_bytes()
    raw = requests.get(server.api(f"/runs/{run_id}/export?format=onnx&step=latest&weights=raw"), timeout=120)
    assert raw.status_code == 200 and raw.content != r.content


@pytest.mark.parametrize("query, status, names", [
    ("format=zip", 400, "format"),
    ("", 400, "format"),
    ("format=onnx&weights=best", 400, "weights"),
    ("format=tf&weights=best", 400, "weights"),
    ("format=tf&step=ten", 400, "step"),
    ("format=tf&step=-1", 400, "step"),
    ("format=tf&color=red", 400, "color"),
    ("format=tf&step=15", 404, "step 15"),
    ("format=onnx&step=99999999999", 404, "step 99999999999"),
    ("format=onnx&step=16012412035529283993600", 404, "step 16012412035529283993600"),  # past int64
])
def test_route_refuses_bad_requests(served_run, query, status, names):
    server, run_id = served_run
    r = requests.get(server.api(f"/runs/{run_id}/export?{query}"), timeout=30)
    assert r.status_code == status, r.text
    assert names in r.json()["error"]["message"]


def test_route_unknown_run_is_404(served_run):
    server, _ = served_run
    r = requests.get(server.api("/runs/r0000000000000000/export?format=tf"), timeout=30)
    assert r.status_code == 404 and "r0000000000000000" in r.json()["error"]["message"]


def test_route_onnx_of_a_csv_run_takes_the_values_as_stored(serve, run_tower, tmp_path):
    """A float dataset (a CSV) is fed to the trainer as it is, never multiplied by `scale`: the route's graph
    takes those values without the scale (what `tower export --input scaled` writes), and onnxruntime gives
    the probabilities the server's prediction gives for them."""
    import onnxruntime as ort
    server = serve()
    rows = np.random.default_rng(4).normal(0, 1, (80, 3)).astype(np.float32)
    csv = "a,b,c,label\n" + "".join(f"{a:.3f},{b:.3f},{c:.3f},{int(a + b > 0)}\n" for a, b, c in rows)
    r = requests.post(server.api("/datasets?name=tab"), files={"csv": ("t.csv", csv), "label_column": (None, "label")},
                      timeout=30)
    assert r.status_code == 202, r.text
    helpers.poll("the CSV to convert", lambda: True if requests.get(server.api("/datasets/tab"), timeout=10)
                 .json()["status"] == "ready" else None)
    cfg = {"dataset": "tab", "model": {"layers": [{"type": "dense", "units": 2}]}, "loss": "softmax_cross_entropy",
           "optimizer": {"type": "sgd", "learning_rate": 0.1}, "batch_size": 16, "steps": 50, "seed": 1,
           "summary_every": 10, "eval_every": 0, "checkpoint_every": 50}
    run_id = submit(server, cfg).json()["id"]
    assert wait_run(server, run_id)["status"] == "succeeded"
    r = requests.get(server.api(f"/runs/{run_id}/export?format=onnx&weights=raw"), timeout=60)
    assert r.status_code == 200, r.text
    ckpt = helpers.run_dir(server.data, run_id) / "checkpoints" / "ckpt-0000000050.safetensors"
    res = run_tower("export", ckpt, "--format", "onnx", "--input", "scaled", "--weights", "raw",
                    "-o", tmp_path / "scaled.onnx")
    assert res.returncode == 0, res.stderr
    assert r.content == (tmp_path / "scaled.onnx").read_bytes()
    probabilities = ort.InferenceSession(r.content, providers=["CPUExecutionProvider"]).run(
        ["probabilities"], {"input": rows})[0]
    predicted = requests.post(server.api(f"/runs/{run_id}/predict?weights=raw"), json={"inputs": rows.tolist()},
                              timeout=60).json()["predictions"]
    served = [{t["class"]: t["probability"] for t in p["top_k"]} for p in predicted]
    assert np.allclose(probabilities, [[s[0], s[1]] for s in served], atol=1e-5)
