"""Training-speed benchmark (not a test): examples/s of the seed's MLP (examples/seed_mlp.json: 784-500-10
relu, SGD with decay, L2, EMA, batch 32 per tower) with 1 and 2 towers, `tower train` side by side with the
same graph in TensorFlow (tf_seed_train.py) on the same data and machine; the fraction of the machine's
sgemm throughput (the best of OpenBLAS and the CPU backend's GEMM), measured on the step's own GEMM shapes,
that a tower step reaches; peak memory.

These machines preset OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) to an older kernel; --native unsets both
for the benchmark's own commands (never in tests or CI). The OpenBLAS core in use is printed.

Each side runs --repeat times; the best run is reported (this VM's timings are noisy).

--cnn instead compares the Fashion CNN (examples/fashion_cnn.json, batch 100): `tower bench` of its step
(1 and 2 towers, synthetic data) against the same model in TensorFlow with the seeds' tf.data input
(tf_fashion_cnn.py), alternating Tower and TensorFlow, --repeat rounds, under both OpenBLAS kernels (the
machine's preset OPENBLAS_CORETYPE, Haswell where none is set, then unset); examples/s, the ratio (Tower's
better tower count over TensorFlow) and peak RSS per round.

usage: python tests/bench/bench_train.py [--build build] [--steps 3000] [--repeat 3] [--native]
       python tests/bench/bench_train.py --cnn [--build build] [--steps 100] [--repeat 3]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
BATCH, IN, HIDDEN, OUT = 32, 784, 500, 10


def run(cmd, env):
    """(stdout, wall seconds) of one process; exits on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, env=env)
    if proc.returncode:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr.decode()}")
    return proc.stdout.decode(), time.perf_counter() - t0


def peak_rss(cmd, env):
    """Runs cmd again under wait4 to read its peak RSS (MiB)."""
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    _, _, ru = os.wait4(proc.pid, 0)
    return ru.ru_maxrss / 1024


def gemm_gflops(bench, shape, env):
    """tw_bench's measurement of one shape: (m, n, k, ta, tb) through OpenBLAS, or ("engine-gemm", m, n,
    k, ta, tb, threads) through the CPU backend's GEMM."""
    out, _ = run([bench, *([] if shape[0] == "engine-gemm" else ["gemm"]), *shape], env)
    return json.loads(out)


