"""The training recipe against TensorFlow: each learning-rate schedule, read back from the run's own event
file (train/learning_rate at every step), equals TensorFlow's schedule function at every step."""
import json
import os
import subprocess

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

FEATURES, CLASSES, EXAMPLES = 4, 3, 48


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A TFRecord of EXAMPLES float examples written by TensorFlow itself: (path, x, y)."""
    import tensorflow as tf
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (EXAMPLES, FEATURES)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0).astype(np.int64)
    path = tmp_path_factory.mktemp("tiny") / "train.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for xi, yi in zip(x, y):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(float_list=tf.train.FloatList(value=xi)),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[yi]))}))
            w.write(ex.SerializeToString())
    return path, x, y


def linear_config(tiny, **over):
    """Softmax regression from zeros on the whole tiny set each step (the order of rows does not matter)."""
    c = {"dataset": {"train": str(tiny[0]), "shape": [FEATURES]},
         "model": {"layers": [{"type": "dense", "units": CLASSES, "weight_init": {"type": "zeros"}}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.5}, "batch_size": EXAMPLES, "steps": 40, "seed": 3,
         "summary_every": 1, "eval_every": 0, "checkpoint_every": 0}
    c.update(over)
    return c


def train(tower_bin, tmp_path, config, name):
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    logdir = tmp_path / name
    res = subprocess.run([str(tower_bin), "train", cfg, "--logdir", logdir], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    return logdir


def scalars(logdir, tag):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def tf_exponential(lr, warmup, decay_steps, rate, staircase):
    import tensorflow as tf
    return lambda s: (s / warmup * lr if s < warmup else
                      tf.compat.v1.train.exponential_decay(lr, s - warmup, decay_steps, rate, staircase)())


def tf_cosine(lr, warmup, decay_steps, alpha):
    import tensorflow as tf
    return tf.keras.optimizers.schedules.CosineDecay(0.0, decay_steps, alpha=alpha, warmup_target=lr,
                                                     warmup_steps=warmup)


def tf_piecewise(lr, warmup, boundaries, factors):
    import tensorflow as tf
    values = [np.float32(lr) * np.float32(f) for f in factors]
    return lambda s: (s / warmup * lr if s < warmup else
                      tf.compat.v1.train.piecewise_constant(np.int64(s - warmup), boundaries, values)())


SCHEDULES = {
    "exponential": ({"type": "exponential", "decay_steps": 7, "decay_rate": 0.8, "staircase": True,
                     "warmup_steps": 5}, lambda: tf_exponential(0.5, 5, 7, 0.8, True)),
    "cosine": ({"type": "cosine", "decay_steps": 25, "alpha": 0.1, "warmup_steps": 10},
               lambda: tf_cosine(0.5, 10, 25, 0.1)),
    "cosine without warm-up": ({"type": "cosine", "decay_steps": 30}, lambda: tf_cosine(0.5, 0, 30, 0.0)),
    "piecewise": ({"type": "piecewise", "boundaries": [10, 20], "factors": [1, 0.1, 0.01], "warmup_steps": 4},
                  lambda: tf_piecewise(0.5, 4, [10, 20], [1, 0.1, 0.01])),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_the_logged_learning_rate_is_tensorflows_schedule(tower_bin, tmp_path, tiny, name):
    decay, reference = SCHEDULES[name]
    logdir = train(tower_bin, tmp_path, linear_config(tiny, lr_decay=decay), "run")
    got = scalars(logdir, "train/learning_rate")
    assert sorted(got) == list(range(1, 41))
    schedule = reference()
    want = [float(schedule(s)) for s in range(1, 41)]
    np.testing.assert_allclose([got[s] for s in range(1, 41)], want, rtol=2e-6, atol=1e-9)


def keras_weights(tiny, optimizer, steps, smoothing=0.0):
    """Keras' Dense(CLASSES) from zeros, trained `steps` full-batch steps on the tiny set: (kernel, bias)."""
    import keras
    _, x, y = tiny
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(CLASSES, kernel_initializer="zeros", bias_initializer="zeros")])
    if getattr(optimizer, "weight_decay", None):
        optimizer.exclude_from_weight_decay(var_names=["bias"])  # Tower decays the weights, not the biases
    model.compile(optimizer=optimizer,
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=smoothing))
    model.fit(x, keras.utils.to_categorical(y, CLASSES), batch_size=EXAMPLES, epochs=steps, shuffle=False,
              verbose=0)
    kernel, bias = model.layers[0].get_weights()
    return kernel, bias


