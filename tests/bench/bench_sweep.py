#!/usr/bin/env python3
"""ASHA against a full grid on the same Fashion-MNIST MLP configurations, trained by a real `tower serve`.

    python3 tests/bench/bench_sweep.py [--build build] [--steps 6000] [--seeds 1,2,3] [--data /tmp/bench-sweep]

Both sweeps search the same 16 points (4 learning rates x 4 widths of examples/seed_mlp.json's hidden layer,
`max_steps` steps each at the top): the grid trains every point to the end; ASHA ("sample": "grid", the same
points in a seeded order, reduction factor 4, 3 rungs) stops the weak ones early; it runs once per seed (the
order of the points is the seed's, and ASHA's choices depend on it). Prints, as JSON and as one Markdown row per
ASHA seed for BENCHMARKS.md: the steps each trained, ASHA's share of the grid's, each one's best
eval_accuracy_ema and the difference in points, and the wall time of each sweep. Fashion-MNIST is read from
/usr/share/datasets/fashion-mnist (scripts/install-deps.sh puts it there)."""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
FILES = {"images": "train-images-idx3-ubyte.gz", "labels": "train-labels-idx1-ubyte.gz",
         "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}
SPACE = {"optimizer.learning_rate": [0.01, 0.03, 0.1, 0.3], "model.layers[1].units": [32, 64, 128, 500]}


def start(build, data):
    proc = subprocess.Popen([str(build / "server" / "tower"), "serve", "--listen", "127.0.0.1:0", "--data", str(data),
                             "--no-demo"], stdout=subprocess.PIPE, stderr=open(data.parent / "serve.log", "ab"))
    return proc, json.loads(proc.stdout.readline())["listening"] + "/api/v1"


def wait(what, fn, every=1.0):
    while (got := fn()) is None:
        time.sleep(every)
    return got


def upload(api):
    cmd = ["curl", "-sS", "-f"] + [a for k, v in FILES.items() for a in ("-F", f"{k}=@{FASHION / v}")]
    d = json.loads(subprocess.run(cmd + [f"{api}/datasets?name=fashion-mnist"], capture_output=True, text=True,
                                  check=True).stdout)
    return wait("the dataset", lambda: (lambda r: r if r["status"] != "converting" else None)(
        requests.get(f"{api}/datasets/{d['id']}", timeout=30).json()))


def sweep(api, name, searcher, steps):
    cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    cfg.update(dataset="fashion-mnist", steps=steps, eval_every=0, summary_every=500, checkpoint_every=0)
    body = {"name": name, "config": cfg, "space": SPACE, "searcher": searcher, "metric": "eval_accuracy_ema"}
    t0 = time.monotonic()
    r = requests.post(f"{api}/sweeps", json=body, timeout=300)
    r.raise_for_status()
    done = wait(name, lambda: (lambda s: s if s["status"] != "running" else None)(
        requests.get(f"{api}/sweeps/{name}", timeout=30).json()))
    done["wall_s"] = time.monotonic() - t0
    return done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--data", default="/tmp/bench-sweep")
    ap.add_argument("--seeds", default="1,2,3")
    a = ap.parse_args()
    data = pathlib.Path(a.data)
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    proc, api = start(pathlib.Path(a.build), data / "data")
    try:
        upload(api)
        grid = sweep(api, "grid", {"type": "grid", "max_concurrent": 1}, a.steps)
        ashas = [sweep(api, f"asha{seed}", {"type": "asha", "sample": "grid", "seed": int(seed), "reduction_factor": 4,
                                            "rungs": 3, "max_concurrent": 1}, a.steps) for seed in a.seeds.split(",")]
    finally:
        proc.kill()
    top = lambda s: s["best"]["results"][-1] * 100  # noqa: E731
    out = {"steps": a.steps, "grid": {"steps": grid["steps_trained"], "best": top(grid), "values": grid["best"]["values"],
                                      "wall_s": grid["wall_s"],
                                      "trials": {json.dumps(t["values"]): t["results"][-1] for t in grid["trials"]}},
           "asha": [{"seed": s["spec"]["searcher"]["seed"], "steps": s["steps_trained"], "best": top(s),
                     "values": s["best"]["values"], "wall_s": s["wall_s"],
                     "trials": {json.dumps(t["values"]): [t["rung"], t["results"]] for t in s["trials"]}}
                    for s in ashas]}
    print(json.dumps(out, indent=1))
    for s in out["asha"]:
        print(f"| {a.steps} | {s['seed']} | {out['grid']['steps']:,} | {s['steps']:,} | "
              f"{s['steps'] / out['grid']['steps']:.1%} | {out['grid']['best']:.2f} | {s['best']:.2f} | "
              f"{out['grid']['best'] - s['best']:+.2f} | {out['grid']['wall_s']:.0f} | {s['wall_s']:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
