"""Prediction: POST /api/v1/runs/{id}/predict on a real `tower serve` and `tower predict`, against
a reader no one here wrote: the run's checkpoint loaded with the `safetensors` package and the MLP's forward
pass computed in NumPy. Inputs are the dataset's own test images, written as PNG and JPEG by Pillow, as .npy
rows and as a JSON array. Also every refusal (size, channels, garbage, caps, origin) and the model cache.

The run trains a small MLP on a 2,000-image slice of Fashion-MNIST (Debian's dataset-fashion-mnist), once for
the module.
"""
import base64
import gzip
import io
import json
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

import helpers
from conftest import FASHION, start_server
from test_server import wait_dataset, wait_run

PIL = pytest.importorskip("PIL.Image")
from safetensors.numpy import load_file  # noqa: E402

pytestmark = pytest.mark.skipif(not (FASHION / "t10k-images-idx3-ubyte.gz").exists(),
                                reason="needs Fashion-MNIST (dataset-fashion-mnist)")

TRAIN, TEST = 2000, 200
CONFIG = {
    "dataset": "fashion-small",
    "model": {"layers": [
        {"type": "flatten"},
        {"type": "dense", "units": 64, "activation": "relu", "name": "layer1"},
        {"type": "dense", "units": 10, "name": "layer2"}]},
    "loss": "softmax_cross_entropy",
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "ema_decay": 0.9, "batch_size": 32, "steps": 200, "seed": 3,
    "eval_every": 0, "checkpoint_every": 100, "summary_every": 100,
}


def read_idx(name, count):
    with gzip.open(FASHION / name) as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)
    return data[:count]


def write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


@pytest.fixture(scope="module")
def trained(tower_bin, tmp_path_factory):
    """A server with a finished run; yields (server, run_id, test images [N, 28, 28] uint8, checkpoint path)."""
    tmp = tmp_path_factory.mktemp("predict")
    files = {}
    for field, name, count in (("images", "train-images-idx3-ubyte.gz", TRAIN),
                               ("labels", "train-labels-idx1-ubyte.gz", TRAIN),
                               ("test_images", "t10k-images-idx3-ubyte.gz", TEST),
                               ("test_labels", "t10k-labels-idx1-ubyte.gz", TEST)):
        files[field] = tmp / name
        write_idx(files[field], read_idx(name, count))
    server = start_server(tower_bin, tmp / "data")
    try:
        handles = {k: (p.name, open(p, "rb")) for k, p in files.items()}
        r = requests.post(server.api("/datasets?name=fashion-small"), files=handles, timeout=60)
        assert r.status_code == 202, r.text
        assert wait_dataset(server, r.json()["id"])["status"] == "ready"
        r = requests.post(server.api("/runs"), json=CONFIG, timeout=30)
        assert r.status_code == 201, r.text
        run = wait_run(server, r.json()["id"])
        assert run["status"] == "succeeded", run
        ckpts = requests.get(server.api(f"/runs/{run['id']}/checkpoints"), timeout=10).json()
        latest = next(c for c in ckpts["checkpoints"] if c["step"] == ckpts["latest"])
        path = helpers.run_dir(server.data, run["id"]) / "checkpoints" / latest["file"]
        yield server, run["id"], read_idx("t10k-images-idx3-ubyte.gz", TEST), path
    finally:
        server.proc.kill()
        server.proc.wait()


def numpy_logits(path, x, weights="ema"):
    """The MLP's logits for x [N, 784] (already scaled), from the checkpoint as the safetensors package reads it."""
    t = load_file(str(path))
    sfx = "/ExponentialMovingAverage" if weights == "ema" else ""
    w = {k: t[k + sfx].astype(np.float64) for k in ("layer1/weights", "layer1/biases", "layer2/weights",
                                                    "layer2/biases")}
    h = np.maximum(x.astype(np.float64) @ w["layer1/weights"] + w["layer1/biases"], 0)
    return h @ w["layer2/weights"] + w["layer2/biases"]


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def png(pixels, mode="L"):
    buf = io.BytesIO()
    PIL.fromarray(pixels).convert(mode).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(pixels):
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def npy(array):
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def decoded(data, mode="L"):
    """The pixels Pillow decodes from an image file, as the model's gray channel."""
    return np.asarray(PIL.open(io.BytesIO(data)).convert(mode), dtype=np.uint8)


def predict(server, run_id, files=None, json_body=None, query="", headers=None):
    url = server.api(f"/runs/{run_id}/predict{query}")
    if files is not None:
        return requests.post(url, files=files, headers=headers, timeout=60)
    return requests.post(url, json=json_body, headers=headers, timeout=60)


