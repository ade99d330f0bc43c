"""The input pipeline holds an image data set as its uint8 bytes, not as fp32 (engine/input.c): a CPU
run over the whole of Fashion-MNIST held in memory peaks below what the fp32 rows alone would take."""
import json
import subprocess
import sys

from test_train import fashion, mlp_config  # noqa: F401 (fixture)

FP32_ROWS = (60000 + 10000) * 784 * 4  # the train and test sets decoded as fp32: 209 MiB

# A fresh interpreter whose only child is the trainer: its RUSAGE_CHILDREN peak is the trainer's.
PEAK = ("import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
        "sys.stderr.write(r.stderr)\n")


def test_uint8_rows_are_held_as_uint8(tower_bin, tmp_path, fashion):  # noqa: F811
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(mlp_config(fashion, steps=20, eval_every=20)))
    res = subprocess.run([sys.executable, "-c", PEAK, str(tower_bin), "train", str(cfg), "--logdir",
                          str(tmp_path / "run"), "--backend", "cpu"], capture_output=True, text=True, timeout=600)
    rc, peak = map(int, res.stdout.split())
    assert rc == 0, res.stderr
    assert peak < FP32_ROWS * 0.75, f"peak RSS {peak / 2**20:.0f} MiB; fp32 rows alone are {FP32_ROWS / 2**20:.0f} MiB"
