"""The GPU kit (scripts/gpu-kit.sh) and tests/gpu/run.sh's use of it, checked on this machine, which has no GPU:
the kit packs the CUDA build and the libraries it loads; every library its programs load then comes from the
kit, from glibc or the C++ runtime, or is cuBLAS or NCCL (read from the dynamic loader's own trace,
LD_DEBUG=libs); and run.sh, given the kit in an empty environment, uses it instead of a build, converts the
data with the kit's `tower` and reports the gpu tests skipped for want of a device, exit 1."""
import os
import pathlib
import re
import subprocess
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What the device machine has of its own (scripts/gpu-kit.sh leaves them out of the kit).
SYSTEM = re.compile(r"^(ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s"
                    r"|libcuda|libcublas|libcublasLt|libnccl)\.so")
PROGRAMS = {"tower": ["--help"], "test_cuda_parity": [], "test_cuda_sticky": [], "test_train_parity": [],
            "test_graph_parity": [], "test_nccl_world": []}


@pytest.fixture(scope="module")
def kit(tmp_path_factory, tower_bin):
    build = tower_bin.parent.parent
    if not (build / "server" / "tower-cuda.so").exists():
        pytest.skip("this build has no CUDA module (no CUDA toolkit found at configure)")
    tmp = tmp_path_factory.mktemp("kit")
    archive = tmp / "tower-gpu-kit.tar.xz"
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu-kit.sh"), str(build), str(archive)], check=True,
                   env={**os.environ, "XZ_OPT": "-0"}, capture_output=True, timeout=900)
    with tarfile.open(archive) as t:
        t.extractall(tmp, filter="data")
    return archive, tmp / "kit"


def cuda_dirs():
    """The folders of this machine's cuBLAS and NCCL, as run.sh finds them."""
    found = subprocess.run(["find", "/usr/local", "/opt", "/usr/lib", "-xdev", "(", "-name", "libcublas.so.13*", "-o",
                            "-name", "libnccl.so.2*", ")", "-printf", "%h\n"], capture_output=True, text=True)
    return list(dict.fromkeys(found.stdout.split()))


def test_the_kit_programs_load_only_the_kit_and_the_system(kit):
    _, root = kit
    env = {"PATH": "/usr/bin:/bin", "LD_DEBUG": "libs",
           "LD_LIBRARY_PATH": ":".join([str(root / "lib")] + cuda_dirs()),
           "TOWER_CUDA_MODULE": str(root / "bin" / "tower-cuda.so")}
    assert sorted(p.name for p in (root / "bin").iterdir()) == sorted(["tower-cuda.so", *PROGRAMS])
    for name, args in PROGRAMS.items():
        r = subprocess.run([str(root / "bin" / name), *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 77), (name, r.returncode, r.stderr[-2000:])
        loaded = set(re.findall(r"calling init: (\S+)", r.stderr))
        assert any(p.startswith(str(root / "lib")) for p in loaded), name
        outside = [p for p in loaded if not p.startswith(str(root)) and not SYSTEM.match(os.path.basename(p))]
        assert outside == [], (name, outside)


def test_run_sh_uses_the_kit_in_an_empty_environment(kit, tmp_path):
    archive, _ = kit
    r = subprocess.run(["bash", str(ROOT / "tests" / "gpu" / "run.sh"), str(tmp_path / "gpu-build")],
                       env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "TW_GPU_KIT": str(archive)},
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "== kit (prebuilt by scripts/gpu-kit.sh)" in out and "configure and build" not in out, out
    assert "=> not found" not in out and "kit: the libraries above are missing" not in out, out
    assert re.search(r"tower convert: wrote \d+ examples", out), out
    assert "gpu tests: SKIPPED (5 tests: no usable CUDA device)" in out, out
    assert not (tmp_path / "gpu-build" / "CMakeCache.txt").exists()
