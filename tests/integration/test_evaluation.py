"""Evaluation that says where the model fails (engine/evaluation.h, GET /runs/{id}/evaluation,
`tower evaluate`), against NumPy: the checkpoint's weights read with the `safetensors` package, the MLP's
forward pass in NumPy over the test TFRecord read with TensorFlow's reader. The confusion matrix and the
per-class counts must be exact, accuracy equal to the run's eval_accuracy, the per-class scalars visible
through stock TensorBoard's HTTP API, and a regression run's MSE, MAE and R² equal to NumPy's."""
import gzip
import json
import struct
import subprocess

import numpy as np
import pytest
import requests

import helpers
from conftest import FASHION, ROOT, start_server
from helpers import poll
from test_server import curl_upload, wait_dataset, wait_run

TRAIN_N, TEST_N = 3000, 1000
SCALE = np.float32(1 / 255)


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def write_idx(path, a):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape))
        f.write(np.ascontiguousarray(a, np.uint8).tobytes())
    return path


def idx_files(folder, images, labels, test_images=None, test_labels=None):
    folder.mkdir()
    out = {"images": write_idx(folder / "images", images), "labels": write_idx(folder / "labels", labels)}
    if test_images is not None:
        out["test_images"] = write_idx(folder / "test_images", test_images)
        out["test_labels"] = write_idx(folder / "test_labels", test_labels)
    return out


def upload(server, name, files):
    code, d = curl_upload(server, name, files)
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert d["status"] == "ready", d
    return d


def tf_examples(path):
    """(images uint8 [n, 784], labels int64 [n]) of a TFRecord of the converter's Examples, read by TF."""
    import tensorflow as tf
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    images, labels = [], []
    for r in tf.data.TFRecordDataset(str(path)):
        e = tf.io.parse_single_example(r, spec)
        images.append(np.frombuffer(e["image_raw"].numpy(), np.uint8))
        labels.append(int(e["label"].numpy()))
    return np.stack(images), np.array(labels)


def mlp_logits(tensors, images, ema):
    sfx = "/ExponentialMovingAverage" if ema else ""
    x = images.astype(np.float32) * SCALE
    w1, b1 = tensors["layer1/weights" + sfx], tensors["layer1/biases" + sfx]
    w2, b2 = tensors["layer2/weights" + sfx], tensors["layer2/biases" + sfx]
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0)
    return h @ w2 + b2


def numpy_metrics(logits, labels, classes=10):
    pred = logits.argmax(axis=1)
    confusion = np.zeros((classes, classes), np.int64)
    np.add.at(confusion, (labels, pred), 1)
    above = (logits > logits[np.arange(len(labels)), labels][:, None]).sum(axis=1)
    return {"confusion": confusion, "accuracy": (pred == labels).mean(), "top5": (above < 5).mean(),
            "recall": np.diag(confusion) / confusion.sum(axis=1),
            "precision": np.diag(confusion) / confusion.sum(axis=0)}