def tower_weights(tower_bin, tmp_path, config):
    from safetensors.numpy import load_file
    logdir = train(tower_bin, tmp_path, config, "run")
    latest = (logdir / "checkpoints" / "latest").read_text().strip()
    t = load_file(str(logdir / "checkpoints" / latest))
    return t["layer1/weights"], t["layer1/biases"]


def recipe_cases():
    import keras
    cosine = keras.optimizers.schedules.CosineDecay(0.0, 15, alpha=0.1, warmup_target=0.2, warmup_steps=5)
    return {
        "nesterov": ({"optimizer": {"type": "momentum", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True}},
                     lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True), 0.0),
        "adamw": ({"optimizer": {"type": "adam", "learning_rate": 0.05, "weight_decay": 0.2}},
                  lambda: keras.optimizers.AdamW(0.05, weight_decay=0.2, epsilon=1e-8), 0.0),
        "global clipnorm": ({"optimizer": {"type": "sgd", "learning_rate": 0.5, "global_clipnorm": 0.05}},
                            lambda: keras.optimizers.SGD(0.5, global_clipnorm=0.05), 0.0),
        "label smoothing": ({"optimizer": {"type": "sgd", "learning_rate": 0.5}, "label_smoothing": 0.2},
                            lambda: keras.optimizers.SGD(0.5), 0.2),
        # Adam, whose moments do not hold the rate (Keras' momentum velocity does, TF1's does not: with a
        # schedule they differ, and Tower's is TF1's)
        "all, two towers": ({"optimizer": {"type": "adam", "learning_rate": 0.2, "weight_decay": 0.1,
                                           "global_clipnorm": 0.3},
                             "lr_decay": {"type": "cosine", "decay_steps": 15, "alpha": 0.1, "warmup_steps": 5},
                             "label_smoothing": 0.1, "towers": 2, "batch_size": EXAMPLES // 2},
                            lambda: keras.optimizers.AdamW(cosine, weight_decay=0.1, epsilon=1e-8,
                                                           global_clipnorm=0.3), 0.1),
    }


@pytest.mark.parametrize("name", ["nesterov", "adamw", "global clipnorm", "label smoothing", "all, two towers"])
def test_the_weights_after_training_are_keras(tower_bin, tmp_path, tiny, name):
    """20 full-batch steps of softmax regression from zeros: Tower's checkpoint holds the weights Keras'
    optimizer (and loss) reach on the same data."""
    over, optimizer, smoothing = recipe_cases()[name]
    config = linear_config(tiny, steps=20, **over)
    w, b = tower_weights(tower_bin, tmp_path, config)
    kw, kb = keras_weights(tiny, optimizer(), 20, smoothing)
    assert np.abs(kw).max() > 0.05  # it moved
    np.testing.assert_allclose(w, kw, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(b, kb, rtol=2e-4, atol=2e-6)


# ---- graph models: batch normalisation, residual add, concat, average pooling ----

IMG = (6, 6, 2)

def residual_layers(filters):
    return [
        {"type": "conv2d", "name": "c1", "filters": filters, "kernel": 3, "weight_init": {"type": "glorot_uniform"}},
        {"type": "batch_norm", "name": "bn1", "activation": "relu"},
        {"type": "conv2d", "name": "c2", "filters": filters, "kernel": 3, "weight_init": {"type": "glorot_uniform"}},
        {"type": "batch_norm", "name": "bn2", "momentum": 0.9},
        {"type": "add", "name": "add1", "inputs": ["bn2", "bn1"], "activation": "relu"},
        {"type": "concat", "name": "cat", "inputs": ["add1", "c1"]},
        {"type": "avg_pool2d", "name": "avg", "pool": 3, "strides": 2, "padding": "same"},
        {"type": "global_avg_pool", "name": "gap"},
        {"type": "batch_norm", "name": "bn3", "epsilon": 0.01},
        {"type": "dense", "name": "out", "units": CLASSES, "weight_init": {"type": "glorot_uniform"}},
    ]


RESIDUAL = residual_layers(4)
# c2 (16 channels to 16 filters, 3x3, stride 1) is a window of oneDNN's Winograd kernels (on AVX-512)
MATH = {"direct": {}, "winograd": {"winograd": True, "model": {"layers": residual_layers(16)}}}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """EXAMPLES images of IMG as float TFRecord examples: (path, x, y)."""
    import tensorflow as tf
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, (EXAMPLES, *IMG)).astype(np.float32)
    y = (x[:, :3, :3, 0].mean(axis=(1, 2)) * CLASSES).astype(np.int64).clip(0, CLASSES - 1)
    path = tmp_path_factory.mktemp("images") / "train.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for xi, yi in zip(x, y):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(float_list=tf.train.FloatList(value=xi.ravel())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[yi]))}))
            w.write(ex.SerializeToString())
    return path, x, y


