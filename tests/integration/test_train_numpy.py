"""The engine's arithmetic against numpy: three steps of SGD, momentum and Adam — with exponential
learning-rate decay, L2 on the weights and the EMA with num_updates — on a tiny two-layer network,
recomputed independently in float64 from TensorFlow 1's formulas (docs/formats.md §6) and compared with the
parameters, EMA shadows and optimizer slots in the checkpoint `tower train` writes.

The initial weights are random (glorot uniform, so the hidden units differ); the test reads them from a
one-step run of the same seed with a learning rate of 1e-30, which leaves every float32 weight as it
was (the step is far below half an ulp of weights that size)."""
import json
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file

X = np.array([[0.1, -0.4, 0.8, 0.3], [0.9, 0.2, -0.5, 0.0], [-0.3, 0.7, 0.1, -0.8],
              [0.5, 0.5, 0.5, 0.5], [-0.9, -0.1, 0.3, 0.6], [0.2, -0.6, -0.2, 0.9],
              [0.0, 0.3, -0.7, -0.4], [0.6, -0.8, 0.4, 0.1]]).astype(np.float32).astype(np.float64)
Y = np.array([0, 2, 1, 2, 0, 1, 1, 0])
LR, DECAY_STEPS, DECAY_RATE, L2, EMA, STEPS = 0.5, 2, 0.8, 0.01, 0.99, 3


def config(data, optimizer):
    layer = {"weight_init": {"type": "glorot_uniform"},
             "bias_init": {"type": "constant", "value": 0.05}}
    return {"dataset": {"train": str(data), "image_feature": "features", "shape": [4]},
            "model": {"layers": [dict(layer, type="dense", units=5, activation="tanh"),
                                 dict(layer, type="dense", units=3)]},
            "optimizer": optimizer,
            "lr_decay": {"type": "exponential", "decay_steps": DECAY_STEPS, "decay_rate": DECAY_RATE,
                         "staircase": False},
            "l2": L2, "ema_decay": EMA, "batch_size": 8, "steps": STEPS, "seed": 5,
            "summary_every": 1, "eval_every": 1000, "checkpoint_every": 1000}


def reference(opt, initial):
    """float64 replay from the initial params: {name: array} for params, EMA shadows and slots."""
    p = {k: initial[k].astype(np.float64) for k in
         ("layer1/weights", "layer1/biases", "layer2/weights", "layer2/biases")}
    ema = {k: v.copy() for k, v in p.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    onehot = np.eye(3)[Y]
    for t in range(1, STEPS + 1):
        lr = LR * DECAY_RATE ** ((t - 1) / DECAY_STEPS)
        h = np.tanh(X @ p["layer1/weights"] + p["layer1/biases"])
        z = h @ p["layer2/weights"] + p["layer2/biases"]
        e = np.exp(z - z.max(1, keepdims=True))
        dz = (e / e.sum(1, keepdims=True) - onehot) / len(X)
        dh = dz @ p["layer2/weights"].T * (1 - h * h)
        g = {"layer2/weights": h.T @ dz, "layer2/biases": dz.sum(0),
             "layer1/weights": X.T @ dh, "layer1/biases": dh.sum(0)}
        for k in p:
            gk = g[k] + (L2 * p[k] if k.endswith("weights") else 0)
            if opt["type"] == "sgd":
                p[k] = p[k] - lr * gk
            elif opt["type"] == "momentum":
                m[k] = m[k] * opt["momentum"] + gk
                p[k] = p[k] - lr * m[k]
            else:
                b1, b2, eps = 0.9, 0.999, 1e-8
                alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                m[k] += (gk - m[k]) * (1 - b1)
                v[k] += (gk * gk - v[k]) * (1 - b2)
                p[k] = p[k] - alpha * m[k] / (np.sqrt(v[k]) + eps)
            d = min(EMA, (1 + t) / (10 + t))
            ema[k] = ema[k] - (ema[k] - p[k]) * (1 - d)
    out = dict(p)
    out.update({f"{k}/ExponentialMovingAverage": a for k, a in ema.items()})
    if opt["type"] == "momentum":
        out.update({f"{k}/Momentum": a for k, a in m.items()})
    if opt["type"] == "adam":
        out.update({f"{k}/Adam": a for k, a in m.items()})
        out.update({f"{k}/Adam_1": a for k, a in v.items()})
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory, tower_bin):
    d = tmp_path_factory.mktemp("tiny")
    rows = ["a,b,c,d,label"] + [",".join(repr(float(v)) for v in x) + f",{y}" for x, y in zip(X, Y)]
    (d / "tiny.csv").write_text("\n".join(rows) + "\n")
    res = subprocess.run([str(tower_bin), "convert", "--csv", d / "tiny.csv", "--label-column",
                          "label", "-o", d / "tiny.tfrecord"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return d / "tiny.tfrecord"


def train(tmp_path, tower_bin, cfg_dict, name):
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(cfg_dict))
    res = subprocess.run([str(tower_bin), "train", cfg, "--logdir", tmp_path / name],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    ckpt = tmp_path / name / "checkpoints" / f"ckpt-{cfg_dict['steps']:010d}.safetensors"
    return [json.loads(l) for l in res.stdout.splitlines()], load_file(str(ckpt))


@pytest.fixture(scope="module")
def initial(tmp_path_factory, tower_bin, data):
    c = config(data, {"type": "sgd", "learning_rate": 1e-30})
    c["steps"] = 1
    _, ckpt = train(tmp_path_factory.mktemp("init"), tower_bin, c, "init")
    assert np.ptp(ckpt["layer2/weights"]) > 0.1  # random, not constant
    return ckpt


@pytest.mark.parametrize("optimizer", [{"type": "sgd", "learning_rate": LR},
                                       {"type": "momentum", "learning_rate": LR, "momentum": 0.9},
                                       {"type": "adam", "learning_rate": LR}],
                         ids=lambda o: o["type"])
def test_three_steps_match_numpy(tmp_path, tower_bin, data, initial, optimizer):
    lines, got = train(tmp_path, tower_bin, config(data, optimizer), "run")
    lrs = [l["learning_rate"] for l in lines if "learning_rate" in l]
    # the rate reported after step s is the one the next update uses: global_step = s
    np.testing.assert_allclose(lrs, [LR * DECAY_RATE ** (s / DECAY_STEPS) for s in (1, 2, 3)],
                               rtol=1e-6)
    want = reference(optimizer, initial)
    assert set(got) == set(want)  # exactly the slots the optimizer has
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=2e-5, atol=2e-6, err_msg=name)
