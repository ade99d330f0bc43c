"""`tower train` end to end on the CPU: tower equivalence, bit-exact resume, what TensorBoard and the
safetensors package read, divergence and config errors, the 3-D CNN regression of the second seed, and a
short Fashion-MNIST run that must learn."""
import copy
import json
import os
import signal
import subprocess

import numpy as np
import pytest

from conftest import FASHION, ROOT

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="session")
def fashion(tmp_path_factory, tower_bin):
    """Fashion-MNIST converted once: (train.tfrecord, test.tfrecord)."""
    out = tmp_path_factory.mktemp("fashion")
    res = subprocess.run([str(tower_bin), "convert",
                          "--images", FASHION / "train-images-idx3-ubyte.gz",
                          "--labels", FASHION / "train-labels-idx1-ubyte.gz",
                          "--test-images", FASHION / "t10k-images-idx3-ubyte.gz",
                          "--test-labels", FASHION / "t10k-labels-idx1-ubyte.gz",
                          "-o", out / "train.tfrecord", "--test-output", out / "test.tfrecord"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out / "train.tfrecord", out / "test.tfrecord"


def mlp_config(fashion, **over):
    train, test = fashion
    c = {"dataset": {"train": str(train), "test": str(test), "shape": [28, 28, 1]},
         "model": {"layers": [{"type": "flatten"},
                              {"type": "dense", "units": 64, "activation": "relu"},
                              {"type": "dense", "units": 10}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.05},
         "lr_decay": {"type": "exponential", "decay_steps": 10, "decay_rate": 0.9, "staircase": False},
         "l2": 0.0001, "ema_decay": 0.99, "batch_size": 32, "towers": 1, "steps": 30, "seed": 7,
         "summary_every": 1, "eval_every": 1000, "checkpoint_every": 1000, "keep_checkpoints": 3}
    for k, v in over.items():
        c[k] = v
    return c


def train(tower_bin, tmp_path, config, *args, name="run", check=True):
    """Runs `tower train`; returns (returncode, JSON lines, logdir)."""
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    logdir = tmp_path / name
    res = subprocess.run([str(tower_bin), "train", cfg, "--logdir", logdir, *map(str, args)],
                         capture_output=True, text=True, timeout=900)
    if check:
        assert res.returncode == 0, res.stderr + res.stdout[-2000:]
    lines = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    return res.returncode, lines, logdir, res.stderr


def losses(lines):
    return {l["step"]: l["loss"] for l in lines if "loss" in l and "step" in l}


def test_two_towers_of_16_equal_one_of_32(tower_bin, tmp_path, fashion):
    one = mlp_config(fashion)
    two = mlp_config(fashion, batch_size=16, towers=2)
    _, a, _, _ = train(tower_bin, tmp_path, one, name="one")
    _, b, _, _ = train(tower_bin, tmp_path, two, name="two")
    la, lb = losses(a), losses(b)
    assert sorted(la) == list(range(1, 31)) == sorted(lb)
    np.testing.assert_allclose([lb[s] for s in la], [la[s] for s in la], rtol=2e-4)
    assert la[30] < la[1]  # it learns


def test_towers_flag_overrides_config(tower_bin, tmp_path, fashion):
    _, a, _, _ = train(tower_bin, tmp_path, mlp_config(fashion, batch_size=16), "--towers", "2",
                       name="flag")
    _, b, _, _ = train(tower_bin, tmp_path, mlp_config(fashion, batch_size=16, towers=2),
                       name="cfg")
    assert losses(a) == losses(b)


def test_resume_is_bit_exact(tower_bin, tmp_path, fashion):
    full = mlp_config(fashion, steps=40, checkpoint_every=20,
                      optimizer={"type": "adam", "learning_rate": 0.001})
    _, whole, _, _ = train(tower_bin, tmp_path, full, name="whole")
    first = copy.deepcopy(full)
    first["steps"] = 20
    _, part1, logdir, _ = train(tower_bin, tmp_path, first, name="split")
    assert (logdir / "checkpoints" / "latest").exists()
    # the second half: same config but 40 steps, resumed from the step-20 checkpoint
    (tmp_path / "split.json").write_text(json.dumps(full))
    res = subprocess.run([str(tower_bin), "train", tmp_path / "split.json", "--logdir", logdir,
                          "--resume"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    part2 = [json.loads(l) for l in res.stdout.splitlines()]
    assert any(l.get("resumed_from") for l in part2)
    lw, l2 = losses(whole), losses(part2)
    assert sorted(l2) == list(range(21, 41))
    assert [l2[s] for s in sorted(l2)] == [lw[s] for s in range(21, 41)]  # exactly equal
    events = sorted(p for p in logdir.iterdir() if "tfevents" in p.name)
    assert len(events) == 2  # the resumed run writes a new event file, starting with SessionLog START
    res = subprocess.run([str(tower_bin), "inspect", events[1], "--json"], capture_output=True,
                         text=True)
    assert json.loads(res.stdout)["session_starts"] == [21]


def test_a_retried_attempt_shows_every_point_once(tower_bin, tmp_path, fashion):
    """An attempt that died after writing the points of steps 21-30 but before its step-30 checkpoint
    committed is retried from step 20: TensorBoard shows each step once, in the run's file and in its
    eval_ema sub-run alike (each attempt's files start with SessionLog START at the resumed step)."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    c = mlp_config(fashion, steps=30, summary_every=5, eval_every=10, checkpoint_every=10, keep_checkpoints=5)
    _, _, logdir, _ = train(tower_bin, tmp_path, c, name="retried")
    latest = logdir / "checkpoints" / "latest"
    latest.write_text(latest.read_text().replace("30", "20"))  # as if step 30 never committed
    _, lines, _, _ = train(tower_bin, tmp_path, c, "--resume", name="retried")
    assert lines[1]["step"] == 20 and lines[1]["resumed_from"], lines[:2]
    assert len(list((logdir / "eval_ema").glob("events.out.tfevents.*"))) == 2
    for sub, tags in (("", ["train/loss", "eval/accuracy"]), ("eval_ema", ["eval/accuracy", "eval/loss"])):
        acc = ea.EventAccumulator(str(logdir / sub), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
        acc.Reload()
        for t in tags:
            want = [0, 10, 20, 30] if t.startswith("eval/") else [5, 10, 15, 20, 25, 30]
            assert [e.step for e in acc.Scalars(t)] == want, (sub, t)


def next_line(proc):
    """The next JSON line of proc's stdout that is not a heartbeat ({"heartbeat": true, "step": k},
    written when no other line came for a second)."""
    while True:
        line = json.loads(proc.stdout.readline())
        if not line.get("heartbeat"):
            return line


def test_sigterm_checkpoints_and_cancels(tower_bin, tmp_path, fashion):
    cfg = tmp_path / "long.json"
    cfg.write_text(json.dumps(mlp_config(fashion, steps=10**8, summary_every=20)))
    proc = subprocess.Popen([str(tower_bin), "train", cfg, "--logdir", tmp_path / "long"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        announced = next_line(proc)  # which backend and devices the towers run on
        assert announced == {"backend": "cpu", "devices": ["cpu"], "towers": 1, "processes": 1,
                             "total_towers": 1, "world": "none"}
        first = next_line(proc)  # the step-0 evaluation: training has begun
        assert first["step"] == 0
        assert next_line(proc)["step"] == 20
        proc.send_signal(signal.SIGTERM)
        rest = [json.loads(l) for l in proc.stdout.read().splitlines()]
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        proc.kill()
    final = rest[-1]
    assert final["status"] == "cancelled" and final["step"] >= 20
    latest = (tmp_path / "long" / "checkpoints" / "latest").read_text().strip()
    assert latest == f"ckpt-{final['step']:010d}.safetensors"


def test_tensorboard_sees_every_tag(tower_bin, tmp_path, fashion):
    """A short run of examples/seed_mlp.json (the seed's model), with only the data paths and the
    schedule shortened."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    seed["dataset"]["train"], seed["dataset"]["test"] = map(str, fashion)
    seed.update(steps=20, summary_every=10, eval_every=10, checkpoint_every=20)
    _, lines, logdir, _ = train(tower_bin, tmp_path, seed, name="tb")
    acc = ea.EventAccumulator(str(logdir), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    tags = acc.Tags()
    train_tags = ["train/" + t for t in ["loss", "cross_entropy", "regularization_loss", "learning_rate",
                                         "examples_per_sec", "sec_per_batch"]]
    # a class's precision is left out while nothing is predicted as it (undefined: evaluation.h)
    recall = {f"eval_per_class/recall/{k}" for k in range(10)}
    precision = {f"eval_per_class/precision/{k}" for k in range(10)}
    evals = {"eval/accuracy", "eval/loss", "eval/top5_accuracy", *recall}
    assert {*train_tags, *evals} <= set(tags["scalars"]) <= {*train_tags, *evals, *precision}  # one group each
    for t in tags["scalars"]:
        want = [0, 10, 20] if t.startswith("eval") else [10, 20]  # eval also runs before step 1
        assert [e.step for e in acc.Scalars(t)] == want, t
    ema = ea.EventAccumulator(str(logdir / "eval_ema"), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    ema.Reload()  # the EMA evaluation: the same tags in a sub-run, so TensorBoard draws both on one chart
    assert evals <= set(ema.Tags()["scalars"]) <= {*evals, *precision}
    for a in (acc, ema):  # the confusion matrix as an image at each evaluation, raw and EMA
        assert [e.step for e in a.Images("eval/confusion_matrix")] == [0, 10, 20]
        assert a.Images("eval/confusion_matrix")[-1].width == 10 * 24
    assert [e.step for e in ema.Scalars("eval/accuracy")] == [0, 10, 20]
    final = [l for l in lines if "eval_accuracy_ema" in l][-1]
    assert ema.Scalars("eval/accuracy")[-1].value == pytest.approx(final["eval_accuracy_ema"], abs=1e-6)
    assert acc.Scalars("eval/accuracy")[-1].value == pytest.approx(final["eval_accuracy"], abs=1e-6)
    for v in ["layer1/weights", "layer1/biases", "layer2/weights", "layer2/biases"]:
        for t in [v, f"gradients_on_average/{v}", f"{v}/ExponentialMovingAverage"]:
            assert t in tags["histograms"], t
    w = acc.Histograms("layer1/weights")[-1].histogram_value
    assert w.num == 784 * 500
    assert tags["graph"]
    names = {n.name for n in acc.Graph().node}
    assert {"layer1/weights", "layer1/MatMul", "layer2/BiasAdd"} <= names
    assert "config" in tags["tensors"]
    lr = [e.value for e in acc.Scalars("train/learning_rate")]
    np.testing.assert_allclose(lr, [0.001 * 0.99 ** (10 / 1718), 0.001 * 0.99 ** (20 / 1718)],
                               rtol=1e-6)
    ev = [l for l in lines if "eval_accuracy" in l]
    assert ev and 0 <= ev[-1]["eval_accuracy"] <= 1
    assert lines[-1]["status"] == "completed"


def test_checkpoint_loads_with_safetensors(tower_bin, tmp_path, fashion, run_tower):
    from safetensors.numpy import load_file
    _, _, logdir, _ = train(tower_bin, tmp_path, mlp_config(fashion, steps=5), name="ck")
    latest = (logdir / "checkpoints" / "latest").read_text().strip()
    path = logdir / "checkpoints" / latest
    t = load_file(str(path))
    assert t["layer1/weights"].shape == (784, 64) and t["layer1/weights"].dtype == np.float32
    assert t["layer2/biases"].shape == (10,)
    assert "layer1/weights/ExponentialMovingAverage" in t
    res = run_tower("inspect", path, "--json", "--limit", "3")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    for name, arr in t.items():
        got = info["tensors"][name]
        assert got["shape"] == list(arr.shape)
        np.testing.assert_allclose(got["sum"], float(arr.astype(np.float64).sum()), rtol=1e-5,
                                   atol=1e-5)


def test_nan_loss_stops_with_exit_10(tower_bin, tmp_path, fashion):
    bad = mlp_config(fashion, optimizer={"type": "sgd", "learning_rate": 1e30}, steps=50)
    rc, lines, logdir, _ = train(tower_bin, tmp_path, bad, name="nan", check=False)
    assert rc == 10
    err = [l for l in lines if l.get("error") in ("LOSS_NAN", "LOSS_INF")]
    assert err and err[0]["step"] > 1
    assert not (logdir / "checkpoints" / "latest").exists()


@pytest.mark.parametrize("change,key", [
    ({"batch_size": 0}, "batch_size"),
    ({"optimiser": {"type": "sgd"}}, "optimiser"),
    ({"dataset": {"train": "missing.tfrecord", "shape": [28, 28, 1]}}, "missing.tfrecord"),
])
def test_bad_config_exit_2_nothing_written(tower_bin, tmp_path, fashion, change, key):
    rc, _, logdir, err = train(tower_bin, tmp_path, mlp_config(fashion, **change), name="bad",
                               check=False)
    assert rc in (1, 2) if "missing" in key else rc == 2
    assert key in err
    assert not logdir.exists()


def test_label_outside_the_classes_is_bad_data(tower_bin, tmp_path):
    """A label the model has no class for is a fault of the data file, not of the config: exit 14
    (engine/child.h TW_EXIT_BAD_DATA), which the server classifies bad_dataset (test_server_faults)."""
    rows = [f"{i * 0.1},{-i * 0.2},{7 if i == 5 else i % 3}" for i in range(8)]
    (tmp_path / "labels.csv").write_text("a,b,label\n" + "\n".join(rows) + "\n")
    res = subprocess.run([str(tower_bin), "convert", "--csv", tmp_path / "labels.csv", "--label-column",
                          "label", "-o", tmp_path / "labels.tfrecord"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    c = {"dataset": {"train": str(tmp_path / "labels.tfrecord"), "image_feature": "features",
                     "shape": [2]},
         "model": {"layers": [{"type": "dense", "units": 3}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.1}, "batch_size": 4, "steps": 4}
    rc, lines, _, err = train(tower_bin, tmp_path, c, name="label", check=False)
    assert rc == 14, err
    assert lines[-1]["status"] == "failed" and lines[-1]["exit"] == 14
    assert "label 7 at record 5 is outside [0, 3)" in err


def test_server_classifies_a_label_outside_the_classes_as_bad_dataset(serve):
    """The same exit through `tower serve` with the real trainer: Fashion-MNIST's labels 0..9 on a model
    with 5 classes fail fast as bad_dataset, not bad_config, and are not retried."""
    from test_server import seed_config, submit, upload_fashion, wait_run
    server = serve("--backoff", "0.2", "--backoff-cap", "1")
    upload_fashion(server)
    cfg = seed_config(steps=20)
    cfg["model"]["layers"][-1]["units"] = 5
    done = wait_run(server, submit(server, cfg).json()["id"])
    assert done["status"] == "failed" and done["reason"] == "bad_dataset" and done["restarts"] == 0, done
    assert "is outside [0, 5)" in done["error"]["message"]


def test_shape_that_does_not_fit_the_model(tower_bin, tmp_path, fashion):
    c = mlp_config(fashion)
    c["dataset"]["shape"] = [32, 32, 1]
    rc, _, logdir, err = train(tower_bin, tmp_path, c, name="shape", check=False)
    assert rc == 2, err
    assert "image_raw" in err or "shape" in err
    assert not logdir.exists()


def blob_volumes(n, size=8, seed=0):
    """Volumes [n, size, size, size] uint8 with a cube of side k (the target) at a random place."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, size, size, size), np.uint8)
    y = rng.integers(1, 6, size=n).astype(np.float32)
    for i, k in enumerate(y.astype(int)):
        o = rng.integers(0, size - k + 1, size=3)
        x[i, o[0]:o[0] + k, o[1]:o[1] + k, o[2]:o[2] + k] = 255
    return x, y


def test_3d_cnn_regression_cuts_mse_tenfold(tower_bin, tmp_path, run_tower):
    for split, n, seed in [("train", 2048, 1), ("test", 256, 2)]:
        x, y = blob_volumes(n, seed=seed)
        np.save(tmp_path / f"{split}_x.npy", x)
        np.save(tmp_path / f"{split}_y.npy", y)
        res = run_tower("convert", "--npy-features", tmp_path / f"{split}_x.npy", "--npy-labels",
                        tmp_path / f"{split}_y.npy", "-o", tmp_path / f"{split}.tfrecord")
        assert res.returncode == 0, res.stderr
    c = {"dataset": {"train": str(tmp_path / "train.tfrecord"), "test": str(tmp_path / "test.tfrecord"),
                     "shape": [8, 8, 8, 1]},
         "model": {"layers": [
             {"type": "conv3d", "filters": 8, "kernel": 3, "activation": "relu"},
             {"type": "max_pool3d", "pool": 2},
             {"type": "conv3d", "filters": 16, "kernel": 3, "activation": "relu"},
             {"type": "flatten"},
             {"type": "dense", "units": 32, "activation": "relu"},
             {"type": "dropout", "rate": 0.2},
             {"type": "dense", "units": 1}]},
         "loss": "mean_squared_error",
         "optimizer": {"type": "adam", "learning_rate": 0.003},
         "lr_decay": {"type": "exponential", "decay_steps": 200, "decay_rate": 0.5, "staircase": True},
         "batch_size": 16, "towers": 2, "steps": 600, "seed": 3,
         "summary_every": 100, "eval_every": 100, "checkpoint_every": 600}
    _, lines, _, _ = train(tower_bin, tmp_path, c, name="cnn3d")
    mse = {l["step"]: l["eval_loss"] for l in lines if "eval_loss" in l}
    assert sorted(mse) == [0, 100, 200, 300, 400, 500, 600]  # step 0: before any training
    assert mse[600] * 10 <= mse[0], mse


def test_fashion_mlp_short_run_learns(tower_bin, tmp_path, fashion):
    c = mlp_config(fashion, steps=1000, summary_every=250, eval_every=1000, batch_size=64,
                   optimizer={"type": "adam", "learning_rate": 0.001})
    del c["lr_decay"]
    c["model"]["layers"][1]["units"] = 256
    _, lines, _, _ = train(tower_bin, tmp_path, c, name="fashion")
    ev = [l for l in lines if "eval_accuracy_ema" in l][-1]
    assert ev["eval_examples"] == 10000
    assert ev["eval_accuracy_ema"] >= 0.82, ev


def test_histograms_on_their_own_cadence(tower_bin, tmp_path, fashion):
    """Scalars every summary, the weight/EMA/gradient histograms every histogram_every steps and at the end."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    _, _, logdir, _ = train(tower_bin, tmp_path, mlp_config(fashion, steps=25, summary_every=1, histogram_every=10))
    acc = ea.EventAccumulator(str(logdir), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    rate = [t for t in acc.Tags()["scalars"] if t.endswith("learning_rate")]
    assert rate and [e.step for e in acc.Scalars(rate[0])] == list(range(1, 26))
    for t in ["layer1/weights", "gradients_on_average/layer1/weights", "layer1/weights/ExponentialMovingAverage"]:
        assert [e.step for e in acc.Histograms(t)] == [10, 20, 25], t
    _, _, logdir, _ = train(tower_bin, tmp_path, mlp_config(fashion, steps=5, histogram_every=0), name="end")
    acc = ea.EventAccumulator(str(logdir), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    assert [e.step for e in acc.Histograms("layer1/weights")] == [5]
