"""Faults a training child can have, and what the supervisor makes of them (docs/reliability.md rows
P1-P3 and G1-G9), driven by the fake trainer (tests/tools/tw_faketrain.c, switches in TW_FAKE)."""
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import time

import pytest
import requests

import helpers
from helpers import poll
from test_server import child_pids, pid_alive, seed_config, submit, upload_fashion, wait_run

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1")


def fake_server(serve, tool, fake, *args, data=None):
    """A server on the fake trainer with FAST's options, each but those args give again (an option is given
    once)."""
    given = set(args[::2])
    fast = [x for k, v in zip(FAST[::2], FAST[1::2]) if k not in given for x in (k, v)]
    server = serve("--trainer", tool("tw_faketrain"), *fast, *args, env={"TW_FAKE": fake}, data=data)
    return server


@pytest.fixture
def with_dataset(serve, tool):
    """start(fake, *args) -> a server on the fake trainer with Fashion-MNIST ready."""
    def start(fake, *args):
        server = fake_server(serve, tool, fake, *args)
        upload_fashion(server)
        return server
    return start


def run_steps(server, run_id):
    """The steps of the run's loss series, read from its event files (TensorBoard's restart rule)."""
    from conftest import BUILD
    out = subprocess.run([BUILD / "tests" / "tools" / "tw_scalars", helpers.run_dir(server.data, run_id)],
                         capture_output=True, text=True, check=True).stdout
    return [p[0] for p in json.loads(out).get("loss", [])]


