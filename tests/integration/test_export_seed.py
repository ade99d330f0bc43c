"""`tower export --names seed` and GET /runs/{id}/export?names=seed, checked by the seed program's own graph
(shared/seeds/000: the TF1 multi-GPU tower MLP): its variables declared as it declares them
(`tf.variable_scope('layer1')`, `tf.get_variable('w', ...)`, `tf.get_variable('bias', ...)`, the step as
`tf.Variable(0, trainable=False)`, `ExponentialMovingAverage(0.99, global_step).apply(...)`) and restored by
its own `tf.compat.v1.train.Saver()`. The seed feeds the pixels as raw 0..255 floats, so the run here trains
with `"scale": 1`, as the seed does; on the 10,000 Fashion-MNIST test images the restored graph's accuracy is
`tower evaluate`'s, with the raw weights and with the EMA shadows (`ema.variables_to_restore()`)."""
import io
import json
import os
import tarfile

import numpy as np
import pytest
import requests

import helpers
from test_export import checkpoint_of, config_of, fashion_test_split
from test_export import served_run  # noqa: F401 (a server's seed-MLP run, checkpointed at steps 10 and 20)
from test_train import fashion, train  # noqa: F401 (fashion: the converted dataset fixture)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

STEPS = 300
SEED_VARIABLES = {f"layer{k}/{v}{s}" for k in (1, 2) for v in ("w", "bias")
                  for s in ("", "/ExponentialMovingAverage")}


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory, tower_bin, fashion):  # noqa: F811
    """examples/seed_mlp.json as the seed trains it (SGD at 0.001 with its decay, L2, EMA 0.99, batch 32) on the
    raw pixels ("scale": 1), STEPS steps: (logdir, its last checkpoint, the test split's TFRecord)."""
    tmp = tmp_path_factory.mktemp("seed_names")
    c = config_of("seed_mlp.json", fashion, steps=STEPS, summary_every=100, eval_every=0, checkpoint_every=STEPS)
    c["dataset"]["scale"] = 1
    assert c["optimizer"]["type"] == "sgd" and c["ema_decay"] == 0.99
    _, _, logdir, _ = train(tower_bin, tmp, c, name="seed")
    return logdir, checkpoint_of(logdir), fashion[1]


def seed_graph(tf):
    """The seed's graph, as it builds it: the inference function under its variable scopes, global_step, and
    the EMA of the trainable variables. Returns (input, logits, global_step, ema)."""
    v1 = tf.compat.v1

    def get_weight_variables(shape):
        return v1.get_variable("w", shape, dtype=tf.float32,
                               initializer=v1.truncated_normal_initializer(stddev=0.1))

    def inference(input_tensor):
        with v1.variable_scope("layer1"):
            weight = get_weight_variables([28 * 28, 500])
            bias = v1.get_variable("bias", [500], dtype=tf.float32)
            layer1 = tf.nn.relu(tf.matmul(input_tensor, weight) + bias)
        with v1.variable_scope("layer2"):
            weight = get_weight_variables([500, 10])
            bias = v1.get_variable("bias", [10], dtype=tf.float32)
            layer2 = tf.matmul(layer1, weight) + bias
        return layer2

    x = v1.placeholder(tf.float32, [None, 28 * 28])  # the seed's tf.cast(decoded uint8, tf.float32)
    logits = inference(x)
    global_step = tf.Variable(0, trainable=False)
    ema = v1.train.ExponentialMovingAverage(0.99, global_step)
    ema.apply(v1.trainable_variables() + v1.moving_average_variables())
    return x, logits, global_step, ema


def correct(logits, labels):
    return int((logits.argmax(1) == labels).sum())


