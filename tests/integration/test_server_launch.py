"""Runs of several processes started by `tower serve` through its launcher (server/launch.h): the real
Open MPI `mpirun` around the fake trainer (tests/tools/tw_faketrain.c, rank-aware under mpirun), the
session every rank stays in, cancel / resume, a hung rank ended by the heartbeat timeout, the strict
"processes" / "hosts" keys and --launcher template; and, when the trainer forms MPI worlds, a real
two-process run through the server, cancelled, resumed and completed."""
import json
import os
import pathlib
import shutil
import signal
import subprocess

import pytest
import requests

import helpers
from helpers import poll
from test_server import pid_alive, seed_config, submit, upload_fashion, wait_run

pytestmark = pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI's mpirun is not installed")

# Open MPI refuses to run as root without these; a container's root is the usual case (docs/scale-out.md).
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "5")


def fake_server(serve, tool, fake, *args):
    server = serve("--trainer", tool("tw_faketrain"), *FAST, *args, env={**MPI_ENV, "TW_FAKE": fake})
    upload_fashion(server)
    return server


def log_text(server, run_id):
    return requests.get(server.api(f"/runs/{run_id}/log?tail=10000"), timeout=10).text


def attempt_pids(server, run_id, attempt):
    """(launcher pid, {rank: pid}) of an attempt, once both ranks announced themselves in the run's log."""
    def found():
        text = log_text(server, run_id)
        head = f"== attempt {attempt}: pid "
        if head not in text:
            return None
        part = text.split(head, 1)[1]
        leader = int(part.split(" ", 1)[0])
        part = part.split(f"== attempt {attempt + 1}:", 1)[0]
        ranks = {}
        for line in part.splitlines():
            if line.startswith("{") and '"rank_pid"' in line:
                o = json.loads(line)
                ranks[o["rank"]] = o["rank_pid"]
        return (leader, ranks) if len(ranks) == 2 else None
    return poll(f"both ranks of attempt {attempt} to start", found)


