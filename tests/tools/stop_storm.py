"""Stop storm (a reproduction tool, not a test): starts `tower train` again and again and stops each run
with a signal at a random moment after its first progress line, then checks that the stop went as
documented (engine/train_main.c): exit status 0, the stop's checkpoint written, nothing on stderr from
glibc's heap checks or a crash.

Written for the heap corruption a SIGTERM caused while the main thread was inside oneDNN's dnnl_sgemm
(docs/architecture.md, "Signals in `tower train`", says what was wrong and how the signals are taken now).

Modes (--mode, all by default, taken in turn):
  term   SIGTERM at a random moment while the run steps
  stop   SIGSTOP, SIGTERM, SIGCONT (what tests/integration/test_runs_control.py's cancel does: the
         signal waits while every thread is stopped and any thread may take it on SIGCONT)
  usr1   SIGUSR1 (what mpirun forwards to every rank)
  twice  SIGTERM, then a second SIGTERM and a SIGINT a few ms later, while the stop is under way

usage: python tests/tools/stop_storm.py [--build build] [--tries 40] [--mode term,stop,usr1,twice]
           [--model seed|big] [--towers 1] [--max-delay 1.5] [--env K=V ...] [--wrap 'valgrind ...']
The dataset is Fashion-MNIST converted once into a temporary folder (as tests/bench/bench_train.py does),
or --train FILE (a .tfrecord with its .meta.json).
Exit status 0 when every try stopped cleanly, 1 otherwise; each failure's stderr tail is printed."""
import argparse
import json
import os
import pathlib
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
BAD = ("corrupted", "double free", "free():", "malloc", "Segmentation", "Aborted", "AddressSanitizer",
       "Invalid write", "Invalid read", "stack smashing")


def config(a, tmp, train):
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    seed["dataset"]["train"] = str(train)
    seed["dataset"].pop("test")
    if a.model == "big":  # test_runs_control's cancelled run: two 1024-unit layers
        seed["model"]["layers"] = [{"type": "flatten"},
                                   {"type": "dense", "units": 1024, "activation": "relu"},
                                   {"type": "dense", "units": 1024, "activation": "relu"},
                                   {"type": "dense", "units": 10}]
    seed.update(steps=10_000_000, summary_every=20, eval_every=0, checkpoint_every=1_000_000,
                towers=a.towers)
    path = tmp / "storm.json"
    path.write_text(json.dumps(seed))
    return path


def one(a, tower, cfg, logdir, mode, env):
    cmd = shlex.split(a.wrap) + [str(tower), "train", str(cfg), "--logdir", str(logdir)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    for line in p.stdout:  # the first step's line: the run is stepping
        if b'"step"' in line and b'"loss"' in line:
            break
    time.sleep(random.uniform(0, a.max_delay))
    if mode == "stop":
        p.send_signal(signal.SIGSTOP)
        time.sleep(random.uniform(0, 0.05))
        p.send_signal(signal.SIGTERM)
        time.sleep(random.uniform(0, 0.05))
        p.send_signal(signal.SIGCONT)
    elif mode == "usr1":
        p.send_signal(signal.SIGUSR1)
    else:
        p.send_signal(signal.SIGTERM)
        if mode == "twice":
            time.sleep(random.uniform(0, 0.01))
            p.send_signal(signal.SIGTERM)
            p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=600)
    err = err.decode(errors="replace")
    ckpt = logdir / "checkpoints"
    saved = ckpt.is_dir() and any(f.name.endswith(".safetensors") for f in ckpt.iterdir())
    ok = p.returncode == 0 and saved and not any(b in err for b in BAD)
    return ok, p.returncode, saved, err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--tries", type=int, default=40)
    ap.add_argument("--mode", default="term,stop,usr1,twice")
    ap.add_argument("--model", choices=("seed", "big"), default="seed")
    ap.add_argument("--towers", type=int, default=1)
    ap.add_argument("--max-delay", type=float, default=1.5, help="seconds after the first step's line")
    ap.add_argument("--train", help="a converted .tfrecord (default: convert Fashion-MNIST)")
    ap.add_argument("--env", action="append", default=[], help="K=V for the trainer")
    ap.add_argument("--wrap", default="", help="a command line to run the trainer under")
    ap.add_argument("--seed", type=int)
    a = ap.parse_args()
    random.seed(a.seed)
    tower = pathlib.Path(a.build) / "server" / "tower"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tw_stop_storm_"))
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in a.env))
    train = a.train
    if not train:
        train = tmp / "train.tfrecord"
        subprocess.run([str(tower), "convert", "--images", str(FASHION / "train-images-idx3-ubyte.gz"),
                        "--labels", str(FASHION / "train-labels-idx1-ubyte.gz"), "-o", str(train)],
                       check=True, capture_output=True)
    cfg = config(a, tmp, train)
    modes = a.mode.split(",")
    failed = 0
    for i in range(a.tries):
        mode = modes[i % len(modes)]
        ok, rc, saved, err = one(a, tower, cfg, tmp / f"run{i}", mode, env)
        failed += not ok
        print(f"try {i + 1:3d} {mode:5s} exit {rc:4d} checkpoint {'yes' if saved else 'no '} "
              f"{'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            print("  " + "\n  ".join(err.strip().splitlines()[-8:]), flush=True)
    print(f"{failed} failed of {a.tries}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