def tower_correct(run_tower, ckpt, data, weights, tmp_path):
    """`tower evaluate`'s count of correct test images with the weights."""
    out = tmp_path / f"eval-{weights}.json"
    res = run_tower("evaluate", ckpt, "--data", data, "--weights", weights, "--out", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["weights"] == weights and doc[weights]["examples"] == 10000, doc
    return doc[weights]["accuracy"] * doc[weights]["examples"]


def restore_seed(tf, prefix, images):
    """The seed's graph restored from prefix by its own Saver: (global_step's value and dtype, the values of
    every variable by name, the raw weights' logits, the EMA's logits)."""
    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        x, logits, global_step, ema = seed_graph(tf)
        assert {v.op.name for v in v1.global_variables()} == SEED_VARIABLES | {"Variable"}
        v1.train.Saver().restore(sess, str(prefix))
        values = {v.op.name: sess.run(v) for v in v1.global_variables()}
        raw = sess.run(logits, {x: images})
        v1.train.Saver(ema.variables_to_restore()).restore(sess, str(prefix))  # the shadows into the variables
        averaged = sess.run(logits, {x: images})
        return (values["Variable"], global_step.dtype.base_dtype), values, raw, averaged


def test_the_seeds_saver_restores_the_seed_export(seed_run, run_tower, tmp_path):
    import tensorflow as tf
    from safetensors.numpy import load_file
    logdir, ckpt, test_data = seed_run
    prefix = tmp_path / "tf" / f"model.ckpt-{STEPS}"
    prefix.parent.mkdir()
    res = run_tower("export", logdir, "--format", "tf", "-o", prefix, "--names", "seed")
    assert res.returncode == 0, res.stderr
    reader = tf.train.load_checkpoint(str(prefix))
    assert set(reader.get_variable_to_shape_map()) == SEED_VARIABLES | {"Variable"}
    assert reader.get_variable_to_dtype_map()["Variable"] == tf.int32

    images, labels = fashion_test_split()
    (step, dtype), values, raw, averaged = restore_seed(tf, prefix, images.reshape(-1, 784).astype(np.float32))
    assert step == STEPS and dtype == tf.int32
    stored = load_file(ckpt)
    for k in (1, 2):
        for tower, seed in (("weights", "w"), ("biases", "bias")):
            for shadow in ("", "/ExponentialMovingAverage"):
                np.testing.assert_array_equal(values[f"layer{k}/{seed}{shadow}"],
                                              stored[f"layer{k}/{tower}{shadow}"])
    # the seed's inference on the 10,000 test images is Tower's evaluation of the same checkpoint, raw and EMA
    for weights, logits in (("raw", raw), ("ema", averaged)):
        tower = tower_correct(run_tower, ckpt, test_data, weights, tmp_path)
        assert abs(correct(logits, labels) - tower) <= 1, (weights, correct(logits, labels), tower)
    assert not np.array_equal(raw, averaged)


def test_the_default_export_keeps_towers_names(seed_run, run_tower, tmp_path):
    """No --names (and --names tower): layer1/weights and an int64 global_step, which the seed's Saver does not
    find."""
    import tensorflow as tf
    logdir, _, _ = seed_run
    plain, tower = tmp_path / "plain" / "model.ckpt", tmp_path / "tower" / "model.ckpt"
    for prefix, extra in ((plain, ()), (tower, ("--names", "tower"))):
        prefix.parent.mkdir()
        res = run_tower("export", logdir, "--format", "tf", "-o", prefix, *extra)
        assert res.returncode == 0, res.stderr
    for suffix in (".index", ".data-00000-of-00001"):
        name = f"model.ckpt{suffix}"
        assert plain.with_name(name).read_bytes() == tower.with_name(name).read_bytes()
    reader = tf.train.load_checkpoint(str(plain))
    dtypes = reader.get_variable_to_dtype_map()
    assert "layer1/weights" in dtypes and "layer1/w" not in dtypes and "Variable" not in dtypes
    assert dtypes["global_step"] == tf.int64
    with pytest.raises(tf.errors.NotFoundError):
        restore_seed(tf, plain, np.zeros((1, 784), np.float32))


def test_a_map_file(seed_run, run_tower, tmp_path):
    """A map file: the seed's map written out is the built-in one byte for byte; variables win over leaves."""
    import tensorflow as tf
    logdir, _, _ = seed_run
    seed_map = {"leaves": {"weights": "w", "biases": "bias"}, "global_step": {"name": "Variable", "dtype": "int32"}}
    (tmp_path / "seed.json").write_text(json.dumps(seed_map))
    (tmp_path / "dense.json").write_text(json.dumps({
        "leaves": {"weights": "kernel", "biases": "bias"}, "variables": {"layer2/weights": "logits/kernel"}}))
    for name, names in (("builtin", "seed"), ("file", tmp_path / "seed.json"), ("dense", tmp_path / "dense.json")):
        (tmp_path / name).mkdir()
        res = run_tower("export", logdir, "--format", "tf", "-o", tmp_path / name / "m", "--names", names)
        assert res.returncode == 0, res.stderr
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / "builtin" / f"m{suffix}").read_bytes() == (tmp_path / "file" / f"m{suffix}").read_bytes()
    shapes = tf.train.load_checkpoint(str(tmp_path / "dense" / "m")).get_variable_to_shape_map()
    assert set(shapes) == {"layer1/kernel", "layer1/bias", "logits/kernel", "layer2/bias", "global_step"} | {
        f"{n}/ExponentialMovingAverage" for n in ("layer1/kernel", "layer1/bias", "logits/kernel", "layer2/bias")}


