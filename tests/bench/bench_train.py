"""Training-speed benchmark (not a test): Tower against TensorFlow on the same machine, per workload, per
OpenBLAS kernel, alternating Tower and TensorFlow round by round.

Workloads (--only NAME,... or --all; the names):
  mlp-1, mlp-2  the seed's MLP (examples/seed_mlp.json: 784-500-10 relu, SGD with decay, L2, EMA, batch 32
                per tower) with 1 and 2 towers: `tower train` on Fashion-MNIST train against the same graph
                in TensorFlow (tf_seed_train.py); Tower's figure is the median of its examples_per_sec
                reports (the first, warm-up, excluded). Also the fraction of the machine's sgemm throughput
                (the best of OpenBLAS and the CPU backend's GEMM, measured with tw_bench on the step's own
                GEMM shapes, the towers side by side with a share of the cores each or in turn with all of
                them, whichever is faster) that a step reaches.
  fashion-cnn   the Fashion CNN (examples/fashion_cnn.json, batch 100): `tower bench` of its step (1 and 2
                towers, synthetic data; Tower's figure is the better tower count) against the same model
                with the seeds' tf.data input (tf_fashion_cnn.py).
  fashion-resnet  examples/fashion_resnet.json (a small ResNet with batch norm, batch 128): `tower bench` of
                its step (1 and 2 towers, the better) against the same network in Keras, its step on one fixed
                batch (tf_fashion_resnet.py).
  cnn3d         the seed's 3-D CNN shape (examples/seed_cnn3d.json: 32^3 single-channel volumes, conv3d
                16 and 32 with max pools, dense 128, dropout 0.2, one output, MSE, Adam with staircase
                decay, no EMA, batch 16 per tower): `tower bench` (1 and 2 towers, the better) against
                tf_seed_cnn3d.py reading a synthetic, deterministic TFRecord of volumes that this script
                writes with `tower convert --npy-features` into its temp folder.

OpenBLAS kernels: the machine's preset OPENBLAS_CORETYPE (Haswell where none is set), then unset (with
OPENBLAS_L2_SIZE), in the benchmark's own child processes only; --native runs the unset kernel alone.
Within a kernel, each of --repeat rounds runs every workload once, Tower then TensorFlow. Peak RSS is each
child's own (wait4). One markdown table at the end: examples/s min-max over the rounds, the ratio Tower/TF
of each round (min-max), the highest peak RSS, and for the MLP the fraction of the sgemm bound.

Steps: each workload's default (mlp 3000, fashion-cnn 100, cnn3d 40, fashion-resnet 20) unless --steps, which
sets them all.
Without --all/--only/--cnn the MLP workloads run (the earlier default); --cnn is --only fashion-cnn.

usage: python tests/bench/bench_train.py --all [--build build] [--repeat 3] [--steps N] [--native]
       python tests/bench/bench_train.py --only mlp-1,cnn3d [--repeat 3] [--steps N]
       python tests/bench/bench_train.py [--steps 3000] [--repeat 3] [--native]   # mlp-1, mlp-2
       python tests/bench/bench_train.py --cnn [--steps 100] [--repeat 3]         # fashion-cnn
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
BATCH, IN, HIDDEN, OUT = 32, 784, 500, 10
# name: (kind, towers, default steps, data it reads)
WORKLOADS = {
    "mlp-1": ("mlp", 1, 3000, "fashion"),
    "mlp-2": ("mlp", 2, 3000, "fashion"),
    "fashion-cnn": ("cnn", None, 100, "fashion"),
    "cnn3d": ("cnn3d", None, 40, "volumes"),
    "fashion-resnet": ("resnet", None, 20, None),
}
VOLUMES = 512  # synthetic examples in cnn3d's TFRecord


def run(cmd, env):
    """(stdout, wall seconds) of one process; exits on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, env=env)
    if proc.returncode:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr.decode()}")
    return proc.stdout.decode(), time.perf_counter() - t0


def child(cmd, env):
    """(stdout, peak RSS in MiB) of one process, its own maximum resident set from wait4; exits on
    failure."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=err, env=env)
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, ru = os.wait4(proc.pid, 0)  # not proc.wait(): wait4 also gives the child's rusage
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{err.read().decode()}")
    return out.decode(), ru.ru_maxrss / 1024


def gemm_gflops(bench, shape, env):
    """tw_bench's measurement of one shape: (m, n, k, ta, tb) through OpenBLAS, or ("engine-gemm", m, n,
    k, ta, tb, threads) through the CPU backend's GEMM."""
    out, _ = run([bench, *([] if shape[0] == "engine-gemm" else ["gemm"]), *shape], env)
    return json.loads(out)