@pytest.mark.parametrize("fault,code", [("nan_at=5", "LOSS_NAN"), ("inf_at=5", "LOSS_INF")])
def test_g1_g2_non_finite_loss_fails_without_retry(with_dataset, fault, code):
    server = with_dataset(f"step_ms=1,{fault}")
    run = submit(server, seed_config(steps=50, checkpoint_every=2)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "diverged" and done["restarts"] == 0
    assert code in done["error"]["message"]
    latest = (helpers.run_dir(server.data, run["id"]) / "checkpoints" / "latest").read_text()
    assert int(latest.split("-")[1].split(".")[0]) < 5


def test_g3_sticky_device_error_retried_on_fresh_processes(with_dataset):
    server = with_dataset("step_ms=1,exit_at=3:12")
    run = submit(server, seed_config(steps=20, max_restarts=2)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "device_error" and done["restarts"] == 2
    assert "gave up after 2 restarts" in done["error"]["message"]
    assert "illegal memory access" in done["error"]["message"]
    log = requests.get(server.api(f"/runs/{run['id']}/log?tail=1000"), timeout=10).text
    assert log.count("== attempt") == 3


def test_g3_retry_then_success_with_once(with_dataset):
    server = with_dataset("step_ms=1,exit_at=6:12,once")
    run = submit(server, seed_config(steps=20, checkpoint_every=2)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1 and done["step"] == 20
    assert done["reason"] is None and done["error"] is None
    assert run_steps(server, run["id"]) == list(range(1, 21))


def test_a_retry_keeps_the_last_evaluation_until_it_evaluates_again(with_dataset):
    """The first attempt evaluates at step 10 and fails at 11; the retry (from the checkpoint at 10) trains
    11..15 and prints no evaluation: the run still shows the one of step 10, and its own last loss."""
    server = with_dataset("step_ms=1,exit_at=11:12,once")
    run = submit(server, seed_config(steps=15, checkpoint_every=10, eval_every=10)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1 and done["step"] == 15, done
    m = done["metrics"]
    assert m["eval_examples"] == 100 and m["eval_loss"] == pytest.approx(2.3 * math.exp(-10 / 200) + 0.05), m
    assert m["loss"] == pytest.approx(2.3 * math.exp(-15 / 200) + 0.05), m


def test_g4_out_of_memory_fails_fast(with_dataset):
    server = with_dataset("step_ms=1,exit_at=2:11")
    run = submit(server, seed_config(steps=20)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "out_of_memory" and done["restarts"] == 0


def test_bad_dataset_fails_fast(with_dataset):
    server = with_dataset("step_ms=1,exit_at=2:14")
    done = wait_run(server, submit(server, seed_config(steps=20)).json()["id"])
    assert done["status"] == "failed" and done["reason"] == "bad_dataset" and done["restarts"] == 0


def test_g5_hang_is_killed_after_the_heartbeat_timeout(with_dataset):
    server = with_dataset("step_ms=1,hang_at=4,once", "--heartbeat-timeout", "1.5")
    run = submit(server, seed_config(steps=10, checkpoint_every=2)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1
    log = requests.get(server.api(f"/runs/{run['id']}/log?tail=1000"), timeout=10).text
    assert "no progress line for 2 s: killed" in log or "no progress line for 1 s" in log
    assert run_steps(server, run["id"]) == list(range(1, 11))


def test_g5_stopped_child_is_killed_and_fails_after_retries(with_dataset):
    server = with_dataset("step_ms=20", "--heartbeat-timeout", "1", "--max-restarts", "0")
    run = submit(server, seed_config(steps=100000)).json()
    wait_run(server, run["id"], ("running",))
    poll("the child", lambda: child_pids(server.proc.pid) or None)
    child = child_pids(server.proc.pid)[0]
    os.kill(child, signal.SIGSTOP)
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "timeout"
    assert done["error"]["code"] == "HEARTBEAT_TIMEOUT"
    poll("the stopped child to be gone", lambda: True if not pid_alive(child) else None)


def test_g7_segfault_restarts_from_the_checkpoint(with_dataset):
    server = with_dataset("step_ms=1,crash_at=7,once")
    run = submit(server, seed_config(steps=15, checkpoint_every=5)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1
    log = requests.get(server.api(f"/runs/{run['id']}/log?tail=1000"), timeout=10).text
    assert "signal 11" in log and '"resumed_from"' in log
    assert run_steps(server, run["id"]) == list(range(1, 16))


def test_g8_crash_loop_backs_off_then_fails(with_dataset):
    server = with_dataset("step_ms=1,exit_at=1:1", "--backoff", "0.3", "--backoff-cap", "10")
    t0 = time.monotonic()
    run = submit(server, seed_config(steps=5, max_restarts=3)).json()
    done = wait_run(server, run["id"])
    elapsed = time.monotonic() - t0
    assert done["status"] == "failed" and done["reason"] == "crashed" and done["restarts"] == 3
    assert "gave up after 3 restarts" in done["error"]["message"]
    assert elapsed >= 0.3 + 0.6 + 1.2  # the back-off doubled each time


def test_g9_deadline_beats_remaining_retries(with_dataset):
    server = with_dataset("step_ms=1,exit_at=1:1", "--backoff", "1", "--backoff-cap", "1")
    run = submit(server, seed_config(steps=5, max_restarts=100, deadline_s=2)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "deadline"
    assert 0 < done["restarts"] < 100


def test_g9_deadline_kills_a_running_child(with_dataset):
    server = with_dataset("step_ms=20")
    run = submit(server, seed_config(steps=100000, deadline_s=1.5)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "deadline" and done["step"] > 0


def test_p2_kill_9_server_children_die_and_resume_exactly(with_dataset, serve, tool):
    server = with_dataset("step_ms=10")
    run = submit(server, seed_config(steps=300, checkpoint_every=50)).json()
    poll("progress", lambda: True if requests.get(server.api(f"/runs/{run['id']}"), timeout=10)
         .json()["step"] >= 120 else None)
    children = child_pids(server.proc.pid)
    server.proc.kill()
    server.proc.wait()
    poll("the children to die with the server", lambda: True if not any(map(pid_alive, children)) else None)
    again = fake_server(serve, tool, "step_ms=1", data=server.data)
    done = wait_run(again, run["id"])
    # the server's crash ended an attempt: a restart counted, the timeline says why
    assert done["status"] == "succeeded" and done["step"] == 300 and done["restarts"] == 1
    assert [a["reason"] for a in done["attempts"]] == ["server crashed", "succeeded"], done["attempts"]
    lines = (helpers.run_dir(server.data, run["id"]) / "steps.log").read_text().split()
    assert lines[1::2] == [str(i) for i in range(1, 301)]
    assert run_steps(again, run["id"]) == list(range(1, 301))


def test_p3_kill_9_child_during_a_checkpoint_write(with_dataset):
    server = with_dataset("step_ms=1,ckpt_ms=3000,once")
    run = submit(server, seed_config(steps=30, checkpoint_every=10)).json()
    ckdir = helpers.run_dir(server.data, run["id"]) / "checkpoints"
    tmp = poll("a checkpoint being written",
               lambda: next((p for p in ckdir.glob("*.tmp.*")), None) if ckdir.exists() else None)
    child = child_pids(server.proc.pid)[0]
    os.kill(child, signal.SIGKILL)
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1 and done["step"] == 30
    assert not tmp.exists() and not list(ckdir.glob("*.tmp.*"))
    assert (ckdir / "latest").read_text().strip() == "ckpt-0000000030.safetensors"


def test_p1_kill_9_mid_submission(serve, tool, tmp_path):
    server = fake_server(serve, tool, "step_ms=1")
    upload_fashion(server)
    rng = random.Random(1)
    acknowledged = set()
    for i in range(20):
        key = f"key-{i}"
        killer_delay = rng.uniform(0, 0.03)
        session = requests.Session()
        try:
            import threading
            timer = threading.Timer(killer_delay, server.proc.kill)
            timer.start()
            r = session.post(server.api("/runs"), json=seed_config(steps=2),
                             headers={"Idempotency-Key": key}, timeout=10)
            if r.status_code in (200, 201):
                acknowledged.add(key)
        except requests.RequestException:
            pass
        timer.join()
        server.proc.wait()
        server = fake_server(serve, tool, "step_ms=1", data=server.data)
    db = sqlite3.connect(server.data / "tower.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    keys = [k for (k,) in db.execute("SELECT idempotency_key FROM runs")]
    db.close()
    assert len(keys) == len(set(keys))
    assert acknowledged <= set(keys)
    runs_dirs = set(os.listdir(server.data / "runs"))
    listed = {r["id"] for r in requests.get(server.api("/runs?limit=100"), timeout=10).json()["runs"]}
    assert runs_dirs <= listed  # no orphan folders after the restart's clean-up


def test_sigterm_stops_cleanly_and_the_run_resumes(with_dataset, serve, tool):
    """A graceful stop: the children checkpoint on SIGTERM, the server exits 0, the next start resumes."""
    server = with_dataset("step_ms=10")
    run = submit(server, seed_config(steps=300, checkpoint_every=1000)).json()
    poll("progress", lambda: True if requests.get(server.api(f"/runs/{run['id']}"), timeout=10)
         .json()["step"] >= 50 else None)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    ckdir = helpers.run_dir(server.data, run["id"]) / "checkpoints"
    saved = int((ckdir / "latest").read_text().split("-")[1].split(".")[0])
    assert 50 <= saved < 300  # checkpointed on SIGTERM, not at a checkpoint_every boundary
    again = fake_server(serve, tool, "step_ms=1", data=server.data)
    done = wait_run(again, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 0 and done["step"] == 300  # a stop is no crash
    assert [a["reason"] for a in done["attempts"]] == ["server stopped", "succeeded"], done["attempts"]
    assert run_steps(again, run["id"]) == list(range(1, 301))


def test_a_run_that_is_running_whenever_the_server_dies_meets_max_restarts(with_dataset, serve, tool):
    """Every start of a trainer is an attempt, whatever ended the previous one: a run that is running each
    time the server is killed (or that kills it) spends its restarts and fails, never loops for ever."""
    server = with_dataset("step_ms=10")
    run = submit(server, seed_config(steps=100_000, checkpoint_every=50, max_restarts=1)).json()
    for crash in (1, 2):
        poll("the run training", lambda: True if requests.get(server.api(f"/runs/{run['id']}"), timeout=10)
             .json()["status"] == "running" else None)
        server.proc.kill()
        server.proc.wait()
        server = fake_server(serve, tool, "step_ms=10", data=server.data)
        shown = requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()
        assert [a["reason"] for a in shown["attempts"]].count("server crashed") == crash, shown["attempts"]
    done = wait_run(server, run["id"])
    assert done["status"] == "failed" and done["reason"] == "crashed" and done["restarts"] == 1, done
    assert "gave up after 1 restarts" in done["error"]["message"]
    assert [a["reason"] for a in done["attempts"]] == ["server crashed", "server crashed"], done["attempts"]