def residual_config(images, **over):
    c = {"dataset": {"train": str(images[0]), "shape": list(IMG)}, "model": {"layers": RESIDUAL},
         "optimizer": {"type": "sgd", "learning_rate": 0.1}, "batch_size": EXAMPLES, "steps": 10, "seed": 5,
         "summary_every": 1, "eval_every": 0, "checkpoint_every": 0}
    c.update(over)
    return c


def keras_residual(weights):
    """The same graph in Keras, with Tower's initial weights."""
    import keras
    L = keras.layers
    inp = keras.Input(IMG)
    filters = weights["c1/weights"].shape[-1]
    c1 = L.Conv2D(filters, 3, padding="same", name="c1")(inp)
    bn1 = L.Activation("relu")(L.BatchNormalization(name="bn1")(c1))
    c2 = L.Conv2D(filters, 3, padding="same", name="c2")(bn1)
    bn2 = L.BatchNormalization(momentum=0.9, name="bn2")(c2)
    add1 = L.Activation("relu")(L.Add()([bn2, bn1]))
    cat = L.Concatenate()([add1, c1])
    avg = L.AveragePooling2D(3, 2, padding="same")(cat)
    gap = L.GlobalAveragePooling2D()(avg)
    bn3 = L.BatchNormalization(epsilon=0.01, name="bn3")(gap)
    out = L.Dense(CLASSES, name="out")(bn3)
    model = keras.Model(inp, out)
    for name in ("c1", "c2", "out"):
        model.get_layer(name).set_weights([weights[f"{name}/weights"], weights[f"{name}/biases"]])
    for name in ("bn1", "bn2", "bn3"):
        model.get_layer(name).set_weights([weights[f"{name}/BatchNorm/{v}"] for v in
                                           ("gamma", "beta", "moving_mean", "moving_variance")])
    return model


def checkpoint(logdir):
    from safetensors.numpy import load_file
    latest = (logdir / "checkpoints" / "latest").read_text().strip()
    return load_file(str(logdir / "checkpoints" / latest))