def check_against_numpy(prediction, path, x, weights="ema"):
    """The reply's top-k for one input against NumPy's softmax of the logits of x [784]."""
    want = softmax(numpy_logits(path, x[None, :], weights))[0]
    top = prediction["top_k"]
    assert top[0]["class"] == int(np.argmax(want))
    for entry in top:
        assert entry["probability"] == pytest.approx(want[entry["class"]], abs=1e-5)
    assert [e["probability"] for e in top] == sorted((e["probability"] for e in top), reverse=True)


def test_png_jpeg_npy_and_json_match_numpy(trained):
    server, run_id, images, path = trained
    img_png, img_jpeg = png(images[0]), jpeg(images[1])
    rows = images[2:6].reshape(4, 28, 28, 1)
    r = predict(server, run_id, files=[("file", ("shirt.png", img_png, "image/png")),
                                       ("file", ("shoe.jpg", img_jpeg, "image/jpeg")),
                                       ("file", ("rows.npy", npy(rows), "application/octet-stream"))],
                query="?top_k=10")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["task"] == "classification" and body["weights"] == "ema" and body["run"] == run_id
    assert body["checkpoint"] == {"step": 200, "file": path.name}
    preds = body["predictions"]
    assert [p["input"] for p in preds] == ["shirt.png", "shoe.jpg"] + [f"rows.npy[{i}]" for i in range(4)]
    check_against_numpy(preds[0], path, decoded(img_png).reshape(-1) / 255.0)
    check_against_numpy(preds[1], path, decoded(img_jpeg).reshape(-1) / 255.0)
    for i in range(4):
        check_against_numpy(preds[2 + i], path, rows[i].reshape(-1) / 255.0)
    for p in preds:  # the softmax over all ten classes
        assert len(p["top_k"]) == 10 and sum(e["probability"] for e in p["top_k"]) == pytest.approx(1, abs=1e-5)
        assert "name" not in p["top_k"][0]  # the dataset has no class names

    colour = np.random.default_rng(1).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    r = predict(server, run_id, files=[("file", ("colour.png", png(colour, "RGB"), "image/png"))])
    assert r.status_code == 200, r.text  # RGB into a gray model: Pillow's luma, convert("L")
    check_against_numpy(r.json()["predictions"][0], path, decoded(png(colour, "RGB")).reshape(-1) / 255.0)

    x = (images[6:9].reshape(3, -1) / 255.0).astype(np.float32)
    r = predict(server, run_id, json_body={"inputs": [x[0].tolist(), x[1].reshape(28, 28).tolist(),
                                                      base64.b64encode(png(images[8])).decode()]})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert [p["input"] for p in preds] == ["inputs[0]", "inputs[1]", "inputs[2]"]
    assert all(len(p["top_k"]) == 5 for p in preds)  # the default k
    for i in range(3):
        check_against_numpy(preds[i], path, x[i])


def test_raw_weights_a_chosen_checkpoint_and_the_cache(trained):
    server, run_id, images, path = trained
    x = images[10].reshape(-1) / 255.0
    file = [("file", ("a.png", png(images[10]), "image/png"))]
    r = predict(server, run_id, files=file, query="?weights=raw&checkpoint=100")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["weights"] == "raw" and body["checkpoint"]["step"] == 100 and body["model_cached"] is False
    check_against_numpy(body["predictions"][0], path.parent / body["checkpoint"]["file"], x, weights="raw")
    again = predict(server, run_id, files=file, query="?weights=raw&checkpoint=100").json()
    assert again["model_cached"] is True and again["predictions"] == body["predictions"]
    r = predict(server, run_id, files=file, query="?checkpoint=99")
    assert r.status_code == 404 and "step 99" in r.json()["error"]["message"]
    r = predict(server, run_id, files=file, query="?weights=best")
    assert r.status_code == 400 and "weights" in r.json()["error"]["message"]
    r = predict(server, "r0000000000000000", files=file)
    assert r.status_code == 404


