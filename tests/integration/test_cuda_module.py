"""The CUDA backend is a module (tower-cuda.so) that `tower` loads only when a run or a command asks for a
CUDA device (engine/backend_reg.c): `tower serve`, `tower convert` and CPU runs never map cudart, cuBLAS
or NCCL (read from /proc/PID/maps of the live processes), and a missing or broken module is named."""
import json
import os
import pathlib
import subprocess

import requests

from helpers import poll
from test_train import fashion, mlp_config  # noqa: F401 (fixture)

CUDA_LIBS = ("libcudart", "libcublas", "libnccl", "libcuda.so", "tower-cuda.so")


def mapped(pid):
    return {line.split()[-1] for line in open(f"/proc/{pid}/maps") if "/" in line}


def cuda_mapped(pid):
    return sorted(p for p in mapped(pid) if any(lib in p for lib in CUDA_LIBS))


def loaded(pid):
    """The process has finished dynamic linking (jansson is one of the libraries every `tower` needs)."""
    return any("libjansson" in p for p in mapped(pid))


def test_the_binary_links_no_cuda_library(tower_bin):
    ldd = subprocess.run(["ldd", str(tower_bin)], capture_output=True, text=True, check=True).stdout
    assert not [l for l in ldd.splitlines() if any(lib in l for lib in CUDA_LIBS)], ldd


def test_serve_maps_no_cuda_library(serve):
    server = serve()
    assert requests.get(server.api("/devices"), timeout=10).status_code == 200
    assert requests.get(server.url + "/", timeout=10).status_code == 200
    assert loaded(server.proc.pid)
    assert cuda_mapped(server.proc.pid) == []


def test_convert_maps_no_cuda_library(tower_bin, tmp_path):
    fifo = tmp_path / "images"
    os.mkfifo(fifo)  # convert blocks opening it: a live converter to look at
    labels = tmp_path / "labels"
    labels.write_bytes(b"")
    proc = subprocess.Popen([str(tower_bin), "convert", "--images", fifo, "--labels", labels,
                             "-o", tmp_path / "out.tfrecord"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        poll("the converter's libraries", lambda: loaded(proc.pid))
        assert cuda_mapped(proc.pid) == []
    finally:
        with open(fifo, "wb"):
            pass  # lets it go on (to an error about the empty input)
        proc.wait(timeout=60)


def test_cpu_training_maps_no_cuda_library(tower_bin, tmp_path, fashion):  # noqa: F811
    cfg = tmp_path / "long.json"
    cfg.write_text(json.dumps(mlp_config(fashion, steps=10**8, summary_every=20)))
    proc = subprocess.Popen([str(tower_bin), "train", cfg, "--logdir", tmp_path / "run", "--backend", "auto"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())  # written once the towers are set up
        assert first["backend"] == "cpu", first
        assert cuda_mapped(proc.pid) == []
    finally:
        proc.kill()
        proc.wait()


def module_of(tower_bin):
    path = pathlib.Path(tower_bin).parent / "tower-cuda.so"
    return path if path.exists() else None


def test_devices_names_a_missing_or_broken_module(run_tower, tmp_path, tower_bin):
    env = {**os.environ, "TOWER_CUDA_MODULE": str(tmp_path / "nowhere.so")}
    res = run_tower("devices", "--json", env=env)
    assert res.returncode == 0, res.stderr
    why = json.loads(res.stdout)["why_no_gpu"]
    assert "TOWER_CUDA_MODULE" in why and "nowhere.so" in why, why
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not an ELF file")
    res = run_tower("devices", "--json", env={**os.environ, "TOWER_CUDA_MODULE": str(broken)})
    why = json.loads(res.stdout)["why_no_gpu"]
    assert "cannot load" in why and "broken.so" in why, why
    res = run_tower("train", tmp_path / "none.json", "--logdir", tmp_path / "r", "--backend", "cuda", env=env)
    assert res.returncode != 0
    if module_of(tower_bin):  # a CUDA build: the module loads; without a GPU it says why there is none
        res = run_tower("devices", "--json")
        d = json.loads(res.stdout)
        assert d["gpus"] or "CUDA device" in d["why_no_gpu"] or "driver" in d["why_no_gpu"], d