@pytest.mark.parametrize("names, says", [
    ("bogus", "neither a built-in name map (expected one of: tower, seed) nor a map file"),
    ("sed", "did you mean 'seed'?"),
    ('{"leaves": {"weights": "w x"}}', "leaves[\"weights\"]: 'w x', whose character 2 (' ', 0x20) TF refuses"),
    ('{"global_step": {"dtype": "int16"}}', 'global_step.dtype: must be "int32" or "int64", got "int16"'),
    ('{"variables": {"layer3/weights": "w"}}', "variables[\"layer3/weights\"]: the model has no variable"),
    ('{"leaves": {"weights": "w", "biases": "w"}}', "'layer1/weights' and 'layer1/biases' would both be named"),
    ('{"names": {}}', "names: unknown key"),
])
def test_a_bad_map_is_a_usage_error(seed_run, run_tower, tmp_path, names, says):
    logdir, _, _ = seed_run
    if names.startswith("{"):
        (tmp_path / "map.json").write_text(names)
        names = tmp_path / "map.json"
    res = run_tower("export", logdir, "--format", "tf", "-o", tmp_path / "m", "--names", names)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert not list(tmp_path.glob("m.*"))


def test_names_apply_to_tf_only_and_an_int32_step_ends_at_int32_max(seed_run, run_tower, tmp_path):
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open
    logdir, ckpt, _ = seed_run
    res = run_tower("export", logdir, "--format", "onnx", "-o", tmp_path / "m.onnx", "--names", "seed")
    assert res.returncode == 2 and "--names applies to --format tf" in res.stderr
    # the same checkpoint at step 2^31: int64 holds it, the seed's int32 Variable cannot
    with safe_open(str(ckpt), "np") as f:
        meta = dict(f.metadata())
    meta["step"] = str(2 ** 31)
    late = tmp_path / "ckpt-late.safetensors"
    save_file(load_file(ckpt), str(late), metadata=meta)
    for name in ("late", "late32"):
        (tmp_path / name).mkdir()
    res = run_tower("export", late, "--format", "tf", "-o", tmp_path / "late" / "m")
    assert res.returncode == 0, res.stderr
    res = run_tower("export", late, "--format", "tf", "-o", tmp_path / "late32" / "m", "--names", "seed")
    assert res.returncode == 2 and "step 2147483648 is past int32's 2147483647" in res.stderr, res.stderr
    assert not list((tmp_path / "late32").iterdir())


# ---------------------------------------------------------------- the download route

def test_route_names_seed_restores_into_the_seed_graph(served_run, run_tower, tmp_path):  # noqa: F811
    import tensorflow as tf
    server, run_id = served_run
    r = requests.get(server.api(f"/runs/{run_id}/export?format=tf&names=seed"), timeout=120)
    assert r.status_code == 200, r.text
    assert 'filename="model.ckpt-20.tar"' in r.headers["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        tar.extractall(tmp_path / "route")
    (step, dtype), _, _, _ = restore_seed(tf, tmp_path / "route" / "model.ckpt-20", np.zeros((1, 784), np.float32))
    assert step == 20 and dtype == tf.int32
    # the bytes `tower export --names seed` writes, and `tower download --names seed` saves
    ckpt = helpers.run_dir(server.data, run_id) / "checkpoints" / "ckpt-0000000020.safetensors"
    (tmp_path / "cli").mkdir()
    res = run_tower("export", ckpt, "--format", "tf", "-o", tmp_path / "cli" / "model.ckpt-20", "--names", "seed")
    assert res.returncode == 0, res.stderr
    for name in ("model.ckpt-20.index", "model.ckpt-20.data-00000-of-00001", "checkpoint"):
        assert (tmp_path / "route" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    res = run_tower("download", run_id, "--server", server.url, "--format", "tf", "--names", "seed",
                    "-o", tmp_path / "client.tar")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "client.tar").read_bytes() == r.content
    # names=tower is the default's archive
    tower = requests.get(server.api(f"/runs/{run_id}/export?format=tf&names=tower"), timeout=120)
    plain = requests.get(server.api(f"/runs/{run_id}/export?format=tf"), timeout=120)
    assert tower.status_code == plain.status_code == 200 and tower.content == plain.content != r.content


@pytest.mark.parametrize("query", ["format=tf&names=bogus", "format=tf&names=", "format=onnx&names=keras",
                                   "format=tf&names=seed.json"])
def test_route_refuses_other_names(served_run, query):  # noqa: F811
    server, run_id = served_run
    r = requests.get(server.api(f"/runs/{run_id}/export?{query}"), timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "INVALID_ARGUMENT" and "names" in r.json()["error"]["message"]


def test_client_names_usage(served_run, run_tower):  # noqa: F811
    server, run_id = served_run
    res = run_tower("download", run_id, "--server", server.url, "--format", "onnx", "--names", "seed")
    assert res.returncode == 2 and "--names applies to --format tf" in res.stderr
    res = run_tower("download", run_id, "--server", server.url, "--format", "tf", "--names", "bogus")
    assert res.returncode == 2 and "--names" in res.stderr
