"""A symlink planted in the data folder never leads the server, or the trainer it starts, outside
it (base/datafs.h). One test per place: a run's `log`, its `checkpoints/` folder, a checkpoint file, an
event file, a dataset's `train.tfrecord`, and a whole run folder. Each points its link at an outside target
with known content; after every request (log, metrics, checkpoint list and download, samples, delete) and
after restarts of the server (kill -9 and SIGTERM, then a start on the same data folder) the outside target's
files and bytes are unchanged, no reply holds its bytes, and the reply is an error naming the path (and the
server's log says so); a run that would write through the link fails instead, with the path in its error."""
import os
import shutil
import signal
import subprocess

import requests

import helpers
from helpers import poll
from test_server import child_pids, pid_alive, seed_config, submit, wait_dataset, wait_run

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1", "--max-restarts", "0")
SECRET = b"outside the data folder: never served, written or deleted\n"
CSV = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(40))
OTHER_CSV = "a,b,label\n" + "".join(f"4242,{i},{i % 2}\n" for i in range(40))  # told apart by 4242


class Outside:
    """A folder outside the data folder (made with files, or as it is) whose every entry and byte must stay."""

    def __init__(self, path, files=None):
        self.path = path
        if files is not None:
            path.mkdir()
            for name, data in files.items():
                (path / name).write_bytes(data)
        self.before = self.snapshot()

    def snapshot(self):
        seen = {}
        for top, dirs, files in os.walk(self.path):  # never follows a link
            for name in dirs + files:
                p = os.path.join(top, name)
                seen[os.path.relpath(p, self.path)] = None if os.path.isdir(p) else open(p, "rb").read()
        return seen

    def check(self):
        assert self.snapshot() == self.before


def fake_server(serve, tool, data=None):
    return serve("--trainer", tool("tw_faketrain"), *FAST, env={"TW_FAKE": "step_ms=20"}, data=data)


