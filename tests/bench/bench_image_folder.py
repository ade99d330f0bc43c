#!/usr/bin/env python3
"""Image-folder conversion: `tower convert --image-archive` against Pillow + tf.io.TFRecordWriter, on the 70,000
Fashion-MNIST images written as PNG files in one folder per class and packed in a plain tar.

    python3 tests/bench/bench_image_folder.py [--build build] [--rounds 3] [--size 32] [--work /tmp/bench-folder]

Both sides read the same archive, decode every PNG, resize it to SIZE x SIZE (Tower: its crop mode, the shorter
side scaled, here the whole image; Pillow: Image.resize with BICUBIC), keep one grey channel, and write a
TFRecord of tf.train.Example (image_raw, label, height, width, depth) with the class folder's index as the label.
The rounds alternate (Tower, then the script) so both see the same machine; each side's wall time includes
starting its process (TensorFlow's import is not timed: the script times from after it). Before each side runs,
the file system is synced (os.sync), so neither side's run pays for the other's output still being written to
disk; Tower's time includes its own fsync of what it wrote (the script's writer does not fsync). Prints one
Markdown row per round and the median ratio."""
import argparse
import gzip
import io
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tarfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]

REFERENCE = r'''
import io, sys, tarfile, time
import tensorflow as tf
from PIL import Image
archive, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
classes = None
n = 0
with tarfile.open(archive) as t, tf.io.TFRecordWriter(out) as w:
    members = [m for m in t.getmembers() if m.isfile()]
    classes = sorted({m.name.split("/")[0] for m in members})
    for m in members:
        img = Image.open(io.BytesIO(t.extractfile(m).read())).convert("L").resize((size, size), Image.BICUBIC)
        feat = {"image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[classes.index(m.name.split("/")[0])])),
                "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[size])),
                "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[size])),
                "depth": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}
        w.write(tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString())
        n += 1
print(n, time.perf_counter() - t0)
'''


def idx(path):
    data = gzip.open(path).read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return data[4 + 4 * dims:], shape


def make_archive(work):
    """The 70,000 images as PNG files, CLASS/NNNNN.png, in a plain tar (made once)."""
    from PIL import Image
    out = work / "fashion-png.tar"
    if out.exists():
        return out
    with tarfile.open(out.with_suffix(".part"), "w") as t:
        k = 0
        for images, labels in (("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                               ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")):
            pixels, (n, h, w) = idx(FASHION / images)
            ys, _ = idx(FASHION / labels)
            for i in range(n):
                b = io.BytesIO()
                Image.frombytes("L", (w, h), pixels[i * h * w:(i + 1) * h * w]).save(b, format="PNG")
                info = tarfile.TarInfo(f"{CLASSES[ys[i]]}/{k:05d}.png")
                info.size = b.tell()
                b.seek(0)
                t.addfile(info, b)
                k += 1
    out.with_suffix(".part").rename(out)
    return out


def tower(build, archive, out, size):
    t0 = time.perf_counter()
    subprocess.run([str(build / "server" / "tower"), "convert", "--image-archive", str(archive), "--image-size",
                    str(size), "--channels", "1", "-o", str(out)], check=True, capture_output=True)
    return time.perf_counter() - t0


def reference(archive, out, size, script):
    r = subprocess.run([sys.executable, str(script), str(archive), str(out), str(size)], check=True,
                       capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    n, seconds = r.stdout.split()
    assert int(n) == 70000, n
    return float(seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--work", default="/tmp/bench-folder")
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    archive = make_archive(work)
    script = work / "pillow_tfrecord.py"
    script.write_text(REFERENCE)
    rows = []
    for k in range(a.rounds):
        os.sync()
        t = tower(pathlib.Path(a.build), archive, work / "tower.tfrecord", a.size)
        os.sync()
        p = reference(archive, work / "pillow.tfrecord", a.size, script)
        rows.append((k + 1, t, p))
        print(f"| {k + 1} | {70000 / t:,.0f} | {70000 / p:,.0f} | {p / t:.1f}x |", flush=True)
    print(json.dumps({"archive_bytes": archive.stat().st_size, "size": a.size,
                      "median_ratio": statistics.median(p / t for _, t, p in rows),
                      "rounds": [{"tower_s": t, "pillow_tf_s": p} for _, t, p in rows]}))


if __name__ == "__main__":
    sys.exit(main())
