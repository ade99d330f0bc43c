"""The trainer's cost stays bounded while it works: a checkpoint is written off the step (complete and
atomic while training goes on: every `latest` ever observed names a file the safetensors package loads), a
SIGTERM ends the trainer whatever it is doing (a step, a save on a disk that does not answer, an evaluation,
an address-space limit), and a dataset over the memory budget streams instead of failing OUT_OF_MEMORY under
an address-space limit. Slow disks are simulated by tests/tools/shims/fsync_gate.c (LD_PRELOAD): the fsync
of a checkpoint waits until a gate file exists. Nothing here is timed: every wait polls for a condition
under a generous deadline."""
import json
import os
import resource
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

DEADLINE = 120  # seconds: a generous bound on every poll, never an assertion on a duration


def poll(cond, what, deadline=DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def npy_dataset(tower_bin, out, n, shape, dtype, seed=0):
    """A TFRecord converted by `tower convert` from NumPy arrays (uncompressed)."""
    r = np.random.default_rng(seed)
    x = (r.integers(0, 256, (n, *shape), dtype=np.uint8) if dtype == np.uint8
         else r.random((n, *shape), dtype=np.float32))
    np.save(out / "x.npy", x)
    np.save(out / "y.npy", r.integers(0, 10, n).astype(np.int64))
    res = subprocess.run([str(tower_bin), "convert", "--npy-features", out / "x.npy", "--npy-labels",
                          out / "y.npy", "-o", out / "data.tfrecord"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (out / "x.npy").unlink()
    return out / "data.tfrecord"


@pytest.fixture(scope="module")
def small(tower_bin, tmp_path_factory):
    return npy_dataset(tower_bin, tmp_path_factory.mktemp("small"), 512, (8, 8, 1), np.uint8)


def config(train, test=None, **over):
    c = {"dataset": {"train": str(train), "test": str(test) if test else None, "shape": [8, 8, 1]},
         "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 16, "activation": "relu"},
                              {"type": "dense", "units": 10}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.01}, "batch_size": 16, "steps": 400, "seed": 3,
         "summary_every": 1, "histogram_every": 0, "eval_every": 0, "checkpoint_every": 50,
         "keep_checkpoints": 5}
    c.update(over)
    return c


class Trainer:
    """`tower train` in the background; its JSON lines are collected as they come."""

    def __init__(self, tower_bin, tmp_path, cfg, *args, env=None, preexec_fn=None):
        (tmp_path / "c.json").write_text(json.dumps(cfg))
        self.logdir = tmp_path / "run"
        self.lines = []
        self.p = subprocess.Popen([str(tower_bin), "train", str(tmp_path / "c.json"), "--logdir",
                                   str(self.logdir), "--backend", "cpu", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def step(self):
        return max((l["step"] for l in self.lines if "loss" in l), default=0)

    def end(self):
        """Polls for the exit (a generous deadline); returns (returncode, stderr)."""
        poll(lambda: self.p.poll() is not None, "the trainer to exit")
        self.reader.join(DEADLINE)
        return self.p.returncode, self.p.stderr.read()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def gated(tower_bin, gate):
    shim = tower_bin.parent.parent / "tests" / "tools" / "libtw_fsync_gate.so"
    assert shim.exists(), f"{shim} missing: build first"
    return {"LD_PRELOAD": str(shim), "TW_FSYNC_GATE": str(gate)}


def latest_of(logdir):
    try:
        return (logdir / "checkpoints" / "latest").read_text().strip()
    except FileNotFoundError:
        return None


def test_checkpoint_is_written_while_training_goes_on(tower_bin, tmp_path, small):
    gate = tmp_path / "gate"
    t = Trainer(tower_bin, tmp_path, config(small), env=gated(tower_bin, gate))
    try:
        # the save of step 50 cannot finish (its fsync waits for the gate), yet the steps go on past it
        poll(lambda: t.step() >= 60 or t.p.poll() is not None, "steps past the first checkpoint")
        assert t.step() >= 60, t.lines[-3:]
        assert latest_of(t.logdir) is None  # nothing committed while the save is in flight
        seen, bad, stop = set(), [], threading.Event()

        def watch():  # every `latest` ever observed names a complete, loadable checkpoint
            while not stop.is_set():
                name = latest_of(t.logdir)
                if name and name not in seen:
                    seen.add(name)
                    try:
                        load_file(str(t.logdir / "checkpoints" / name))
                    except Exception as e:  # noqa: BLE001 (reported below)
                        bad.append(f"{name}: {e}")
        w = threading.Thread(target=watch)
        w.start()
        gate.touch()
        rc, err = t.end()
        stop.set()
        w.join()
    finally:
        t.kill()
    assert rc == 0, err
    assert t.lines[-1]["status"] == "completed"
    assert not bad, bad
    assert latest_of(t.logdir) == "ckpt-0000000400.safetensors"
    with safe_open(str(t.logdir / "checkpoints" / latest_of(t.logdir)), "np") as f:
        assert f.metadata()["step"] == "400" and f.keys()
    assert not list((t.logdir / "checkpoints").glob("*.tmp.*"))


def test_sigterm_during_a_checkpoint_save_ends_the_trainer(tower_bin, tmp_path, small):
    """A disk that never answers: the stop's checkpoint cannot be written, the watchdog ends the process with
    exit status 15 (STOP_TIMEOUT, retried by the server) and `latest` still names nothing half-written."""
    t = Trainer(tower_bin, tmp_path, config(small), "--stop-within", "2",
                env=gated(tower_bin, tmp_path / "never"))
    try:
        poll(lambda: t.step() >= 60 or t.p.poll() is not None, "a save in flight")
        t.p.send_signal(signal.SIGTERM)
        rc, err = t.end()
    finally:
        t.kill()
    assert rc == 15, err
    assert "not stopped within" in err
    assert latest_of(t.logdir) is None


def test_sigterm_during_a_step_checkpoints_and_stops(tower_bin, tmp_path, small):
    t = Trainer(tower_bin, tmp_path, config(small, steps=1000000), "--stop-within", "20")
    try:
        poll(lambda: t.step() >= 5 or t.p.poll() is not None, "training steps")
        t.p.send_signal(signal.SIGTERM)
        rc, err = t.end()
    finally:
        t.kill()
    assert rc == 0, err
    final = t.lines[-1]
    assert final["status"] == "cancelled"
    name = latest_of(t.logdir)
    assert name == f"ckpt-{final['step']:010d}.safetensors"  # the stop's checkpoint, joined before the end
    load_file(str(t.logdir / "checkpoints" / name))


def test_sigterm_during_evaluation_ends_the_trainer(tower_bin, tmp_path, small):
    """An evaluation pass over a test set larger than many steps: SIGTERM right after the backend line lands
    in the baseline evaluation or the steps after it; either way the trainer ends, cancelled."""
    test = npy_dataset(tower_bin, tmp_path, 50000, (8, 8, 1), np.uint8, seed=1)
    t = Trainer(tower_bin, tmp_path, config(small, test, steps=1000000, eval_every=20), "--stop-within", "20")
    try:
        poll(lambda: any("backend" in l for l in t.lines) or t.p.poll() is not None, "the backend line")
        t.p.send_signal(signal.SIGTERM)
        rc, err = t.end()
    finally:
        t.kill()
    assert rc in (0, 15), err
    assert rc == 15 or t.lines[-1]["status"] == "cancelled"


def address_space(limit):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# One OpenBLAS thread and two malloc arenas: the address space the trainer maps does not depend on the cores.
PINNED = {"OPENBLAS_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}


@pytest.fixture(scope="module")
def big(tower_bin, tmp_path_factory):
    """20,000 fp32 32×32×3 examples: 247 MB uncompressed."""
    return npy_dataset(tower_bin, tmp_path_factory.mktemp("big"), 20000, (32, 32, 3), np.float32)


def big_config(big, **over):
    c = config(big, **{"steps": 30, "checkpoint_every": 0, **over})
    c["dataset"]["shape"] = [32, 32, 3]
    c["dataset"]["shuffle_buffer"] = 1000
    return c


LIMIT = 530 << 20  # bytes of address space: room for the trainer and a shuffle buffer, not for the decoded set


def test_budget_streams_under_an_address_space_limit(tower_bin, tmp_path, big):
    """Under the limit, the default budget (2 GiB) decodes the set and fails OUT_OF_MEMORY; the config's
    input_memory_bytes, or --input-memory, streams it and completes (the file's size over the first record
    says it is over twice the budget: nothing is decoded first)."""
    runs = {"default": (big_config(big), []),
            "config": (big_config(big, input_memory_bytes=64 << 20), []),
            "flag": (big_config(big), ["--input-memory", str(64 << 20)])}
    got = {}
    for name, (cfg, args) in runs.items():
        (tmp_path / name).mkdir()
        t = Trainer(tower_bin, tmp_path / name, cfg, *args, env=PINNED, preexec_fn=address_space(LIMIT))
        try:
            got[name] = t.end() + (t.lines[-1] if t.lines else {},)
        finally:
            t.kill()
    assert got["default"][0] == 11, got["default"]  # OUT_OF_MEMORY, and never a hang
    for name in ("config", "flag"):
        rc, err, last = got[name]
        assert rc == 0, (name, err)
        assert last["status"] == "completed"


def test_sigterm_under_an_address_space_limit_ends_the_trainer(tower_bin, tmp_path, big):
    """The limit that made OpenBLAS spin at 100% CPU ignoring SIGTERM: the trainer now says
    OUT_OF_MEMORY, or stops on SIGTERM; it always ends."""
    t = Trainer(tower_bin, tmp_path, big_config(big, steps=1000000, input_memory_bytes=64 << 20),
                "--stop-within", "5", env=PINNED, preexec_fn=address_space(400 << 20))
    try:
        poll(lambda: t.lines or t.p.poll() is not None, "a first line")
        t.p.send_signal(signal.SIGTERM)
        rc, err = t.end()
    finally:
        t.kill()
    assert rc in (0, 11, 15), err
