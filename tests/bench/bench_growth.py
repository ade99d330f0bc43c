"""Benchmark of the costs that grow with the work, each measured at three sizes, to see how they grow:

  convert       `tower convert` of synthetic IDX images (28x28 uint8): wall time and peak RSS
  startup       `tower convert --help`: the peak RSS of a `tower` process before any work
  health        GET /api/v1/health and GET /metrics (Prometheus): requests/s (wrk) at N runs in the store
  runs list     GET /api/v1/runs?limit=1000: the default keys, ?fields naming every key (config included:
                the same on a build before the default left configs out) and ?fields=id,name,status,step:
                requests/s, and the server's peak RSS after
  run metrics   GET /api/v1/runs/{id}/metrics of a run with N steps of event files (tw_eventgen: loss and
                eval/accuracy every step, a 1000-value histogram every 5th): the first request (reads every
                file), one after 1% more steps were appended, and one with nothing new (median of 20); the
                bytes read (tower_event_bytes_read_total)
  summaries     `tower train` of an MLP of N parameters: the extra wall time per step of a summary with
                histograms at every step (summary_every = histogram_every = 1) over none
  checkpoints   the same, a checkpoint at every step (checkpoint_every = 1) over none: the stall per checkpoint

Sizes (full / --quick): images 60k, 600k, 1.2M / 6k, 60k, 120k; runs 10, 1k, 10k / 10, 100, 1k; steps 1k,
10k, 50k / 1k, 5k, 10k; parameters 1M, 15M, 48M / 0.1M, 1M, 4M. Runs are inserted straight into the
server's SQLite file (copies of one finished run, the store's schema and triggers as the server made them).

Usage: python tests/bench/bench_growth.py [--build build] [--quick] [--seconds S] [--only ROW,ROW] [--json]
Prints a Markdown table (or one JSON object). Nothing here is an assertion: it is a benchmark.
"""
import argparse
import json
import os
import pathlib
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import start_server  # noqa: E402
from helpers import copy_run_rows  # noqa: E402

ROWS = ("convert", "startup", "health", "runs_list", "run_metrics", "summaries", "checkpoints")
FULL = {"images": (60_000, 600_000, 1_200_000), "runs": (10, 1_000, 10_000), "steps": (1_000, 10_000, 50_000),
        "params": (1_000_000, 15_000_000, 48_000_000)}
QUICK = {"images": (6_000, 60_000, 120_000), "runs": (10, 100, 1_000), "steps": (1_000, 5_000, 10_000),
         "params": (100_000, 1_000_000, 4_000_000)}
CSV = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(40))
MIB = 1 << 20
EVERY_FIELD = ("id,name,dataset,status,priority,reason,error,config,towers,steps,step,metrics,devices,eta_s,created,"
               "started,first_started,finished,restarts,max_restarts,deadline_s,not_before,folder,logdir,tensorboard,"
               "tensorboard_url,class_names,warnings")  # server/runs.h, TW_RUN_FIELDS


def timed(cmd, env=None):
    """(wall seconds, peak RSS MiB) of one process; raises when it fails. The peak comes from GNU time
    (its wait4()): a direct child of this Python would report at least this process's own RSS, which
    Linux counts in a forked child's maximum and keeps across exec."""
    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.monotonic()
        res = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *map(str, cmd)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
        wall = time.monotonic() - start
        if res.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited {res.returncode}: {res.stderr.decode(errors='replace')[-2000:]}")
        return wall, int(rss.read().split()[-1]) / 1024


def wrk(url, seconds, connections=8):
    """Requests/s by wrk; when no request finished within the time (a slow route), from 3 in a row."""
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "60s", url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    if re.search(r"\b0 requests in", out) or rps == 0:
        start = time.monotonic()
        for _ in range(3):
            requests.get(url, timeout=600).raise_for_status()
        rps = 3 / (time.monotonic() - start)
    return rps


def rss_mib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(field)).split()[1]) / 1024


