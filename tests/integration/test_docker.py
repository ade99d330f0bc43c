"""docker/: the Dockerfile, compose.yaml and the runtime package list, checked without a Docker engine.

No image is built here (there is no engine on the CI machine): these tests read the files. compose.yaml goes
through `docker-compose config` (Debian's docker-compose, installed by `scripts/install-deps.sh --test`),
the Dockerfile through a small parser of its instructions, and the runtime stage's package list
(`scripts/install-deps.sh --runtime --list`) is checked against what `tower` really loads: every library
that `ldd` lists for the TOWER_BUILD binary must belong (dpkg -S) to a package of that list, to one of
their dependencies, to the base system, or be a CUDA library that the CUDA runtime image or the host's
driver provides. The health check is tried against a real `tower serve`, and so is the entrypoint command.
"""
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import requests

from conftest import ROOT

DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
INSTALL_DEPS = ROOT / "scripts" / "install-deps.sh"
ENTRYPOINT = ["tower", "serve", "--listen", "0.0.0.0:8080", "--data", "/data"]
HEALTH_URL = "http://127.0.0.1:8080/api/v1/health"
# Libraries the nvidia/cuda runtime image ships (CUDA runtime, cuBLAS, NCCL and the other toolkit
# libraries) or the NVIDIA Container Toolkit mounts from the host's driver (libcuda, libnvidia-*).
CUDA_LIB = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|nvJitLink|curand|cusparse|cufft|"
                      r"cusolver|npp\w*|nvidia-\S+|nvToolsExt)\.so(\.|$)")


# ------------------------------------------------------------------------------------------- compose

def compose_config(token):
    """Runs `docker-compose -f docker/compose.yaml config` with or without TOWER_TOKEN; returns the
    CompletedProcess and, when it succeeded, the resolved configuration as a dict."""
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose missing: scripts/install-deps.sh --test installs it"
    env = {k: v for k, v in os.environ.items() if k != "TOWER_TOKEN"}
    if token is not None:
        env["TOWER_TOKEN"] = token
    res = subprocess.run([exe, "-f", str(COMPOSE), "config"], capture_output=True, text=True, env=env,
                         cwd=DOCKER, timeout=120)
    if res.returncode != 0:
        return res, None
    # The venv has no YAML module; docker-compose's own interpreter has (python3-yaml is its dependency).
    with open(exe) as f:
        interp = f.readline()[2:].strip().split()
    conv = subprocess.run([*interp, "-c", "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), "
                           "sys.stdout)"], input=res.stdout, capture_output=True, text=True, check=True)
    return res, json.loads(conv.stdout)


@pytest.fixture(scope="module")
def compose():
    res, cfg = compose_config("test-token")
    assert res.returncode == 0, res.stderr
    return cfg


def test_compose_requires_the_token():
    res, _ = compose_config(None)
    assert res.returncode != 0
    assert "set TOWER_TOKEN" in res.stderr, res.stderr
    res, _ = compose_config("")  # ${VAR:?} also refuses an empty value
    assert res.returncode != 0


def test_compose_passes_the_token(compose):
    assert compose["services"]["tower"]["environment"]["TOWER_TOKEN"] == "test-token"


def published(service):
    """[(host_ip, published, target)] of a service's ports, from the short or the long syntax."""
    out = []
    for p in service.get("ports", []):
        if isinstance(p, dict):
            out.append((p.get("host_ip", ""), str(p.get("published", "")), str(p["target"])))
        else:
            parts = str(p).split("/")[0].split(":")
            assert len(parts) == 3, f"port {p!r} names no host address: it would bind every interface"
            out.append(tuple(parts))
    return out


def test_compose_publishes_on_loopback_only(compose):
    ports = {name: published(svc) for name, svc in compose["services"].items()}
    assert ports["tower"] == [("127.0.0.1", "8080", "8080")]
    assert ports["tensorboard"] == [("127.0.0.1", "6006", "6006")]
    for name, svc in compose["services"].items():
        assert svc.get("network_mode") != "host", name
        for host_ip, _, _ in ports[name]:
            assert host_ip == "127.0.0.1", f"{name} publishes on {host_ip or 'every interface'}"


def test_compose_reserves_the_gpus(compose):
    devices = compose["services"]["tower"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and str(d.get("count")) == "all" and "gpu" in d["capabilities"]
               for d in devices), devices


def volume_at(service, target):
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            if v["target"] == target:
                return v["source"], v.get("read_only", False)
        else:
            parts = v.split(":")
            if parts[1] == target:
                return parts[0], len(parts) > 2 and "ro" in parts[2].split(",")
    return None, None


