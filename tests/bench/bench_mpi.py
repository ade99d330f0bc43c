"""Processes against towers (not a test): the seed MLP (examples/seed_mlp.json, batch 32 per tower) as
1 process x 2 towers against 2 processes x 1 tower, under `mpirun -np 2` (MPI world) and started with
torchrun's variables (TCP world, world/world_tcp.c), on this machine. Two measurements, each --repeat
times alternating the two shapes, the best run reported (this VM's timings are noisy):

- `tower bench` (synthetic data, the step alone): step time, examples/s and the gradient all-reduce's time
  per step (between syncs of every tower: in a world it includes waiting for the slower process, which is
  what a step pays for it);
- `tower train` on Fashion-MNIST for --steps steps: examples/s as the trainer reports it (its step lines,
  the world's examples), the input pipeline included.

The 1-process row's all-reduce is fused with the update (`tower bench` marks it "+update"): the CPU's
towers share one state. usage: python tests/bench/bench_mpi.py [--build build] [--steps 2000] [--bench-steps 200] [--repeat 3]
"""
import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
SHAPES = (("1 process x 2 towers", 1, 2, None), ("2 processes x 1 tower (MPI)", 2, 1, "mpi"),
          ("2 processes x 1 tower (TCP)", 2, 1, "tcp"))


def env():
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, procs=1, world=None):
    """cmd's stdout (rank 0's in a world): one process, `mpirun -np procs`, or procs processes with
    torchrun's variables (MASTER_ADDR/PORT, WORLD_SIZE, RANK)."""
    cmd = [str(c) for c in cmd]
    if world == "mpi":
        cmd = [shutil.which("mpirun"), "-np", str(procs), "--oversubscribe", *cmd]
    if world != "tcp":
        procs = 1
    port = free_port()
    ranks = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(env(), **({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                                  "WORLD_SIZE": str(procs), "RANK": str(r)}
                                                 if world == "tcp" else {})))
             for r in range(procs)]
    outs = [p.communicate() for p in ranks]
    for p, (_, err) in zip(ranks, outs):
        if p.returncode:
            sys.exit(f"failed: {' '.join(cmd)}\n{err[-3000:]}")
    return outs[0][0]


def bench(tower, procs, towers, world, steps):
    """tower bench's row for the seed MLP: (examples/s, step us, all-reduce us)."""
    out = run([tower, "bench", "--json", "--backend", "cpu", "--config", ROOT / "examples" / "seed_mlp.json",
               "--towers", towers, "--steps", steps], procs, world)
    row = json.loads(out)["results"][0]
    assert row["towers"] == 2 and row["processes"] == procs, row
    return row["examples_per_s"], row["step_us_median"], row["allreduce_us"]


def train(tower, data, procs, towers, world, steps):
    """tower train's examples/s over the run (the mean of its step lines after the first 10%)."""
    cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    cfg.update(towers=towers, steps=steps, summary_every=50, eval_every=0, checkpoint_every=10**9)
    cfg["dataset"].update(train=str(data / "train.tfrecord"), test=None)
    path = data / f"{world}_{procs}x{towers}.json"
    path.write_text(json.dumps(cfg))
    logdir = data / f"run_{world}_{procs}x{towers}"
    shutil.rmtree(logdir, ignore_errors=True)
    lines = [json.loads(l) for l in run([tower, "train", path, "--logdir", logdir], procs, world).splitlines()]
    rates = [l["examples_per_sec"] for l in lines if "examples_per_sec" in l and l["step"] > steps // 10]
    return sum(rates) / len(rates)


def convert(tower, out):
    run([tower, "convert", "--images", FASHION / "train-images-idx3-ubyte.gz", "--labels",
         FASHION / "train-labels-idx1-ubyte.gz", "-o", out / "train.tfrecord"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--bench-steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tower = pathlib.Path(a.build).resolve() / "server" / "tower"
    if not shutil.which("mpirun"):
        sys.exit("mpirun not found: scripts/install-deps.sh installs openmpi-bin")
    best = {name: {} for name, *_ in SHAPES}
    with tempfile.TemporaryDirectory() as tmp:
        data = pathlib.Path(tmp)
        convert(tower, data)
        for _ in range(a.repeat):
            for name, procs, towers, world in SHAPES:
                eps, step_us, ar_us = bench(tower, procs, towers, world, a.bench_steps)
                b = best[name]
                if eps > b.get("bench_eps", 0):
                    b.update(bench_eps=eps, step_us=step_us, allreduce_us=ar_us)
                b["train_eps"] = max(b.get("train_eps", 0), train(tower, data, procs, towers, world, a.steps))
    print(f"seed MLP (784-500-10, batch 32 per tower), best of {a.repeat}; cores: {os.cpu_count()}")
    print(f"{'shape':30} {'bench ex/s':>11} {'step us':>9} {'all-reduce us':>14} {'train ex/s':>11}")
    for name, b in best.items():
        print(f"{name:30} {b['bench_eps']:11.0f} {b['step_us']:9.0f} {b['allreduce_us']:14.0f} "
              f"{b['train_eps']:11.0f}")


if __name__ == "__main__":
    main()