def write_idx(folder, n, seed=0):
    """images (n, 28, 28) uint8 and labels in IDX files under folder, written in slices."""
    rng = np.random.default_rng(seed)
    images, labels = folder / f"images-{n}.idx", folder / f"labels-{n}.idx"
    with open(images, "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + np.array([n, 28, 28], ">u4").tobytes())
        for at in range(0, n, 50_000):
            f.write(rng.integers(0, 256, (min(50_000, n - at), 28, 28), dtype=np.uint8).tobytes())
    with open(labels, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + np.array([n], ">u4").tobytes())
        f.write(rng.integers(0, 10, n, dtype=np.uint8).tobytes())
    return images, labels


# ---- rows ----

def bench_convert(b, sizes, work):
    out = []
    for n in sizes["images"]:
        images, labels = write_idx(work, n)
        wall, rss = timed([b.tower, "convert", "--images", images, "--labels", labels, "-o", work / "out.tfrecord"])
        out.append({"size": f"{n:,} images", "wall_s": round(wall, 3), "peak_rss_mib": round(rss, 1)})
        for p in (images, labels, *work.glob("out.*")):
            p.unlink()
    return out


def bench_startup(b, sizes, work):
    _, rss = timed([b.tower, "convert", "--help"])
    return [{"size": "tower convert --help", "peak_rss_mib": round(rss, 1)}]


class Served:
    """A data folder with one finished run of the fake trainer, and a server over it when started."""

    def __init__(self, b, work):
        work.mkdir(parents=True, exist_ok=True)
        self.b, self.data, self.server = b, work / "data", None
        server = self.start()
        r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                          headers={"Content-Type": "text/csv"}, timeout=60)
        self.poll(f"/datasets/{r.json()['id']}", ("ready",))
        cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
        cfg.update(dataset="tab", steps=5, checkpoint_every=0)
        self.run = requests.post(server.api("/runs"), json=cfg, timeout=60).json()["id"]
        self.poll(f"/runs/{self.run}", ("succeeded",))
        self.stop()
        self.runs = 1

    def poll(self, path, states):
        end = time.monotonic() + 120
        while time.monotonic() < end:
            got = requests.get(self.server.api(path), timeout=10).json()
            if got["status"] in states:
                return got
            time.sleep(0.1)
        raise RuntimeError(f"{path} never reached {states}")

    def start(self):
        self.server = start_server(self.b.tower, self.data, "--trainer", self.b.faketrain,
                                   env={"TW_FAKE": "step_ms=1"})
        return self.server

    def stop(self):
        self.server.proc.send_signal(signal.SIGTERM)
        self.server.proc.wait(timeout=60)
        self.server = None

    def grow_to(self, n):
        """Copies of the finished run until the store holds n runs (the server stopped)."""
        (db,) = [p for p in self.data.glob("*.db")]
        copy_run_rows(db, self.run, n - self.runs)
        self.runs = n


def bench_server_rows(b, sizes, work, rows):
    served = Served(b, work)
    health, listing = [], []
    for n in sizes["runs"]:
        served.grow_to(n)
        server = served.start()
        if "health" in rows:
            health.append({"size": f"{n:,} runs",
                           "health_req_s": round(wrk(server.api("/health"), b.seconds)),
                           "metrics_req_s": round(wrk(server.url + "/metrics", b.seconds))})
        if "runs_list" in rows:
            default = wrk(server.api("/runs?limit=1000"), b.seconds, connections=2)
            every = wrk(server.api("/runs?limit=1000&fields=" + EVERY_FIELD), b.seconds, connections=2)
            few = wrk(server.api("/runs?limit=1000&fields=id,name,status,step"), b.seconds, connections=2)
            listing.append({"size": f"{n:,} runs", "list_req_s": round(default, 1),
                            "list_every_field_req_s": round(every, 1), "list_fields_req_s": round(few, 1),
                            "server_peak_rss_mib": round(rss_mib(server.proc.pid, "VmHWM"), 1)})
        served.stop()
    return health, listing


def bench_run_metrics(b, sizes, work):
    served = Served(b, work)
    out = []
    folder = next((served.data / "runs").glob(f"*{served.run[:7]}*"))
    for n in sizes["steps"]:
        for p in [*folder.glob("events.out.tfevents.*"), *folder.glob("eval_ema/events.out.tfevents.*")]:
            p.unlink()
        gen = work / "gen"
        gen.mkdir(exist_ok=True)
        made = pathlib.Path(subprocess.run([b.eventgen, gen, "--steps", str(n)], capture_output=True, text=True,
                                           check=True).stdout.strip())
        data = made.read_bytes()
        made.unlink()
        cut, at = len(data) * 99 // 100, 0
        while True:  # the last record boundary before 99% of the file
            size = int.from_bytes(data[at:at + 8], "little") + 16
            if at + size > cut:
                break
            at += size
        target = folder / "events.out.tfevents.0000000001.bench"
        target.write_bytes(data[:at])
        server = served.start()
        url = server.api(f"/runs/{served.run}/metrics")

        def get():
            start = time.monotonic()
            r = requests.get(url, timeout=600)
            r.raise_for_status()
            return (time.monotonic() - start) * 1000

        def bytes_read():
            text = requests.get(server.url + "/metrics", timeout=10).text
            m = re.search(r"^tower_event_bytes_read_total (\d+)$", text, re.M)
            return int(m.group(1)) if m else None

        first = get()
        with open(target, "ab") as f:
            f.write(data[at:])
        before = bytes_read()
        appended = get()
        after = bytes_read()
        unchanged = statistics.median(get() for _ in range(20))
        out.append({"size": f"{n:,} steps ({len(data) / MIB:.1f} MiB)", "first_ms": round(first, 1),
                    "after_append_ms": round(appended, 1), "unchanged_ms": round(unchanged, 1),
                    "append_bytes": len(data) - at,
                    "bytes_read_for_append": None if before is None else after - before})
        served.stop()
    return out


