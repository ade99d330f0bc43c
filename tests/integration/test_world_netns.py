"""A host of a TCP world that vanishes mid-run, for real: two network namespaces, each a "host" with an address
of its own on a veth pair (loopback-range addresses, 127.77.0.1 and .2, routed with route_localnet), rank 0 in
one and rank 1 in the other over MASTER_ADDR. Mid-step the link is cut on rank 1's side (its end of the pair
goes down: rank 0's packets are dropped without a word, as when a cable is pulled or a machine loses power).

Rank 0 must end within the documented bound (keep-alive after 5 s idle, 3 probes 5 s apart, TCP_USER_TIMEOUT
20 s: world/world_tcp.c, docs/reliability.md G17) with exit 1, which the server retries; the world started again
with --resume goes on from rank 0's last checkpoint to the end, and every step is written once by rank 0 alone
after the checkpoint it resumed from.

Needs root and iproute2 (`ip netns`); the namespaces and the pair are the test's own and are removed after it."""
import json
import os
import shutil
import subprocess
import time

import pytest

import helpers
from test_mpi import write_config
from test_train import fashion, losses, mlp_config  # noqa: F401  (fashion is a fixture)
from test_world_tcp import WORLD_VARS, WORLD_PREFIXES, json_lines, kill_all

HOSTS = ("127.77.0.1", "127.77.0.2")
BOUND_S = 60  # keep-alive (5 + 3 x 5 s) and TCP_USER_TIMEOUT (20 s), with room for a loaded machine


def ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def sysctl(ns, key):
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}=1"], check=True, capture_output=True)


@pytest.fixture
def two_hosts():
    """(ns_a, ns_b, link_b): two namespaces joined by a veth pair, A at HOSTS[0], B at HOSTS[1]."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make network namespaces")
    tag = f"tw{os.getpid() % 100000}"
    names = (f"{tag}a", f"{tag}b")
    links = (f"{tag}va", f"{tag}vb")
    try:
        for ns in names:
            ip("netns", "add", ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot make network namespaces here: {e.stderr.strip()}")
    try:
        ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for ns, link, addr in zip(names, links, HOSTS):
            ip("link", "set", link, "netns", ns)
            sysctl(ns, "net.ipv4.conf.all.route_localnet")
            sysctl(ns, f"net.ipv4.conf.{link}.route_localnet")
            ip("addr", "add", f"{addr}/24", "dev", link, ns=ns)
            ip("link", "set", link, "up", ns=ns)
            ip("link", "set", "lo", "up", ns=ns)
        yield names[0], names[1], links[1]
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def rank_env(port, rank):
    env = {k: v for k, v in os.environ.items() if k not in WORLD_VARS and not k.startswith(WORLD_PREFIXES)}
    env.update(MASTER_ADDR=HOSTS[0], MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    return env


def start_world(tower_bin, config, logdir, namespaces, out, *args):
    port = helpers.free_port()
    return [subprocess.Popen(["ip", "netns", "exec", ns, str(tower_bin), "train", str(config), "--logdir", str(logdir),
                              *args], env=rank_env(port, rank), stdout=out if rank == 0 else subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
            for rank, ns in enumerate(namespaces)]


def wait_for_step(path, step):
    end = time.monotonic() + 600
    def done():
        text = path.read_text()
        return any(line.get("step", 0) >= step and "loss" in line for line in json_lines(text[:text.rfind("\n") + 1]))
    while not done():
        assert time.monotonic() < end, f"no step {step} in {path}"
        time.sleep(0.1)  # a look at the file again, not a wait for an event


def test_a_vanished_host_ends_the_world_and_the_run_resumes_from_its_checkpoint(two_hosts, tower_bin, tmp_path,
                                                                                 fashion):  # noqa: F811
    ns_a, ns_b, link_b = two_hosts
    config = mlp_config(fashion, batch_size=16, steps=10_000_000, summary_every=1, eval_every=0,
                        checkpoint_every=20, keep_checkpoints=2)
    path, logdir = write_config(tmp_path, "cut", config), tmp_path / "cut"
    first = tmp_path / "first.out"
    with open(first, "w+") as out:
        procs = start_world(tower_bin, path, logdir, (ns_a, ns_b), out)
        try:
            wait_for_step(first, 45)  # two checkpoints behind it
            ip("link", "set", link_b, "down", ns=ns_b)  # the cable is pulled on rank 1's side
            cut = time.monotonic()
            _, err = procs[0].communicate(timeout=BOUND_S + 60)
            took = time.monotonic() - cut
        finally:
            kill_all(procs)
    assert procs[0].returncode == 1, err[-2000:]  # TW_EXIT_FAILED: the server retries it from the checkpoint
    assert took < BOUND_S, took
    assert "rank 1" in err, err[-2000:]
    lines = json_lines(first.read_text())
    assert lines[-1]["exit"] == 1, lines[-1]
    reached = max(line["step"] for line in lines if "loss" in line)
    saved = int((logdir / "checkpoints" / "latest").read_text().strip().rsplit("-", 1)[-1].split(".")[0])
    assert 40 <= saved <= reached and saved % 20 == 0, (saved, reached)

    # The link back, the world started again: it goes on from the checkpoint to the end.
    ip("link", "set", link_b, "up", ns=ns_b)
    end = saved + 30
    path.write_text(json.dumps({**config, "steps": end}))
    second = tmp_path / "second.out"
    with open(second, "w+") as out:
        procs = start_world(tower_bin, path, logdir, (ns_a, ns_b), out, "--resume")
        try:
            results = [p.communicate(timeout=600) for p in procs]
        finally:
            kill_all(procs)
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in results]
    again = json_lines(second.read_text())
    assert again[0]["world"] == "tcp" and again[0]["processes"] == 2, again[0]
    assert again[1]["step"] == saved and again[1]["resumed_from"], again[:2]
    resumed = losses(again)
    assert sorted(resumed) == list(range(saved + 1, end + 1))  # every step after the checkpoint, once
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 2  # one per start, rank 0's alone