@pytest.mark.parametrize("math", MATH)
def test_a_residual_batch_norm_graph_trains_as_keras(tower_bin, tmp_path, images, math):
    """Ten full-batch SGD steps of a graph with batch norm (batch statistics in training, moving ones
    following them), a residual add, a concat reading a layer twice read, average and global average
    pooling: Tower's weights and moving statistics are Keras' from the same start, with direct and with
    Winograd convolutions."""
    import keras
    # the start: one step at a rate too small to move a weight (the moving statistics do move; their
    # start is known: zeros and ones)
    start = checkpoint(train(tower_bin, tmp_path, residual_config(images, steps=1, **MATH[math],
                                                                 optimizer={"type": "sgd", "learning_rate": 1e-30}),
                             "start"))
    for name in ("bn1", "bn2", "bn3"):
        start[f"{name}/BatchNorm/moving_mean"] = np.zeros_like(start[f"{name}/BatchNorm/moving_mean"])
        start[f"{name}/BatchNorm/moving_variance"] = np.ones_like(start[f"{name}/BatchNorm/moving_variance"])
    got = checkpoint(train(tower_bin, tmp_path, residual_config(images, **MATH[math]), "run"))
    model = keras_residual(start)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    _, x, y = images
    model.fit(x, y, batch_size=EXAMPLES, epochs=10, shuffle=False, verbose=0)
    want = {}
    for name in ("c1", "c2", "out"):
        want[f"{name}/weights"], want[f"{name}/biases"] = model.get_layer(name).get_weights()
    for name in ("bn1", "bn2", "bn3"):
        for v, value in zip(("gamma", "beta", "moving_mean", "moving_variance"), model.get_layer(name).get_weights()):
            want[f"{name}/BatchNorm/{v}"] = value
    moved = max(np.abs(want[k] - start[k]).max() for k in want)
    assert moved > 0.01, moved
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-3, atol=1e-5, err_msg=k)


def test_a_residual_batch_norm_graph_exports(tower_bin, run_tower, tmp_path, images):
    """The graph with an EMA: ONNX (BatchNormalization, Add, Concat, AveragePool, GlobalAveragePool) passes
    onnx.checker and onnxruntime gives Tower's own outputs for raw and EMA weights; TensorFlow reads the TF
    checkpoint with TF1's batch-norm names, the moving statistics raw only (no EMA shadow, as
    ExponentialMovingAverage keeps none for them)."""
    import tensorflow as tf
    from test_export import onnx_matches_tower
    logdir = train(tower_bin, tmp_path, residual_config(images, ema_decay=0.9), "run")
    ckpt = logdir / "checkpoints" / (logdir / "checkpoints" / "latest").read_text().strip()
    x = images[1][:16]
    outs = {w: onnx_matches_tower(run_tower, tmp_path, ckpt, x, w, "--input", "scaled") for w in ("raw", "ema")}
    assert np.abs(outs["raw"] - outs["ema"]).max() > 1e-4  # two different models
    (tmp_path / "tf").mkdir()
    prefix = tmp_path / "tf" / "model.ckpt-10"
    res = run_tower("export", ckpt, "--format", "tf", "-o", prefix)
    assert res.returncode == 0, res.stderr
    reader = tf.train.load_checkpoint(str(prefix))
    names = set(reader.get_variable_to_shape_map())
    got = checkpoint(logdir)
    for v in ("gamma", "beta", "moving_mean", "moving_variance"):
        np.testing.assert_array_equal(reader.get_tensor(f"bn1/BatchNorm/{v}"), got[f"bn1/BatchNorm/{v}"])
    assert "bn1/BatchNorm/gamma/ExponentialMovingAverage" in names
    assert "bn1/BatchNorm/moving_mean/ExponentialMovingAverage" not in names
    assert reader.get_tensor("global_step") == 10


