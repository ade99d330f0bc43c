"""examples/fashion_resnet.json's network in Keras (TensorFlow's own), on the CPU, for the benchmark only
(bench_train.py --only fashion-resnet): the same layers and inputs read from the JSON (conv2d, batch_norm,
add, global_avg_pool, dense), SGD with Nesterov momentum, weight decay and global clipping, label-smoothed
cross-entropy, batch 128. Like `tower bench`, it times the training step on one fixed batch (the input
pipeline left out): `warmup` untimed steps, then `steps` timed ones, one JSON line.

usage: tf_fashion_resnet.py STEPS [BATCH]
"""
import json
import os
import pathlib
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import keras  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build(cfg):
    L = keras.layers
    x = inp = keras.Input(tuple(cfg["dataset"]["shape"]))
    out = {"input": inp}
    prev = inp
    for layer in cfg["model"]["layers"]:
        ins = [out[n] for n in layer.get("inputs", [])] or [prev]
        t, act = layer["type"], layer.get("activation")
        if t == "conv2d":
            x = L.Conv2D(layer["filters"], layer["kernel"], layer.get("strides", 1), padding=layer.get("padding", "same"),
                         kernel_initializer="glorot_uniform")(ins[0])
        elif t == "batch_norm":
            x = L.BatchNormalization(momentum=layer.get("momentum", 0.99), epsilon=layer.get("epsilon", 0.001))(ins[0])
        elif t == "add":
            x = L.Add()(ins)
        elif t == "global_avg_pool":
            x = L.GlobalAveragePooling2D()(ins[0])
        elif t == "dense":
            x = L.Dense(layer["units"], kernel_initializer="glorot_uniform")(ins[0])
        else:
            sys.exit(f"tf_fashion_resnet.py: no Keras form for layer type {t}")
        if act and act != "linear":
            x = L.Activation(act)(x)
        out[layer["name"]] = prev = x
    return keras.Model(inp, x)


def main():
    steps, batch = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 128
    cfg = json.loads((ROOT / "examples" / "fashion_resnet.json").read_text())
    o = cfg["optimizer"]
    model = build(cfg)
    model.compile(optimizer=keras.optimizers.SGD(o["learning_rate"], momentum=o["momentum"], nesterov=True,
                                                 weight_decay=o["weight_decay"], global_clipnorm=o["global_clipnorm"]),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg["label_smoothing"]))
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (batch, *cfg["dataset"]["shape"])).astype(np.float32)
    y = keras.utils.to_categorical(rng.integers(0, 10, batch), 10)
    for _ in range(5):
        model.train_on_batch(x, y)
    t0 = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(x, y)
    dt = time.perf_counter() - t0
    print(json.dumps({"steps": steps, "examples_per_sec": steps * batch / dt,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