def test_compose_shares_one_named_volume(compose):
    tower_src, tower_ro = volume_at(compose["services"]["tower"], "/data")
    tb_src, _ = volume_at(compose["services"]["tensorboard"], "/data")
    assert tower_src and tower_src in compose["volumes"], "tower's /data must be a named volume"
    assert tb_src == tower_src and not tower_ro


def test_compose_builds_from_the_dockerfile(compose):
    for name, target in (("tower", "tower"), ("tensorboard", "tensorboard")):
        build = compose["services"][name]["build"]
        assert os.path.realpath(build["context"]) == str(ROOT)
        assert build["dockerfile"] == "docker/Dockerfile" and build["target"] == target


def test_compose_runs_tensorboard_on_the_runs(compose):
    cmd = compose["services"]["tensorboard"]["command"]
    cmd = cmd.split() if isinstance(cmd, str) else cmd
    assert cmd == ["tensorboard", "--logdir", "/data/runs", "--host", "0.0.0.0", "--port", "6006"]


# ---------------------------------------------------------------------------------------- Dockerfile

def instructions(text):
    """[(KEYWORD, arguments)] of a Dockerfile: continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1].strip() + " "
            continue
        buf += s
        kw, _, rest = buf.partition(" ")
        out.append((kw.upper(), rest.strip()))
        buf = ""
    assert not buf, "the Dockerfile ends inside a continued line"
    return out


def stages():
    """[{"name", "base", "ins": [(KEYWORD, args)]}] in order; ARGs before the first FROM substituted."""
    args, result = {}, []
    for kw, rest in instructions(DOCKERFILE.read_text()):
        if kw == "ARG" and not result:
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
        elif kw == "FROM":
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], rest)
            m = re.fullmatch(r"(?:--\S+\s+)*(\S+)(?:\s+as\s+(\S+))?", base, flags=re.I)
            assert m, f"FROM {rest}"
            result.append({"name": m.group(2) or "", "base": m.group(1), "ins": []})
        else:
            assert result, f"{kw} before the first FROM"
            result[-1]["ins"].append((kw, rest))
    return result


@pytest.fixture(scope="module")
def dockerfile():
    by_name = {s["name"]: s for s in stages()}
    assert set(by_name) >= {"build", "tower", "tensorboard"}
    return by_name


def runs(stage):
    return [args for kw, args in stage["ins"] if kw == "RUN"]


INSTALLERS = [r"\bapt(-get)?\s+(\S+\s+)*install\b", r"\baptitude\b", r"\bdpkg\s+(\S+\s+)*-i\b",
              r"\b(yum|dnf|microdnf|zypper)\s+(\S+\s+)*install\b", r"\bapk\s+(\S+\s+)*add\b"]


def test_every_package_install_goes_through_install_deps(dockerfile):
    for stage in dockerfile.values():
        for run in runs(stage):
            for pattern in INSTALLERS:
                assert not re.search(pattern, run), f"stage {stage['name']}: a package list of its own: {run}"
            if re.search(r"\bpip3?\s+install\b", run):
                # only a requirements file cut from scripts/requirements-test.txt (TensorBoard's pin)
                assert re.search(r"\bpip3?\s+install\b.*\s-r\s", run), run
                assert any(kw == "COPY" and "scripts/requirements-test.txt" in a for kw, a in stage["ins"])


def install_deps_runs(stage):
    """The RUNs of a stage that call install-deps.sh, after checking the stage copies the real script."""
    found = [r for r in runs(stage) if "install-deps.sh" in r]
    if found:
        assert any(kw == "COPY" and a.split()[0] == "scripts/install-deps.sh" for kw, a in stage["ins"]), \
            f"stage {stage['name']} runs an install-deps.sh that is not scripts/install-deps.sh"
    return found


def test_build_stage(dockerfile):
    build = dockerfile["build"]
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-devel-ubuntu24\.04", build["base"]), build["base"]
    deps = install_deps_runs(build)
    assert deps and not any("--runtime" in r or "--test" in r for r in deps), deps
    cmake = " ".join(r for r in runs(build) if "cmake" in r)
    assert "-DTW_CUDA=ON" in cmake and "--build" in cmake


def build_stage_configure(build):
    """The -D definitions of the build stage's configure command (`cmake -S ...`), {NAME: value}."""
    cmds = [c.strip() for r in runs(build) for c in r.split("&&") if c.strip().startswith("cmake -S")]
    assert len(cmds) == 1, cmds
    return {a[2:].split("=", 1)[0].split(":")[0]: a.split("=", 1)[1]
            for a in shlex.split(cmds[0]) if a.startswith("-D")}


