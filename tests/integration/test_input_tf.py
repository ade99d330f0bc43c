"""The input pipeline against TensorFlow: TFRecord files written by TensorFlow itself (plain and
GZIP) are decoded exactly as TensorFlow's own input pipeline decodes them (decode_raw, cast, scale),
float-list images and float labels pass through unchanged, shuffled epochs are permutations, a
resumed stream repeats the same batches, a bad label names the file and the record's byte offset,
and all of Fashion-MNIST decodes into memory exactly.

The pipeline is driven through tests/tools/tw_inputdump, which prints batches as JSON lines.

Run: TOWER_BUILD=build /opt/tower-venv/bin/python -m pytest tests/integration/test_input_tf.py
"""
import gzip
import json
import subprocess

import numpy as np
import pytest

from conftest import FASHION

tf = pytest.importorskip("tensorflow")

SIZE = 20  # values per example in the synthetic files


def write_tfrecord(path, examples, compression=""):
    """Writes dicts of name -> ('bytes', b) | ('int64', [..]) | ('float', [..]) with TensorFlow.
    Returns each record's byte offset in the uncompressed stream."""
    offsets, at = [], 0
    with tf.io.TFRecordWriter(str(path), options=compression or None) as w:
        for ex in examples:
            feature = {}
            for name, (kind, value) in ex.items():
                if kind == "bytes":
                    feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
                elif kind == "int64":
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
                else:
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
            data = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            w.write(data)
            offsets.append(at)
            at += len(data) + 16
    return offsets


