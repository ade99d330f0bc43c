"""The seed's 3-D CNN (seeds/001: a regression on single-channel volumes, per-tower slices of one batch,
mean squared error, Adam with staircase exponential decay, dropout 0.2, no EMA) in TensorFlow's graph
mode, on the CPU, for the benchmark only (bench_train.py, workload cnn3d). The network is read from
examples/seed_cnn3d.json (or CONFIG), so both sides train the same layers: conv3d (SAME/VALID, relu...),
max_pool3d, flatten, dense, dropout, in that file's order, with its batch size, learning rate and decay.
The input is the seeds' pipeline: TFRecordDataset -> parse_single_example -> shuffle(the config's
shuffle_buffer) -> repeat -> batch, reading what `tower convert --npy-features --npy-labels` writes
(uint8 image_raw, int64 label). Prints one JSON line.

The seed leaves its volume (SPACE_I/J/K_DIMS), batch_size, inference() and lr0/lr_step/lr_decay out, so
examples/seed_cnn3d.json chooses them: 32^3 volumes, two conv3d 3^3 (16, 32 filters) each with a 2^3 max
pool, dense 128, dropout 0.2, one output, batch 16 per tower, Adam 0.001 decayed 0.9 every 1000 steps.

usage: tf_seed_cnn3d.py TRAIN.tfrecord STEPS [CONFIG]
"""
import json
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

from tf_timing import time_steps  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_eager_execution()
SPEC = {"label": tf.io.FixedLenFeature([], tf.int64), "image_raw": tf.io.FixedLenFeature([], tf.string)}
CONFIG = pathlib.Path(__file__).resolve().parents[2] / "examples" / "seed_cnn3d.json"
ACT = {"relu": tf.nn.relu, "tanh": tf.nn.tanh, "sigmoid": tf.nn.sigmoid, "linear": None, None: None}


def triple(v):
    return list(v) if isinstance(v, list) else [v] * 3


def initializer(spec):
    kind = (spec or {}).get("type", "truncated_normal")
    if kind == "glorot_uniform":
        return tf1.glorot_uniform_initializer()
    if kind == "zeros":
        return tf1.zeros_initializer()
    if kind == "constant":
        return tf1.constant_initializer(spec.get("value", 0.0))
    return tf1.truncated_normal_initializer(stddev=spec.get("stddev", 0.1) if spec else 0.1)


def inference(x, layers, drop_rate):
    h, k = x, 0
    for layer in layers:
        kind = layer["type"]
        if kind in ("conv3d", "dense"):
            k += 1
            with tf1.variable_scope(layer.get("name", f"layer{k}")):
                if kind == "conv3d":
                    shape = [*triple(layer["kernel"]), int(h.shape[-1]), layer["filters"]]
                    w = tf1.get_variable("weights", shape, initializer=initializer(layer.get("weight_init")))
                    strides = [1, *triple(layer.get("strides", 1)), 1]
                    h = tf.nn.conv3d(h, w, strides, layer.get("padding", "same").upper())
                else:
                    w = tf1.get_variable("weights", [int(h.shape[-1]), layer["units"]],
                                         initializer=initializer(layer.get("weight_init")))
                    h = tf.matmul(h, w)
                b = tf1.get_variable("biases", [int(w.shape[-1])],
                                     initializer=initializer(layer.get("bias_init") or {"type": "zeros"}))
                h = tf.nn.bias_add(h, b)
                act = ACT[layer.get("activation")]
                h = act(h) if act else h
        elif kind == "max_pool3d":
            pool = triple(layer["pool"])
            h = tf.nn.max_pool3d(h, pool, triple(layer.get("strides", pool)),
                                 layer.get("padding", "same").upper())  # Tower's default
        elif kind == "flatten":
            h = tf.reshape(h, [-1, int(h.shape[1:].num_elements())])
        elif kind == "dropout":
            h = tf.nn.dropout(h, rate=drop_rate)
        else:
            sys.exit(f"tf_seed_cnn3d.py: layer type {kind!r} is not a 3-D CNN's")
    return h


def main(path, steps, config=CONFIG):
    cfg = json.loads(pathlib.Path(config).read_text())
    steps, batch, towers = int(steps), cfg["batch_size"], cfg.get("towers", 1)
    data = cfg["dataset"]
    shape, scale = data["shape"], data.get("scale", 1 / 255)

    def parse(record):
        f = tf.io.parse_single_example(record, SPEC)
        x = tf.cast(tf.reshape(tf.io.decode_raw(f["image_raw"], tf.uint8), shape), tf.float32) * scale
        return x, tf.cast(tf.reshape(f["label"], [1]), tf.float32)

    ds = (tf.data.TFRecordDataset(path).map(parse).shuffle(data.get("shuffle_buffer", 10000)).repeat()
          .batch(batch * towers))
    x, y = tf1.data.make_one_shot_iterator(ds).get_next()
    global_step = tf1.train.get_or_create_global_step()
    decay = cfg.get("lr_decay") or {}
    lr0 = cfg["optimizer"].get("learning_rate", 0.001)
    lr = (tf1.train.exponential_decay(lr0, global_step, decay["decay_steps"], decay["decay_rate"],
                                      staircase=decay.get("staircase", False)) if decay else lr0)
    opt = tf1.train.AdamOptimizer(lr)
    drop = [float(l["rate"]) for l in cfg["model"]["layers"] if l["type"] == "dropout"]
    tower_grads = []
    with tf1.variable_scope(tf1.get_variable_scope()):
        for i in range(towers):
            with tf1.name_scope(f"tower_{i}"):
                pred = inference(x[i * batch:(i + 1) * batch], cfg["model"]["layers"],
                                 drop[0] if drop else 0.0)
                loss = tf1.losses.mean_squared_error(y[i * batch:(i + 1) * batch], pred)
                tower_grads.append(opt.compute_gradients(loss))
                tf1.get_variable_scope().reuse_variables()
    grads = [(tf.reduce_mean(tf.stack([g for g, _ in gv]), 0), gv[0][1]) for gv in zip(*tower_grads)]
    train_op = opt.apply_gradients(grads, global_step=global_step)
    if cfg.get("ema_decay"):
        ema = tf1.train.ExponentialMovingAverage(cfg["ema_decay"], global_step)
        with tf.control_dependencies([train_op]):
            train_op = ema.apply(tf1.trainable_variables())
    time_steps(tf1, train_op, 5, steps, batch * towers, towers=towers)


if __name__ == "__main__":
    main(*sys.argv[1:])