def test_build_stage_needs_no_test_dependencies(dockerfile):
    """The build stage installs the build dependencies only (no --test: no cmocka), so its configure must
    not require the unit tests (-DTW_UNIT_TESTS=ON) and builds none (TW_TESTS or TW_UNIT_TESTS OFF).
    test_configure.py configures with these definitions, pkg-config blind to the test packages."""
    defs = build_stage_configure(dockerfile["build"])
    assert defs.get("TW_UNIT_TESTS", "AUTO") != "ON", defs
    assert defs.get("TW_TESTS") == "OFF" or defs.get("TW_UNIT_TESTS") == "OFF", defs


def test_runtime_stage_is_the_default_one(dockerfile):
    assert stages()[-1]["name"] == "tower"
    tower = dockerfile["tower"]
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-runtime-ubuntu24\.04", tower["base"]), tower["base"]
    assert tower["base"].split(":")[1].split("-")[0] == dockerfile["build"]["base"].split(":")[1].split("-")[0]
    deps = install_deps_runs(tower)
    assert deps and all("--runtime" in r for r in deps), deps
    copies = [a for kw, a in tower["ins"] if kw == "COPY" and "--from=build" in a]
    assert any(a.split()[-2].endswith("build/server/tower") and a.split()[-1] == "/usr/local/bin/tower"
               for a in copies), copies
    # the CUDA module where the binary looks for it (engine/backend_reg.c: ../lib/tower/ from the binary)
    assert any(a.split()[-2].endswith("build/server/tower-cuda.so")
               and a.split()[-1] == "/usr/local/lib/tower/tower-cuda.so" for a in copies), copies


def last(stage, keyword):
    found = [a for kw, a in stage["ins"] if kw == keyword]
    assert found, f"stage {stage['name']} has no {keyword}"
    return found[-1]


def test_runtime_stage_runs_tower_serve(dockerfile):
    tower = dockerfile["tower"]
    assert json.loads(last(tower, "ENTRYPOINT")) + json.loads(last(tower, "CMD")) == ENTRYPOINT
    assert "8080" in last(tower, "EXPOSE").split()
    assert last(tower, "VOLUME") in ("/data", '["/data"]')
    user = last(tower, "USER").split(":")[0]
    assert user not in ("root", "0", ""), user
    # USER comes after every RUN, so nothing at run time is root
    kws = [kw for kw, _ in tower["ins"]]
    assert max(i for i, k in enumerate(kws) if k == "RUN") < kws.index("USER")
    assert not any(kw == "ENV" and "TOWER_TOKEN" in a for kw, a in tower["ins"]), "no token baked in"


def test_healthcheck_hits_health(dockerfile):
    hc = last(dockerfile["tower"], "HEALTHCHECK")
    cmd = hc.split(" CMD ", 1)[1] if " CMD " in f" {hc}" else ""
    assert cmd.split()[0] == "curl" and HEALTH_URL in cmd, hc


def test_tensorboard_stage(dockerfile):
    tb = dockerfile["tensorboard"]
    assert last(tb, "USER").split(":")[0] not in ("root", "0")
    assert "6006" in last(tb, "EXPOSE").split()
    pins = [line for line in (ROOT / "scripts" / "requirements-test.txt").read_text().splitlines()
            if line.startswith("tensorboard==")]
    assert len(pins) == 1, "scripts/requirements-test.txt pins TensorBoard once; the image installs that pin"