def check_against_numpy(got, want):
    assert np.array_equal(np.array(got["confusion"]), want["confusion"])
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-12)
    assert got["top5"] == pytest.approx(want["top5"], abs=1e-12)
    assert got["top5"] >= got["accuracy"]
    np.testing.assert_allclose(got["per_class"]["recall"], want["recall"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["per_class"]["precision"], want["precision"], rtol=0, atol=1e-12)
    assert got["per_class"]["support"] == want["confusion"].sum(axis=1).tolist()


@pytest.fixture(scope="module")
def fashion():
    return {"images": read_idx(FASHION / "train-images-idx3-ubyte.gz")[:TRAIN_N],
            "labels": read_idx(FASHION / "train-labels-idx1-ubyte.gz")[:TRAIN_N],
            "test_images": read_idx(FASHION / "t10k-images-idx3-ubyte.gz"),
            "test_labels": read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")}


@pytest.fixture(scope="module")
def served(tower_bin, tmp_path_factory, fashion):
    """A server, a small Fashion-MNIST subset uploaded as IDX, and a short seed-MLP run on it."""
    tmp = tmp_path_factory.mktemp("evaluation")
    server = start_server(tower_bin, tmp / "data")
    try:
        f = fashion
        dataset = upload(server, "small", idx_files(tmp / "small", f["images"], f["labels"],
                                                    f["test_images"][:TEST_N], f["test_labels"][:TEST_N]))
        cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
        cfg.update(dataset="small", name="eval-mlp", steps=300, summary_every=100, eval_every=100,
                   checkpoint_every=300)
        r = requests.post(server.api("/runs"), json=cfg, timeout=30)
        assert r.status_code == 201, r.text
        run = wait_run(server, r.json()["id"], deadline_s=300)
        assert run["status"] == "succeeded", run
        yield server, dataset, run, tmp
    finally:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="module")
def reference(served):
    """The final checkpoint's weights and the test split as NumPy arrays."""
    from safetensors.numpy import load
    server, dataset, run, _ = served
    r = requests.get(server.api(f"/runs/{run['id']}/checkpoints/latest"), timeout=30)
    assert r.status_code == 200
    images, labels = tf_examples(server.data / "datasets" / dataset["id"] / "test.tfrecord")
    assert len(labels) == TEST_N
    return load(r.content), images, labels


def test_evaluation_route_matches_numpy(served, reference):
    server, _, run, _ = served
    tensors, images, labels = reference
    r = requests.get(server.api(f"/runs/{run['id']}/evaluation"), timeout=10)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["format"] == "tower-evaluation-1" and doc["step"] == 300
    assert doc["kind"] == "classification" and doc["classes"] == 10
    assert doc["class_names"] == [str(k) for k in range(10)]
    for slot, ema in (("raw", False), ("ema", True)):
        got = doc[slot]
        assert got["examples"] == TEST_N
        check_against_numpy(got, numpy_metrics(mlp_logits(tensors, images, ema), labels))
    metrics = run["metrics"]
    assert doc["raw"]["accuracy"] == pytest.approx(metrics["eval_accuracy"], abs=1e-12)
    assert doc["ema"]["accuracy"] == pytest.approx(metrics["eval_accuracy_ema"], abs=1e-12)
    assert metrics["eval_top5_accuracy"] == pytest.approx(doc["raw"]["top5"], abs=1e-6)
    assert metrics["eval_top5_accuracy_ema"] == pytest.approx(doc["ema"]["top5"], abs=1e-6)


def test_evaluation_404_with_the_envelope(served, fashion, tmp_path):
    server, _, _, _ = served
    r = requests.get(server.api("/runs/r000000000000000/evaluation"), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    f = fashion
    upload(server, "no-test", idx_files(tmp_path / "no-test", f["images"][:200], f["labels"][:200]))
    cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    cfg.update(dataset="no-test", steps=2, summary_every=1, eval_every=1, checkpoint_every=2)
    cfg["dataset"] = "no-test"
    r = requests.post(server.api("/runs"), json=cfg, timeout=30)
    assert r.status_code == 201, r.text
    assert wait_run(server, r.json()["id"])["status"] == "succeeded"
    r = requests.get(server.api(f"/runs/{r.json()['id']}/evaluation"), timeout=10)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "NOT_FOUND" and "no evaluation" in r.json()["error"]["message"]


def test_per_class_scalars_in_tensorboard(served, tmp_path):
    server, _, run, _ = served
    with helpers.tensorboard(server.data / "runs", tmp_path) as (base, _):
        folder, ema = run["folder"], run["folder"] + "/eval_ema"  # the EMA's under the same tags, a sub-run

        def tags():
            r = requests.get(base + "/data/plugin/scalars/tags", timeout=10)
            body = r.json() if r.status_code == 200 else {}
            done = all("eval_per_class/recall/9" in body.get(f, {}) for f in (folder, ema))
            return body if done else None
        body = poll("tensorboard to list the per-class scalars", tags)
        for f in (folder, ema):
            got = set(body[f])
            for k in range(10):
                assert {f"eval_per_class/recall/{k}", f"eval_per_class/precision/{k}"} <= got, f
            assert "eval/top5_accuracy" in got, f
        rows = requests.get(base + "/data/plugin/scalars/scalars",
                            params={"run": folder, "tag": "eval_per_class/recall/1"}, timeout=10).json()
        assert [p[1] for p in rows] == [0, 100, 200, 300]
    doc = requests.get(server.api(f"/runs/{run['id']}/evaluation"), timeout=10).json()
    assert rows[-1][2] == pytest.approx(doc["raw"]["per_class"]["recall"][1], abs=1e-6)


def test_tower_evaluate_cli_on_another_file(served, reference, fashion, run_tower, tmp_path):
    """`tower evaluate` on the EMA weights over the next 1000 test images (written by `tower convert`)."""
    server, _, run, _ = served
    tensors, _, _ = reference
    f = fashion
    files = idx_files(tmp_path / "other", f["images"][:10], f["labels"][:10],
                      f["test_images"][TEST_N:2 * TEST_N], f["test_labels"][TEST_N:2 * TEST_N])
    res = run_tower("convert", "--images", files["test_images"], "--labels", files["test_labels"],
                    "-o", tmp_path / "other.tfrecord")
    assert res.returncode == 0, res.stderr
    ckpt = helpers.run_dir(server.data, run["id"]) / "checkpoints" / "ckpt-0000000300.safetensors"
    res = run_tower("evaluate", ckpt, "--data", tmp_path / "other.tfrecord", "--weights", "ema",
                    "--out", tmp_path / "out.json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(l) for l in res.stdout.splitlines()]
    assert lines[-1]["status"] == "completed"
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["weights"] == "ema" and doc["raw"] is None and doc["step"] == 300
    images, labels = tf_examples(tmp_path / "other.tfrecord")
    check_against_numpy(doc["ema"], numpy_metrics(mlp_logits(tensors, images, True), labels))
    assert lines[-2]["eval_accuracy"] == pytest.approx(doc["ema"]["accuracy"], abs=1e-6)


def regression_set(tmp_path, run_tower, name, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, 8) + 0.3 * rng.normal(size=n)).astype(np.float32)
    np.save(tmp_path / f"{name}_x.npy", x)
    np.save(tmp_path / f"{name}_y.npy", y)
    res = run_tower("convert", "--npy-features", tmp_path / f"{name}_x.npy", "--npy-labels",
                    tmp_path / f"{name}_y.npy", "-o", tmp_path / f"{name}.tfrecord")
    assert res.returncode == 0, res.stderr
    return x, y


def numpy_regression(tensors, x, y, ema):
    sfx = "/ExponentialMovingAverage" if ema else ""
    h = np.maximum(x.astype(np.float64) @ tensors["hidden/weights" + sfx] + tensors["hidden/biases" + sfx], 0)
    p = (h @ tensors["out/weights" + sfx] + tensors["out/biases" + sfx])[:, 0]
    err = p - y
    return {"mse": np.mean(err ** 2), "mae": np.mean(np.abs(err)),
            "r2": 1 - np.sum(err ** 2) / np.sum((y - y.mean()) ** 2)}


def test_regression_metrics_equal_numpy(tower_bin, run_tower, tmp_path):
    from safetensors.numpy import load_file
    regression_set(tmp_path, run_tower, "train", 512, 1)
    x, y = regression_set(tmp_path, run_tower, "test", 200, 2)
    cfg = {"dataset": {"train": str(tmp_path / "train.tfrecord"), "test": str(tmp_path / "test.tfrecord"),
                       "shape": [8], "scale": 1.0},
           "model": {"layers": [{"type": "dense", "units": 16, "activation": "relu", "name": "hidden"},
                                {"type": "dense", "units": 1, "name": "out"}]},
           "loss": "mean_squared_error", "optimizer": {"type": "adam", "learning_rate": 0.01},
           "ema_decay": 0.9, "batch_size": 32, "steps": 100, "seed": 5, "summary_every": 50,
           "eval_every": 50, "checkpoint_every": 100}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    logdir = tmp_path / "run"
    res = run_tower("train", tmp_path / "cfg.json", "--logdir", logdir, "--backend", "cpu")
    assert res.returncode == 0, res.stderr
    doc = json.loads((logdir / "evaluation.json").read_text())
    assert doc["kind"] == "regression" and doc["step"] == 100 and doc["classes"] == 0
    tensors = load_file(logdir / "checkpoints" / "ckpt-0000000100.safetensors")
    for slot, ema in (("raw", False), ("ema", True)):
        want = numpy_regression(tensors, x, y, ema)
        for k in ("mse", "mae", "r2"):
            assert doc[slot][k] == pytest.approx(want[k], rel=1e-5), (slot, k)
    line = [json.loads(l) for l in res.stdout.splitlines() if "eval_r2" in l][-1]
    assert line["eval_r2"] == pytest.approx(doc["raw"]["r2"], abs=1e-6)  # the line has 7 digits
    assert line["eval_mae_ema"] == pytest.approx(doc["ema"]["mae"], abs=1e-6)
    x2, y2 = regression_set(tmp_path, run_tower, "other", 150, 3)
    res = run_tower("evaluate", logdir / "checkpoints" / "ckpt-0000000100.safetensors", "--data",
                    tmp_path / "other.tfrecord", "--weights", "raw", "--out", tmp_path / "other.json")
    assert res.returncode == 0, res.stderr
    got = json.loads((tmp_path / "other.json").read_text())["raw"]
    want = numpy_regression(tensors, x2, y2, False)
    for k in ("mse", "mae", "r2"):
        assert got[k] == pytest.approx(want[k], rel=1e-5), k


def wait_job(server, run_id, job_id, states=("succeeded", "failed", "cancelled")):
    def done():
        r = requests.get(server.api(f"/runs/{run_id}/evaluations/{job_id}"), timeout=10)
        assert r.status_code == 200, r.text
        return r.json() if r.json()["status"] in states else None
    return poll(f"evaluation {job_id}", done, 120)


def test_post_evaluate_on_a_second_dataset(served, reference, fashion):
    server, _, run, tmp = served
    tensors, _, _ = reference
    f = fashion
    second = upload(server, "second", idx_files(tmp / "second", f["images"][:100], f["labels"][:100],
                                                f["test_images"][TEST_N:2 * TEST_N],
                                                f["test_labels"][TEST_N:2 * TEST_N]))
    r = requests.post(server.api(f"/runs/{run['name']}/evaluate"),
                      json={"dataset": "second", "checkpoint": "latest", "weights": "ema"}, timeout=30)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] in ("queued", "running") and job["dataset_id"] == second["id"]
    assert job["checkpoint"] == 300 and job["weights"] == "ema" and job["split"] == "test"
    job = wait_job(server, run["id"], job["id"])
    assert job["status"] == "succeeded", job
    images, labels = tf_examples(server.data / "datasets" / second["id"] / "test.tfrecord")
    result = job["result"]
    assert result["raw"] is None and result["ema"]["examples"] == TEST_N
    check_against_numpy(result["ema"], numpy_metrics(mlp_logits(tensors, images, True), labels))
    listed = requests.get(server.api(f"/runs/{run['id']}/evaluations"), timeout=10).json()["evaluations"]
    assert job["id"] in [j["id"] for j in listed] and "job" not in listed[0]
    # the raw weights of checkpoint 300 on the train split of the same dataset
    r = requests.post(server.api(f"/runs/{run['id']}/evaluate"),
                      json={"dataset": second["id"], "checkpoint": 300, "split": "train", "weights": "raw"},
                      timeout=30)
    assert r.status_code == 202, r.text
    job = wait_job(server, run["id"], r.json()["id"])
    assert job["status"] == "succeeded", job
    images, labels = tf_examples(server.data / "datasets" / second["id"] / "train.tfrecord")
    check_against_numpy(job["result"]["raw"], numpy_metrics(mlp_logits(tensors, images, False), labels))
    # the weights not named: the EMA (README, "Raw and EMA")
    r = requests.post(server.api(f"/runs/{run['id']}/evaluate"),
                      json={"dataset": second["id"], "checkpoint": 300}, timeout=30)
    assert r.status_code == 202 and r.json()["weights"] == "ema", r.text


def test_post_evaluate_refuses_what_does_not_fit(served, fashion):
    server, _, run, tmp = served
    f = fashion
    small = f["images"][:50, ::2, ::2]
    upload(server, "half-size", idx_files(tmp / "half", small, f["labels"][:50], small, f["labels"][:50]))
    upload(server, "five-classes", idx_files(tmp / "five", f["images"][:50], f["labels"][:50] % 5,
                                             f["images"][:50], f["labels"][:50] % 5))
    url = server.api(f"/runs/{run['id']}/evaluate")

    def refused(body, status=400):
        r = requests.post(url, json=body, timeout=30)
        assert r.status_code == status, r.text
        return r.json()["error"]["message"]
    msg = refused({"dataset": "half-size"})
    assert "half-size" in msg and "[14,14,1]" in msg and "[28,28,1]" in msg
    msg = refused({"dataset": "five-classes"})
    assert "five-classes" in msg and "5 classes" in msg and "10" in msg
    assert "no dataset 'nope'" in refused({"dataset": "nope"})
    assert "weights" in refused({"dataset": "small", "weights": "best"})
    assert "colour" in refused({"dataset": "small", "colour": 1})
    assert "step 12345" in refused({"dataset": "small", "checkpoint": 12345}, 404)
    r = requests.get(server.api(f"/runs/{run['id']}/evaluations/e000000000000000"), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"


def test_evaluation_job_can_be_cancelled(served):
    """A job over 60,000 examples, cancelled at once: it ends "cancelled" (queued or running when asked)."""
    server, _, run, tmp = served
    big = upload(server, "fashion-full", {k: FASHION / v for k, v in {
        "images": "train-images-idx3-ubyte.gz", "labels": "train-labels-idx1-ubyte.gz"}.items()})
    r = requests.post(server.api(f"/runs/{run['id']}/evaluate"), json={"dataset": big["id"]}, timeout=30)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["split"] == "train"
    r = requests.delete(server.api(f"/runs/{run['id']}"), timeout=10)  # the job holds its run
    assert r.status_code == 409 and "evaluation job" in r.json()["error"]["message"], r.text
    r = requests.post(server.api(f"/runs/{run['id']}/evaluations/{job['id']}/cancel"), timeout=10)
    assert r.status_code == 202, r.text
    job = wait_job(server, run["id"], job["id"])
    assert job["status"] == "cancelled" and job["result"] is None, job
    r = requests.post(server.api(f"/runs/{run['id']}/evaluations/{job['id']}/cancel"), timeout=10)
    assert r.status_code == 409 and "already cancelled" in r.json()["error"]["message"]


def test_run_page_shows_the_heat_map(served):
    """Chromium (as test_page.py drives it): the run page's confusion matrix shows the counts of GET
    /evaluation, raw then EMA after the switch, coloured; ten per-class bar rows; a screenshot."""
    page = pytest.importorskip("test_page")
    if not (page.os.path.exists(page.CHROMIUM) and page.os.path.exists(page.CHROMEDRIVER)):
        pytest.skip("needs chromium and chromium-driver (scripts/install-deps.sh --test)")
    server, _, run, _ = served
    doc = requests.get(server.api(f"/runs/{run['id']}/evaluation"), timeout=10).json()
    driver = next(page.browser.__wrapped__())
    try:
        driver.get(f"{server.url}/#/runs/{run['id']}")
        By = page.By

        def cells():
            rows = driver.find_elements(By.CSS_SELECTOR, "#confusion-matrix tbody tr")
            return [[int(td.text) for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        page.wait(driver, lambda d: len(cells()) == 10, message="the confusion matrix",
                  detail=lambda d: d.find_element(By.ID, "run-evaluation").text)
        assert cells() == doc["ema"]["confusion"]  # the EMA weights first (README, "Raw and EMA")
        driver.find_element(By.ID, "evaluation-raw").click()
        page.wait(driver, lambda d: cells() == doc["raw"]["confusion"], message="the raw matrix")
        colour = page.js(driver, "return getComputedStyle(document.querySelector("
                                 "'#confusion-matrix tbody tr td')).backgroundColor")
        assert colour.startswith("rgba(") and not colour.endswith(", 0)"), colour
        assert len(driver.find_elements(By.CSS_SELECTOR, "#per-class tbody tr")) == 10
        assert "accuracy" in driver.find_element(By.ID, "evaluation-head").text
        page.js(driver, "document.getElementById('run-evaluation').scrollIntoView()")
        page.screenshot(driver, "evaluation-heatmap.png")
        assert page.severe(driver) == []
    finally:
        driver.quit()


def test_post_evaluate_regression_on_a_numpy_upload(served, run_tower, tmp_path):
    """A regression run on a NumPy upload (no test split: it trains without evaluating), then POST
    /evaluate on the train split of another NumPy upload: MSE, MAE and R² equal NumPy's."""
    from safetensors.numpy import load
    server, _, _, _ = served
    for name, seed in (("reg-train", 1), ("reg-other", 4)):
        regression_set(tmp_path, run_tower, name, 300, seed)
        upload(server, name, {"features": tmp_path / f"{name}_x.npy", "labels": tmp_path / f"{name}_y.npy"})
    cfg = {"dataset": "reg-train", "name": "reg",
           "model": {"layers": [{"type": "dense", "units": 16, "activation": "relu", "name": "hidden"},
                                {"type": "dense", "units": 1, "name": "out"}]},
           "loss": "mean_squared_error", "optimizer": {"type": "adam", "learning_rate": 0.01},
           "ema_decay": 0, "batch_size": 32, "steps": 50, "seed": 5, "summary_every": 25,
           "checkpoint_every": 50}
    r = requests.post(server.api("/runs"), json=cfg, timeout=30)
    assert r.status_code == 201, r.text
    run = wait_run(server, r.json()["id"])
    assert run["status"] == "succeeded", run
    assert requests.get(server.api(f"/runs/{run['id']}/evaluation"), timeout=10).status_code == 404
    r = requests.post(server.api(f"/runs/{run['id']}/evaluate"), json={"dataset": "reg-other"}, timeout=30)
    assert r.status_code == 202, r.text
    r_ema = requests.post(server.api(f"/runs/{run['id']}/evaluate"),
                          json={"dataset": "reg-other", "weights": "ema"}, timeout=30)
    assert r_ema.status_code == 400 and "no EMA" in r_ema.json()["error"]["message"], r_ema.text
    job = wait_job(server, run["id"], r.json()["id"])
    assert job["status"] == "succeeded" and job["split"] == "train", job
    tensors = load(requests.get(server.api(f"/runs/{run['id']}/checkpoints/latest"), timeout=30).content)
    x, y = np.load(tmp_path / "reg-other_x.npy"), np.load(tmp_path / "reg-other_y.npy")
    want = numpy_regression(tensors, x, y, False)
    got = job["result"]["raw"]
    assert job["result"]["kind"] == "regression" and got["examples"] == 300
    for k in ("mse", "mae", "r2"):
        assert got[k] == pytest.approx(want[k], rel=1e-5), k
