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