def test_inputs_that_do_not_fit_are_400_naming_the_problem(trained):
    server, run_id, images, _ = trained
    big = np.zeros((32, 32), np.uint8)
    cases = [
        ([("file", ("big.png", png(big), "image/png"))], "big.png", "32x32"),
        ([("file", ("junk.png", b"\x00garbage bytes" * 10, "image/png"))], "junk.png", "not a PNG or JPEG"),
        ([("file", ("cut.png", png(images[0])[:60], "image/png"))], "cut.png", "PNG"),
        ([("file", ("cut.jpg", jpeg(images[0])[:200], "image/jpeg"))], "cut.jpg", "JPEG"),
        ([("file", ("rows.npy", npy(np.zeros((2, 27, 27), np.uint8)), "x"))], "rows.npy", "729 values"),
        ([("file", ("ints.npy", npy(np.zeros((2, 784), np.int64)), "x"))], "ints.npy", "int64"),
    ]
    for files, name, words in cases:
        r = predict(server, run_id, files=files)
        assert r.status_code == 400, (name, r.text)
        msg = r.json()["error"]["message"]
        assert r.json()["error"]["code"] == "INVALID_ARGUMENT" and name in msg and words in msg, msg
    r = predict(server, run_id, json_body={"inputs": [[0.5] * 783]})
    assert r.status_code == 400 and "inputs[0]" in r.text and "783 values" in r.text
    r = predict(server, run_id, json_body={"inputs": ["not base64!"]})
    assert r.status_code == 400 and "base64" in r.text
    r = predict(server, run_id, json_body={"inputs": [[0] * 784], "extra": 1})
    assert r.status_code == 400 and "'extra'" in r.text
    r = predict(server, run_id, files=[("file", ("none.npy", npy(np.zeros((0, 784), np.uint8)), "x"))])
    assert r.status_code == 400 and "no inputs" in r.text
    r = requests.post(server.api(f"/runs/{run_id}/predict"), data=b"x", headers={"Content-Type": "text/plain"},
                      timeout=30)
    assert r.status_code == 415


def test_caps_and_the_origin_rule(trained):
    server, run_id, images, _ = trained
    r = predict(server, run_id, files=[("file", ("many.npy", npy(np.zeros((1025, 784), np.uint8)), "x"))])
    assert r.status_code == 413 and "1024" in r.json()["error"]["message"], r.text
    r = predict(server, run_id, files=[("file", ("huge.npy", b"\x93NUMPY" + bytes(33 << 20), "x"))])
    assert r.status_code == 413 and r.json()["error"]["code"] == "PAYLOAD_TOO_LARGE", r.text
    r = predict(server, run_id, files=[("file", ("a.png", png(images[0]), "image/png"))],
                headers={"Origin": "http://evil.example"})
    assert r.status_code == 403


def peak_rss(pid):
    """The process's peak resident memory in bytes (VmHWM)."""
    line = next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_big_images_are_refused_from_their_header_before_decoding(trained):
    """Sixteen concurrent 8192x2048 RGB PNGs (within every cap, 48 MiB each decoded, ~50 KB sent) for a model
    of 28x28 images: each is refused from its header, so the server's peak memory hardly moves."""
    server, run_id, _, _ = trained
    big = png(np.zeros((2048, 8192, 3), np.uint8), mode="RGB")
    assert len(big) < 100_000
    before = peak_rss(server.proc.pid)

    def one(i):
        r = predict(server, run_id, files=[("file", (f"big{i}.png", big, "image/png"))])
        return r.status_code, r.json()["error"]["message"]
    with ThreadPoolExecutor(16) as pool:
        for status, message in pool.map(one, range(16)):
            assert status == 400 and "8192x2048" in message and "28x28" in message, message
    grown = peak_rss(server.proc.pid) - before
    assert grown < 64 << 20, f"the peak grew by {grown >> 20} MiB"  # one decoded image alone is 48 MiB


def test_concurrent_requests_share_one_model(trained):
    """libmicrohttpd runs each request on its own thread; the cached model is used by one at a time."""
    server, run_id, images, path = trained
    rows = images[30:38].reshape(8, 784)
    want = np.argmax(numpy_logits(path, rows / 255.0), axis=1)

    def one(i):
        r = predict(server, run_id, files=[("file", (f"{i}.png", png(images[30 + i % 8]), "image/png"))],
                    query="?checkpoint=200")
        assert r.status_code == 200, r.text
        return i, r.json()["predictions"][0]["top_k"][0]["class"]
    with ThreadPoolExecutor(8) as pool:
        for i, got in pool.map(one, range(48)):
            assert got == want[i % 8]


