"""Benchmark of `tower serve`, with a run training on the same machine:

  - wrk on GET /api/v1/runs/{id} and GET /api/v1/health: requests/s and p99 latency;
  - a raw upload body of --upload-mb MB (curl -T, streamed from a file): MB/s, and the server's peak resident memory
    while it streams (sampled from /proc every 20 ms) against its resident memory before;
  - the disk's own speed for the same bytes (dd ... conv=fdatasync), the "disk speed" the upload is held to.

Usage: python tests/bench/bench_server.py [--build build] [--seconds 10] [--connections 50] [--upload-mb 1024]
Prints one JSON object. The seed programs have no HTTP service, so there is no TensorFlow side here.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import FASHION, start_server  # noqa: E402


def wrk(url, seconds, connections):
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[p99.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests_per_s": rps, "p99_ms": round(float(p99.group(1)) * scale, 3),
            "non_2xx": int(errors.group(1)) if errors else 0}


def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(field)).split()[1])


def upload(server, path, size):
    peak = [rss_kb(server.proc.pid)]
    before = peak[0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb(server.proc.pid))
            time.sleep(0.02)
    t = threading.Thread(target=sample)
    t.start()
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                          "-X", "POST", "-T", str(path), "-H", "Content-Type: text/csv",
                          server.api("/datasets?name=big")], capture_output=True, text=True, check=True).stdout
    done.set()
    t.join()
    code, seconds = out.split()
    assert code == "202", out
    return {"http": int(code), "seconds": float(seconds), "MB_per_s": round(size / 1e6 / float(seconds), 1),
            "server_rss_before_MiB": round(before / 1024, 1), "server_rss_peak_MiB": round(peak[0] / 1024, 1)}


def disk_speed(folder, mb):
    path = folder / "dd.bin"
    t0 = time.monotonic()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}", "conv=fdatasync"],
                   capture_output=True, check=True)
    seconds = time.monotonic() - t0
    path.unlink()
    return {"seconds": round(seconds, 3), "MB_per_s": round(mb * 1.048576 / seconds, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--upload-mb", type=int, default=1024)
    a = ap.parse_args()
    tower = pathlib.Path(a.build) / "server" / "tower"
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp:
        tmp = pathlib.Path(tmp)
        server = start_server(tower, tmp / "data", "--max-upload", str((a.upload_mb + 1) << 20))
        try:
            files = {"images": "train-images-idx3-ubyte.gz", "labels": "train-labels-idx1-ubyte.gz",
                     "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}
            cmd = ["curl", "-sS"] + [x for k, v in files.items() for x in ("-F", f"{k}=@{FASHION / v}")]
            subprocess.run(cmd + [server.api("/datasets?name=fashion-mnist")], check=True, capture_output=True)
            while requests.get(server.api("/datasets"), timeout=10).json()["datasets"][0]["status"] == "converting":
                time.sleep(0.2)
            cfg = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
            cfg.update(dataset="fashion-mnist", steps=10**8, name="bench-load")
            run = requests.post(server.api("/runs"), json=cfg, timeout=30).json()
            while requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()["status"] != "running":
                time.sleep(0.2)
            result = {"machine": f"{os.cpu_count()} cores", "training": run["id"],
                      "get_run": wrk(server.api(f"/runs/{run['id']}"), a.seconds, a.connections),
                      "get_health": wrk(server.api("/health"), a.seconds, a.connections)}
            body = tmp / "body.csv"
            with open(body, "wb") as f:
                f.truncate(a.upload_mb << 20)  # sparse: reading it costs no disk time
            result["upload"] = upload(server, body, a.upload_mb << 20)
            body.unlink()
            result["disk_dd_fdatasync"] = disk_speed(tmp, a.upload_mb)
            requests.post(server.api(f"/runs/{run['id']}/cancel"), timeout=10)
        finally:
            server.proc.kill()
            server.proc.wait()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
