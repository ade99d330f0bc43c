"""The child-process contract the server supervises: `tower train`'s exit codes and heartbeat lines, and
tests/tools/tw_faketrain (the stand-in the reliability tests run) speaking the same contract — resume from
the checkpoint with an exact step log, every TW_FAKE switch and its exit code, a kill during a
checkpoint write, and event files that TensorBoard reads.

Exit codes (engine/train_main.c): 0 completed/cancelled, 1 other failure, 2 usage/config, 10 NaN/Inf,
11 out of memory, 12 sticky device error, 13 storage full, 14 damaged dataset."""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

TIMEOUT = 120


# ---- helpers ----

def full_config(steps=20, checkpoint_every=5, **over):
    """A complete tower config (the fake reads only steps and checkpoint_every)."""
    c = {"dataset": {"train": "/nonexistent/train.tfrecord", "shape": [4]},
         "model": {"layers": [{"type": "dense", "units": 3}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.1}, "batch_size": 8, "towers": 1,
         "steps": steps, "seed": 1, "summary_every": 10 ** 6, "eval_every": 0,
         "checkpoint_every": checkpoint_every, "keep_checkpoints": 3}
    c.update(over)
    return c


def parse(stdout):
    return [json.loads(l) for l in stdout.splitlines() if l.strip()]


def read_steps_log(logdir):
    return [int(l.split()[1]) for l in (logdir / "steps.log").read_text().splitlines()]


def latest(logdir):
    p = logdir / "checkpoints" / "latest"
    return p.read_text().strip() if p.exists() else None


def env_with(fake):
    env = {k: v for k, v in os.environ.items() if k != "TW_FAKE"}
    if fake:
        env["TW_FAKE"] = fake
    return env


@pytest.fixture
def fake(tool, tmp_path):
    """fake(config, fake="", resume=False, name="run") -> (rc, lines, stderr, logdir)."""
    binary = tool("tw_faketrain")

    def run(config, fake="", resume=False, name="run", timeout=TIMEOUT):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps(config))
        logdir = tmp_path / name
        cmd = [str(binary), "train", str(cfg), "--logdir", str(logdir)] + (["--resume"] if resume else [])
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env_with(fake))
        return res.returncode, parse(res.stdout), res.stderr, logdir
    run.binary = binary
    return run


def popen_fake(fake_run, tmp_path, config, fake="", resume=False, name="run"):
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    cmd = [str(fake_run.binary), "train", str(cfg), "--logdir", str(tmp_path / name)]
    if resume:
        cmd.append("--resume")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_with(fake))


def step_lines(lines):
    return [l for l in lines if "loss" in l and "step" in l]


# ---- tw_faketrain: the normal path ----

def test_fake_completes_with_checkpoints_events_and_step_log(fake):
    from safetensors.numpy import load_file
    from tensorboard.backend.event_processing import event_accumulator as ea
    rc, lines, err, logdir = fake(full_config(steps=20, checkpoint_every=5))
    assert rc == 0, err
    steps = step_lines(lines)
    assert [l["step"] for l in steps] == list(range(1, 21))
    assert lines[-1]["status"] == "completed" and lines[-1]["step"] == 20
    assert lines[-1]["seconds"] >= 0
    assert read_steps_log(logdir) == list(range(1, 21))
    assert latest(logdir) == "ckpt-0000000020.safetensors"
    kept = sorted(p.name for p in (logdir / "checkpoints").iterdir() if p.name.startswith("ckpt-"))
    assert kept == [f"ckpt-{s:010d}.safetensors" for s in (10, 15, 20)]  # keep 3
    t = load_file(str(logdir / "checkpoints" / latest(logdir)))
    assert t["w"].dtype == np.float32 and t["w"].shape == (4,)
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    got = acc.Scalars("loss")
    assert [e.step for e in got] == list(range(1, 21))
    np.testing.assert_allclose([e.value for e in got], [l["loss"] for l in steps], rtol=1e-6)


def test_fake_sigterm_checkpoints_then_resume_is_exact_in_tensorboard(fake, tmp_path):
    from tensorboard.backend.event_processing import event_accumulator as ea
    config = full_config(steps=60, checkpoint_every=1000)
    proc = popen_fake(fake, tmp_path, config, fake="step_ms=20")
    try:
        for line in proc.stdout:
            if json.loads(line).get("step", 0) >= 10:
                break
        proc.send_signal(signal.SIGTERM)
        rest = parse(proc.stdout.read())
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        proc.kill()
    final = rest[-1]
    assert final["status"] == "cancelled"
    k = final["step"]
    assert 10 <= k < 60
    logdir = tmp_path / "run"
    assert latest(logdir) == f"ckpt-{k:010d}.safetensors"
    assert read_steps_log(logdir) == list(range(1, k + 1))
    rc, lines, err, _ = fake(config, resume=True)
    assert rc == 0, err
    assert lines[0]["resumed_from"].endswith(f"ckpt-{k:010d}.safetensors") and lines[0]["step"] == k
    assert [l["step"] for l in step_lines(lines)] == list(range(k + 1, 61))
    assert read_steps_log(logdir) == list(range(1, 61))
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == list(range(1, 61))


