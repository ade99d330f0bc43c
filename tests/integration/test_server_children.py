"""The children `tower serve` runs: own process group, nothing of the server's inherited (docs/reliability.md
row P12), the devices they are scheduled on, and `tower devices`."""
import json
import os
import subprocess

import requests

import helpers
from helpers import poll
from test_server import child_pids, seed_config, submit, upload_fashion, wait_run


def test_child_has_its_own_group_and_no_server_descriptors(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=20"})
    upload_fashion(server)
    run = submit(server, seed_config(steps=100000)).json()
    wait_run(server, run["id"], ("running",))
    child = poll("the child", lambda: (child_pids(server.proc.pid) or [None])[0])

    def exec_done():  # "running" is stored right after fork: the child may still be inside execve
        args = open(f"/proc/{child}/cmdline", "rb").read().split(b"\0")
        return args if len(args) > 1 and args[1] == b"train" else None
    cmdline = poll("the child's exec", exec_done)
    assert os.getpgid(child) == child != os.getpgid(server.proc.pid)
    fds = {os.readlink(f"/proc/{child}/fd/{fd}") for fd in os.listdir(f"/proc/{child}/fd")}
    assert not any("tower.db" in f for f in fds), fds
    assert not any(f.startswith("socket:") for f in fds), fds  # not the listening socket
    logdir = str(helpers.run_dir(server.data.resolve(), run["id"]))
    assert [c.decode() for c in cmdline[1:7]] == ["train", f"{logdir}/config.json", "--logdir", logdir,
                                                   "--resume", "--backend"]
    assert [c.decode() for c in cmdline[8:10]] == ["--data-root", str(server.data.resolve())]  # confined
    env = dict(e.split(b"=", 1) for e in open(f"/proc/{child}/environ", "rb").read().split(b"\0") if b"=" in e)
    assert env[b"CUDA_VISIBLE_DEVICES"] == b"" and env[b"CUDA_DEVICE_ORDER"] == b"PCI_BUS_ID"
    devices = requests.get(server.api("/devices"), timeout=10).json()["devices"]
    assert devices == [{"id": "cpu", "kind": "cpu", "name": devices[0]["name"], "run": run["id"]}]
    requests.post(server.api(f"/runs/{run['id']}/cancel"), timeout=10)
    wait_run(server, run["id"])
    assert requests.get(server.api("/devices"), timeout=10).json()["devices"][0]["run"] is None


def test_tower_devices_says_why_there_is_no_gpu(tower_bin):
    out = subprocess.run([tower_bin, "devices", "--json"], capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    assert d["cpu"]["cores"] == os.cpu_count()
    if not os.path.isdir("/proc/driver/nvidia/gpus"):  # this machine: no driver
        assert d["gpus"] == [] and d["auto"] == "cpu"
        assert "no CUDA backend" in d["why_no_gpu"] or "driver" in d["why_no_gpu"]
    else:
        assert d["auto"] == "cuda" and all(g["compute_capability"] for g in d["gpus"])
    text = subprocess.run([tower_bin, "devices"], capture_output=True, text=True, check=True).stdout
    assert text.splitlines()[-1].startswith("cpu ")
    assert subprocess.run([tower_bin, "devices", "--bogus"], capture_output=True).returncode == 2


def test_start_up_keeps_folders_that_are_not_its_own(serve, tower_bin):
    """Only folders named like Tower's ids and missing from the store are debris: a dataset made by
    `tower convert` or a run of `tower train` in the same data folder (as the README's examples do) stays."""
    server = serve()
    data = server.data
    server.proc.kill()
    server.proc.wait()
    mine = [data / "datasets" / "fashion-mnist", data / "runs" / "mlp", data / "runs" / "r12345"]
    debris = [data / "datasets" / "d0123456789abcde", data / "runs" / "r0123456789abcde"]
    for folder in mine + debris:
        folder.mkdir(parents=True)
        (folder / "file").write_text("x")
    serve(data=data)
    assert all((folder / "file").exists() for folder in mine)
    assert not any(folder.exists() for folder in debris)
