"""Class names reach every view of a class: a run on a dataset uploaded with names reports its evaluation,
its per-class scalars in TensorBoard, its predictions and `tower evaluate` under those names, not indices
(eventlog/convert.h tw_convert_class_names_of is the one source)."""
import json

import requests

import helpers
from conftest import FASHION
from test_dataset_splits import upload
from test_server import FILES, submit, wait_dataset, wait_run

NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def test_names_in_evaluation_scalars_and_predictions(serve, run_tower, tmp_path):
    server = serve()
    code, d = upload(server, "named", {k: FASHION / v for k, v in FILES.items()}, {"class_names": json.dumps(NAMES)})
    assert code == 202, d
    assert wait_dataset(server, d["id"])["class_names"] == NAMES
    cfg = {"dataset": "named", "name": "named",
           "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]},
           "optimizer": {"type": "sgd", "learning_rate": 0.05}, "batch_size": 32, "steps": 40,
           "summary_every": 20, "eval_every": 40, "checkpoint_every": 40, "ema_decay": 0.9}
    r = submit(server, cfg)
    assert r.status_code == 201, r.text
    run = wait_run(server, r.json()["id"])
    assert run["status"] == "succeeded", run
    doc = requests.get(server.api(f"/runs/{run['id']}/evaluation"), timeout=10).json()
    assert doc["class_names"] == NAMES
    from tensorboard.backend.event_processing import event_accumulator as ea
    folder = helpers.run_dir(server.data, run["id"])
    for logdir in (folder, folder / "eval_ema"):
        acc = ea.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
        acc.Reload()
        assert {"eval_per_class/recall/T-shirt-top", "eval_per_class/recall/Ankle boot"} <= set(acc.Tags()["scalars"])
    pixels = [[0.0] * 784]
    r = requests.post(server.api(f"/runs/{run['id']}/predict"), json={"inputs": pixels}, timeout=30)
    assert r.status_code == 200, r.text
    top = r.json()["predictions"][0]["top_k"]
    assert all(t["name"] == NAMES[t["class"]] for t in top), top
    test = folder.parent.parent / "datasets" / d["id"] / "test.tfrecord"
    res = run_tower("evaluate", folder / "checkpoints" / "ckpt-0000000040.safetensors", "--data", test,
                    "--out", tmp_path / "e.json")
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "e.json").read_text())["class_names"] == NAMES
