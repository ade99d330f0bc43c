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
