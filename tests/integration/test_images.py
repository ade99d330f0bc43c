"""TensorBoard's IMAGES tab over `tower train` runs, read through stock TensorBoard (the Rust data server,
--load_fast=true) and its images HTTP API (/data/plugin/images/tags, /images, /individualImage), each PNG
decoded by Pillow.

Three short runs on tiny random uint8 datasets: a CNN of examples/fashion_cnn.json's shape (narrower), an
MLP, and a 3-D CNN on 8x8x8 volumes. Every run shows `input/samples` at step 0, each tile exactly one
training example's bytes (the middle slice of a volume); the CNNs show `layer1/filters` with every histogram summary,
the last one equal to the checkpoint's `layer1/weights` rendered by the rule docs/formats.md states; the
MLP has no filter image. A confusion matrix written by tw_summary_confusion (tests/tools/tw_confusiongen)
shows as the heat map docs/formats.md §3.11 describes, pixel for pixel. Sizes are computed here from the
shapes, by the documented layout."""
import io
import json
import math
import subprocess

import numpy as np
import pytest
import requests

import helpers
from conftest import ROOT
from helpers import poll
from test_train import train

Image = pytest.importorskip("PIL.Image")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

GAP, TILE = 2, 32  # TW_GRID_GAP, TW_GRID_TILE (engine/summary_images.h)
STEPS, SUMMARY_EVERY, BATCH = 10, 5, 16