def test_fake_sigkill_then_resume_continues_at_checkpoint_with_exact_step_log(fake, tmp_path):
    config = full_config(steps=40, checkpoint_every=10)
    rc, lines, err, logdir = fake(config, fake="step_ms=1,crash_at=27")
    assert rc == -signal.SIGSEGV, err
    assert "crash_at=27" in err
    assert [l["step"] for l in step_lines(lines)] == list(range(1, 27))
    assert read_steps_log(logdir) == list(range(1, 27))
    assert latest(logdir) == "ckpt-0000000020.safetensors"
    rc, lines, err, _ = fake(config, resume=True)
    assert rc == 0, err
    assert lines[0]["step"] == 20 and lines[0]["resumed_from"].endswith("ckpt-0000000020.safetensors")
    assert [l["step"] for l in step_lines(lines)] == list(range(21, 41))
    assert read_steps_log(logdir) == list(range(1, 41))  # steps 21..26 were redone, not duplicated
    # a second resume of a finished run does nothing more
    rc, lines, err, _ = fake(config, resume=True)
    assert rc == 0, err
    assert lines[-1]["status"] == "completed" and lines[-1]["step"] == 40 and not step_lines(lines)
    assert read_steps_log(logdir) == list(range(1, 41))


def test_fake_without_resume_appends_so_a_forgotten_resume_shows(fake):
    config = full_config(steps=5, checkpoint_every=5)
    assert fake(config)[0] == 0
    rc, _, _, logdir = fake(config)
    assert rc == 0
    assert read_steps_log(logdir) == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]


def test_fake_sigkill_during_checkpoint_write_keeps_previous(fake, tmp_path):
    """P3: the checkpoint's temporary file is written and fsynced, the rename waits ckpt_ms; SIGKILL
    then. `latest` still names the previous checkpoint, and the resume removes the temporary."""
    config = full_config(steps=12, checkpoint_every=5)
    proc = popen_fake(fake, tmp_path, config, fake="step_ms=1,ckpt_ms=1500")
    ckdir = tmp_path / "run" / "checkpoints"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if latest(tmp_path / "run") == "ckpt-0000000005.safetensors" and \
                    any(".safetensors.tmp." in p.name and "0000000010" in p.name
                        for p in ckdir.iterdir()):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the step-10 checkpoint's temporary never appeared")
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
    assert latest(tmp_path / "run") == "ckpt-0000000005.safetensors"
    assert not (ckdir / "ckpt-0000000010.safetensors").exists()
    rc, lines, err, logdir = fake(config, resume=True)
    assert rc == 0, err
    assert lines[0]["step"] == 5
    assert not [p for p in ckdir.iterdir() if ".tmp." in p.name]
    assert read_steps_log(logdir) == list(range(1, 13))


# ---- tw_faketrain: every switch ----

@pytest.mark.parametrize("switch,code,text", [
    ("exit_at=3:11", 11, "out of memory"),
    ("exit_at=3:12", 12, "CUDA error: an illegal memory access"),
    ("exit_at=3:13", 13, "No space left on device"),
    ("exit_at=3:14", 14, "corrupted record"),
    ("exit_at=3:1", 1, "injected failure"),
])
def test_fake_exit_at_gives_the_code(fake, switch, code, text):
    rc, lines, err, logdir = fake(full_config(steps=10, checkpoint_every=2), fake=switch)
    assert rc == code, err
    assert switch in err and text in err
    final = lines[-1]
    assert final["status"] == "failed" and final["exit"] == code and text in final["message"]
    assert [l["step"] for l in step_lines(lines)] == [1, 2]
    assert latest(logdir) == "ckpt-0000000002.safetensors"


@pytest.mark.parametrize("switch,error", [("nan_at=5", "LOSS_NAN"), ("inf_at=5", "LOSS_INF")])
def test_fake_nan_and_inf_exit_10_without_checkpointing(fake, switch, error):
    rc, lines, err, logdir = fake(full_config(steps=10, checkpoint_every=2), fake=switch)
    assert rc == 10, err
    assert lines[-2] == {"error": error, "step": 5,
                         "message": "the loss is not finite: stopping without checkpointing this state"}
    assert lines[-1]["status"] == "diverged" and lines[-1]["step"] == 4
    assert latest(logdir) == "ckpt-0000000004.safetensors"  # the last checkpoint is before step 5
    assert read_steps_log(logdir) == [1, 2, 3, 4]


