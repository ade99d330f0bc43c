"""A model too large for the memory of the device it would get is refused before anything
runs. `POST /api/v1/runs` answers 400 naming the estimate, its parts and the limit (the seed MLP still
passes); `tower train` exits 2 with the same message and writes nothing. The limit is the real one
(total RAM capped by the cgroup) for a model no machine holds, and `--memory-limit` for a model that
only a big machine would hold (two 65536-unit dense layers: ~16 GiB of weights alone)."""
import json
import os
import re

import pytest
import requests

from test_server import seed_config, submit, wait_dataset

CSV = "a,b,label\n" + "".join(f"{i % 7}.5,{i % 3}.25,{i % 2}\n" for i in range(40))
BIG_LAYERS = [{"type": "flatten"}, {"type": "dense", "units": 65536, "activation": "relu"},
              {"type": "dense", "units": 65536, "activation": "relu"}, {"type": "dense", "units": 10}]
LIMIT = 24 << 30
GPUS = os.path.isdir("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus")
ESTIMATE = re.compile(r"the run needs ~(\d+\.\d) ([KMGTPE]iB) of memory(?: for (\d+) towers)? \((.*?)\)")


def gib(value, unit):
    return float(value) * 1024 ** ("KMGTPE".index(unit[0]) + 1) / 2 ** 30


def weights_gib(inputs):
    """The weights of BIG_LAYERS on `inputs` features, in GiB (fp32)."""
    return 4 * (inputs * 65536 + 65536 * 65536 + 65536 * 10 + 2 * 65536 + 10) / 2 ** 30


def check_message(message, limit_words, towers=1):
    """The message names the estimate (at least weights, gradients and EMA shadows of every tower), the
    weights of BIG_LAYERS among its parts, and the limit."""
    m = ESTIMATE.search(message)
    assert m, message
    assert int(m.group(3) or 1) == towers, message
    parts = {name: (value, unit)
             for name, value, unit in re.findall(r"([A-Za-z ]+) ([\d.]+) ([KMGTPE]iB|B)(?:, |$)", m.group(4))}
    assert abs(gib(*parts["weights"]) - towers * weights_gib(2)) <= 0.05 * towers * weights_gib(2), message
    assert gib(m.group(1), m.group(2)) >= 3 * towers * weights_gib(2) * 0.95, message
    assert limit_words in message


@pytest.fixture
def csv_server(serve, tool):
    def start(*args):
        server = serve("--trainer", tool("tw_faketrain"), *args, env={"TW_FAKE": "step_ms=1"})
        r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                          headers={"Content-Type": "text/csv", **server.headers()}, timeout=30)
        assert r.status_code in (201, 202), r.text
        assert wait_dataset(server, r.json()["id"])["status"] == "ready"
        return server
    return start


def refused(server, cfg):
    r = submit(server, cfg)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "INVALID_ARGUMENT"
    return err["message"]


def test_submit_refuses_a_model_over_the_memory_limit(csv_server):
    server = csv_server("--memory-limit", LIMIT)
    message = refused(server, seed_config(dataset="tab", model={"layers": BIG_LAYERS}))
    check_message(message, "24.0 GiB (--memory-limit)")
    assert requests.get(server.api("/runs"), timeout=10).json()["total"] == 0
    assert list((server.data / "runs").iterdir()) == []
    r = submit(server, seed_config(dataset="tab", steps=2))  # the seed MLP fits
    assert r.status_code == 201, r.text


@pytest.mark.skipif(bool(GPUS), reason="a GPU server refuses 64 towers for its GPU count first")
def test_submit_refuses_a_model_no_machine_holds(csv_server):
    server = csv_server()  # the limit is the machine's own
    cfg = seed_config(dataset="tab", model={"layers": BIG_LAYERS}, towers=64,
                      optimizer={"type": "adam", "learning_rate": 0.001})
    message = refused(server, cfg)
    check_message(message, "the CPU has", towers=64)
    assert "Adam slots" in message
    assert submit(server, seed_config(dataset="tab", steps=2)).status_code == 201


@pytest.fixture
def csv_tfrecord(run_tower, tmp_path):
    (tmp_path / "tab.csv").write_text(CSV)
    res = run_tower("convert", "--csv", tmp_path / "tab.csv", "--label-column", "label", "-o",
                    tmp_path / "tab.tfrecord")
    assert res.returncode == 0, res.stderr
    return tmp_path / "tab.tfrecord"


def train(run_tower, tmp_path, path, layers, *args, steps=3):
    cfg = json.loads(json.dumps(seed_config(steps=steps, summary_every=1, eval_every=0,
                                            checkpoint_every=0, lr_decay=None)))
    cfg["dataset"] = {"train": str(path), "image_feature": "features", "label_feature": "label",
                      "shape": [2]}
    cfg["model"] = {"layers": layers}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    logdir = tmp_path / "logdir"
    res = run_tower("train", tmp_path / "cfg.json", "--logdir", logdir, *args, timeout=120)
    return res, logdir


def test_train_refuses_before_writing(run_tower, tmp_path, csv_tfrecord):
    res, logdir = train(run_tower, tmp_path, csv_tfrecord, BIG_LAYERS, "--memory-limit", LIMIT)
    assert res.returncode == 2, res.stderr
    check_message(res.stderr, "24.0 GiB (--memory-limit)")
    last = json.loads(res.stdout.splitlines()[-1])
    assert last["status"] == "failed" and last["exit"] == 2 and "needs ~" in last["message"]
    assert not logdir.exists()


def test_train_limit_is_the_machines_and_small_models_run(run_tower, tmp_path, csv_tfrecord):
    res, logdir = train(run_tower, tmp_path, csv_tfrecord, BIG_LAYERS, "--towers", "64", "--backend", "cpu")
    assert res.returncode == 2 and "the CPU has" in res.stderr, res.stderr
    assert not logdir.exists()
    seed = seed_config()["model"]["layers"]
    res, logdir = train(run_tower, tmp_path, csv_tfrecord, seed, "--memory-limit", 1000, "--backend", "cpu")
    assert res.returncode == 2 and "1000 B (--memory-limit)" in res.stderr, res.stderr
    assert not logdir.exists()
    res, logdir = train(run_tower, tmp_path, csv_tfrecord, seed)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["status"] == "completed"