def dump(tool, path, *args, check=True):
    """Runs tw_inputdump: (header, [batches]), or the CompletedProcess when check is False."""
    p = subprocess.run([str(tool("tw_inputdump")), str(path), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    if not check:
        return p
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    return lines[0], lines[1:]


def tf_pipeline(path, compression, scale):
    """TensorFlow's reading of a uint8-image file: (x [n, SIZE] float32, labels [n] int32)."""
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        f = tf.io.parse_single_example(record, spec)
        pixels = tf.cast(tf.io.decode_raw(f["image_raw"], tf.uint8), tf.float32)
        x = pixels * tf.constant(scale, tf.float32)
        return x, tf.cast(f["label"], tf.int32)

    xs, ys = [], []
    for x, y in tf.data.TFRecordDataset(str(path), compression_type=compression).map(parse):
        xs.append(x.numpy())
        ys.append(int(y.numpy()))
    return np.stack(xs), np.array(ys)


def uint8_examples(n, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, SIZE), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n)
    examples = [{"image_raw": ("bytes", images[i].tobytes()), "label": ("int64", [int(labels[i])]),
                 "size": ("int64", [SIZE])} for i in range(n)]
    return images, labels, examples


def batches_array(batches, key):
    dtype = np.float32 if key == "x" else None
    return np.concatenate([np.array(b[key], dtype=dtype) for b in batches])


@pytest.mark.parametrize("compression", ["", "GZIP"])
@pytest.mark.parametrize("streaming", [False, True])
def test_uint8_images_match_tensorflow(tmp_path, tool, compression, streaming):
    path = tmp_path / "u8.tfrecord"
    _, labels, examples = uint8_examples(53)
    write_tfrecord(path, examples, compression)
    scale = np.float32(1 / 255)
    want_x, want_y = tf_pipeline(path, compression, scale)
    extra = ["--max-memory", 1, "--shuffle-buffer", 8] if streaming else []
    header, batches = dump(tool, path, SIZE, "--batch", 10, "--once", *extra)
    assert header["in_memory"] == (not streaming)
    assert [b["got"] for b in batches] == [10, 10, 10, 10, 10, 3, 0]
    x = batches_array(batches, "x").reshape(-1, SIZE)
    assert np.array_equal(x, want_x)  # bit-exact: uint8 -> fp32, times fp32(1/255)
    assert np.array_equal(batches_array(batches, "labels"), want_y)
    assert np.array_equal(want_y, labels)


def test_float_images_and_labels_pass_through(tmp_path, tool):
    path = tmp_path / "f.tfrecord"
    rng = np.random.default_rng(1)
    images = rng.standard_normal((9, SIZE)).astype(np.float32)
    targets = rng.standard_normal(9).astype(np.float32)
    examples = [{"pixels": ("float", images[i].tolist()), "y": ("float", [float(targets[i])])}
                for i in range(9)]
    write_tfrecord(path, examples)
    _, batches = dump(tool, path, SIZE, "--batch", 9, "--float-labels", "--image-feature",
                      "pixels", "--label-feature", "y", "--scale", 3)
    assert np.array_equal(np.array(batches[0]["x"], np.float32).reshape(9, SIZE), images)
    assert np.array_equal(np.array(batches[0]["labels"], np.float32), targets)


def test_float32_bytes_images_pass_through(tmp_path, tool):
    """`tower convert` stores float32 NumPy examples as raw float32 bytes: read as they are."""
    path = tmp_path / "f32.tfrecord"
    images = np.random.default_rng(2).standard_normal((5, SIZE)).astype("<f4")
    examples = [{"image_raw": ("bytes", images[i].tobytes()), "label": ("int64", [i])}
                for i in range(5)]
    write_tfrecord(path, examples)
    _, batches = dump(tool, path, SIZE, "--batch", 5)
    assert np.array_equal(np.array(batches[0]["x"], np.float32).reshape(5, SIZE), images)


@pytest.mark.parametrize("streaming", [False, True])
def test_shuffled_epochs_are_permutations_and_resume_exactly(tmp_path, tool, streaming):
    path = tmp_path / "ids.tfrecord.gz"
    examples = [{"image_raw": ("float", [float(i)] * SIZE), "label": ("int64", [i % 10])}
                for i in range(40)]
    write_tfrecord(path, examples, "GZIP")
    extra = ["--max-memory", 1, "--shuffle-buffer", 16] if streaming else []
    common = [SIZE, "--shuffle", 1, "--seed", 5, "--batch", 6, *extra]
    _, ref = dump(tool, path, *common, "--batches", 20)
    ids = batches_array(ref, "x").reshape(-1, SIZE)[:, 0].astype(int)
    epochs = [ids[40 * e:40 * (e + 1)] for e in range(3)]
    for e in epochs:
        assert sorted(e) == list(range(40))
    assert not np.array_equal(epochs[0], epochs[1])
    told = ref[8]  # the position after 9 batches
    _, tail = dump(tool, path, *common, "--seek", f"{told['epoch']}:{told['consumed']}",
                   "--batches", 11)
    assert tail == ref[9:]


def test_bad_label_names_file_and_offset(tmp_path, tool):
    path = tmp_path / "bad.tfrecord"
    _, _, examples = uint8_examples(8)
    examples[5]["label"] = ("int64", [12])
    offsets = write_tfrecord(path, examples)
    p = dump(tool, path, SIZE, check=False)
    assert p.returncode == 1
    assert f"{path}: at byte {offsets[5]}: label 12 at record 5 is outside [0, 10)" in p.stderr


@pytest.mark.skipif(not FASHION.exists(), reason="Fashion-MNIST not installed")
def test_fashion_mnist_decodes_in_memory_exactly(tmp_path, tool):
    images = np.frombuffer(gzip.open(FASHION / "train-images-idx3-ubyte.gz").read(), np.uint8,
                           offset=16).reshape(-1, 784)
    labels = np.frombuffer(gzip.open(FASHION / "train-labels-idx1-ubyte.gz").read(), np.uint8,
                           offset=8)
    path = tmp_path / "fashion.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for img, lab in zip(images, labels):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(lab)])),
            })).SerializeToString())
    p = dump(tool, path, 784, "--time", "--shuffle", 1, "--batch", 32, "--batches", 2000,
             check=False)
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)
    assert t["count"] == 60000 and t["in_memory"] == 1
    _, batches = dump(tool, path, 784, "--batch", 4)
    x = np.array(batches[0]["x"], np.float32).reshape(4, 784)
    assert np.array_equal(x, images[:4].astype(np.float32) * np.float32(1 / 255))
    assert batches[0]["labels"] == labels[:4].tolist()
