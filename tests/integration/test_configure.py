"""CMake configure: CUDA is optional, reported, and required only when asked for."""
import os
import subprocess

from conftest import ROOT


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