def test_dockerignore_keeps_builds_and_data_out():
    lines = {l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", "build*", "tower-data"} <= lines
    for needed in ("CMakeLists.txt", "scripts", "server", "engine", "eventlog", "base", "static", "cmake"):
        assert needed not in lines


# ------------------------------------------------------------------------ the runtime package list

def deps_list(*args):
    res = subprocess.run(["bash", str(INSTALL_DEPS), *args, "--list"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_install_deps_modes():
    build, test, runtime = deps_list(), deps_list("--test"), deps_list("--runtime")
    assert "build-essential" in build and "libmicrohttpd-dev" in build and "docker-compose" not in build
    assert test[:len(build)] == build and "docker-compose" in test
    assert not any(p.endswith("-dev") or p in ("build-essential", "cmake", "clang") for p in runtime), runtime
    assert {"libjs-chart.js", "dataset-fashion-mnist", "curl"} <= set(runtime)
    res = subprocess.run(["bash", str(INSTALL_DEPS), "--runtime", "--test"], capture_output=True, text=True)
    assert res.returncode == 2


def installed_packages():
    """{package: (priority, essential, [[alternative, ...] per dependency], [provided names])}."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Priority}\t"
                          "${Essential}\t${Pre-Depends}, ${Depends}\t${Provides}\n"],
                         capture_output=True, text=True, check=True).stdout
    pkgs = {}

    def names(field):
        return [re.sub(r"[\s(].*|:\w+$", "", alt.strip()) for alt in field.split("|") if alt.strip()]

    for line in out.splitlines():
        name, status, prio, essential, depends, provides = line.split("\t")
        if not status.startswith("ii"):
            continue
        deps = [names(d) for d in depends.split(",") if d.strip()]
        pkgs[name] = (prio, essential == "yes", deps, [n for p in provides.split(",") for n in names(p)])
    return pkgs


def closure(seeds, pkgs):
    """The installed packages that `seeds` need, following Depends and Pre-Depends."""
    providers = {}
    for name, (_, _, _, provides) in pkgs.items():
        for p in provides:
            providers.setdefault(p, []).append(name)
    seen, todo = set(), [s for s in seeds if s in pkgs]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for alts in pkgs[p][2]:
            for a in alts:
                hit = [a] if a in pkgs else providers.get(a, [])
                if hit:
                    todo.extend(hit)
                    break
    return seen


def owner(path):
    """The Debian package that ships `path` (trying the /usr-merged spellings), or None."""
    tries = []
    for p in (path, os.path.realpath(path)):
        tries += [p, p[4:] if p.startswith("/usr/") else "/usr" + p]
    for p in tries:
        res = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if res.returncode == 0:
            return res.stdout.split(":")[0].split(",")[0].strip()
    return None


def test_runtime_packages_cover_every_linked_library(tower_bin):
    pkgs = installed_packages()
    runtime = deps_list("--runtime")
    missing = [p for p in runtime if p not in pkgs]
    assert not missing, f"runtime packages not installed here, cannot check: {missing}"
    base = [n for n, (prio, essential, _, _) in pkgs.items() if prio == "required" or essential]
    allowed = closure(runtime + base, pkgs)
    ldd = subprocess.run(["ldd", str(tower_bin)], capture_output=True, text=True, check=True).stdout
    uncovered = []
    for line in ldd.splitlines():
        m = re.match(r"\s*(\S+)(?:\s+=>\s+(\S+))?", line)
        soname, path = m.group(1), m.group(2)
        if soname.startswith("linux-vdso") or CUDA_LIB.match(os.path.basename(soname)):
            continue
        if path == "not":
            uncovered.append(f"{soname}: not found")
            continue
        path = path or soname
        pkg = owner(path)
        if pkg not in allowed:
            uncovered.append(f"{soname} ({path}) from {pkg or 'no package'}")
    assert not uncovered, ("libraries `tower` links that `install-deps.sh --runtime` would not install: "
                           + "; ".join(uncovered))


def test_runtime_packages_ship_what_tower_serves():
    runtime = set(deps_list("--runtime"))
    for path in ("/usr/share/javascript/chart.js/chart.min.js", "/usr/share/datasets/fashion-mnist",
                 shutil.which("curl")):
        assert owner(path) in runtime, path


def test_runtime_packages_ship_the_default_launcher():
    """A run of "processes" > 1 starts through mpirun (server/launch.h's default --launcher): the runtime
    image has it (Open MPI's libraries come with it), and the build has Open MPI's headers."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("Open MPI is not installed here")
    assert owner(os.path.realpath(mpirun)) in set(deps_list("--runtime")), mpirun
    assert "libopenmpi-dev" in deps_list()


# ----------------------------------------------------------- the entrypoint against a real server

def test_health_needs_no_token(serve):
    server = serve(token="s3cret")
    res = subprocess.run(["curl", "-fsS", "-o", "/dev/null", "-w", "%{http_code}", server.api("/health")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and res.stdout == "200", res.stderr


def test_entrypoint_needs_the_token(tower_bin, tmp_path):
    cmd = [str(tower_bin), *ENTRYPOINT[1:]]
    cmd[cmd.index("0.0.0.0:8080")] = "0.0.0.0:0"
    cmd[cmd.index("/data")] = str(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k != "TOWER_TOKEN"}
    res = subprocess.run(cmd + ["--no-demo"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and "TOWER_TOKEN" in res.stderr, res.stderr

    proc = subprocess.Popen(cmd + ["--no-demo"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**env, "TOWER_TOKEN": "s3cret"})
    try:
        line = proc.stdout.readline().decode()
        assert line, f"tower serve exited with {proc.wait()}"
        port = json.loads(line)["listening"].rsplit(":", 1)[1].strip("/")
        r = requests.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        r = requests.post(f"http://127.0.0.1:{port}/api/v1/runs", json={}, timeout=10)
        assert r.status_code == 401
    finally:
        proc.kill()
        proc.wait()
