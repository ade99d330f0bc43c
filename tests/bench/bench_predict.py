"""Benchmark of prediction: POST /api/v1/runs/{id}/predict on a real `tower serve` against
TensorFlow's `model(x)` on the same weights.

A run of examples/seed_mlp.json (784-500-10) trains a few steps on a slice of Fashion-MNIST; its checkpoint's
EMA weights, read with the `safetensors` package, go into a Keras model built with the same layers. Then,
alternating one call of each per round: tower with one PNG image (multipart) and with a batch of 256 rows (a
uint8 .npy, multipart), each a whole HTTP request (upload, decode, forward pass, top-5 JSON) timed by the
client; TensorFlow with `model(x)` on the already-scaled float32 [1, 784] and [256, 784] (no decoding, no
HTTP). The first request of each kind (loading the model into the cache) and the first TensorFlow calls are
warm-up and not counted. Both sides get the same cores (--cores, default 2: taskset for the server, TF's
intra-op threads), and the top-1 of both is checked to agree.

OpenBLAS picks its kernel from the CPU it detects (on this VM: Prescott, its SSE3 fallback, for a CPU it does not
know); --openblas-core NAME (e.g. Haswell, SkylakeX) sets OPENBLAS_CORETYPE for the server. The core in use is
printed.

Usage: python tests/bench/bench_predict.py [--build build] [--rounds 300] [--cores 2] [--openblas-core NAME]
Prints a table and one JSON object.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import start_server  # noqa: E402
from test_predict import npy, png, read_idx, write_idx  # noqa: E402


def train_run(server, tmp):
    files = {}
    for field, name, count in (("images", "train-images-idx3-ubyte.gz", 2000),
                               ("labels", "train-labels-idx1-ubyte.gz", 2000)):
        files[field] = tmp / name
        write_idx(files[field], read_idx(name, count))
    r = requests.post(server.api("/datasets?name=bench"), files={k: (p.name, open(p, "rb")) for k, p in files.items()},
                      timeout=120)
    r.raise_for_status()
    dataset = r.json()["id"]
    while requests.get(server.api(f"/datasets/{dataset}"), timeout=10).json()["status"] == "converting":
        time.sleep(0.2)
    cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    cfg.update(dataset="bench", steps=200, eval_every=0, checkpoint_every=0, summary_every=100)
    r = requests.post(server.api("/runs"), json=cfg, timeout=30)
    r.raise_for_status()
    run = r.json()["id"]
    while (status := requests.get(server.api(f"/runs/{run}"), timeout=10).json()["status"]) not in (
            "succeeded", "failed", "cancelled"):
        time.sleep(0.2)
    assert status == "succeeded", status
    ckpts = requests.get(server.api(f"/runs/{run}/checkpoints"), timeout=10).json()
    file = next(c["file"] for c in ckpts["checkpoints"] if c["step"] == ckpts["latest"])
    return run, server.data / "runs" / run / "checkpoints" / file


def keras_model(path, cores):
    import tensorflow as tf
    from safetensors.numpy import load_file
    tf.config.threading.set_intra_op_parallelism_threads(cores)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    t = load_file(str(path))
    ema = "/ExponentialMovingAverage"
    model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)), tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(500, activation="relu"), tf.keras.layers.Dense(10)])
    model.layers[1].set_weights([t["layer1/weights" + ema], t["layer1/biases" + ema]])
    model.layers[2].set_weights([t["layer2/weights" + ema], t["layer2/biases" + ema]])
    return model


def stats(ms):
    a = np.array(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p99_ms": round(float(np.percentile(a, 99)), 3),
            "n": len(ms)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--openblas-core")
    args = ap.parse_args()
    tower = pathlib.Path(args.build).resolve() / "server" / "tower"
    cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:args.cores])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        env = {"OPENBLAS_NUM_THREADS": str(args.cores), "OPENBLAS_VERBOSE": "2"}
        if args.openblas_core:
            env["OPENBLAS_CORETYPE"] = args.openblas_core
        server = start_server(tower, tmp / "data", env=env)
        try:
            subprocess.run(["taskset", "-a", "-p", "-c", cores, str(server.proc.pid)], check=True,
                           capture_output=True)
            run, ckpt = train_run(server, tmp)
            images = read_idx("t10k-images-idx3-ubyte.gz", 256)
            one = [("file", ("one.png", png(images[0]), "image/png"))]
            batch = [("file", ("batch.npy", npy(images.reshape(256, 28, 28, 1)), "application/octet-stream"))]
            x1 = (images[:1].reshape(1, 28, 28, 1) / 255.0).astype(np.float32)
            x256 = (images.reshape(256, 28, 28, 1) / 255.0).astype(np.float32)
            model = keras_model(ckpt, args.cores)
            url = server.api(f"/runs/{run}/predict")
            session = requests.Session()

            def tower_call(files):
                t0 = time.perf_counter()
                r = session.post(url, files=files, timeout=60)
                ms = (time.perf_counter() - t0) * 1e3
                r.raise_for_status()
                return ms, [p["top_k"][0]["class"] for p in r.json()["predictions"]]

            def tf_call(x):
                t0 = time.perf_counter()
                y = model(x, training=False).numpy()
                return (time.perf_counter() - t0) * 1e3, list(np.argmax(y, axis=1))

            for _ in range(5):  # warm-up: the model cache, TensorFlow's tracing
                _, top_tower = tower_call(batch)
                _, top_tf = tf_call(x256)
                tower_call(one)
                tf_call(x1)
            agree = float(np.mean(np.array(top_tower) == np.array(top_tf)))
            times = {"tower_1": [], "tf_1": [], "tower_256": [], "tf_256": []}
            for i in range(args.rounds):
                times["tower_1"].append(tower_call(one)[0])
                times["tf_1"].append(tf_call(x1)[0])
                if i % 3 == 0:  # the batch is slower: a third as many rounds
                    times["tower_256"].append(tower_call(batch)[0])
                    times["tf_256"].append(tf_call(x256)[0])
        finally:
            server.proc.kill()
            server.proc.wait()
        log = (tmp / "data.server.log").read_text()
    result = {k: stats(v) for k, v in times.items()}
    result["openblas_core"] = next((line.split(":", 1)[1].strip() for line in log.splitlines()
                                    if line.startswith("Core:")), "unknown")
    result["top1_agreement_256"] = agree
    result["cores"] = cores
    print(f"OpenBLAS core of the server: {result['openblas_core']}")
    print("| input | tower serve (HTTP, decode, forward, JSON) p50 / p99 ms | TensorFlow model(x) p50 / p99 ms |")
    print("| --- | ---: | ---: |")
    for k, label in (("1", "1 PNG image"), ("256", "256 rows (.npy)")):
        t, f = result[f"tower_{k}"], result[f"tf_{k}"]
        print(f"| {label} | {t['p50_ms']} / {t['p99_ms']} | {f['p50_ms']} / {f['p99_ms']} |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