def stat_fields(pid):
    """(state, ppid, pgrp, session) of a live process."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def cmdline(pid):
    return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def steps_log(server, run_id):
    return (helpers.run_dir(server.data, run_id) / "steps.log").read_text().split("\n")


def test_two_processes_start_through_mpirun_in_one_session_and_cancel_resume_complete(serve, tool):
    server = fake_server(serve, tool, "step_ms=20")
    reply = submit(server, seed_config(steps=400, checkpoint_every=50, processes=2))
    assert reply.status_code == 201, reply.text
    run = requests.get(server.api(f"/runs/{reply.json()['id']}"), timeout=10).json()
    assert run["processes"] == 2 and run["hosts"] == [], run
    leader, ranks = attempt_pids(server, run["id"], 1)
    argv = cmdline(leader)
    assert pathlib.Path(argv[0]).name == "mpirun", argv
    assert argv[1:7] == ["--quiet", "-np", "2", "--oversubscribe", "--bind-to", "none"], argv
    assert argv[7] == str(tool("tw_faketrain")) and argv[8] == "train" and "--resume" in argv
    for rank, pid in ranks.items():
        state, _, pgrp, session = stat_fields(pid)
        # mpirun puts each rank in a process group of its own, never out of the session the server made
        assert session == leader, (rank, pid, session, leader)
        assert cmdline(pid)[0] == str(tool("tw_faketrain"))
    assert stat_fields(leader)[3] == leader

    poll("a checkpoint", lambda: True if (helpers.run_dir(server.data, run["id"]) / "checkpoints" /
                                          "latest").exists() else None)
    cancel = requests.post(server.api(f"/runs/{run['id']}/cancel"), timeout=10)
    assert cancel.status_code == 202, cancel.text
    done = wait_run(server, run["id"])
    assert done["status"] == "cancelled" and 0 < done["step"] < 400, done
    for pid in (leader, *ranks.values()):
        assert not pid_alive(pid), pid
    assert '"status":"cancelled"' in log_text(server, run["id"]).replace(" ", "")

    resumed = requests.post(server.api(f"/runs/{run['id']}/resume"), json={}, timeout=10)
    assert resumed.status_code == 202, resumed.text
    assert resumed.json()["processes"] == 2
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["step"] == 400 and done["processes"] == 2, done
    assert "resumed_from" in log_text(server, run["id"])
    # rank 0 alone wrote the run's files: every step exactly once, across the cancel and the resume
    assert steps_log(server, run["id"]) == [f"step {k}" for k in range(1, 401)] + [""]


def test_hosts_reach_the_launchers_command_line(serve, tool):
    server = fake_server(serve, tool, "step_ms=20")
    run = submit(server, seed_config(steps=100, processes=2, hosts=["localhost:2"])).json()
    run = requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()
    assert run["hosts"] == ["localhost:2"] and run["processes"] == 2, run
    leader, _ = attempt_pids(server, run["id"], 1)
    argv = cmdline(leader)
    assert argv[argv.index("--host") + 1] == "localhost:2", argv
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["step"] == 100, done


def test_a_hung_rank_is_ended_by_the_heartbeat_timeout_and_the_run_retried(serve, tool):
    server = fake_server(serve, tool, "step_ms=20", "--heartbeat-timeout", "2")
    run = submit(server, seed_config(steps=300, checkpoint_every=20, processes=2, max_restarts=1)).json()
    leader, ranks = attempt_pids(server, run["id"], 1)
    os.kill(ranks[0], signal.SIGSTOP)  # rank 0, the one that reports, hangs: the world makes no progress
    second = attempt_pids(server, run["id"], 2)
    for pid in (leader, *ranks.values()):
        assert not pid_alive(pid), pid
    assert second[0] != leader
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1 and done["step"] == 300, done
    assert "no progress line for 2 s" in log_text(server, run["id"])


def test_a_failing_rank_zero_fails_the_attempt_with_its_exit_code(serve, tool):
    server = fake_server(serve, tool, "step_ms=5,exit_at=5:12,once")
    run = submit(server, seed_config(steps=40, checkpoint_every=2, processes=2)).json()
    done = wait_run(server, run["id"])
    assert done["status"] == "succeeded" and done["restarts"] == 1, done
    assert "illegal memory access" in log_text(server, run["id"])


@pytest.mark.parametrize("key,value", [
    ("processes", 0), ("processes", 65), ("processes", "2"), ("processes", 1.5), ("processes", True),
    ("hosts", "node1"), ("hosts", ["-oProxyCommand=touch /tmp/x"]), ("hosts", ["node1 node2"]),
    ("hosts", ["node1;id"]), ("hosts", ["node1:0"]), ("hosts", ["node1:"]), ("hosts", ["node1:12345"]),
    ("hosts", ["$(id)"]), ("hosts", ["a" * 254]), ("hosts", [f"n{i}" for i in range(65)]), ("hosts", [3]),
])
def test_bad_processes_and_hosts_are_400_naming_the_key(serve, key, value):
    server = serve(env=MPI_ENV)
    cfg = seed_config(steps=10, **{key: value})
    if key == "hosts":
        cfg["processes"] = 2
    reply = submit(server, cfg)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and error["message"].startswith(f"{key}:"), error


def test_hosts_with_one_process_are_400(serve):
    reply = submit(serve(), seed_config(steps=10, hosts=["node1"]))
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith("hosts:"), reply.text


def test_processes_without_a_launcher_are_400_never_queued(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), "--launcher", "tw-no-such-launcher -n {processes} {trainer}")
    upload_fashion(server)
    reply = submit(server, seed_config(steps=10, processes=2))
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert message.startswith("processes:") and "'tw-no-such-launcher' is not found on PATH" in message
    assert requests.get(server.api("/runs"), timeout=10).json()["total"] == 0
    one = submit(server, seed_config(steps=10, processes=1))  # one process needs no launcher
    assert one.status_code == 201, one.text
    assert wait_run(server, one.json()["id"])["status"] == "succeeded"


@pytest.mark.parametrize("template", [
    "mpirun -np {processes}", "mpirun {trainer} {trainer}", "mpirun -np {nprocs} {trainer}",
    "mpirun --host {hosts} {trainer}", "mpirun '{trainer}'", "mpirun -x A=\"b c\" {trainer}",
    "mpirun $(id) {trainer}", "mpirun [--host {hosts} {trainer}", "mpirun --host {hosts}] {trainer}",
    "[mpirun] {trainer}", "{trainer}", "mpirun [[--host {hosts}]] {trainer}", "mpirun x{trainer} ",
    "mpirun\t{trainer}", "",
])
def test_a_bad_launcher_template_stops_serve_with_2_naming_it(tower_bin, tmp_path, template):
    got = subprocess.run([str(tower_bin), "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"),
                          "--no-demo", "--launcher", template], capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got
    shown = template.replace("\t", "\\t")  # the log escapes control characters (server/logtext.h)
    assert f"--launcher '{shown}'" in got.stderr, got.stderr


def test_resume_needs_the_launcher_too(serve, tool, tmp_path):
    server = fake_server(serve, tool, "step_ms=20")
    run = submit(server, seed_config(steps=2000, processes=2)).json()
    attempt_pids(server, run["id"], 1)
    assert requests.post(server.api(f"/runs/{run['id']}/cancel"), timeout=10).status_code == 202
    assert wait_run(server, run["id"])["status"] == "cancelled"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0
    again = serve("--trainer", tool("tw_faketrain"), "--launcher", "tw-no-such-launcher {trainer}",
                  data=server.data, env=MPI_ENV)
    reply = requests.post(again.api(f"/runs/{run['id']}/resume"), json={}, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith("processes:"), reply.text
    assert requests.get(again.api(f"/runs/{run['id']}"), timeout=10).json()["status"] == "cancelled"


def built_with_mpi():
    from conftest import BUILD
    tower = BUILD / "server" / "tower"
    return tower.exists() and "libmpi" in subprocess.run(["ldd", str(tower)], capture_output=True, text=True).stdout


@pytest.mark.skipif(not built_with_mpi(), reason="tower is built without MPI (no world/world_mpi.c)")
def test_the_real_trainer_in_two_processes_cancelled_resumed_and_completed(serve):
    server = serve("--grace", "30", env=MPI_ENV)  # the trainer: this tower's `train`, under mpirun
    upload_fashion(server)
    steps = 2000  # a few seconds on a quiet machine: the cancel follows the first checkpoint (step 50)
    run = submit(server, seed_config(steps=steps, summary_every=100, eval_every=steps, checkpoint_every=50,
                                     processes=2)).json()
    latest = helpers.run_dir(server.data, run["id"]) / "checkpoints" / "latest"
    poll("the first checkpoint", lambda: True if latest.exists() else None, deadline_s=180)
    assert requests.post(server.api(f"/runs/{run['id']}/cancel"), timeout=10).status_code == 202
    cancelled = wait_run(server, run["id"], deadline_s=180)
    assert cancelled["status"] == "cancelled" and 0 < cancelled["step"] < steps, cancelled
    log = log_text(server, run["id"])
    start = json.loads(next(line for line in log.splitlines() if line.startswith('{"backend"')))
    assert start["processes"] == 2 and start["world"] == "mpi" and start["total_towers"] == 2, start
    assert '"status":"cancelled"' in log.replace(" ", "")

    assert requests.post(server.api(f"/runs/{run['id']}/resume"), json={}, timeout=10).status_code == 202
    done = wait_run(server, run["id"], deadline_s=600)
    assert done["status"] == "succeeded" and done["step"] == steps and done["processes"] == 2, done
    assert done["restarts"] == 0 and done["error"] is None
    assert 0 < done["metrics"]["loss"] < 2.3 and done["metrics"]["eval_accuracy"] > 0.5, done["metrics"]
    log = log_text(server, run["id"])
    assert '"resumed_from"' in log and log.count("== attempt") == 2
    listed = requests.get(server.api(f"/runs/{run['id']}/checkpoints"), timeout=10).json()
    assert listed["latest"] == steps
    scalars = requests.get(server.api(f"/runs/{run['id']}/metrics"), timeout=10).json()["scalars"]
    loss_steps = [p[0] for p in scalars["loss"]]
    assert loss_steps == sorted(set(loss_steps)) and loss_steps[-1] == steps  # one writer, no repeats


def test_server_shutdown_stops_every_rank_and_the_run_resumes_at_the_next_start(serve, tool):
    server = fake_server(serve, tool, "step_ms=20")
    run = submit(server, seed_config(steps=300, checkpoint_every=50, processes=2)).json()
    leader, ranks = attempt_pids(server, run["id"], 1)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 0
    for pid in (leader, *ranks.values()):
        assert not pid_alive(pid), pid
    again = serve("--trainer", tool("tw_faketrain"), *FAST, data=server.data, env={**MPI_ENV, "TW_FAKE": "step_ms=5"})
    done = wait_run(again, run["id"])
    assert done["status"] == "succeeded" and done["step"] == 300 and done["processes"] == 2, done
    assert steps_log(again, run["id"]) == [f"step {k}" for k in range(1, 301)] + [""]
