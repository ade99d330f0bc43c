"""CMake configure: CUDA is optional, reported, and required only when asked for; and a fresh machine's
build works from the build dependencies alone.

The README's `scripts/install-deps.sh && cmake -S . -B build && cmake --build build` must work without the
test dependencies, although this machine has them: pkg-config is made blind to what only
`scripts/install-deps.sh --test` adds. PKG_CONFIG_LIBDIR points at a folder of links to every `.pc` file of
pkg-config's search path except those that the packages of `install-deps.sh --list --test` beyond `--list`
ship (`dpkg -L`; cmocka's today), the method of the before-stop hook's fresh_check. A new build folder then
configures (saying plainly that the unit tests are not built, and why) and builds; -DTW_UNIT_TESTS=ON fails
configure naming cmocka; with pkg-config sighted, the default configure builds the unit tests. The Docker
build stage's configure (its definitions, CUDA off) succeeds the same way."""
import glob
import os
import subprocess

import pytest

from conftest import ROOT
from test_docker import build_stage_configure, deps_list, stages


def configure(tmp_path, *args, env=None):
    return subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_configure_reports_what_it_found(tmp_path):
    res = configure(tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Tower: CUDA toolkit" in res.stdout
    assert "Tower: cuBLAS" in res.stdout and "NCCL" in res.stdout
    assert "Tower: CUDA backend" in res.stdout


def test_explicit_cuda_without_toolkit_fails_clearly(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin", CUDACXX="/nonexistent/nvcc")
    res = configure(tmp_path, "-DTW_CUDA=ON", env=env)
    assert res.returncode != 0
    assert "Tower: CUDA toolkit not found" in res.stdout
    assert "-DTW_CUDA=ON was asked for" in res.stderr


def test_cuda_off_skips_the_probe(tmp_path):
    res = configure(tmp_path, "-DTW_CUDA=OFF")
    assert res.returncode == 0, res.stderr
    assert "Tower: CUDA disabled (-DTW_CUDA=OFF)" in res.stdout


# ------------------------------------------------------------------- the build dependencies alone

FAST = ("-DCMAKE_BUILD_TYPE=Release", "-DTW_CUDA=OFF")
UNIT_LINE = "-- Tower: unit tests"


def pc_files_of_test_packages():
    """The .pc files (real paths) of the packages that only the test install adds."""
    hidden = set()
    for pkg in sorted(set(deps_list("--test")) - set(deps_list())):
        res = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True)
        hidden |= {os.path.realpath(f) for f in res.stdout.splitlines() if f.endswith(".pc")}
    return hidden


@pytest.fixture(scope="module")
def blind_pkg_config(tmp_path_factory):
    """An environment whose pkg-config sees every .pc file of this machine but the test-only ones."""
    farm = tmp_path_factory.mktemp("pc")
    hidden = pc_files_of_test_packages()
    path = subprocess.run(["pkg-config", "--variable", "pc_path", "pkg-config"], capture_output=True,
                          text=True, check=True).stdout.strip()
    for d in path.split(":"):
        for f in sorted(glob.glob(os.path.join(d, "*.pc"))):
            link = farm / os.path.basename(f)
            if os.path.realpath(f) not in hidden and not link.exists():  # the first in the path wins
                link.symlink_to(f)
    env = {k: v for k, v in os.environ.items() if k != "PKG_CONFIG_PATH"}  # searched before the LIBDIR
    env["PKG_CONFIG_LIBDIR"] = str(farm)
    return env


def unit_line(res):
    lines = [l for l in res.stdout.splitlines() if l.startswith(UNIT_LINE)]
    assert len(lines) == 1, res.stdout
    return lines[0]


def test_builds_from_the_build_dependencies_alone(blind_pkg_config, tmp_path):
    res = configure(tmp_path, *FAST, env=blind_pkg_config)
    assert res.returncode == 0, res.stdout + res.stderr
    line = unit_line(res)
    assert "not built" in line and "cmocka not found" in line and "install-deps.sh --test" in line, line
    build = subprocess.run(["cmake", "--build", str(tmp_path / "b"), "-j", str(os.cpu_count() or 1)],
                           capture_output=True, text=True, env=blind_pkg_config, timeout=900)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    assert (tmp_path / "b" / "server" / "tower").exists()
    assert not list((tmp_path / "b" / "tests" / "unit").glob("test_*")), "unit tests built without cmocka"


def test_unit_tests_on_requires_cmocka(blind_pkg_config, tmp_path):
    res = configure(tmp_path, *FAST, "-DTW_UNIT_TESTS=ON", env=blind_pkg_config)
    assert res.returncode != 0
    assert "-DTW_UNIT_TESTS=ON, but cmocka not found" in res.stderr, res.stderr
    assert "install-deps.sh --test" in res.stderr


def test_unit_tests_built_when_cmocka_is_found(tmp_path):
    if not any(os.path.basename(f) == "cmocka.pc" for f in pc_files_of_test_packages()):
        pytest.skip("cmocka is not installed here (scripts/install-deps.sh --test installs it)")
    res = configure(tmp_path, *FAST)
    assert res.returncode == 0, res.stdout + res.stderr
    assert unit_line(res).startswith("-- Tower: unit tests built (cmocka "), res.stdout
    res = configure(tmp_path, *FAST, "-DTW_UNIT_TESTS=OFF")
    assert res.returncode == 0 and "not built: TW_UNIT_TESTS=OFF" in unit_line(res)


def test_docker_build_stage_configures_without_test_packages(blind_pkg_config, tmp_path):
    build = next(st for st in stages() if st["name"] == "build")
    defs = [f"-D{k}={v}" for k, v in build_stage_configure(build).items() if "CUDA" not in k]
    res = configure(tmp_path, *defs, "-DTW_CUDA=OFF", env=blind_pkg_config)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "not built" in unit_line(res), res.stdout
