"""A run is its whole process group: when the trainer exits, what is left of its group is
killed and reaped before the run settles and frees its device, whether a helper holds the trainer's
stdout, ignores SIGTERM or was orphaned by a double fork. And the server's logs (a run's `log`, the
server's stderr) show control characters escaped, never raw (§7). Driven by the fake trainer's helper=KIND
and forge switches (tests/tools/tw_faketrain.c)."""
import os
import re
import signal

import pytest
import requests

import helpers
from helpers import poll
from test_server import pid_alive, seed_config, submit, upload_fashion, wait_run

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1", "--heartbeat-timeout", "5")
SETTLE_S = 20  # a run that outlives its group's leader waits forever without the fix
FORGED = "\n== forged ==\n\x1b[2J"


def fake_server(serve, tool, fake, *args, data=None):
    server = serve("--trainer", tool("tw_faketrain"), *FAST, *args, env={"TW_FAKE": fake}, data=data)
    upload_fashion(server)
    return server


@pytest.fixture
def helper_pid(tmp_path):
    """helper_pid(server, run_id) -> the pid the run's helper wrote to stdout, read from the run's log.
    At teardown any process still running from this test's folder (a helper the server failed to kill) is
    killed, so none outlives the test."""
    def read(server, run_id):
        log = helpers.run_dir(server.data, run_id) / "log"

        def find():
            m = re.search(r'\{"helper_pid":(\d+)\}', log.read_text()) if log.exists() else None
            return int(m.group(1)) if m else None
        return poll(f"run {run_id}'s helper pid in its log", find, SETTLE_S)
    yield read
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(tmp_path).encode() in open(f"/proc/{entry}/cmdline", "rb").read():
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass


def gone(pid):
    poll(f"process {pid} to be gone", lambda: True if not pid_alive(pid) else None, SETTLE_S)


def device_run(server):
    return requests.get(server.api("/devices"), timeout=10).json()["devices"][0]["run"]


@pytest.mark.parametrize("kind", ["stdout", "ignore_term", "orphan"])
def test_trainer_exit_kills_its_group_then_the_next_run_starts(serve, tool, helper_pid, kind):
    server = fake_server(serve, tool, f"step_ms=5,helper={kind}")
    first = submit(server, seed_config(steps=20)).json()
    second = submit(server, seed_config(steps=20)).json()
    helper = helper_pid(server, first["id"])
    done = wait_run(server, first["id"], deadline_s=SETTLE_S)
    assert done["status"] == "succeeded" and done["step"] == 20 and done["restarts"] == 0
    gone(helper)
    after = wait_run(server, second["id"], deadline_s=SETTLE_S)
    assert after["status"] == "succeeded"
    gone(helper_pid(server, second["id"]))
    assert device_run(server) is None


def test_failed_trainer_kills_its_group(serve, tool, helper_pid):
    server = fake_server(serve, tool, "step_ms=5,helper=stdout,exit_at=3:11")
    run = submit(server, seed_config(steps=20)).json()
    helper = helper_pid(server, run["id"])
    done = wait_run(server, run["id"], deadline_s=SETTLE_S)
    assert done["status"] == "failed" and done["reason"] == "out_of_memory"
    gone(helper)
    assert device_run(server) is None


def test_cancel_kills_a_helper_that_ignores_sigterm(serve, tool, helper_pid):
    server = fake_server(serve, tool, "step_ms=20,helper=ignore_term")
    run = submit(server, seed_config(steps=100000)).json()
    helper = helper_pid(server, run["id"])
    wait_run(server, run["id"], ("running",))
    assert requests.post(server.api(f"/runs/{run['id']}/cancel"), timeout=10).status_code in (200, 202)
    done = wait_run(server, run["id"], deadline_s=SETTLE_S)
    assert done["status"] == "cancelled"
    gone(helper)
    assert device_run(server) is None
    nxt = submit(server, seed_config(steps=5)).json()
    assert wait_run(server, nxt["id"], deadline_s=SETTLE_S)["status"] == "succeeded"


def test_server_shutdown_leaves_no_process_of_a_run_behind(serve, tool, helper_pid):
    server = fake_server(serve, tool, "step_ms=20,helper=ignore_term")
    run = submit(server, seed_config(steps=100000)).json()
    helper = helper_pid(server, run["id"])
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=SETTLE_S) == 0
    gone(helper)


def assert_no_forged_line(text, where):
    assert "\x1b" not in text and "\x07" not in text, f"raw terminal escape in {where}"
    assert not any(line.startswith("== forged ==") for line in text.splitlines()), f"forged line in {where}"


def test_run_log_escapes_control_characters(serve, tool):
    server = fake_server(serve, tool, "forge")
    run = submit(server, seed_config(steps=20)).json()
    done = wait_run(server, run["id"], deadline_s=SETTLE_S)
    assert done["status"] == "failed" and done["reason"] == "bad_config"
    assert done["error"]["message"].endswith(f"unknown value '{FORGED}'")  # the API keeps the text
    log = (helpers.run_dir(server.data, run["id"]) / "log").read_bytes().decode()
    assert_no_forged_line(log, "the run log")
    assert r"unknown value '\n== forged ==\n\x1b[2J' ==" in log  # the server's exit line
    assert r"forge: \x1b[2J\x1b]0;owned\x07 terminal escapes" in log  # the child's stderr line


def test_server_stderr_escapes_control_characters(serve, tmp_path, run_tower):
    data = tmp_path / f"data{FORGED}"
    serve(data=data)
    log = tmp_path / f"{data.name}.server.log"
    line = poll("the listening line", lambda: next(
        (x for x in log.read_bytes().decode().splitlines() if "listening on" in x), None))
    assert line.endswith(r"data\n== forged ==\n\x1b[2J")
    assert_no_forged_line(log.read_bytes().decode(), "the server's stderr")
    bad = run_tower("serve", "--grace", f"1{FORGED}")
    assert bad.returncode == 2
    assert_no_forged_line(bad.stderr, "a usage error")
    assert r"got '1\n== forged ==\n\x1b[2J'" in bad.stderr