def dataset(tower_bin, root, name, x):
    """x uint8 [n, ...] with random labels of 10 classes, converted by `tower convert`; returns the
    TFRecord's path."""
    np.save(root / f"{name}_x.npy", x)
    np.save(root / f"{name}_y.npy", np.random.default_rng(1).integers(0, 10, len(x)).astype(np.int64))
    out = root / f"{name}.tfrecord"
    res = subprocess.run([str(tower_bin), "convert", "--npy-features", root / f"{name}_x.npy",
                          "--npy-labels", root / f"{name}_y.npy", "-o", out], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out


def config(train_path, shape, layers):
    return {"dataset": {"train": str(train_path), "shape": shape}, "model": {"layers": layers},
            "optimizer": {"type": "adam", "learning_rate": 0.001}, "batch_size": BATCH, "steps": STEPS,
            "seed": 1, "summary_every": SUMMARY_EVERY, "histogram_every": SUMMARY_EVERY, "eval_every": 0, "checkpoint_every": STEPS}


def cnn_layers():
    """examples/fashion_cnn.json's layers, narrower."""
    layers = json.loads((ROOT / "examples" / "fashion_cnn.json").read_text())["model"]["layers"]
    for layer, width in zip([l for l in layers if "filters" in l or "units" in l], [8, 16, 32, 10]):
        layer["filters" if "filters" in layer else "units"] = width
    return layers


CNN3D = [{"type": "conv3d", "filters": 6, "kernel": 3, "activation": "relu"},
         {"type": "max_pool3d", "pool": 2}, {"type": "flatten"}, {"type": "dense", "units": 10}]
MLP = [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"}, {"type": "dense", "units": 10}]


CONFUSION_K, CONFUSION_STEP = 10, 300
BLUES = np.array([[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
                  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]], np.float64)


def confusion_counts():
    """A k x k matrix: a strong diagonal, some confusion, one class without test examples."""
    k = CONFUSION_K
    c = np.fromfunction(lambda i, j: np.where(i == j, 40 + 6 * i, (3 * i + j) % 5), (k, k), dtype=np.int64)
    c[7] = 0
    return c


def render_confusion(counts):
    """docs/formats.md's heat map: rows normalised, ColorBrewer Blues, cells of max(1, min(24, 480 // k))."""
    k = len(counts)
    sums = counts.sum(axis=1, keepdims=True).astype(np.float64)
    t = np.divide(counts, sums, out=np.zeros((k, k)), where=sums > 0)
    pos = t * 8.0
    i = np.minimum(pos.astype(int), 7)
    f = (pos - i)[..., None]
    rgb = np.floor(BLUES[i] + (BLUES[i + 1] - BLUES[i]) * f + 0.5).astype(np.uint8)
    cell = max(1, min(24, 480 // k))
    return np.kron(rgb, np.ones((cell, cell, 1), np.uint8))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tower_bin, tool):
    """logdir with runs cnn, mlp and cnn3d; returns (logdir, {name: examples uint8})."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (256, 28, 28), dtype=np.uint8)
    volumes = rng.integers(0, 256, (128, 8, 8, 8), dtype=np.uint8)
    flat = dataset(tower_bin, root, "images", images)
    vol = dataset(tower_bin, root, "volumes", volumes)
    logdir = root / "logs"
    logdir.mkdir()
    for name, cfg in [("cnn", config(flat, [28, 28, 1], cnn_layers())),
                      ("mlp", config(flat, [28, 28, 1], MLP)),
                      ("cnn3d", config(vol, [8, 8, 8, 1], CNN3D))]:
        train(tower_bin, logdir, cfg, name=name)
    res = subprocess.run([str(tool("tw_confusiongen")), logdir / "confusion", str(CONFUSION_STEP),
                          str(CONFUSION_K), *map(str, confusion_counts().ravel())], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return logdir, {"cnn": images, "mlp": images, "cnn3d": volumes[:, 4]}


@pytest.fixture(scope="module")
def board(runs, tmp_path_factory):
    logdir, _ = runs
    with helpers.tensorboard(logdir, tmp_path_factory.mktemp("tb-logs")) as (base, _pid):
        yield base


def get_json(base, route, ready=lambda got: True):
    def attempt():
        r = requests.get(f"{base}/data/plugin/images/{route}", timeout=30)
        return r.json() if r.status_code == 200 and ready(r.json()) else None
    return poll(f"images/{route}", attempt)


def images_of(base, run, tag, steps):
    """{step: PIL image} of (run, tag), once TensorBoard has every step in `steps`."""
    entries = get_json(base, f"images?run={run}&tag={tag}", lambda e: [x["step"] for x in e] == steps)
    out = {}
    for e in entries:
        r = requests.get(f"{base}/data/plugin/images/individualImage?{e['query']}", timeout=30)
        assert r.status_code == 200 and r.headers["Content-Type"] == "image/png", r.headers
        out[e["step"]] = Image.open(io.BytesIO(r.content))
    return out


def grid_size(n, cols, tile_h, tile_w):
    rows = math.ceil(n / cols)
    return cols * tile_w + (cols - 1) * GAP, rows * tile_h + (rows - 1) * GAP


def tiles(img, n, cols, tile_h, tile_w):
    a = np.asarray(img)
    return [a[i // cols * (tile_h + GAP):][:tile_h, i % cols * (tile_w + GAP):][:, :tile_w] for i in range(n)]


def render_filters(w):
    """docs/formats.md's filter grid of a conv kernel [kh, kw, in_c, f] or [kd, kh, kw, in_c, f]."""
    if w.ndim == 5:
        w = w[w.shape[0] // 2]
    kh, kw, in_c, f = w.shape
    n = min(f * in_c, 256)
    cols = min(math.ceil(math.ceil(math.sqrt(n)) / in_c) * in_c, n)
    shown = [w[:, :, t % in_c, t // in_c].astype(np.float64) for t in range(n)]
    lo, hi = min(s.min() for s in shown), max(s.max() for s in shown)
    zoom = TILE // max(kh, kw) if max(kh, kw) < TILE else 1
    width, height = grid_size(n, cols, kh * zoom, kw * zoom)
    out = np.full((height, width), 255, np.uint8)
    for t, s in enumerate(shown):
        px = np.floor(255.0 * (s - lo) / (hi - lo) + 0.5).astype(np.uint8)
        y0, x0 = t // cols * (kh * zoom + GAP), t % cols * (kw * zoom + GAP)
        out[y0:y0 + kh * zoom, x0:x0 + kw * zoom] = np.kron(px, np.ones((zoom, zoom), np.uint8))
    return out


def test_tags_listed(board):
    want = {"cnn": {"input/samples", "layer1/filters"}, "mlp": {"input/samples"},
            "cnn3d": {"input/samples", "layer1/filters"}, "confusion": {"eval/confusion_matrix"}}
    tags = get_json(board, "tags", lambda t: {r: set(v) for r, v in t.items()} == want)
    assert tags["cnn"]["input/samples"]["samples"] == 1


@pytest.mark.parametrize("run", ["cnn", "mlp", "cnn3d"])
def test_samples_are_the_first_batch_bytes(board, runs, run):
    _, examples = runs
    (img,) = images_of(board, run, "input/samples", [0]).values()
    side = examples[run].shape[1]
    zoom = TILE // side if side < TILE else 1
    n, cols, t = BATCH, math.ceil(math.sqrt(BATCH)), side * zoom
    assert img.mode == "L" and img.size == grid_size(n, cols, t, t)
    known = {e.tobytes(): i for i, e in enumerate(examples[run])}
    found = []
    for tile in tiles(img, n, cols, t, t):
        example = tile[::zoom, ::zoom]
        assert np.array_equal(tile, np.kron(example, np.ones((zoom, zoom), np.uint8)))
        assert example.tobytes() in known, "a tile is not a training example"
        found.append(known[example.tobytes()])
    assert len(set(found)) == n  # n different examples: one batch
    gaps = np.asarray(img)[:, t:t + GAP]
    assert (gaps == 255).all()


@pytest.mark.parametrize("run", ["cnn", "cnn3d"])
def test_filters_match_the_checkpoint(board, runs, run):
    logdir, _ = runs
    shots = images_of(board, run, "layer1/filters", [SUMMARY_EVERY, STEPS])
    latest = (logdir / run / "checkpoints" / "latest").read_text().strip()
    assert latest == f"ckpt-{STEPS:010d}.safetensors"
    ckpt = safetensors_numpy.load_file(logdir / run / "checkpoints" / latest)
    want = render_filters(ckpt["layer1/weights"])
    got = np.asarray(shots[STEPS])
    assert shots[STEPS].mode == "L" and got.shape == want.shape
    assert np.array_equal(got, want)
    assert not np.array_equal(np.asarray(shots[SUMMARY_EVERY]), got)  # the filters moved


def test_mlp_has_no_filters(board):
    r = requests.get(f"{board}/data/plugin/images/images?run=mlp&tag=layer1/filters", timeout=30)
    assert r.status_code != 200


def test_confusion_matrix_heat_map(board):
    (img,) = images_of(board, "confusion", "eval/confusion_matrix", [CONFUSION_STEP]).values()
    want = render_confusion(confusion_counts())
    assert img.mode == "RGB" and img.size == (CONFUSION_K * 24, CONFUSION_K * 24)
    assert np.array_equal(np.asarray(img), want)
    assert tuple(want[0, 0]) != tuple(want[0, 24])  # the diagonal stands out


def test_inspect_names_the_image_tags(runs, run_tower):
    logdir, _ = runs
    (events,) = (logdir / "cnn").glob("events.out.tfevents.*")
    res = run_tower("inspect", events, "--json")
    assert res.returncode == 0, res.stderr
    tags = json.loads(res.stdout)["tags"]
    assert tags["input/samples"] == {"kind": "image", "count": 1, "first_step": 0, "last_step": 0}
    assert tags["layer1/filters"] == {"kind": "image", "count": 2, "first_step": SUMMARY_EVERY,
                                      "last_step": STEPS}
