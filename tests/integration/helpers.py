"""Helpers shared by the integration tests: polling for a condition, a stock TensorBoard, a free port."""
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

DEADLINE_S = 60


def poll(what, fn, deadline_s=DEADLINE_S):
    """Calls fn() until it returns something other than None, for at most deadline_s seconds."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = fn()
        if got is not None:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out after {deadline_s} s waiting for {what}")


@contextlib.contextmanager
def tensorboard(logdir, logs):
    """Runs `tensorboard --load_fast=true --logdir logdir` (logs: a folder for its output); yields
    (base_url, pid). Killed with its process group (the Rust data server included) at the end."""
    out, err = open(logs / "stdout", "w+"), open(logs / "stderr", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--load_fast=true",
         "--host", "127.0.0.1", "--port", "0", "--reload_interval", "1"],
        stdout=out, stderr=err, start_new_session=True)
    try:
        def url():
            assert proc.poll() is None, (logs / "stderr").read_text()[-4000:]
            m = re.search(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+)/",
                          (logs / "stderr").read_text() + (logs / "stdout").read_text())
            return m.group(1) if m else None
        yield poll("tensorboard to listen", url), proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.close()
        err.close()


def run_dir(data, run_id):
    """DATA/runs/<folder> of run run_id (server/server.h, tw_run_folder_name): NAME-<the id's first 7
    characters> (or NAME-<id>) for a named run, the bare id for an unnamed one or one an older Tower made;
    DATA/runs/<id> when there is none (yet, or any more)."""
    runs = Path(data) / "runs"
    found = [*runs.glob(f"*-{run_id[:7]}"), *runs.glob(f"*-{run_id}")]
    assert len(found) <= 1, found
    return found[0] if found and not (runs / run_id).exists() else runs / run_id


def copy_run_rows(db, run_id, n, **over):
    """Inserts n copies of run run_id's row into the SQLite file db (the server stopped, or not writing):
    each with a new id as its folder, no name and no idempotency key, and the columns in `over` replaced.
    The store's triggers keep the per-state counts. For the tests and benchmarks of many runs."""
    import secrets
    import sqlite3
    con = sqlite3.connect(db)
    try:
        cols = [c[1] for c in con.execute("PRAGMA table_info(runs)") if c[1] != "seq"]
        row = dict(zip(cols, con.execute(f"SELECT {', '.join(cols)} FROM runs WHERE id = ?", (run_id,)).fetchone()))
        copies = []
        for _ in range(n):
            rid = "r" + secrets.token_hex(8)[:15]
            copies.append({**row, "id": rid, "name": None, "folder": rid, "idempotency_key": None, **over})
        con.executemany(f"INSERT INTO runs({', '.join(cols)}) VALUES({', '.join('?' * len(cols))})",
                        [tuple(c[k] for k in cols) for c in copies])
        con.commit()
    finally:
        con.close()


def free_port():
    """A loopback TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
