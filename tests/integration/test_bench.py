"""`tower bench` on the CPU: the JSON report's numbers are positive and agree with each other, the table
prints, the default configs are built into the binary, a config's model runs without its dataset, bad
options exit 2 naming the option, and `--backend cuda` without a GPU fails saying why."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

MLP_PARAMS = 784 * 500 + 500 + 500 * 10 + 10  # examples/seed_mlp.json's parameter arena


def bench_json(run_tower, *args, **kw):
    res = run_tower("bench", "--json", *args, **kw)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def check_row(r):
    """Positive times; examples/s = towers x batch / median step; the all-reduce as NCCL counts it."""
    assert 0 < r["step_us_median"] <= r["step_us_p90"]
    expected = r["towers"] * r["batch_size"] * 1e6 / r["step_us_median"]
    assert r["examples_per_s"] == pytest.approx(expected, rel=0.2)
    assert r["graphs"] == "off"  # the CPU backend has no CUDA Graphs
    assert r["allreduce_bytes"] > 0
    if r["towers"] == 1:
        assert r["allreduce_us"] == 0 and r["busbw_gb_s"] is None
        assert r["allreduce_with_update"] is False
    elif r["allreduce_with_update"]:  # the CPU's towers of one process: the update is in the time
        assert r["backend"] == "cpu" and r["processes"] == 1
        assert r["allreduce_us"] > 0 and r["busbw_gb_s"] is None
    else:
        n = r["towers"]
        algbw = r["allreduce_bytes"] / (r["allreduce_us"] * 1e-6) / 1e9
        assert r["allreduce_us"] > 0
        assert r["busbw_gb_s"] == pytest.approx(algbw * 2 * (n - 1) / n, rel=1e-3)


def test_defaults_on_the_cpu_report_consistent_numbers(run_tower):
    doc = bench_json(run_tower, "--backend", "cpu", "--steps", "20", cwd=ROOT)
    assert doc["backend"] == "cpu" and doc["steps"] == 20 and doc["warmup"] == 10
    counts = [1, 2] if (os.cpu_count() or 1) >= 2 else [1]
    got = [(r["model"], r["towers"], r["batch_size"]) for r in doc["results"]]
    assert got == [("seed_mlp", n, 32) for n in counts] + [("fashion_cnn", n, 100) for n in counts]
    for r in doc["results"]:
        assert r["backend"] == "cpu"
        assert r["allreduce_with_update"] == (r["towers"] > 1)  # one shared state, one fused pass
        check_row(r)
    # The step mode each chose (train_step.c's table): the MLP starts with a dense layer, so one tower
    # updates it inside the backward pass, and its towers run in turn; the CNN's towers keep a share each.
    modes = {(r["model"], r["towers"]): r["step_mode"] for r in doc["results"]}
    assert modes[("seed_mlp", 1)] == "fused" and modes[("fashion_cnn", 1)] == "shared", modes
    if 2 in counts:
        assert modes[("seed_mlp", 2)] == "in_turn" and modes[("fashion_cnn", 2)] == "shared", modes
    assert doc["results"][0]["allreduce_bytes"] == 4 * MLP_PARAMS


def test_default_configs_are_built_in(tower_bin, tmp_path):
    """A binary with no examples/ anywhere near it (the Docker image's /usr/local/bin/tower) still runs
    both default configs, from another folder."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "cwd").mkdir()
    tower = shutil.copy(tower_bin, tmp_path / "bin" / "tower")
    for d in (tmp_path / "bin", tmp_path / "cwd"):
        assert not any((p / "examples").exists() for p in (d, *d.parents)), d
    res = subprocess.run([tower, "bench", "--json", "--backend", "cpu", "--steps", "1", "--warmup", "0",
                          "--towers", "1"], capture_output=True, text=True, cwd=tmp_path / "cwd",
                         timeout=600)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    got = [(r["model"], r["batch_size"]) for r in doc["results"]]
    assert got == [("seed_mlp", 32), ("fashion_cnn", 100)]
    assert doc["results"][0]["allreduce_bytes"] == 4 * MLP_PARAMS


def test_table_prints(run_tower):
    res = run_tower("bench", "--backend", "cpu", "--config", ROOT / "examples/seed_mlp.json",
                    "--towers", "1", "--steps", "3", "--warmup", "1")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "3 timed steps after 1 warm-up" in lines[0]
    assert lines[2].split() == ["model", "towers", "batch", "step", "median", "step", "p90",
                                "examples/s", "all-reduce", "bus", "GB/s", "graphs"]
    row = lines[3].split()
    assert row[:3] == ["seed_mlp", "1", "32"] and row[-2:] == ["-", "off"]
    assert float(row[3]) > 0 and float(row[5]) > 0
    help_text = run_tower("bench", "--help")
    assert help_text.returncode == 0 and "--graphs G" in help_text.stdout
    on_cpu = bench_json(run_tower, "--backend", "cpu", "--config", ROOT / "examples/seed_mlp.json",
                        "--towers", "1", "--steps", "2", "--warmup", "1", "--graphs", "both")
    assert [r["graphs"] for r in on_cpu["results"]] == ["off"]  # no graphs on the CPU: one row


def test_regression_model_runs_without_its_dataset(run_tower, tmp_path):
    config = {"dataset": {"train": str(tmp_path / "absent.tfrecord"), "shape": [8, 8, 8, 1]},
              "model": {"layers": [
                  {"type": "conv3d", "filters": 8, "kernel": 3, "activation": "relu"},
                  {"type": "max_pool3d", "pool": 2},
                  {"type": "flatten"},
                  {"type": "dropout", "rate": 0.2},
                  {"type": "dense", "units": 1}]},
              "loss": "mean_squared_error", "optimizer": {"type": "adam", "learning_rate": 0.003},
              "batch_size": 16, "towers": 1, "steps": 600}
    path = tmp_path / "cnn3d.json"
    path.write_text(json.dumps(config))
    towers = ["--towers", "1"] + (["--towers", "2"] if (os.cpu_count() or 1) >= 2 else [])
    doc = bench_json(run_tower, "--backend", "cpu", "--config", path, *towers, "--steps", "5")
    assert [r["model"] for r in doc["results"]] == ["cnn3d"] * (len(towers) // 2)
    for r in doc["results"]:
        check_row(r)


def test_seed_cnn3d_example_runs(run_tower):
    """examples/seed_cnn3d.json (bench_train.py's cnn3d workload) builds and steps on the CPU."""
    doc = bench_json(run_tower, "--backend", "cpu", "--config", ROOT / "examples/seed_cnn3d.json",
                     "--towers", "1", "--steps", "2", "--warmup", "1")
    assert [(r["model"], r["batch_size"]) for r in doc["results"]] == [("seed_cnn3d", 16)]
    check_row(doc["results"][0])


@pytest.mark.parametrize("args,named", [
    (["--steps", "0"], "--steps"),
    (["--steps", "ten"], "--steps"),
    (["--warmup", "-1"], "--warmup"),
    (["--towers", "0"], "--towers"),
    (["--towers", "65"], "--towers"),
    (["--towers", str((os.cpu_count() or 1) + 1), "--backend", "cpu"], "--towers"),
    (["--backend", "gpu"], "--backend"),
    (["--graphs", "maybe"], "--graphs"),
    (["--bogus"], "--bogus"),
    (["--steps"], "--steps"),
    (["stray.json"], "stray.json"),
    (["--config", "/nonexistent/bench.json"], "/nonexistent/bench.json"),
])
def test_bad_options_exit_2_naming_the_option(run_tower, args, named):
    res = run_tower("bench", *args)
    assert res.returncode == 2, res.stderr
    assert named in res.stderr.splitlines()[0]
    assert res.stdout == ""


def test_bad_config_key_exit_2_naming_it(run_tower, tmp_path):
    config = json.loads((ROOT / "examples/seed_mlp.json").read_text())
    config["batch_sise"] = 8
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(config))
    res = run_tower("bench", "--backend", "cpu", "--config", path)
    assert res.returncode == 2 and "batch_sise" in res.stderr


def test_cuda_backend_without_a_gpu_says_why(run_tower):
    res = run_tower("bench", "--backend", "cuda", "--steps", "2", "--warmup", "0", "--json",
                    "--config", ROOT / "examples/seed_mlp.json")
    if res.returncode == 0:  # a machine with a GPU: the report is the CUDA backend's
        assert all(r["backend"] == "cuda" for r in json.loads(res.stdout)["results"])
        return
    assert "no CUDA device" in res.stderr or "no CUDA backend" in res.stderr, res.stderr
    assert res.stdout == ""


def environ_of(pid):
    """The environment process pid was executed with ({} once it has exited)."""
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return {}
    return dict(v.split("=", 1) for v in raw.decode().split("\0") if "=" in v)


WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")


@pytest.mark.parametrize("given, want", [
    ({}, {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4"}),
    ({"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "active", "OPENBLAS_THREAD_TIMEOUT": "4"}),
    ({"GOMP_SPINCOUNT": "1000"}, {"OMP_WAIT_POLICY": None, "OPENBLAS_THREAD_TIMEOUT": "4"}),
    ({"OPENBLAS_THREAD_TIMEOUT": "28"}, {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "28"}),
])
def test_cpu_commands_park_idle_library_threads_unless_set(tower_bin, given, want):
    """libgomp (oneDNN's OpenMP) and OpenBLAS read their idle-thread settings once, as they load:
    `tower bench` (as train, evaluate, predict) re-executes itself, same pid, with
    OMP_WAIT_POLICY=passive (unless it or GOMP_SPINCOUNT is set) and OPENBLAS_THREAD_TIMEOUT=4 (unless
    set), so that one library's idle threads sleep instead of spinning on the cores the other needs; a
    value the user set stays. Polls the process's environment until it shows the wanted values; a
    value the user set must show in every read."""
    env = {k: v for k, v in os.environ.items() if k not in WAIT_VARS}
    p = subprocess.Popen([str(tower_bin), "bench", "--backend", "cpu", "--config",
                          str(ROOT / "examples/seed_mlp.json"), "--towers", "1", "--steps", "300",
                          "--warmup", "0"], env={**env, **given}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    seen = []
    try:
        while p.poll() is None:
            e = environ_of(p.pid)
            if e:
                seen.append({k: e.get(k) for k in want})
            if seen and seen[-1] == want:
                break
    finally:
        p.kill()
        p.wait()
    assert seen and seen[-1] == want
    for k, v in given.items():
        assert all(s.get(k, v) == v for s in seen)