def test_fake_crash_at_0_dies_before_writing_anything(fake):
    rc, lines, _, logdir = fake(full_config(), fake="crash_at=0")
    assert rc == -signal.SIGSEGV and lines == []
    assert not (logdir / "steps.log").exists()


def test_fake_hang_prints_nothing_more_and_survives_sigterm(fake, tmp_path):
    proc = popen_fake(fake, tmp_path, full_config(steps=100), fake="step_ms=1,hang_at=4")
    try:
        got = [json.loads(proc.stdout.readline()) for _ in range(3)]
        assert [l["step"] for l in got] == [1, 2, 3]
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)  # a deadlock does not answer SIGTERM
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert proc.stdout.read() == ""  # silent since step 3: no heartbeat either
    finally:
        proc.kill()


def test_fake_once_fires_only_in_the_first_attempt(fake):
    config = full_config(steps=8, checkpoint_every=4)
    rc, _, err, logdir = fake(config, fake="step_ms=1,exit_at=6:12,once")
    assert rc == 12 and "illegal memory access" in err
    assert (logdir / ".tw_fake_once").exists()
    rc, lines, err, _ = fake(config, fake="step_ms=1,exit_at=6:12,once", resume=True)
    assert rc == 0, err
    assert lines[0]["step"] == 4
    assert read_steps_log(logdir) == list(range(1, 9))


def test_fake_startup_ms_delays_the_first_line(fake, tmp_path):
    t0 = time.monotonic()
    proc = popen_fake(fake, tmp_path, full_config(steps=2), fake="startup_ms=700")
    try:
        first = json.loads(proc.stdout.readline())
        assert time.monotonic() - t0 >= 0.7 and first["step"] == 1
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_fake_step_ms_paces_the_steps(fake):
    t0 = time.monotonic()
    rc, _, _, _ = fake(full_config(steps=10, checkpoint_every=0), fake="step_ms=60")
    assert rc == 0 and time.monotonic() - t0 >= 0.6


@pytest.mark.parametrize("switch", ["bogus=1", "nan_at=0", "exit_at=3", "exit_at=3:256",
                                    "step_ms=-1", "crash_at=x"])
def test_fake_bad_switch_is_a_usage_error(fake, switch):
    rc, lines, err, logdir = fake(full_config(), fake=switch)
    assert rc == 2 and "TW_FAKE" in err
    assert lines == [] and not logdir.exists()


def test_fake_bad_config_is_a_config_error(fake):
    rc, lines, err, logdir = fake(full_config(steps=0))
    assert rc == 2 and "steps" in err
    assert lines[-1]["exit"] == 2 and lines[-1]["error"]["code"] == "INVALID_ARGUMENT"
    assert not logdir.exists()


def test_fake_storage_full_during_checkpoint_exits_13(fake, tmp_path):
    """P5/P6 with the real checkpoint code: fsync fails with ENOSPC/EDQUOT under strace (the syscall
    must be in the traced set for inject to fire: trace=none would silently inject nothing)."""
    strace = shutil.which("strace")
    if not strace or subprocess.run([strace, "-o", "/dev/null", "true"]).returncode != 0:
        pytest.skip("strace cannot trace here")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(full_config(steps=6, checkpoint_every=3)))
    for errno_name in ("ENOSPC", "EDQUOT"):
        logdir = tmp_path / errno_name
        res = subprocess.run([strace, "-f", "-o", "/dev/null", "-e", "trace=fsync", "-e",
                              f"inject=fsync:error={errno_name}", str(fake.binary), "train", cfg,
                              "--logdir", logdir], capture_output=True, text=True, timeout=TIMEOUT,
                             env=env_with(""))
        assert res.returncode == 13, res.stderr
        final = parse(res.stdout)[-1]
        assert final["exit"] == 13 and final["error"]["code"] == "IO_ERROR"
        assert latest(logdir) is None


# ---- tower train: exit codes and heartbeats ----