@pytest.mark.parametrize("math", MATH)
def test_a_batch_norm_graph_resumes_bit_exact(tower_bin, tmp_path, images, math):
    """Two towers (each normalising its own half of the batch, the first moving the statistics), Adam, an EMA,
    clipping and augmentation, direct or Winograd convolutions: 12 steps straight, and 6 then a resume to 12,
    end with the same weights and moving statistics, bit for bit."""
    full = residual_config(images, steps=12, towers=2, batch_size=EXAMPLES // 4, checkpoint_every=6, ema_decay=0.9,
                           optimizer={"type": "adam", "learning_rate": 0.01, "global_clipnorm": 1.0}, **MATH[math])
    full["dataset"] = dict(full["dataset"], augment=AUGMENT)
    whole = checkpoint(train(tower_bin, tmp_path, full, "whole"))
    first = dict(full, steps=6)
    logdir = train(tower_bin, tmp_path, first, "split")
    (tmp_path / "split.json").write_text(json.dumps(full))
    res = subprocess.run([str(tower_bin), "train", tmp_path / "split.json", "--logdir", logdir, "--resume"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert any(json.loads(l).get("resumed_from") for l in res.stdout.splitlines())
    resumed = checkpoint(logdir)
    assert sorted(resumed) == sorted(whole)
    for k in whole:
        np.testing.assert_array_equal(resumed[k], whole[k], err_msg=k)


AUGMENT = {"crop_padding": 1, "horizontal_flip": True, "erasing_probability": 0.5, "erasing_max_area": 0.2,
           "resized_crop_min_scale": 0.6}


def lines_of(logdir_or_res):
    return [json.loads(l) for l in logdir_or_res.stdout.splitlines() if l.startswith("{")]


def run_lines(tower_bin, tmp_path, config, name):
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    res = subprocess.run([str(tower_bin), "train", cfg, "--logdir", tmp_path / name], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return lines_of(res)


def test_augmentation_is_keyed_and_training_only(tower_bin, tmp_path, images):
    """The same config twice trains on the same augmented examples (equal losses); without augmentation the
    losses differ; the evaluation before the first step sees the examples as stored either way; two towers
    of half the batch see the examples one tower of the whole batch sees."""
    def cfg(**over):
        c = residual_config(images, steps=6, eval_every=3, **over)
        c["dataset"] = dict(c["dataset"], test=str(images[0]))
        return c
    aug = cfg()
    aug["dataset"]["augment"] = AUGMENT
    a, b, plain = (run_lines(tower_bin, tmp_path, c, n) for c, n in ((aug, "a"), (aug, "b"), (cfg(), "plain")))
    loss = lambda ls: [l["loss"] for l in ls if "loss" in l]
    assert loss(a) == loss(b) and len(loss(a)) == 6
    assert loss(a)[1:] != loss(plain)[1:]
    first_eval = lambda ls: next(l for l in ls if "eval_loss" in l and l["step"] == 0)["eval_loss"]
    assert first_eval(a) == first_eval(plain)
    towers = dict(aug, towers=2, batch_size=EXAMPLES // 2)
    towers["model"] = {"layers": [RESIDUAL[0], RESIDUAL[7], RESIDUAL[9]]}  # no batch norm: it normalises per tower
    single = dict(towers, towers=1, batch_size=EXAMPLES)
    np.testing.assert_allclose(loss(run_lines(tower_bin, tmp_path, towers, "two")),
                               loss(run_lines(tower_bin, tmp_path, single, "one")), rtol=1e-4)


def write_images(path, x, y):
    import tensorflow as tf
    with tf.io.TFRecordWriter(str(path)) as w:
        for xi, yi in zip(x, y):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(float_list=tf.train.FloatList(value=xi.ravel())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[yi]))}))
            w.write(ex.SerializeToString())


def test_normalize_is_part_of_the_model(tower_bin, run_tower, tmp_path, images):
    """dataset.normalize trains exactly as the same data normalised beforehand does, and its ONNX export
    normalises in the graph (onnxruntime on the stored values gives Tower's outputs)."""
    from test_export import onnx_matches_tower
    mean, std = np.float32([0.4, 0.6]), np.float32([0.25, 0.5])
    _, x, y = images
    write_images(tmp_path / "normed.tfrecord", (x - mean) / std, y)
    model = {"layers": [RESIDUAL[0], RESIDUAL[7], RESIDUAL[9]]}
    raw = residual_config(images, model=model)
    raw["dataset"] = dict(raw["dataset"], normalize={"mean": mean.tolist(), "std": std.tolist()})
    pre = residual_config(images, model=model)
    pre["dataset"] = dict(pre["dataset"], train=str(tmp_path / "normed.tfrecord"))
    loss = lambda ls: [l["loss"] for l in ls if "loss" in l]
    assert loss(run_lines(tower_bin, tmp_path, raw, "raw")) == loss(run_lines(tower_bin, tmp_path, pre, "pre"))
    ckpt = tmp_path / "raw" / "checkpoints" / (tmp_path / "raw" / "checkpoints" / "latest").read_text().strip()
    onnx_matches_tower(run_tower, tmp_path, ckpt, x[:16], "raw", "--input", "scaled")
