"""Benchmark of eventlog/ against the TensorFlow way, on this machine (not a test).

  1. Fashion-MNIST train (60k) IDX.gz -> TFRecord: `tower convert` vs the seed's Python loop over
     tf.io.TFRecordWriter (seed_convert.py).
  2. TFRecord read + Example parse of that file: `tw_bench read` vs tf.data.TFRecordDataset with
     parse_single_example (the seed's pipeline) and with batched parse_example (tf_read_parse.py).
  3. CRC32C throughput, SSE4.2 and portable (`tw_bench crc`).

Each measurement runs in its own process; wall time and peak RSS come from wait4(). The best of --repeat
runs is reported. Prints a Markdown table for BENCHMARKS.md and, with --json, the raw figures.

usage: python tests/bench/bench_eventlog.py [--build build] [--repeat 3] [--json]
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
IMAGES = FASHION / "train-images-idx3-ubyte.gz"
LABELS = FASHION / "train-labels-idx1-ubyte.gz"


def measure(cmd):
    """Runs cmd; returns (seconds, peak RSS MiB, stdout)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, rusage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{err.decode()}")
    return dt, rusage.ru_maxrss / 1024, out.decode()


def best(cmd, repeat):
    runs = [measure(cmd) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    tower = build / "server" / "tower"
    bench = build / "tests" / "tools" / "tw_bench"
    py = sys.executable
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tw_bench_"))
    ours_out, seed_out = tmp / "tower.tfrecord", tmp / "seed.tfrecord"
    mb_in = (IMAGES.stat().st_size + LABELS.stat().st_size) / 1e6

    r = {}
    r["convert_tower"] = best([tower, "convert", "--images", IMAGES, "--labels", LABELS,
                               "-o", ours_out], args.repeat)
    r["convert_seed"] = best([py, HERE / "seed_convert.py", IMAGES, LABELS, seed_out], args.repeat)
    seed_loop = json.loads(r["convert_seed"][2].strip().splitlines()[-1])["loop_seconds"]
    n = 60000
    mb_out = ours_out.stat().st_size / 1e6
    r["read_tower"] = best([bench, "read", ours_out], args.repeat)
    r["read_tf_single"] = best([py, HERE / "tf_read_parse.py", ours_out, "single"], args.repeat)
    r["read_tf_batched"] = best([py, HERE / "tf_read_parse.py", ours_out, "batched"], args.repeat)
    inner = {k: json.loads(r[k][2].strip().splitlines()[-1]) for k in
             ("read_tower", "read_tf_single", "read_tf_batched")}
    checks = {v["checksum"] for v in inner.values()}
    assert len(checks) == 1, f"readers disagree on the data: {inner}"
    crc = json.loads(measure([bench, "crc", "256"])[2])

    # (task, how, (wall s, peak RSS MiB, stdout), MB processed, the pipeline's own seconds)
    rows = [
        ("convert 60k IDX.gz -> TFRecord", "tower convert", r["convert_tower"], mb_in, None),
        ("", "seed: Python loop + tf.io.TFRecordWriter (whole process)", r["convert_seed"], mb_in,
         seed_loop),
        ("read + parse 60k Examples", "tower (tw_bench read)", r["read_tower"], mb_out,
         inner["read_tower"]["seconds"]),
        ("", "tf.data + parse_single_example (whole process)", r["read_tf_single"], mb_out,
         inner["read_tf_single"]["seconds"]),
        ("", "tf.data + batched parse_example (whole process)", r["read_tf_batched"], mb_out,
         inner["read_tf_batched"]["seconds"]),
    ]
    print("MB/s is of the input: the IDX.gz files for convert, the TFRecord for read. inner s: the "
          "timed loop alone, without process start and imports.\n")
    print("| task | how | wall s | records/s | MB/s | peak RSS MiB | inner s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for task, how, (dt, rss, _), mb, inner_s in rows:
        inner_txt = "" if inner_s is None else f"{inner_s:.3f}"
        print(f"| {task} | {how} | {dt:.3f} | {n / dt:,.0f} | {mb / dt:.1f} | {rss:.0f} | "
              f"{inner_txt} |")
    conv_x = r["convert_seed"][0] / r["convert_tower"][0]
    read_x = r["read_tf_single"][0] / r["read_tower"][0]
    read_xb = r["read_tf_batched"][0] / r["read_tower"][0]
    print()
    print(f"- conversion: tower is {conv_x:.1f}x the seed's way (whole process), "
          f"{seed_loop / r['convert_tower'][0]:.1f}x its loop alone (TF import excluded)")
    print(f"- read + parse: tower is {read_x:.1f}x tf.data + parse_single_example, "
          f"{read_xb:.1f}x batched parse_example (whole process)")
    print(f"- CRC32C over 256 MiB: SSE4.2 {crc['sse42_gb_per_s']} GB/s, portable "
          f"{crc['portable_gb_per_s']} GB/s (one core)")
    if args.json:
        print(json.dumps({"runs": {k: v[:2] for k, v in r.items()}, "inner": inner, "crc": crc}))


if __name__ == "__main__":
    main()