@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory, tower_bin):
    """A small 8x8 image dataset: (train.tfrecord, its size in bytes)."""
    d = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.integers(0, 256, size=(256, 8, 8, 1), dtype=np.uint8))
    np.save(d / "y.npy", rng.integers(0, 4, size=256).astype(np.int64))
    res = subprocess.run([str(tower_bin), "convert", "--npy-features", d / "x.npy", "--npy-labels",
                          d / "y.npy", "-o", d / "train.tfrecord"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return d / "train.tfrecord"


def tower_config(train, **over):
    c = {"dataset": {"train": str(train), "shape": [8, 8, 1]},
         "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                              {"type": "dense", "units": 4}]},
         "optimizer": {"type": "sgd", "learning_rate": 0.01}, "batch_size": 16, "towers": 1,
         "steps": 20, "seed": 3, "summary_every": 10, "eval_every": 0, "checkpoint_every": 10}
    c.update(over)
    return c


def run_train(tower_bin, tmp_path, config, name="t", wrap=(), **kw):
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps(config))
    res = subprocess.run([*wrap, str(tower_bin), "train", str(cfg), "--logdir", str(tmp_path / name)],
                         capture_output=True, text=True, timeout=TIMEOUT, **kw)
    return res.returncode, parse(res.stdout), res.stderr, tmp_path / name


def test_tower_heartbeat_when_summary_every_exceeds_steps(tower_bin, tmp_path, tiny_data):
    cfg = tmp_path / "hb.json"
    cfg.write_text(json.dumps(tower_config(tiny_data, steps=10 ** 8, summary_every=10 ** 9,
                                           checkpoint_every=0)))
    proc = subprocess.Popen([str(tower_bin), "train", cfg, "--logdir", tmp_path / "hb"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert json.loads(proc.stdout.readline())["backend"] == "cpu"  # the first line names the backend
        assert json.loads(proc.stdout.readline())["warning"] == "NO_TEST_SET"  # no test set: said up front
        t0 = time.monotonic()
        beats = []
        while len(beats) < 3:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            beats.append((time.monotonic(), json.loads(line)))
        proc.send_signal(signal.SIGTERM)
        rest = parse(proc.stdout.read())
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        watchdog.cancel()
        proc.kill()
    assert all(b == {"heartbeat": True, "step": b["step"]} for _, b in beats)
    assert 0 < beats[0][1]["step"] < beats[1][1]["step"] < beats[2][1]["step"]
    assert beats[0][0] - t0 >= 0.8  # nothing else to say before the first second
    gaps = np.diff([t for t, _ in beats])
    assert all(0.8 <= g <= 3.0 for g in gaps), gaps  # about once a second, never more often
    assert rest[-1]["status"] == "cancelled" and rest[-1]["step"] >= beats[2][1]["step"]


def test_tower_storage_full_exits_13(tower_bin, tmp_path, tiny_data):
    strace = shutil.which("strace")
    if not strace or subprocess.run([strace, "-o", "/dev/null", "true"]).returncode != 0:
        pytest.skip("strace cannot trace here")
    # the first fsync of a run is the checkpoint's (the event writer does not fsync by default)
    rc, lines, err, logdir = run_train(
        tower_bin, tmp_path, tower_config(tiny_data), wrap=(strace, "-f", "-o", "/dev/null", "-e",
                                                            "trace=fsync", "-e",
                                                            "inject=fsync:error=ENOSPC"))
    assert rc == 13, err
    final = lines[-1]
    assert final["status"] == "failed" and final["exit"] == 13
    assert final["error"]["code"] == "IO_ERROR" and "No space left on device" in final["message"]
    assert "No space left on device" in err
    assert latest(logdir) is None


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_tower_damaged_dataset_exits_14(tower_bin, tmp_path, tiny_data, damage):
    data = bytearray(tiny_data.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[:len(data) // 2 + 5]
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    rc, lines, err, _ = run_train(tower_bin, tmp_path, tower_config(bad, steps=200))
    assert rc == 14, err
    final = lines[-1]
    assert final["status"] == "failed" and final["exit"] == 14
    assert final["error"]["code"] in ("CORRUPT", "TRUNCATED")
    assert "bad.tfrecord" in final["message"] and "bad.tfrecord" in err


def test_tower_out_of_memory_exits_11(tower_bin, tmp_path, tiny_data):
    """A model far larger than the address-space limit: allocation fails, TW_ERR_NOMEM, exit 11."""
    if "asan" in str(tower_bin).lower():
        pytest.skip("RLIMIT_AS does not mix with AddressSanitizer")
    limit = 1 << 30

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    big = tower_config(tiny_data)
    big["model"]["layers"][1]["units"] = 65536
    big["model"]["layers"].insert(2, {"type": "dense", "units": 8192})
    rc, lines, err, _ = run_train(tower_bin, tmp_path, big, preexec_fn=cap,
                                  env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert rc == 11, err
    final = lines[-1]
    assert final["exit"] == 11 and final["error"]["code"] == "OUT_OF_MEMORY"


def test_tower_config_error_line_carries_exit_and_message(tower_bin, tmp_path, tiny_data):
    rc, lines, err, logdir = run_train(tower_bin, tmp_path, tower_config(tiny_data, batch_size=0))
    assert rc == 2
    final = lines[-1]
    assert final["exit"] == 2 and final["error"]["code"] == "INVALID_ARGUMENT"
    assert "batch_size" in final["message"] and "batch_size" in err
    assert not logdir.exists()


def test_tower_usage_lists_exit_codes(run_tower):
    res = run_tower("train", "--help")
    assert res.returncode == 0
    for text in ("11 out of memory", "13 storage full", "14 damaged"):
        assert text in re.sub(r"\s+", " ", res.stdout), text
