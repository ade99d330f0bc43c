"""Shared fixtures for Tower's integration tests.

The binaries come from the build folder named by $TOWER_BUILD (default: build/ at the repository root):
`tower` itself and the helper programs under tests/tools/.
"""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TOWER_BUILD", ROOT / "build")).resolve()
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="session")
def tower_bin():
    path = BUILD / "server" / "tower"
    assert path.exists(), f"{path} missing: build first (scripts/test.sh does)"
    return path


@pytest.fixture(scope="session")
def tool():
    """tool("tw_eventgen") -> path of a helper program built from tests/tools/."""
    def find(name):
        path = BUILD / "tests" / "tools" / name
        assert path.exists(), f"{path} missing: build first"
        return path
    return find


@pytest.fixture
def run_tower(tower_bin):
    """run_tower(*args) -> CompletedProcess (text mode, never raises on a non-zero exit)."""
    def run(*args, **kw):
        return subprocess.run([str(tower_bin), *map(str, args)], capture_output=True, text=True,
                              timeout=kw.pop("timeout", 600), **kw)
    return run


class Server:
    """A running `tower serve` on a free loopback port, for one test."""

    def __init__(self, proc, url, data, token):
        self.proc, self.url, self.data, self.token = proc, url, data, token

    def api(self, path):
        return f"{self.url}/api/v1{path}"

    def headers(self):
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def start_server(tower_bin, data, *args, env=None, token=None, demo=False):
    """Starts `tower serve --listen 127.0.0.1:0 --data DATA [--no-demo] ARGS` and waits for its first
    stdout line, {"listening": URL}: the socket is bound before that line is written."""
    cmd = [str(tower_bin), "serve", "--listen", "127.0.0.1:0", "--data", str(data),
           *([] if demo else ["--no-demo"]), *map(str, args)]
    if token:
        cmd += ["--token", token]
    log = open(pathlib.Path(data).parent / f"{pathlib.Path(data).name}.server.log", "ab")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                            env={**os.environ, **(env or {})})
    line = proc.stdout.readline().decode()
    assert line, f"tower serve exited with {proc.wait()} before listening (see {log.name})"
    import json
    url = json.loads(line)["listening"]
    return Server(proc, url, pathlib.Path(data), token)


@pytest.fixture
def serve(tower_bin, tmp_path):
    """serve(*extra_args, env=None, token=None, data=None, demo=False) -> Server; every server started is killed
    (SIGKILL) at teardown and its children die with it."""
    started = []

    def start(*args, env=None, token=None, data=None, demo=False):
        server = start_server(tower_bin, data or tmp_path / "data", *args, env=env, token=token, demo=demo)
        started.append(server)
        return server
    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
        server.proc.wait()