def sgemm_limit(bench, env, towers):
    """Examples/s if a step did nothing but its GEMMs at the best measured sgemm speed of each shape: the
    better of the towers side by side, each with its share of the cores (1 to cores/towers threads; small
    shapes are often faster on one), and the towers in turn, each with all the cores (the engine runs a
    model without convolutions that way). The best of OpenBLAS and the CPU backend's own GEMM (oneDNN's
    where the build has it, cut over the threads as the engine cuts it), so the bound stays a bound."""
    cores = os.cpu_count() or 1
    b = BATCH
    shapes = [  # (m, n, k, trans_a, trans_b) of one tower step
        (b, HIDDEN, IN, 0, 0), (b, OUT, HIDDEN, 0, 0),          # forward
        (HIDDEN, OUT, b, 1, 0), (b, HIDDEN, OUT, 0, 1),         # layer 2: dW, dx
        (IN, HIDDEN, b, 1, 0),                                  # layer 1: dW
    ]

    def step_seconds(share):
        seconds = 0.0
        for m, n, k, ta, tb in shapes:
            runs = [gemm_gflops(bench, (m, n, k, ta, tb), dict(env, OPENBLAS_NUM_THREADS=str(t)))
                    for t in sorted({1, share})]
            runs += [gemm_gflops(bench, ("engine-gemm", m, n, k, ta, tb, t), env) for t in sorted({1, share})]
            seconds += 2.0 * m * n * k / (max(g["gflops"] for g in runs) * 1e9)
        return seconds

    side_by_side = towers * b / step_seconds(max(1, cores // towers))
    in_turn = b / step_seconds(cores)
    return max(side_by_side, in_turn)


def openblas_core(bench, env):
    """The kernel OpenBLAS picks under env (tw_bench reports it with any GEMM)."""
    return gemm_gflops(bench, (8, 8, 8, 0, 0), dict(env, OPENBLAS_NUM_THREADS="1"))["openblas_core"]


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


class Bench:
    """The binaries, the data and the per-workload commands; each side returns (examples/s, peak MiB,
    detail)."""

    def __init__(self, a, env):
        build = pathlib.Path(a.build)
        self.tower, self.bench = build / "server" / "tower", build / "tests" / "tools" / "tw_bench"
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tw_bench_train_"))
        self.env = env
        self.towers = [1, 2] if (os.cpu_count() or 1) >= 2 else [1]
        self.runs = 0

    def fashion(self):
        self.train = self.tmp / "train.tfrecord"
        run([self.tower, "convert", "--images", FASHION / "train-images-idx3-ubyte.gz", "--labels",
             FASHION / "train-labels-idx1-ubyte.gz", "-o", self.train], self.env)

    def volumes(self):
        """A deterministic regression set shaped as examples/seed_cnn3d.json says: uint8 volumes, each
        with one bright cube whose side (int64, the seed's label type) is the target."""
        import numpy as np
        shape = json.loads((ROOT / "examples" / "seed_cnn3d.json").read_text())["dataset"]["shape"][:3]
        rng = np.random.default_rng(13)
        x = np.zeros((VOLUMES, *shape), np.uint8)
        y = rng.integers(2, min(shape) // 2 + 1, size=VOLUMES).astype(np.int64)
        for i, k in enumerate(y):
            o = [rng.integers(0, s - k + 1) for s in shape]
            x[i, o[0]:o[0] + k, o[1]:o[1] + k, o[2]:o[2] + k] = 255
        np.save(self.tmp / "volumes_x.npy", x)
        np.save(self.tmp / "volumes_y.npy", y)
        self.volume_set = self.tmp / "volumes.tfrecord"
        run([self.tower, "convert", "--npy-features", self.tmp / "volumes_x.npy", "--npy-labels",
             self.tmp / "volumes_y.npy", "-o", self.volume_set], self.env)

    def tower_mlp(self, towers, steps, env):
        seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
        seed["dataset"]["train"] = str(self.train)
        seed["dataset"].pop("test")
        seed.update(towers=towers, steps=steps, summary_every=max(1, steps // 6), eval_every=0,
                    checkpoint_every=steps)
        self.runs += 1
        cfg = self.tmp / f"seed{towers}.{self.runs}.json"
        cfg.write_text(json.dumps(seed))
        out, rss = child([self.tower, "train", cfg, "--logdir", self.tmp / f"run{self.runs}"], env)
        rates = [json.loads(l)["examples_per_sec"] for l in out.splitlines() if '"examples_per_sec"' in l]
        rates = sorted(rates[1:] or rates)  # the first report excluded (warm-up) where there are more
        return rates[len(rates) // 2], rss, ""

    def tower_bench(self, config, steps, env):
        cmd = [self.tower, "bench", "--config", ROOT / "examples" / config, "--backend", "cpu",
               *[a for t in self.towers for a in ("--towers", t)], "--steps", steps, "--warmup", 5, "--json"]
        out, rss = child(cmd, env)
        rates = {r["towers"]: r["examples_per_s"] for r in json.loads(out)["results"]}
        detail = " / ".join(f"{rates[t]:,.0f}" for t in self.towers)
        return max(rates.values()), rss, f"{'/'.join(map(str, self.towers))} towers: {detail}"

    def tf(self, script, args, env):
        out, rss = child([sys.executable, HERE / script, *args], env)
        return last_json(out)["examples_per_sec"], rss, ""

    def sides(self, name, steps, env):
        """(Tower's run, TensorFlow's run) of one workload: two callables, run in that order."""
        kind, towers, _, _ = WORKLOADS[name]
        if kind == "mlp":
            return (lambda: self.tower_mlp(towers, steps, env),
                    lambda: self.tf("tf_seed_train.py", [self.train, towers, steps], env))
        if kind == "cnn":
            return (lambda: self.tower_bench("fashion_cnn.json", steps, env),
                    lambda: self.tf("tf_fashion_cnn.py", [self.train, steps], env))
        if kind == "resnet":
            return (lambda: self.tower_bench("fashion_resnet.json", steps, env),
                    lambda: self.tf("tf_fashion_resnet.py", [steps], env))
        return (lambda: self.tower_bench("seed_cnn3d.json", steps, env),
                lambda: self.tf("tf_seed_cnn3d.py", [self.volume_set, steps], env))


def span(values, fmt):
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=None,
                    help="steps of every selected workload (default: mlp 3000, fashion-cnn 100, cnn3d 40)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per OpenBLAS kernel")
    ap.add_argument("--native", action="store_true", help="the unset OpenBLAS kernel only")
    ap.add_argument("--cnn", action="store_true", help="--only fashion-cnn")
    ap.add_argument("--all", action="store_true", help="every workload: " + ", ".join(WORKLOADS))
    ap.add_argument("--only", default=None, help="NAME,... of " + ", ".join(WORKLOADS))
    a = ap.parse_args()
    if a.all:
        names = list(WORKLOADS)
    elif a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        bad = [n for n in names if n not in WORKLOADS]
        if bad or not names:
            ap.error(f"--only: unknown workload {', '.join(bad) or '(none)'}; known: {', '.join(WORKLOADS)}")
    else:
        names = ["fashion-cnn"] if a.cnn else ["mlp-1", "mlp-2"]
    if a.cnn and "fashion-cnn" not in names:
        names.append("fashion-cnn")
    names = [n for n in WORKLOADS if n in names]  # the table's order
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    preset = env.get("OPENBLAS_CORETYPE") or "Haswell"  # these machines' preset
    unset = {k: v for k, v in env.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    kernels = ([] if a.native else [(preset, dict(env, OPENBLAS_CORETYPE=preset))]) + [("unset", unset)]

    b = Bench(a, env)
    try:
        report(a, b, names, kernels)
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)  # the converted data sets and the runs' logdirs


def report(a, b, names, kernels):
    """Every round of every workload under every kernel, then the summary table."""
    for data in sorted({WORKLOADS[n][3] for n in names} - {None}):
        getattr(b, data)()
    load = os.getloadavg()
    print(f"workloads {', '.join(names)}; {a.repeat} round(s) per kernel; {os.cpu_count()} CPUs; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start\n")
    print("| OpenBLAS kernel | round | workload | Tower ex/s | TensorFlow ex/s | ratio | Tower peak MiB | "
          "TF peak MiB | Tower detail |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |", flush=True)
    rows, labels, limits = {}, {}, {}
    for kname, kenv in kernels:
        core = openblas_core(b.bench, kenv)
        label = kname if core.lower() == kname.lower() else f"{kname} ({core})"
        labels[kname] = label
        for n in names:
            if WORKLOADS[n][0] == "mlp":
                limits[n, kname] = sgemm_limit(b.bench, kenv, WORKLOADS[n][1])
        for i in range(a.repeat):
            for n in names:
                steps = a.steps or WORKLOADS[n][2]
                ours_run, tf_run = b.sides(n, steps, kenv)
                ours, ours_rss, detail = ours_run()
                tf, tf_rss, _ = tf_run()
                rows.setdefault((n, kname), []).append((ours, tf, ours_rss, tf_rss))
                print(f"| {label} | {i + 1} | {n} | {ours:,.0f} | {tf:,.0f} | {ours / tf:.2f}x | "
                      f"{ours_rss:.0f} | {tf_rss:.0f} | {detail} |", flush=True)

    ex = lambda v: f"{v:,.0f}"  # noqa: E731
    print("\n| workload | OpenBLAS kernel | Tower ex/s | TensorFlow ex/s | ratio Tower/TF | Tower peak MiB | "
          "TF peak MiB | sgemm-bound ex/s | fraction of the bound |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in names:
        for kname, _ in kernels:
            r = rows[n, kname]  # (tower ex/s, TF ex/s, tower MiB, TF MiB) per round
            ours, tf = [x[0] for x in r], [x[1] for x in r]
            limit = limits.get((n, kname))
            bound = ((ex(limit), span([o / limit for o in ours], lambda v: f"{v:.0%}")) if limit
                     else ("–", "–"))
            ratio = span([o / t for o, t in zip(ours, tf)], lambda v: f"{v:.2f}x")
            print(f"| {n} | {labels[kname]} | {span(ours, ex)} | {span(tf, ex)} | {ratio} | "
                  f"{max(x[2] for x in r):.0f} | {max(x[3] for x in r):.0f} | {bound[0]} | {bound[1]} |")


if __name__ == "__main__":
    main()