def train_dataset(b, work):
    images, labels = write_idx(work, 2048, seed=1)
    out = work / "train.tfrecord"
    timed([b.tower, "convert", "--images", images, "--labels", labels, "-o", out])
    return out


def train_seconds(b, work, tfrecord, hidden, steps, **over):
    cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    cfg["dataset"] = {k: v for k, v in cfg["dataset"].items() if k != "test"}
    cfg["dataset"].update(train=str(tfrecord), shuffle_buffer=256)
    cfg["model"]["layers"][1]["units"] = hidden
    cfg.update({"steps": steps, "summary_every": 10**6, "eval_every": 10**6, "checkpoint_every": 0,
                "keep_checkpoints": 1, **over})
    path = work / "bench.json"
    path.write_text(json.dumps(cfg))
    logdir = work / f"train-{secrets.token_hex(4)}"
    wall, _ = timed([b.tower, "train", path, "--logdir", logdir, "--backend", "cpu"])
    subprocess.run(["rm", "-rf", str(logdir)], check=True)
    return wall


def bench_train_rows(b, sizes, work, rows):
    """Each figure is the difference of two trainings' best-of-`repeat` wall times over `steps` steps: the
    process's start, the dataset's reading and the model's initialisation cancel out (noisy on a shared
    machine: a small difference can come out negative)."""
    tfrecord = train_dataset(b, work)
    steps, repeat = (12, 2) if b.quick else (10, 3)
    summaries, checkpoints = [], []

    def best(hidden, **over):
        return min(train_seconds(b, work, tfrecord, hidden, steps, **over) for _ in range(repeat))
    for params in sizes["params"]:
        hidden = max(1, params // (784 + 1 + 10))
        base = best(hidden)
        size = f"{hidden * 795 + 10:,} params"
        if "summaries" in rows:
            t = best(hidden, summary_every=1, histogram_every=1)
            scal = best(hidden, summary_every=1, histogram_every=10**6)
            summaries.append({"size": size, "step_ms": round(base / steps * 1000, 1),
                              "summary_with_histograms_ms": round((t - base) / steps * 1000, 1),
                              "summary_scalars_only_ms": round((scal - base) / steps * 1000, 1)})
        if "checkpoints" in rows:
            t = best(hidden, checkpoint_every=1)
            checkpoints.append({"size": size, "stall_per_checkpoint_ms": round((t - base) / steps * 1000, 1)})
    return summaries, checkpoints


def table(results):
    lines = ["| row | size | figures |", "| --- | --- | --- |"]
    for row, entries in results.items():
        for e in entries:
            figures = ", ".join(f"{k} {v}" for k, v in e.items() if k != "size")
            lines.append(f"| {row} | {e['size']} | {figures} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("TOWER_BUILD", str(ROOT / "build")))
    ap.add_argument("--quick", action="store_true", help="the smaller sizes, 1 s per wrk measurement")
    ap.add_argument("--seconds", type=int, help="seconds per wrk measurement (default 5, --quick 1)")
    ap.add_argument("--only", help="comma-separated rows: " + ",".join(ROWS))
    ap.add_argument("--json", action="store_true")
    b = ap.parse_args()
    build = pathlib.Path(b.build).resolve()
    b.tower, b.faketrain = build / "server" / "tower", build / "tests" / "tools" / "tw_faketrain"
    b.eventgen = build / "tests" / "tools" / "tw_eventgen"
    b.seconds = b.seconds or (1 if b.quick else 5)
    sizes = QUICK if b.quick else FULL
    rows = b.only.split(",") if b.only else list(ROWS)
    unknown = set(rows) - set(ROWS)
    if unknown:
        ap.error(f"unknown rows {sorted(unknown)}: choose from {','.join(ROWS)}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_growth.") as tmp:
        work = pathlib.Path(tmp)
        if "convert" in rows:
            results["convert"] = bench_convert(b, sizes, work)
        if "startup" in rows:
            results["startup"] = bench_startup(b, sizes, work)
        if "health" in rows or "runs_list" in rows:
            health, listing = bench_server_rows(b, sizes, work / "s", rows)
            if health:
                results["health"] = health
            if listing:
                results["runs_list"] = listing
        if "run_metrics" in rows:
            results["run_metrics"] = bench_run_metrics(b, sizes, work / "m")
        if "summaries" in rows or "checkpoints" in rows:
            (work / "t").mkdir()
            summaries, checkpoints = bench_train_rows(b, sizes, work / "t", rows)
            if summaries:
                results["summaries"] = summaries
            if checkpoints:
                results["checkpoints"] = checkpoints
    print(json.dumps(results, indent=1) if b.json else table(results))


if __name__ == "__main__":
    main()
