"""`tower train` started N times with torchrun's variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, or a
launcher's SLURM_PROCID/SLURM_NTASKS, JOB_COMPLETION_INDEX): one data-parallel run over the TCP world
(world/world_tcp.c), no mpirun and no MPI in the build needed (run it with TOWER_BUILD naming a -DTW_MPI=OFF
build too).

On loopback, each test starts real processes with the variables a launcher sets: two processes of one tower
train the seed MLP to exactly the losses of one process of two towers (rank 0 sums in rank order, as the CPU
backend sums its towers); the first line says "world":"tcp"; only rank 0 writes; SIGTERM to both stops at a
step both agreed on and the resumed run ends bit-exactly where an uninterrupted one does; SIGKILL of rank 1
ends rank 0 within seconds with exit 1 (retried by the server); a rank failing ends the world with its
status; a rank of another world size is refused (exit 2 naming it); a missing rank times out
(TOWER_RENDEZVOUS_TIMEOUT) naming it.

Run: TOWER_BUILD=build /opt/tower-venv/bin/python -m pytest -q tests/integration/test_world_tcp.py
"""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import helpers

from test_mpi import stop_config, tensors, write_config
from test_train import fashion, losses, mlp_config  # noqa: F401  (fashion is a fixture)

# Every variable that could make a process join some world; a test's environment starts without them.
WORLD_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "JOB_COMPLETION_INDEX",
              "TOWER_RENDEZVOUS_TIMEOUT")
WORLD_PREFIXES = ("OMPI_", "PMI", "SLURM_")
BOUND_S = 600
FINAL_EXITS = {2, 10, 11, 14}  # statuses the server never retries (engine/child.h)



def rank_env(port, rank, size, rank_var="RANK", size_var="WORLD_SIZE", **extra):
    env = {k: v for k, v in os.environ.items() if k not in WORLD_VARS and not k.startswith(WORLD_PREFIXES)}
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), rank_var: str(rank),
                size_var: str(size)}, **extra)
    return env


def start(tower_bin, config_path, logdir, env, *args, stdout=subprocess.PIPE):
    return subprocess.Popen([str(tower_bin), "train", str(config_path), "--logdir", str(logdir),
                             *map(str, args)], env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)


def start_world(tower_bin, config_path, logdir, *args, n=2, rank_var="RANK", size_var="WORLD_SIZE", **extra):
    port = helpers.free_port()
    return [start(tower_bin, config_path, logdir, rank_env(port, r, n, rank_var, size_var, **extra), *args)
            for r in range(n)]


def finish(procs):
    """[(rc, stdout, stderr)] of every rank, each within the bound."""
    out = []
    for p in procs:
        o, e = p.communicate(timeout=BOUND_S)
        out.append((p.returncode, o, e))
    return out


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def run_world(tower_bin, tmp_path, config, name, *args, **kw):
    """Trains config in a TCP world (2 processes unless n=...): (rank 0's lines, logdir, [rank results])."""
    logdir = tmp_path / name
    procs = start_world(tower_bin, write_config(tmp_path, name, config), logdir, *args, **kw)
    try:
        res = finish(procs)
    finally:
        kill_all(procs)
    for rank, (rc, _, err) in enumerate(res):
        assert rc == 0, f"rank {rank}: {err[-3000:]}"
    return json_lines(res[0][1]), logdir, res


def run_one(tower_bin, tmp_path, config, name, *args):
    logdir = tmp_path / name
    env = {k: v for k, v in os.environ.items() if k not in WORLD_VARS and not k.startswith(WORLD_PREFIXES)}
    res = subprocess.run([str(tower_bin), "train", write_config(tmp_path, name, config), "--logdir",
                          str(logdir), *map(str, args)], capture_output=True, text=True, timeout=BOUND_S, env=env)
    assert res.returncode == 0, res.stderr
    return json_lines(res.stdout), logdir


@pytest.fixture(scope="module")
def world_run(tower_bin, tmp_path_factory, fashion):  # noqa: F811
    """The seed MLP, 200 steps, two processes of one tower of 16: (rank 0's lines, logdir, results)."""
    tmp = tmp_path_factory.mktemp("tcpworld")
    return run_world(tower_bin, tmp, mlp_config(fashion, batch_size=16, towers=1, steps=200, eval_every=100),
                     "two_procs")


