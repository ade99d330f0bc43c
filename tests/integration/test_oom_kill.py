"""The kernel's OOM killer inside a real memory cgroup limit: a trainer that outgrows the limit is killed with
SIGKILL by the kernel, and the server reports the run failed `out_of_memory` (the group, its limit and its
peak named), at once, without retrying it as a crash.

The test makes a memory cgroup of its own (v2, or v1's memory hierarchy) with a 192 MiB limit and no swap,
moves the server into it (its trainers start there), and lets the fake trainer write 1 GiB (hog_mb). It needs
root and a writable memory controller: where the machine has none it says so and is skipped."""
import os
import pathlib
import signal

import pytest
import requests

from helpers import poll
from test_server import submit, wait_run
from test_server_faults import FAST

LIMIT = 192 << 20


def make_group(name):
    """A memory cgroup limited to LIMIT bytes, no swap -> its folder, or None with the reason it cannot be."""
    v2 = pathlib.Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        if "memory" not in (v2 / "cgroup.subtree_control").read_text().split():
            return None, "cgroup v2 without the memory controller enabled for child groups"
        group, files = v2 / name, [("memory.max", LIMIT), ("memory.swap.max", 0)]
    else:
        root = pathlib.Path("/sys/fs/cgroup/memory")
        if not root.is_dir():
            return None, "no memory cgroup hierarchy mounted"
        group = root / name
        files = [("memory.limit_in_bytes", LIMIT), ("memory.memsw.limit_in_bytes", LIMIT)]
    try:
        group.mkdir()
        for file, value in files:
            if (group / file).exists():
                (group / file).write_text(str(value))
    except OSError as e:
        return None, f"cannot make a memory cgroup here: {e}"
    return group, None


@pytest.fixture
def memory_group():
    group, why = make_group(f"tower-test-{os.getpid()}")
    if group is None:
        pytest.skip(why)
    yield group
    for pid in (group / "cgroup.procs").read_text().split():  # the test's server and whatever it started
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass

    def empty():
        return True if not (group / "cgroup.procs").read_text().split() else None
    poll("the group's processes to end", empty)
    group.rmdir()


def test_a_trainer_killed_by_the_oom_killer_fails_out_of_memory(serve, tool, memory_group):
    server = serve("--trainer", tool("tw_faketrain"), *FAST, "--max-restarts", "3", env={"TW_FAKE": "hog_mb=1024"})
    (memory_group / "cgroup.procs").write_text(str(server.proc.pid))  # the server, and its trainers after it
    text = "a,label\n" + "".join(f"{i},{i % 2}\n" for i in range(40))
    r = requests.post(server.api("/datasets?name=tiny"), data=text, headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    poll("the dataset", lambda: requests.get(server.api("/datasets/tiny"), timeout=10).json()["status"] == "ready"
         or None)
    r = submit(server, {"dataset": "tiny", "model": {"layers": [{"type": "dense", "units": 2}]},
                        "loss": "softmax_cross_entropy", "batch_size": 4, "steps": 20})
    assert r.status_code == 201, r.text
    done = wait_run(server, r.json()["id"])
    assert done["status"] == "failed" and done["reason"] == "out_of_memory", done
    assert done["restarts"] == 0, done  # not retried blindly: the next attempt would meet the same limit
    message = done["error"]["message"]
    assert done["error"]["code"] == "OUT_OF_MEMORY" and "OOM killer" in message, message
    assert str(memory_group) in message and "limit 192.0 MiB" in message, message
    assert "peak " in message and "peak unknown" not in message, message
    assert [a["reason"] for a in done["attempts"]] == ["out_of_memory"], done["attempts"]