def test_tower_predict_gives_the_routes_answer(trained, tower_bin, tmp_path):
    server, run_id, images, path = trained
    (tmp_path / "a.png").write_bytes(png(images[20]))
    (tmp_path / "b.npy").write_bytes(npy(images[21:23].reshape(2, 784)))
    (tmp_path / "c.json").write_text(json.dumps([(images[23].reshape(-1) / 255.0).tolist()]))
    out = subprocess.run([str(tower_bin), "predict", str(path), str(tmp_path / "a.png"), str(tmp_path / "b.npy"),
                          str(tmp_path / "c.json"), "--json", "--top-k", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    r = predict(server, run_id, files=[("file", ("a.png", png(images[20]), "image/png")),
                                       ("file", ("b.npy", npy(images[21:23].reshape(2, 784)), "x"))],
                query="?top_k=3")
    route = r.json()["predictions"] + predict(server, run_id, json_body={
        "inputs": [(images[23].reshape(-1) / 255.0).tolist()]}, query="?top_k=3").json()["predictions"]
    assert cli["weights"] == "ema" and cli["checkpoint"]["step"] == 200
    assert len(cli["predictions"]) == len(route) == 4
    for got, want in zip(cli["predictions"], route):  # the same classes; the same probabilities to float32
        assert [e["class"] for e in got["top_k"]] == [e["class"] for e in want["top_k"]]  # (the GEMM's blocking
        for g, w in zip(got["top_k"], want["top_k"]):                                    # differs by batch)
            assert g["probability"] == pytest.approx(w["probability"], abs=1e-6)
    lines = subprocess.run([str(tower_bin), "predict", str(path), str(tmp_path / "a.png")], capture_output=True,
                           text=True, timeout=60)
    assert lines.returncode == 0 and lines.stdout.startswith(f"{tmp_path / 'a.png'}: {route[0]['top_k'][0]['class']} ")
    bad = subprocess.run([str(tower_bin), "predict", str(path), str(tmp_path / "c.json"), "--weights", "best"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--weights" in bad.stderr
    (tmp_path / "big.png").write_bytes(png(np.zeros((30, 30), np.uint8)))
    bad = subprocess.run([str(tower_bin), "predict", str(path), str(tmp_path / "big.png")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "30x30" in bad.stderr and "big.png" in bad.stderr


def test_a_new_checkpoint_then_deleting_the_run(trained):
    """Last in the module (the run trains on, then is deleted): "latest" follows the run's new checkpoint, loaded
    afresh; a deleted run's predictions are 404."""
    server, run_id, images, _ = trained
    file = [("file", ("a.png", png(images[0]), "image/png"))]
    assert predict(server, run_id, files=file).json()["model_cached"] is True  # loaded by the tests before
    r = requests.post(server.api(f"/runs/{run_id}/resume"), json={"steps": 300}, timeout=30)
    assert r.status_code == 202, r.text
    assert wait_run(server, run_id)["status"] == "succeeded"
    body = predict(server, run_id, files=file).json()
    assert body["checkpoint"]["step"] == 300 and body["model_cached"] is False
    assert predict(server, run_id, files=file).json()["model_cached"] is True
    assert requests.delete(server.api(f"/runs/{run_id}"), timeout=30).status_code == 204
    assert predict(server, run_id, files=file).status_code == 404


def test_a_regression_model_gives_its_outputs(tower_bin, tmp_path):
    """An MSE model (a 3-to-2 dense layer on float rows) trained by `tower train`: `tower predict` gives its outputs,
    equal to NumPy's x @ W + b from the checkpoint; an image for its flat input is refused."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(256, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, :1] * 2 - x[:, 1:2]).astype(np.float32))
    conv = subprocess.run([str(tower_bin), "convert", "--npy-features", str(tmp_path / "x.npy"), "--npy-labels",
                           str(tmp_path / "y.npy"), "-o", str(tmp_path / "t.tfrecord")], capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr
    cfg = {"dataset": {"train": str(tmp_path / "t.tfrecord"), "shape": [3]},
           "model": {"layers": [{"type": "dense", "units": 1, "name": "out"}]}, "loss": "mean_squared_error",
           "optimizer": {"type": "sgd", "learning_rate": 0.05}, "batch_size": 16, "steps": 40, "seed": 1,
           "eval_every": 0, "checkpoint_every": 0, "summary_every": 20}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    tr = subprocess.run([str(tower_bin), "train", str(tmp_path / "c.json"), "--logdir", str(tmp_path / "run")],
                        capture_output=True, text=True, timeout=120)
    assert tr.returncode == 0, tr.stderr
    ckpt = sorted((tmp_path / "run" / "checkpoints").glob("ckpt-*.safetensors"))[-1]
    out = subprocess.run([str(tower_bin), "predict", str(ckpt), str(tmp_path / "x.npy"), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["task"] == "regression" and body["weights"] == "raw"  # no EMA: the raw weights by default
    t = load_file(str(ckpt))
    want = x.astype(np.float64) @ t["out/weights"] + t["out/biases"]
    got = np.array([p["outputs"] for p in body["predictions"]])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (tmp_path / "a.png").write_bytes(png(np.zeros((3, 1), np.uint8)))
    bad = subprocess.run([str(tower_bin), "predict", str(ckpt), str(tmp_path / "a.png"), "--weights", "ema"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "kept no EMA" in bad.stderr
    bad = subprocess.run([str(tower_bin), "predict", str(ckpt), str(tmp_path / "a.png")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "not images" in bad.stderr