def upload_csv(server, name, text):
    r = requests.post(server.api(f"/datasets?name={name}&label_column=label"), data=text,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    done = wait_dataset(server, r.json()["id"])
    assert done["status"] == "ready", done
    return done


def kill_9(server):
    """kill -9 of the server; returns once its trainers (killed with it) are gone too."""
    kids = child_pids(server.proc.pid)
    server.proc.kill()
    server.proc.wait()
    poll("the trainers to die with the server", lambda: True if not any(map(pid_alive, kids)) else None)


def restarted(serve, server, start, sig):
    """Stops server (SIGKILL or SIGTERM) and starts a new one on its data folder with start(data)."""
    if sig == signal.SIGKILL:
        kill_9(server)
    else:
        server.proc.send_signal(sig)
        server.proc.wait(timeout=60)
    return start(server.data)


def run_dir(server, run_id):
    return helpers.run_dir(server.data.resolve(), run_id)


def refused(r, path, secret=SECRET):
    """An error reply (500 or 409) that names path as a symlink and holds none of the outside bytes."""
    assert r.status_code in (500, 409), (r.status_code, r.text[:300])
    assert secret not in r.content
    message = r.json()["error"]["message"]
    assert str(path) in message and "symbolic link" in message, message


def logged(server, path):
    text = (server.data.parent / f"{server.data.name}.server.log").read_text()
    assert any(str(path) in line and "symbolic link" in line for line in text.splitlines()), text[-2000:]


def failed_naming(server, run_id, path):
    done = wait_run(server, run_id)
    assert done["status"] == "failed", done
    message = done["error"]["message"]
    assert str(path) in message and "symbolic link" in message, message
    return done


def running_with_checkpoint(serve, tool):
    """A fake server with a dataset and a run (300 steps of 20 ms) that has written a checkpoint, then killed -9
    (the trainer dies with it): the run is `running` in the store and resumes when a server starts again (the
    crash is its one restart)."""
    server = fake_server(serve, tool)
    upload_csv(server, "tab", CSV)
    run = submit(server, seed_config(dataset="tab", steps=300, checkpoint_every=5, max_restarts=1)).json()
    latest = run_dir(server, run["id"]) / "checkpoints" / "latest"
    poll("a checkpoint", lambda: True if latest.exists() else None)
    kill_9(server)
    return server, run["id"]


def test_run_log_symlink_is_never_appended_or_served(serve, tool, tmp_path):
    out = Outside(tmp_path / "outside", {"secret": SECRET})
    server, run_id = running_with_checkpoint(serve, tool)
    log = run_dir(server, run_id) / "log"
    log.unlink()
    log.symlink_to(out.path / "secret")
    start = lambda data: fake_server(serve, tool, data=data)  # noqa: E731
    server = start(server.data)  # resumes the run: its restart line must not reach the outside file
    failed_naming(server, run_id, log)
    out.check()
    logged(server, log)
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig:
            server = restarted(serve, server, start, sig)
        refused(requests.get(server.api(f"/runs/{run_id}/log"), timeout=10), log)
        out.check()
    assert log.is_symlink()


def test_checkpoints_folder_symlink_is_never_cleaned_listed_or_served(serve, tool, tmp_path):
    name = "ckpt-0000000005.safetensors"
    out = Outside(tmp_path / "outside", {"latest": f"{name}\n".encode(), name: SECRET, "x.tmp.1": SECRET})
    server, run_id = running_with_checkpoint(serve, tool)
    ckdir = run_dir(server, run_id) / "checkpoints"
    shutil.rmtree(ckdir)
    ckdir.symlink_to(out.path)
    start = lambda data: fake_server(serve, tool, data=data)  # noqa: E731
    server = start(server.data)  # resuming cleans checkpoints/ of *.tmp.*: not through the link
    failed_naming(server, run_id, ckdir)
    out.check()
    logged(server, ckdir)
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig:
            server = restarted(serve, server, start, sig)
        refused(requests.get(server.api(f"/runs/{run_id}/checkpoints"), timeout=10), ckdir)
        out.check()
        refused(requests.get(server.api(f"/runs/{run_id}/checkpoints/latest"), timeout=10), ckdir)
        out.check()
    assert requests.delete(server.api(f"/runs/{run_id}"), timeout=10).status_code == 204
    assert not os.path.lexists(run_dir(server, run_id))  # the link went, not what it points at
    out.check()
    server = restarted(serve, server, start, signal.SIGTERM)
    out.check()


def test_checkpoint_file_symlink_is_never_resumed_from_or_served(serve, tool, tmp_path):
    out = Outside(tmp_path / "outside", {"secret": SECRET})
    server, run_id = running_with_checkpoint(serve, tool)
    ckdir = run_dir(server, run_id) / "checkpoints"
    ckpt = ckdir / (ckdir / "latest").read_text().strip()
    ckpt.unlink()
    ckpt.symlink_to(out.path / "secret")
    start = lambda data: fake_server(serve, tool, data=data)  # noqa: E731
    server = start(server.data)  # the trainer (confined by --data-root) must refuse to resume from it
    failed_naming(server, run_id, ckpt)
    out.check()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig:
            server = restarted(serve, server, start, sig)
        refused(requests.get(server.api(f"/runs/{run_id}/checkpoints"), timeout=10), ckpt)
        out.check()
        refused(requests.get(server.api(f"/runs/{run_id}/checkpoints/latest"), timeout=10), ckpt)
        out.check()
    logged(server, ckpt)


def test_event_file_symlink_is_never_read_for_metrics(serve, tool, tmp_path):
    out_dir = tmp_path / "outside"
    out_dir.mkdir()
    made = subprocess.run([tool("tw_eventgen"), out_dir, "--steps", "3"], capture_output=True, text=True,
                          check=True).stdout.strip()
    secret = open(made, "rb").read()
    shutil.rmtree(out_dir)
    out = Outside(out_dir, {"events": secret})
    server = fake_server(serve, tool)
    upload_csv(server, "tab", CSV)
    run = submit(server, seed_config(dataset="tab", steps=10)).json()
    assert wait_run(server, run["id"])["status"] == "succeeded"
    r = requests.get(server.api(f"/runs/{run['id']}/metrics"), timeout=10)
    assert r.status_code == 200 and "loss" in r.json()["scalars"]
    events = next(run_dir(server, run["id"]).glob("events.out.tfevents.*"))
    events.unlink()
    events.symlink_to(out.path / "events")
    start = lambda data: fake_server(serve, tool, data=data)  # noqa: E731
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig:
            server = restarted(serve, server, start, sig)
        r = requests.get(server.api(f"/runs/{run['id']}/metrics"), timeout=10)
        refused(r, events, secret)
        assert "eval/accuracy" not in r.text  # the outside file's series
        out.check()
    logged(server, events)


def test_dataset_tfrecord_symlink_is_never_sampled_or_trained_on(serve, tool, tmp_path):
    server = serve(*FAST)  # the real trainer
    dataset = upload_csv(server, "tab", CSV)
    other = upload_csv(server, "other", OTHER_CSV)
    secret = (server.data / "datasets" / other["id"] / "train.tfrecord").read_bytes()
    out = Outside(tmp_path / "outside", {"train.tfrecord": secret})
    train = server.data.resolve() / "datasets" / dataset["id"] / "train.tfrecord"
    train.unlink()
    train.symlink_to(out.path / "train.tfrecord")
    samples = f"/datasets/{dataset['id']}/samples?n=8"
    r = requests.get(server.api(samples), timeout=10)
    refused(r, train, secret)
    assert "4242" not in r.text
    out.check()
    logged(server, train)
    r = submit(server, seed_config(dataset="tab", steps=20, summary_every=10, eval_every=0, checkpoint_every=10))
    assert r.status_code == 201, r.text  # the trainer, confined by --data-root, must refuse the file
    done = failed_naming(server, r.json()["id"], train)
    assert done["step"] == 0
    out.check()
    start = lambda data: serve(*FAST, data=data)  # noqa: E731
    for sig in (signal.SIGTERM, signal.SIGKILL):
        server = restarted(serve, server, start, sig)
        refused(requests.get(server.api(samples), timeout=10), train, secret)
        out.check()


def test_run_folder_symlink_is_never_written_served_or_deleted_through(serve, tool, tmp_path):
    server, run_id = running_with_checkpoint(serve, tool)
    folder = run_dir(server, run_id)
    copy = tmp_path / "outside"
    shutil.move(folder, copy)  # the run's own files, now outside, plus a marked log and a leftover temporary
    (copy / "log").write_bytes(SECRET)
    (copy / "checkpoints" / "x.tmp.1").write_bytes(SECRET)
    latest = copy / "checkpoints" / (copy / "checkpoints" / "latest").read_text().strip()
    latest.write_bytes(SECRET)
    out = Outside(copy)
    folder.symlink_to(copy)
    start = lambda data: fake_server(serve, tool, data=data)  # noqa: E731
    server = start(server.data)  # resuming the run must not write, clean or read through the link
    failed_naming(server, run_id, folder)
    out.check()
    logged(server, folder)
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig:
            server = restarted(serve, server, start, sig)
        for route in ("log", "metrics", "checkpoints", "checkpoints/latest"):
            refused(requests.get(server.api(f"/runs/{run_id}/{route}"), timeout=10), folder)
            out.check()
    assert requests.delete(server.api(f"/runs/{run_id}"), timeout=10).status_code == 204
    assert not os.path.lexists(folder)  # the link went, not the folder it points at
    out.check()
    server = restarted(serve, server, start, signal.SIGKILL)
    out.check()
