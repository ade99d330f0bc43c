"""`tower train` under `mpirun -np 2` (Open MPI, world/world.h): one data-parallel run across processes.

Against the real launcher (Open MPI's mpirun, --oversubscribe on this small machine) and stock TensorBoard:
two processes of one tower train the seed MLP to the losses of one process of two towers (exactly: the same
sums in the same order) and of one tower with twice the batch; only rank 0 writes (one events file per
sub-run, one set of lines on stdout); a stop (SIGUSR1, which mpirun forwards to every rank, or SIGTERM to
mpirun, which sends it on and SIGKILLs the ranks odls_base_sigkill_timeout seconds later) checkpoints at a
step boundary every rank agreed on, and the resumed run ends bit-exactly where an uninterrupted one does
(losses and the final safetensors); SIGKILL of one
rank ends the other and mpirun promptly with a status the server retries. Skipped, saying why, only when the
build has no MPI (TW_HAVE_MPI in the build's CMakeCache.txt) or mpirun is missing; the configure test at
the end runs in every build: without MPI the build goes on (world.c refuses mpirun's ranks; the TCP world of
torchrun's variables, tests/integration/test_world_tcp.py, needs no MPI).

Run: TOWER_BUILD=build /opt/tower-venv/bin/python -m pytest -q tests/integration/test_mpi.py
"""
import json
import os
import shutil
import signal
import subprocess

import numpy as np
import pytest
import requests

import helpers
from conftest import BUILD, ROOT
from test_train import fashion, losses, mlp_config  # noqa: F401  (fashion is a fixture)

MPIRUN = shutil.which("mpirun")
HAVE_MPI = "TW_HAVE_MPI:INTERNAL=ON" in (BUILD / "CMakeCache.txt").read_text() \
    if (BUILD / "CMakeCache.txt").exists() else False
needs_mpi = pytest.mark.skipif(not (HAVE_MPI and MPIRUN),
                               reason="this build has no MPI (configure found no libopenmpi-dev, or "
                                      "-DTW_MPI=OFF)" if not HAVE_MPI else "mpirun is not installed")
# Statuses the server never retries (engine/child.h: bad config, diverged, out of memory, bad data).
FINAL_EXITS = {2, 10, 11, 14}


def mpi_env():
    """The environment for mpirun: root allowed (CI runs as root), more ranks than cores allowed, and no
    cross-memory attach between ranks (containers without CAP_SYS_PTRACE refuse process_vm_readv, which
    Open MPI's shared-memory transport would otherwise use for large messages)."""
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def mpi_cmd(tower_bin, n, config_path, logdir, *args):
    return [MPIRUN, "-np", str(n), "--oversubscribe", str(tower_bin), "train", str(config_path),
            "--logdir", str(logdir), *map(str, args)]