def test_two_processes_train_exactly_as_two_towers(world_run, tower_bin, tmp_path, fashion):  # noqa: F811
    lines, _, _ = world_run
    assert lines[0] == {"backend": "cpu", "devices": ["cpu"], "towers": 1, "processes": 2,
                        "total_towers": 2, "world": "tcp"}
    two, _ = run_one(tower_bin, tmp_path, mlp_config(fashion, batch_size=16, towers=2, steps=200,
                                                     eval_every=100), "two_towers")
    assert two[0]["processes"] == 1 and two[0]["world"] == "none"
    lw, l2 = losses(lines), losses(two)
    assert sorted(lw) == list(range(1, 201)) == sorted(l2)
    assert [lw[s] for s in lw] == [l2[s] for s in lw]  # the same sums in the same order: exactly equal
    assert lw[200] < lw[1]  # it learns
    evals = [l for l in lines if "eval_loss" in l]
    assert [e["step"] for e in evals] == [0, 100, 200]
    assert evals == [l for l in two if "eval_loss" in l]


def test_only_rank_0_writes(world_run):
    lines, logdir, res = world_run
    assert res[1][1] == ""  # rank 1 writes nothing on stdout
    assert sum("backend" in l for l in lines) == 1 and sum("status" in l for l in lines) == 1
    assert lines[-1]["status"] == "completed"
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    assert len(list((logdir / "eval_ema").glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in logdir.iterdir()) == ["checkpoints", "eval_ema", "evaluation.json",
                                                      next(logdir.glob("events.*")).name]
    assert [p.name for p in (logdir / "checkpoints").glob("*.safetensors")] == \
        ["ckpt-0000000200.safetensors"]


@pytest.mark.parametrize("rank_var,size_var", [("SLURM_PROCID", "SLURM_NTASKS"),
                                               ("JOB_COMPLETION_INDEX", "WORLD_SIZE")])
def test_the_rank_from_a_launchers_variables(tower_bin, tmp_path, fashion, rank_var, size_var):  # noqa: F811
    """srun without PMIx (SLURM_PROCID, SLURM_NTASKS) and a Kubernetes Indexed Job (JOB_COMPLETION_INDEX,
    WORLD_SIZE): the same world as RANK/WORLD_SIZE."""
    config = mlp_config(fashion, batch_size=16, towers=1, steps=30)
    lines, _, _ = run_world(tower_bin, tmp_path, config, "launched", rank_var=rank_var, size_var=size_var)
    assert lines[0]["world"] == "tcp" and lines[0]["processes"] == 2
    two, _ = run_one(tower_bin, tmp_path, mlp_config(fashion, batch_size=16, towers=2, steps=30), "two")
    lw, l2 = losses(lines), losses(two)
    assert sorted(lw) == list(range(1, 31)) and [lw[s] for s in lw] == [l2[s] for s in lw]


def test_a_stopped_world_resumes_bit_exactly(tower_bin, tmp_path, fashion):  # noqa: F811
    """SIGTERM to both ranks after step 100: they agree on a step, rank 0 checkpoints, both exit 0; the
    same config with k + 200 steps, resumed, ends where an uninterrupted world of k + 200 steps ends."""
    path, logdir = write_config(tmp_path, "split", stop_config(fashion, 10**8)), tmp_path / "split"
    procs = start_world(tower_bin, path, logdir)
    try:
        first = []
        for line in procs[0].stdout:  # the world is training: stop it
            first.append(json.loads(line))
            if first[-1].get("step", 0) >= 100 and "loss" in first[-1]:
                break
        for p in procs:
            p.send_signal(signal.SIGTERM)
        res = finish(procs)
    finally:
        kill_all(procs)
    first += json_lines(res[0][1])
    assert [r[0] for r in res] == [0, 0], res[0][2][-2000:] + res[1][2][-2000:]
    assert first[-1]["status"] == "cancelled", first[-3:]
    stopped = int((logdir / "checkpoints" / "latest").read_text().strip().rsplit("-", 1)[-1].split(".")[0])
    assert stopped >= 100
    end = stopped + 200
    whole, whole_dir, _ = run_world(tower_bin, tmp_path, stop_config(fashion, end), "whole")
    path.write_text(json.dumps(stop_config(fashion, end)))
    procs = start_world(tower_bin, path, logdir, "--resume")
    try:
        res = finish(procs)
    finally:
        kill_all(procs)
    assert [r[0] for r in res] == [0, 0], res[0][2][-2000:] + res[1][2][-2000:]
    second = json_lines(res[0][1])
    assert second[1]["step"] == stopped and second[1]["resumed_from"], second[:2]
    lw, l2 = losses(whole), losses(second)
    assert min(l2) > stopped and max(l2) == end
    full = [s for s in sorted(l2) if s - 10 >= stopped]  # reports whose 10 steps all ran after the resume
    assert len(full) >= 19 and [l2[s] for s in full] == [lw[s] for s in full]
    a, b = tensors(whole_dir, end), tensors(logdir, end)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 2  # one per attempt, rank 0's


def endless(fashion):  # noqa: F811
    return mlp_config(fashion, batch_size=16, steps=10_000_000, summary_every=10, eval_every=0,
                      checkpoint_every=100000)


def wait_for_step(path, step):
    end = time.monotonic() + BOUND_S
    while f'"step":{step},' not in path.read_text():
        assert time.monotonic() < end, f"no step {step} in {path}"
        time.sleep(0.1)


def test_sigkill_of_one_rank_ends_the_world(tower_bin, tmp_path, fashion):  # noqa: F811
    out = open(tmp_path / "stdout", "w+")  # a file, not a pipe: nobody reads while the world ends
    port = helpers.free_port()
    procs = [start(tower_bin, write_config(tmp_path, "killed", endless(fashion)), tmp_path / "killed",
                   rank_env(port, r, 2), stdout=out if r == 0 else subprocess.DEVNULL) for r in range(2)]
    try:
        wait_for_step(tmp_path / "stdout", 20)
        procs[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        kill_all(procs)
        out.close()
    assert took < 10, took  # promptly: the connection closed
    assert procs[0].returncode == 1, err[-2000:]  # TW_EXIT_FAILED: the server retries from the checkpoint
    assert "lost rank 1" in err, err[-2000:]
    assert json_lines((tmp_path / "stdout").read_text())[-1]["exit"] == 1


def test_a_failing_rank_ends_the_world_with_its_status(tower_bin, tmp_path, fashion):  # noqa: F811
    """Rank 1's config does not load (exit 2): it aborts the world, and rank 0 exits 2 too."""
    good = write_config(tmp_path, "good", endless(fashion))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    port = helpers.free_port()
    procs = [start(tower_bin, good if r == 0 else bad, tmp_path / "failing", rank_env(port, r, 2))
             for r in range(2)]
    try:
        res = finish(procs)
    finally:
        kill_all(procs)
    assert [r[0] for r in res] == [2, 2], res[0][2][-2000:] + res[1][2][-2000:]
    assert "rank 1 ended the world with exit status 2" in res[0][2], res[0][2][-2000:]


def test_a_rank_of_another_world_size_is_refused(tower_bin, tmp_path, fashion):  # noqa: F811
    path, logdir = write_config(tmp_path, "sizes", mlp_config(fashion)), tmp_path / "sizes"
    port = helpers.free_port()
    rank0 = start(tower_bin, path, logdir, rank_env(port, 0, 2, TOWER_RENDEZVOUS_TIMEOUT="5"))
    rank1 = start(tower_bin, path, logdir, rank_env(port, 1, 3, TOWER_RENDEZVOUS_TIMEOUT="30"))
    try:
        (rc1, _, err1), (rc0, _, err0) = finish([rank1, rank0])
    finally:
        kill_all([rank0, rank1])
    assert rc1 == 2, err1
    assert "refused RANK=1" in err1 and "its world has 2 processes, this rank's WORLD_SIZE=3" in err1, err1
    assert rc0 == 1 and "missing rank 1" in err0, err0  # rank 0 waits in vain for a rank 1 of its world
    assert not logdir.exists()  # nothing written


def test_a_missing_rank_times_out_naming_it(tower_bin, tmp_path, fashion):  # noqa: F811
    path, logdir = write_config(tmp_path, "missing", mlp_config(fashion)), tmp_path / "missing"
    port = helpers.free_port()
    procs = [start(tower_bin, path, logdir, rank_env(port, r, 3, TOWER_RENDEZVOUS_TIMEOUT=t))
             for r, t in ((0, "2"), (1, "60"))]
    began = time.monotonic()
    try:
        (rc0, _, err0), (rc1, _, err1) = finish(procs)
    finally:
        kill_all(procs)
    assert time.monotonic() - began < 30  # rank 1 ends when rank 0 gives up, long before its own 60 s
    assert rc0 == 1 and "timed out after 2s" in err0 and "missing rank 2" in err0, err0
    assert rc1 == 1 and "its rendezvous timed out with 2 of 3 ranks" in err1, err1  # retryable, as rank 0
    assert not logdir.exists()


@pytest.mark.parametrize("value", ["0", "86401", "10s"])
def test_a_bad_rendezvous_timeout_is_a_usage_error(tower_bin, tmp_path, fashion, value):  # noqa: F811
    res = subprocess.run([str(tower_bin), "train", str(write_config(tmp_path, "t", mlp_config(fashion))),
                          "--logdir", str(tmp_path / "t")], capture_output=True, text=True, timeout=60,
                         env=rank_env(helpers.free_port(), 0, 2, TOWER_RENDEZVOUS_TIMEOUT=value))
    assert res.returncode == 2 and "TOWER_RENDEZVOUS_TIMEOUT" in res.stderr, res.stderr