def sgemm_limit(bench, env, towers):
    """Examples/s if a step did nothing but its GEMMs at the best measured sgemm speed of each shape,
    with each tower's share of the cores (1 to cores/towers threads; small shapes are often faster on
    one) and the towers' GEMMs running side by side. The best of OpenBLAS and the CPU backend's own GEMM
    (oneDNN's where the build has it, which beats OpenBLAS's preset kernel), so the bound stays a bound."""
    share = max(1, (os.cpu_count() or 1) // towers)
    b = BATCH
    shapes = [  # (m, n, k, trans_a, trans_b) of one tower step
        (b, HIDDEN, IN, 0, 0), (b, OUT, HIDDEN, 0, 0),          # forward
        (HIDDEN, OUT, b, 1, 0), (b, HIDDEN, OUT, 0, 1),         # layer 2: dW, dx
        (IN, HIDDEN, b, 1, 0),                                  # layer 1: dW
    ]
    seconds, core = 0.0, ""
    for m, n, k, ta, tb in shapes:
        runs = [gemm_gflops(bench, (m, n, k, ta, tb), dict(env, OPENBLAS_NUM_THREADS=str(t)))
                for t in sorted({1, share})]
        runs += [gemm_gflops(bench, ("engine-gemm", m, n, k, ta, tb, t), env)
                 for t in sorted({1, share})]
        seconds += 2.0 * m * n * k / (max(g["gflops"] for g in runs) * 1e9)
        core = runs[0]["openblas_core"]  # runs[0]: OpenBLAS's, on one thread
    return towers * b / seconds, core


def tower_rate(tower, cfg, logdir, env):
    out, _ = run([tower, "train", cfg, "--logdir", logdir], env)
    rates = [json.loads(l)["examples_per_sec"] for l in out.splitlines()
             if '"examples_per_sec"' in l]
    return sorted(rates[1:])[len(rates[1:]) // 2]  # median, the first report excluded (warm-up)


def tower_cnn(tower, steps, env):
    """{towers: examples/s} of `tower bench` on the Fashion CNN, and its peak RSS (MiB)."""
    cmd = [tower, "bench", "--config", ROOT / "examples" / "fashion_cnn.json", "--backend", "cpu",
           "--towers", "1", "--towers", "2", "--steps", steps, "--warmup", 5, "--json"]
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    if status:
        sys.exit(f"failed: {' '.join(map(str, cmd))}")
    rates = {r["towers"]: r["examples_per_s"] for r in json.loads(out)["results"]}
    return rates, ru.ru_maxrss / 1024


def cnn_main(a, env, tower, train):
    """The Fashion CNN, Tower and TensorFlow alternately, per OpenBLAS kernel and round."""
    preset = env.get("OPENBLAS_CORETYPE") or "Haswell"  # these machines' preset
    unset = {k: v for k, v in env.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    kernels = [(preset, dict(env, OPENBLAS_CORETYPE=preset)), ("unset", unset)]
    print("| OpenBLAS kernel | round | tower 1 ex/s | tower 2 ex/s | TensorFlow ex/s | ratio (best) | "
          "tower peak MiB | TF peak MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, kenv in kernels:
        for i in range(a.repeat):
            ours, rss = tower_cnn(tower, a.steps, kenv)
            tf = json.loads(run([sys.executable, HERE / "tf_fashion_cnn.py", train, a.steps], kenv)[0]
                            .strip().splitlines()[-1])
            best = max(ours.values())
            print(f"| {name} | {i + 1} | {ours[1]:,.0f} | {ours[2]:,.0f} | "
                  f"{tf['examples_per_sec']:,.0f} | {best / tf['examples_per_sec']:.2f}x | {rss:.0f} | "
                  f"{tf['peak_rss_mib']:.0f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=None, help="3000 (MLP) or 100 (--cnn)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--native", action="store_true")
    ap.add_argument("--cnn", action="store_true")
    a = ap.parse_args()
    a.steps = a.steps or (100 if a.cnn else 3000)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if a.native:
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    build = pathlib.Path(a.build)
    tower, bench = build / "server" / "tower", build / "tests" / "tools" / "tw_bench"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tw_bench_train_"))
    train = tmp / "train.tfrecord"
    run([tower, "convert", "--images", FASHION / "train-images-idx3-ubyte.gz", "--labels",
         FASHION / "train-labels-idx1-ubyte.gz", "-o", train], env)
    if a.cnn:
        return cnn_main(a, env, tower, train)
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    seed["dataset"]["train"] = str(train)
    seed["dataset"].pop("test")
    seed.update(steps=a.steps, summary_every=a.steps // 6, eval_every=0, checkpoint_every=a.steps)
    rows = []
    for towers in (1, 2):
        seed["towers"] = towers
        cfg = tmp / f"seed{towers}.json"
        cfg.write_text(json.dumps(seed))
        ours = max(tower_rate(tower, cfg, tmp / f"run{towers}.{i}", env) for i in range(a.repeat))
        ours_rss = peak_rss([tower, "train", cfg, "--logdir", tmp / f"rss{towers}"], env)
        tf_cmd = [sys.executable, HERE / "tf_seed_train.py", train, towers, a.steps]
        tf = max((json.loads(run(tf_cmd, env)[0].strip().splitlines()[-1]) for _ in range(a.repeat)),
                 key=lambda r: r["examples_per_sec"])
        limit, core = sgemm_limit(bench, env, towers)
        rows.append((towers, ours, ours_rss, tf["examples_per_sec"], tf["peak_rss_mib"], limit))
    print(f"OpenBLAS core: {core}; OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(unset)')}\n")
    print("| towers | tower ex/s | TensorFlow ex/s | speed-up | sgemm-bound ex/s | fraction | "
          "tower peak MiB | TF peak MiB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for towers, ours, rss, tf, tf_rss, limit in rows:
        print(f"| {towers} | {ours:,.0f} | {tf:,.0f} | {ours / tf:.1f}x | {limit:,.0f} | "
              f"{ours / limit:.0%} | {rss:.0f} | {tf_rss:.0f} |")


if __name__ == "__main__":
    main()