def write_config(tmp_path, name, config):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def run_world(tower_bin, tmp_path, config, name, *args, n=2):
    """Runs `mpirun -np n tower train`; returns (JSON lines of stdout, logdir, stderr)."""
    logdir = tmp_path / name
    res = subprocess.run(mpi_cmd(tower_bin, n, write_config(tmp_path, name, config), logdir, *args),
                         capture_output=True, text=True, timeout=600, env=mpi_env())
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    return [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")], logdir, res.stderr


def run_one(tower_bin, tmp_path, config, name, *args):
    logdir = tmp_path / name
    res = subprocess.run([str(tower_bin), "train", write_config(tmp_path, name, config), "--logdir",
                          str(logdir), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return [json.loads(l) for l in res.stdout.splitlines()], logdir


@pytest.fixture(scope="module")
def world_run(tower_bin, tmp_path_factory, fashion):  # noqa: F811
    """The seed MLP, 200 steps, two processes of one tower of 16: (lines, logdir, stderr)."""
    tmp = tmp_path_factory.mktemp("world")
    return run_world(tower_bin, tmp, mlp_config(fashion, batch_size=16, towers=1, steps=200,
                                                eval_every=100), "two_procs")


@needs_mpi
def test_two_processes_train_as_two_towers_and_as_twice_the_batch(world_run, tower_bin, tmp_path,
                                                                  fashion):  # noqa: F811
    lines, _, _ = world_run
    assert lines[0] == {"backend": "cpu", "devices": ["cpu"], "towers": 1, "processes": 2,
                        "total_towers": 2, "world": "mpi"}
    two, _ = run_one(tower_bin, tmp_path, mlp_config(fashion, batch_size=16, towers=2, steps=200,
                                                     eval_every=100), "two_towers")
    assert two[0]["processes"] == 1 and two[0]["world"] == "none"
    one, _ = run_one(tower_bin, tmp_path, mlp_config(fashion, batch_size=32, steps=200, eval_every=100),
                     "one_of_32")
    lw, l2, l1 = losses(lines), losses(two), losses(one)
    assert sorted(lw) == list(range(1, 201)) == sorted(l2) == sorted(l1)
    assert [lw[s] for s in lw] == [l2[s] for s in lw]  # the same sums in the same order
    np.testing.assert_allclose([lw[s] for s in l1], [l1[s] for s in l1], rtol=2e-4)
    assert lw[200] < lw[1]  # it learns
    evals = [l for l in lines if "eval_loss" in l]
    assert [e["step"] for e in evals] == [0, 100, 200]  # the evaluation: rank 0's pass over the test set
    assert evals == [l for l in two if "eval_loss" in l]


@needs_mpi
def test_two_processes_of_two_towers_train_as_four_towers(tower_bin, tmp_path, fashion):  # noqa: F811
    """Local tower 1 of rank 1 is global tower 3: it gets rows [48, 64) of the world's batch of 64."""
    lines, _, _ = run_world(tower_bin, tmp_path, mlp_config(fashion, batch_size=16, towers=2, steps=100),
                            "two_by_two")
    assert lines[0]["towers"] == 2 and lines[0]["processes"] == 2 and lines[0]["total_towers"] == 4
    four, _ = run_one(tower_bin, tmp_path, mlp_config(fashion, batch_size=16, towers=4, steps=100), "four")
    lw, l4 = losses(lines), losses(four)
    assert sorted(lw) == list(range(1, 101)) == sorted(l4)
    # the mean of two means of two against the mean of four: the same to rounding
    np.testing.assert_allclose([lw[s] for s in l4], [l4[s] for s in l4], rtol=2e-4)


@needs_mpi
def test_only_rank_0_writes(world_run):
    lines, logdir, _ = world_run
    assert sum("backend" in l for l in lines) == 1 and sum("status" in l for l in lines) == 1
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    assert len(list((logdir / "eval_ema").glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in logdir.iterdir()) == ["checkpoints", "eval_ema", "evaluation.json",
                                                      next(logdir.glob("events.*")).name]
    assert [p.name for p in (logdir / "checkpoints").glob("*.safetensors")] == \
        ["ckpt-0000000200.safetensors"]


@needs_mpi
def test_tensorboard_reads_the_world_run(world_run, tmp_path):
    lines, logdir, _ = world_run
    want = losses(lines)
    with helpers.tensorboard(logdir, tmp_path) as (base, _):
        def scalars():
            r = requests.get(f"{base}/data/plugin/scalars/scalars",
                             params={"run": ".", "tag": "train/loss"}, timeout=10)
            rows = r.json() if r.status_code == 200 else []
            return rows if len(rows) == 200 else None
        rows = helpers.poll("TensorBoard's train/loss of the world run", scalars)
    assert [r[1] for r in rows] == list(range(1, 201))
    np.testing.assert_allclose([r[2] for r in rows], [want[s] for s in range(1, 201)], rtol=1e-6)


def stop_config(fashion, steps):  # noqa: F811
    return mlp_config(fashion, batch_size=16, steps=steps, summary_every=10, eval_every=0,
                      checkpoint_every=100000, optimizer={"type": "adam", "learning_rate": 0.001})


def tensors(logdir, step):
    from safetensors.numpy import load_file
    return load_file(str(logdir / "checkpoints" / f"ckpt-{step:010d}.safetensors"))


# SIGTERM to mpirun: it sends SIGTERM on to each rank and SIGKILLs it --mca odls_base_sigkill_timeout
# seconds later (default 1, too short for a checkpoint on a loaded machine).
STOPS = {"SIGUSR1": [], "SIGTERM": ["--mca", "odls_base_sigkill_timeout", "5"]}


@needs_mpi
@pytest.mark.parametrize("sig", sorted(STOPS))
def test_a_stopped_world_resumes_bit_exactly(tower_bin, tmp_path, fashion, sig):  # noqa: F811
    """A world that never ends by itself is stopped after step 100; the same config with k + 200 steps
    (k: the stop's checkpoint), resumed, ends where an uninterrupted run of k + 200 steps ends."""
    path, logdir = write_config(tmp_path, "split", stop_config(fashion, 10**8)), tmp_path / "split"
    proc = subprocess.Popen([MPIRUN, *STOPS[sig], *mpi_cmd(tower_bin, 2, path, logdir)[1:]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    first = []
    for line in proc.stdout:  # the world is training: stop it
        first.append(json.loads(line))
        if first[-1].get("step", 0) >= 100 and "loss" in first[-1]:
            break
    proc.send_signal(getattr(signal, sig))
    first += [json.loads(l) for l in proc.stdout.read().splitlines()]  # the reader's buffer, then the rest
    err = proc.stderr.read()
    proc.wait(timeout=120)
    if sig == "SIGUSR1":  # forwarded to every rank: they agree, rank 0 checkpoints, all exit 0
        assert proc.returncode == 0, err[-3000:]
        assert first[-1]["status"] == "cancelled", first[-3:]
    # SIGTERM: the ranks stop the same way, but mpirun exits 1 itself (it killed its job) and its last
    # forwarded lines may be lost: the checkpoint is what counts
    assert (logdir / "checkpoints" / "latest").exists(), err[-3000:]
    stopped = int((logdir / "checkpoints" / "latest").read_text().strip().rsplit("-", 1)[-1].split(".")[0])
    assert stopped >= 100
    end = stopped + 200
    whole, whole_dir, _ = run_world(tower_bin, tmp_path, stop_config(fashion, end), "whole")
    path.write_text(json.dumps(stop_config(fashion, end)))
    res = subprocess.run(mpi_cmd(tower_bin, 2, path, logdir, "--resume"), capture_output=True,
                         text=True, timeout=600, env=mpi_env())
    assert res.returncode == 0, res.stderr[-3000:]
    second = [json.loads(l) for l in res.stdout.splitlines()]
    assert second[1]["step"] == stopped and second[1]["resumed_from"], second[:2]
    lw, l2 = losses(whole), losses(second)
    assert min(l2) > stopped and max(l2) == end
    # exactly equal, from the first report whose 10 steps all ran after the resume (a step line's loss is
    # the mean since the previous line)
    full = [s for s in sorted(l2) if s - 10 >= stopped]
    assert len(full) >= 19 and [l2[s] for s in full] == [lw[s] for s in full]
    a, b = tensors(whole_dir, end), tensors(logdir, end)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 2  # one per attempt, rank 0's


def alive(pid):
    """Whether process pid runs (not gone, not a zombie waiting for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@needs_mpi
def test_sigkill_of_one_rank_ends_the_world(tower_bin, tmp_path, fashion):  # noqa: F811
    config = mlp_config(fashion, batch_size=16, steps=10_000_000, summary_every=10, eval_every=0,
                        checkpoint_every=100000)
    out = open(tmp_path / "stdout", "w+")  # a file, not a pipe: nobody reads while mpirun ends
    proc = subprocess.Popen(mpi_cmd(tower_bin, 2, write_config(tmp_path, "killed", config),
                                    tmp_path / "killed"),
                            stdout=out, stderr=subprocess.DEVNULL, text=True, env=mpi_env())
    try:
        helpers.poll("the world to train", lambda: True if '"step":20,' in
                     (tmp_path / "stdout").read_text() else None)
        ranks = helpers.poll("mpirun's two ranks", lambda: (lambda k: k if len(k) == 2 else None)(
            subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()))
        os.kill(int(ranks[1]), signal.SIGKILL)
        helpers.poll("mpirun to end after a rank was killed", lambda: proc.poll())
        helpers.poll("the other rank to end", lambda: True if not alive(ranks[0]) else None)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.close()
    # Open MPI's mpirun exits 128 + 9 = 137 for a rank killed by SIGKILL: outside engine/child.h's table,
    # which the server reads as a crash and retries from the checkpoint (docs/reliability.md)
    assert proc.returncode != 0 and proc.returncode not in FINAL_EXITS, proc.returncode


@pytest.mark.skipif(HAVE_MPI or not MPIRUN, reason="this build has MPI (unit_world tests world.c's refusal in "
                    "every build)" if HAVE_MPI else "mpirun is not installed")
def test_a_build_without_mpi_refuses_to_run_under_mpirun(tower_bin, tmp_path, fashion):  # noqa: F811
    res = subprocess.run(mpi_cmd(tower_bin, 2, write_config(tmp_path, "refused", mlp_config(fashion)),
                                 tmp_path / "refused"), capture_output=True, text=True, timeout=120,
                         env=mpi_env())
    assert res.returncode == 2, res.stderr
    assert "built without MPI" in res.stderr and "-DTW_MPI=ON" in res.stderr
    assert not (tmp_path / "refused").exists()  # nothing written


@needs_mpi
def test_a_launcher_wins_over_torchrun_variables(tower_bin, tmp_path, fashion):  # noqa: F811
    """mpirun's ranks with torchrun's variables of another world in their environment (a Slurm job that sets
    both): the launcher's world is joined (MPI), the variables are not read (world.c's order)."""
    env = dict(mpi_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT="1", WORLD_SIZE="5", RANK="4")
    res = subprocess.run(mpi_cmd(tower_bin, 2, write_config(tmp_path, "both", mlp_config(fashion, steps=5)),
                                 tmp_path / "both"), capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    first = json.loads(res.stdout.splitlines()[0])
    assert first["world"] == "mpi" and first["processes"] == 2, first


def test_configure_without_mpi_goes_on(tmp_path):
    """-DTW_MPI=OFF, and TW_MPI=ON with no MPI to be found: configure says so and succeeds (no world_mpi.c)."""
    for args, says in ((["-DTW_MPI=OFF"], "Tower: MPI world of processes OFF"),
                       (["-DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON"], "TW_MPI is ON but no MPI was found")):
        build = tmp_path / args[0].split("=")[0].lstrip("-D")
        res = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DTW_CUDA=OFF", *args],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert says in res.stdout, res.stdout
        assert "TW_HAVE_MPI:INTERNAL=OFF" in (build / "CMakeCache.txt").read_text()
