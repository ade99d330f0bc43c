"""`tower convert` against the real readers: TensorFlow parses what we write (plain, GZIP and ZLIB), the
real Fashion-MNIST files convert exactly, the test split is exact, the meta JSON is right, and every bad
input fails with one message naming the file and the byte offset or line, leaving no file behind.
TFRecord uploads are written by TensorFlow's own writer (plain and GZIP), come back record for record
as TensorFlow reads them, and every damaged record is named by its index and byte offset.

Run: TOWER_BUILD=build-conv python -m pytest tests/integration/test_convert.py
"""
import collections
import gzip
import json
import os
import re
import struct

import numpy as np
import pytest

from conftest import FASHION

tf = pytest.importorskip("tensorflow")

TF_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}


# ----------------------------------------------------------------------------------------------- helpers

def idx_bytes(array):
    """The IDX ubyte encoding of a uint8 array (magic 0x08 + rank, big-endian dims, data)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 8, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.tobytes()


def write(path, data, gz=False):
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def read_examples(path, spec, compression="none"):
    """Every record of a TFRecord file parsed by TensorFlow with `spec`, as a list of numpy dicts."""
    ds = tf.data.TFRecordDataset(str(path), compression_type=TF_COMPRESSION[compression])
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()} for r in ds]


IDX_SPEC = {
    "image_raw": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "size": tf.io.FixedLenFeature([], tf.int64),
    "height": tf.io.FixedLenFeature([], tf.int64),
    "width": tf.io.FixedLenFeature([], tf.int64),
    "depth": tf.io.FixedLenFeature([], tf.int64),
}


def read_idx_batches(path, compression="none"):
    """(images [N, size] uint8, labels [N] int64) of an IDX-converted TFRecord, parsed by TensorFlow."""
    ds = tf.data.TFRecordDataset(str(path), compression_type=TF_COMPRESSION[compression])
    ds = ds.batch(8192).map(lambda r: tf.io.parse_example(r, IDX_SPEC))
    images, labels = [], []
    for b in ds:
        images.append(tf.io.decode_raw(b["image_raw"], tf.uint8).numpy())
        labels.append(b["label"].numpy())
    if not labels:
        return np.zeros((0, 0), np.uint8), np.zeros(0, np.int64)
    return np.concatenate(images), np.concatenate(labels)


def leftovers(folder):
    return sorted(os.listdir(folder))


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


# ------------------------------------------------------------------------- (1) TensorFlow reads our files

@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_idx_read_by_tensorflow(tmp_path, run_tower, compression):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(37, 5, 4), dtype=np.uint8)
    labels = rng.integers(0, 10, size=37, dtype=np.uint8)
    write(tmp_path / "img", idx_bytes(images), gz=True)
    write(tmp_path / "lab", idx_bytes(labels))
    out = tmp_path / "out.tfrecord"
    ok(run_tower("convert", "--images", tmp_path / "img", "--labels", tmp_path / "lab", "-o", out,
                 "--compression", compression))
    records = read_examples(out, IDX_SPEC, compression)
    assert len(records) == 37
    for i, r in enumerate(records):
        assert r["image_raw"] == images[i].tobytes()
        assert r["label"] == labels[i]
        assert (r["size"], r["height"], r["width"], r["depth"]) == (20, 5, 4, 1)


def test_idx4_depth(tmp_path, run_tower):
    images = np.arange(6 * 3 * 2 * 3, dtype=np.uint8).reshape(6, 3, 2, 3)
    write(tmp_path / "img", idx_bytes(images))
    write(tmp_path / "lab", idx_bytes(np.arange(6, dtype=np.uint8)))
    out = tmp_path / "v.tfrecord"
    ok(run_tower("convert", "--images", tmp_path / "img", "--labels", tmp_path / "lab", "-o", out))
    records = read_examples(out, IDX_SPEC)
    assert [r["image_raw"] for r in records] == [im.tobytes() for im in images]
    assert {(r["size"], r["height"], r["width"], r["depth"]) for r in records} == {(18, 3, 2, 3)}
    meta = json.loads((tmp_path / "v.meta.json").read_text())
    assert meta["shape"] == [3, 2, 3]


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_csv_read_by_tensorflow(tmp_path, run_tower, compression):
    rng = np.random.default_rng(2)
    feats = rng.standard_normal((25, 3)).astype(np.float32)
    labels = rng.integers(-3, 5, size=25)
    lines = ['"f 1",label,"f,2",f3']
    for f, y in zip(feats, labels):
        lines.append(f"{float(f[0])!r},{y},{float(f[1])!r},{float(f[2])!r}")
    (tmp_path / "d.csv").write_text("\r\n".join(lines) + "\r\n\r\n")
    out = tmp_path / "d.tfrecord"
    ok(run_tower("convert", "--csv", tmp_path / "d.csv", "--label-column", "label", "-o", out,
                 "--compression", compression))
    spec = {"features": tf.io.FixedLenFeature([3], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64)}
    records = read_examples(out, spec, compression)
    assert len(records) == 25
    for i, r in enumerate(records):
        assert r["features"].tobytes() == feats[i].tobytes()
        assert r["label"] == labels[i]
    meta = json.loads((tmp_path / "d.meta.json").read_text())
    assert meta["source"] == "csv" and meta["shape"] == 3 and meta["label_column"] == "label"
    hist = meta["splits"]["train"]["label_histogram"]
    assert hist == {str(k): int(v) for k, v in sorted(collections.Counter(labels.tolist()).items())}


def test_csv_float_labels_and_stats(tmp_path, run_tower):
    (tmp_path / "r.csv").write_text("x,y\n1,0.5\n2,2\n3,-1.25")
    out = tmp_path / "r.tfrecord"
    ok(run_tower("convert", "--csv", tmp_path / "r.csv", "--label-column", "y", "-o", out))
    spec = {"features": tf.io.FixedLenFeature([1], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.float32)}
    assert [float(r["label"]) for r in read_examples(out, spec)] == [0.5, 2.0, -1.25]
    train = json.loads((tmp_path / "r.meta.json").read_text())["splits"]["train"]
    assert "label_histogram" not in train
    assert train["label_stats"] == {"min": -1.25, "max": 2.0, "mean": pytest.approx(1.25 / 3)}


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_npy_volumes_read_by_tensorflow(tmp_path, run_tower, dtype, compression):
    rng = np.random.default_rng(3)
    vols = (rng.standard_normal((7, 4, 3, 2)) * 50).astype(dtype)
    labels = rng.integers(0, 3, size=7).astype(np.int64)
    np.save(tmp_path / "x.npy", vols)
    np.save(tmp_path / "y.npy", labels)
    out = tmp_path / "v.tfrecord"
    ok(run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels",
                 tmp_path / "y.npy", "-o", out, "--compression", compression))
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
            "shape": tf.io.FixedLenFeature([3], tf.int64),
            "dtype": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}
    records = read_examples(out, spec, compression)
    assert len(records) == 7
    for i, r in enumerate(records):
        decoded = np.frombuffer(r["image_raw"], dtype=np.dtype(dtype).newbyteorder("<"))
        assert np.array_equal(decoded.reshape(4, 3, 2), vols[i])
        assert list(r["shape"]) == [4, 3, 2]
        assert r["dtype"] == dtype.encode()
        assert r["label"] == labels[i]
    meta = json.loads((tmp_path / "v.meta.json").read_text())
    assert meta["shape"] == [4, 3, 2] and meta["dtype"] == dtype and meta["source"] == "npy"


def test_npy_float_labels_gzip_input(tmp_path, run_tower):
    vols = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    labels = np.array([[0.5], [1.5], [2.5], [-1.0], [3.25]])  # float64, shape (N, 1)
    np.save(tmp_path / "x.npy", vols)
    np.save(tmp_path / "y.npy", labels)
    write(tmp_path / "y.npy.gz", (tmp_path / "y.npy").read_bytes(), gz=True)
    out = tmp_path / "v.tfrecord"
    ok(run_tower("convert", "--npy-features", tmp_path / "x.npy", "--npy-labels",
                 tmp_path / "y.npy.gz", "-o", out))
    spec = {"label": tf.io.FixedLenFeature([], tf.float32),
            "shape": tf.io.FixedLenFeature([1], tf.int64)}
    assert [float(r["label"]) for r in read_examples(out, spec)] == [0.5, 1.5, 2.5, -1.0, 3.25]


# ------------------------------------------------------------------------- (2) real Fashion-MNIST files

def load_fashion(prefix):
    with gzip.open(FASHION / f"{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(FASHION / f"{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


needs_fashion = pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").exists(),
                                   reason="Fashion-MNIST files not installed")


@needs_fashion
def test_fashion_mnist_train_and_test(tmp_path, run_tower):
    train, test = tmp_path / "train.tfrecord", tmp_path / "test.tfrecord"
    result = ok(run_tower(
        "convert", "--images", FASHION / "train-images-idx3-ubyte.gz",
        "--labels", FASHION / "train-labels-idx1-ubyte.gz",
        "--test-images", FASHION / "t10k-images-idx3-ubyte.gz",
        "--test-labels", FASHION / "t10k-labels-idx1-ubyte.gz",
        "-o", train, "--test-output", test, "--compression", "gzip", "--json"))
    summary = json.loads(result.stdout)
    assert summary["train"] == {"path": str(train), "count": 60000}
    assert summary["test"] == {"path": str(test), "count": 10000}
    for prefix, path, n in [("train", train, 60000), ("t10k", test, 10000)]:
        images, labels = load_fashion(prefix)
        got_images, got_labels = read_idx_batches(path, "gzip")
        assert got_images.shape == (n, 784)
        assert np.array_equal(got_images, images)
        assert np.array_equal(got_labels, labels)
    meta = json.loads((tmp_path / "train.meta.json").read_text())
    assert meta["format_version"] == 1 and meta["source"] == "idx"
    assert meta["shape"] == [28, 28, 1] and meta["dtype"] == "uint8"
    assert meta["compression"] == "gzip"
    assert meta["features"] == {"image_raw": "bytes", "label": "int64", "size": "int64",
                                "height": "int64", "width": "int64", "depth": "int64"}
    assert meta["splits"]["train"]["count"] == 60000
    assert meta["splits"]["test"]["count"] == 10000
    assert meta["splits"]["train"]["label_histogram"] == {str(k): 6000 for k in range(10)}
    assert meta["splits"]["test"]["label_histogram"] == {str(k): 1000 for k in range(10)}
    assert leftovers(tmp_path) == ["test.tfrecord", "train.meta.json", "train.tfrecord"]


@needs_fashion
def test_fashion_mnist_test_fraction_is_exact(tmp_path, run_tower):
    train, test = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
    ok(run_tower("convert", "--images", FASHION / "t10k-images-idx3-ubyte.gz",
                 "--labels", FASHION / "t10k-labels-idx1-ubyte.gz", "-o", train,
                 "--test-fraction", "0.137", "--seed", "42", "--test-output", test))
    images, labels = load_fashion("t10k")
    tr_images, tr_labels = read_idx_batches(train)
    te_images, te_labels = read_idx_batches(test)
    assert len(te_labels) == round(0.137 * 10000) == 1370
    assert len(tr_labels) == 10000 - 1370

    def rows(im, lab):
        return collections.Counter(im[i].tobytes() + bytes([lab[i]]) for i in range(len(lab)))

    assert rows(tr_images, tr_labels) + rows(te_images, te_labels) == rows(images, labels)
    meta = json.loads((tmp_path / "a.meta.json").read_text())
    hist = meta["splits"]["test"]["label_histogram"]
    assert sum(hist.values()) == 1370
    assert hist == {str(k): int(v) for k, v in sorted(collections.Counter(te_labels.tolist()).items())}


@pytest.mark.parametrize("fraction,n", [(0.25, 41), (0.5, 9), (0.0, 12), (1.0, 12), (0.333, 1000)])
def test_test_fraction_counts(tmp_path, run_tower, fraction, n):
    images = np.arange(n * 4, dtype=np.uint32).astype(np.uint8).reshape(n, 2, 2)
    images[:, 0, 0] = np.arange(n) % 256
    images[:, 0, 1] = np.arange(n) // 256
    write(tmp_path / "img", idx_bytes(images))
    write(tmp_path / "lab", idx_bytes(np.arange(n) % 10))
    train, test = tmp_path / "tr.tfrecord", tmp_path / "te.tfrecord"
    ok(run_tower("convert", "--images", tmp_path / "img", "--labels", tmp_path / "lab", "-o", train,
                 "--test-fraction", fraction, "--test-output", test))
    want = int(fraction * n + 0.5)  # halves round away from zero
    ids = {}
    for name, path in [("train", train), ("test", test)]:
        got, _ = read_idx_batches(path)
        ids[name] = [int(r[0]) + 256 * int(r[1]) for r in got]
    assert len(ids["test"]) == want
    assert sorted(ids["train"] + ids["test"]) == list(range(n))
    assert ids["train"] == sorted(ids["train"]) and ids["test"] == sorted(ids["test"])


# ------------------------------------------------------------------------------------- (3) bad inputs

def idx_pair(folder, n=10, n_labels=None, gz=False):
    images = (np.arange(n * 9) % 251).astype(np.uint8).reshape(n, 3, 3)
    labels = (np.arange(n if n_labels is None else n_labels) % 10).astype(np.uint8)
    return (write(folder / "images", idx_bytes(images), gz),
            write(folder / "labels", idx_bytes(labels), gz))


def csv_file(folder, text):
    path = folder / "data.csv"
    path.write_text(text)
    return path


def npy_pair(folder, features=None, labels=None, features_bytes=None):
    fx, fy = folder / "x.npy", folder / "y.npy"
    np.save(fx, np.zeros((4, 2, 2), np.float32) if features is None else features)
    np.save(fy, np.arange(4) if labels is None else labels)
    if features_bytes is not None:
        fx.write_bytes(features_bytes)
    return fx, fy


def case_wrong_magic(d):
    img, lab = idx_pair(d)
    img.write_bytes(b"\x12\x34" + img.read_bytes()[2:])
    return ["--images", img, "--labels", lab], img, "at byte 0: bad magic 0x12340803"


def case_labels_as_images(d):
    img, lab = idx_pair(d)
    return ["--images", lab, "--labels", img], lab, "at byte 0: not an IDX images file"


def case_count_mismatch(d):
    img, lab = idx_pair(d, n=10, n_labels=9)
    return ["--images", img, "--labels", lab], lab, "at byte 4: the labels file declares 9 labels"


def case_truncated_gzip(d):
    img, lab = idx_pair(d, n=500, gz=True)
    data = img.read_bytes()
    img.write_bytes(data[: len(data) // 2])
    return (["--images", img, "--labels", lab], img,
            f"at byte {len(data) // 2}: truncated gzip stream")


def case_gzip_bomb_header(d):
    img, lab = idx_pair(d, n=2000, gz=True)
    return (["--images", img, "--labels", lab, "--max-bytes", "10K"], img,
            "at byte 4: the header declares 2000 items of 9 bytes (18016 bytes in all), past the "
            "budget of 10240 bytes")


def case_gzip_bomb_stream(d):
    # 64 MiB of rows in ~100 KB: reading stops at the budget, long before the end
    path = d / "bomb.csv"
    path.write_bytes(gzip.compress(b"a,y\n" + b"1,2\n" * (16 << 20), mtime=0))
    return (["--csv", path, "--label-column", "y", "--max-bytes", "1M"], path,
            "at byte 1048576: the data is larger than the budget of 1048576 bytes after "
            "decompression")


def case_truncated_raw_idx(d):
    img, lab = idx_pair(d)
    data = img.read_bytes()
    img.write_bytes(data[:-4])
    return (["--images", img, "--labels", lab], img,
            f"at byte {len(data) - 4}: truncated: the data ends inside item 10 of 10")


def case_trailing_idx(d):
    img, lab = idx_pair(d)
    lab.write_bytes(lab.read_bytes() + b"\0")
    return ["--images", img, "--labels", lab], lab, "at byte 18: trailing data after the 10 items"


def case_csv_non_numeric(d):
    path = csv_file(d, "a,b,y\n1,2,0\n3,abc,1\n")
    return (["--csv", path, "--label-column", "y"], path,
            ":3: column 2 ('b'): 'abc' is not a number")


def case_csv_ragged(d):
    path = csv_file(d, "a,b,y\n1,2,0\n3,4,1\n5,6\n")
    return (["--csv", path, "--label-column", "y"], path,
            ":4: ragged row: 2 fields but the header has 3 columns")


def case_csv_missing_label(d):
    path = csv_file(d, "a,b,y\n1,2,0\n")
    return (["--csv", path, "--label-column", "label"], path,
            ":1: no column named 'label' in the header")


def case_npy_bad_magic(d):
    fx, fy = npy_pair(d, features_bytes=b"\x93NUMPX\x01\x00" + b" " * 100)
    return (["--npy-features", fx, "--npy-labels", fy], fx, "at byte 0: bad magic: not a .npy file")


def case_npy_unsupported_dtype(d):
    fx, fy = npy_pair(d, features=np.zeros((4, 2), np.complex64))
    return (["--npy-features", fx, "--npy-labels", fy], fx,
            "at byte 20: dtype '<c8' is not supported")


def case_npy_fortran(d):
    fx, fy = npy_pair(d, features=np.asfortranarray(np.zeros((4, 3), np.float32)))
    header = fx.read_bytes()[10:128].decode()
    at = 10 + header.index("True")
    return (["--npy-features", fx, "--npy-labels", fy], fx,
            f"at byte {at}: bad .npy header: fortran_order True")


def case_npy_first_dims(d):
    fx, fy = npy_pair(d, labels=np.arange(5))
    return (["--npy-features", fx, "--npy-labels", fy], fy,
            "at byte 10: the labels have 5 rows but the features")


BAD_INPUTS = [case_wrong_magic, case_labels_as_images, case_count_mismatch, case_truncated_gzip,
              case_gzip_bomb_header, case_gzip_bomb_stream, case_truncated_raw_idx, case_trailing_idx,
              case_csv_non_numeric, case_csv_ragged, case_csv_missing_label, case_npy_bad_magic,
              case_npy_unsupported_dtype, case_npy_fortran, case_npy_first_dims]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda c: c.__name__[5:])
@pytest.mark.parametrize("split", [False, True])
def test_bad_input_fails_cleanly(tmp_path, run_tower, case, split):
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    args, bad_file, want = case(inputs)
    args += ["-o", outputs / "o.tfrecord", "--compression", "gzip"]
    if split:
        args += ["--test-fraction", "0.5", "--test-output", outputs / "t.tfrecord"]
    result = run_tower("convert", *args)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"tower convert: {bad_file}")
    assert want in lines[0]
    assert leftovers(outputs) == []
    assert result.stdout == ""


def test_bad_input_json_error(tmp_path, run_tower):
    (tmp_path / "d.csv").write_text("a,y\nx,1\n")
    result = run_tower("convert", "--csv", tmp_path / "d.csv", "--label-column", "y", "-o",
                       tmp_path / "o.tfrecord", "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["message"].startswith(f"{tmp_path / 'd.csv'}:2: column 1 ('a')")


def test_existing_output_untouched_on_failure(tmp_path, run_tower):
    img, lab = idx_pair(tmp_path, n=10, n_labels=9)
    out = tmp_path / "o.tfrecord"
    out.write_bytes(b"previous")
    result = run_tower("convert", "--images", img, "--labels", lab, "-o", out)
    assert result.returncode == 1
    assert out.read_bytes() == b"previous"
    assert leftovers(tmp_path) == ["images", "labels", "o.tfrecord"]


@pytest.mark.parametrize("args,want", [
    (["--bogus"], "unknown option '--bogus'"),
    (["--images", "a", "--labels", "b"], "-o/--output is required"),
    (["--images", "a", "-o", "x"], "--images needs --labels"),
    (["-o", "x"], "give exactly one source"),
    (["--csv", "a", "-o", "x"], "--csv needs --label-column"),
    (["--images", "a", "--labels", "b", "-o", "x", "--test-fraction", "0.1"],
     "--test-output is needed"),
    (["--images", "a", "--labels", "b", "-o", "x", "--test-fraction", "1.5", "--test-output", "t"],
     "--test-fraction: bad value '1.5'"),
    (["--images", "a", "--labels", "b", "-o", "x", "--compression", "lz4"],
     "--compression: bad value 'lz4'"),
    (["--images", "a", "--labels", "b", "-o", "x", "--max-bytes", "12Q"],
     "--max-bytes: bad value '12Q'"),
    (["--images", "a", "--images", "b"], "option --images given twice"),
    (["--images"], "option --images needs a value"),
    (["stray"], "unexpected argument 'stray'"),
    (["--images", "a", "--labels", "b", "-o", "x", "--seed", "3"], "--seed needs --test-fraction"),
    (["--images", "a", "--labels", "b", "-o", "x", "--json=1"], "option --json takes no value"),
    (["--images", "a", "--labels", "b", "-o", "a"], "'a' is named twice"),
])
def test_usage_errors(tmp_path, run_tower, args, want):
    result = run_tower("convert", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert want in result.stderr
    assert leftovers(tmp_path) == []


def test_help_documents_every_option(run_tower):
    result = ok(run_tower("convert", "--help"))
    for option in ["--images", "--labels", "--test-images", "--test-labels", "--csv",
                   "--label-column", "--npy-features", "--npy-labels", "--tfrecord",
                   "--test-tfrecord", "-o, --output", "--test-output", "--test-fraction", "--seed",
                   "--compression", "--meta", "--max-bytes", "--max-record-bytes", "--json",
                   "--help"]:
        assert option in result.stdout
    assert result.stdout.startswith("usage: tower convert")


def test_summary_line_and_meta_option(tmp_path, run_tower):
    img, lab = idx_pair(tmp_path, n=10)
    out, meta = tmp_path / "o.rec", tmp_path / "desc.json"
    result = ok(run_tower("convert", "--images", img, "--labels", lab, "-o", out, "--meta", meta))
    assert result.stdout == (f"tower convert: wrote 10 examples to {out} (idx, compression none); "
                             f"meta: {meta}\n")
    assert json.loads(meta.read_text())["splits"]["train"]["count"] == 10
    # the default meta path for a name without .tfrecord
    ok(run_tower("convert", "--images", img, "--labels", lab, "-o", tmp_path / "p.rec"))
    assert (tmp_path / "p.rec.meta.json").exists()


# ------------------------------------------------------------------------- (4) TFRecord of tf.train.Example

def tf_image_example(i, h=3, w=2, d=2, skip=()):
    """Example i as TensorFlow's MNIST convert_to_records writes it (plus depth): image_raw, label,
    height, width, depth; features named in skip are left out."""
    pixels = ((np.arange(h * w * d) + 7 * i) % 256).astype(np.uint8).tobytes()
    feature = {
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
        "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[h])),
        "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[w])),
        "depth": tf.train.Feature(int64_list=tf.train.Int64List(value=[d])),
    }
    for name in skip:
        del feature[name]
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def tf_write(path, records, compression="none"):
    """Writes records with tf.io.TFRecordWriter; returns each record's byte offset (uncompressed)."""
    with tf.io.TFRecordWriter(str(path), options=TF_COMPRESSION[compression] or None) as w:
        for r in records:
            w.write(r)
    offsets, at = [], 0
    for r in records:
        offsets.append(at)
        at += 16 + len(r)
    return offsets


def tf_records(path, compression="none"):
    """The raw records of a TFRecord file, as TensorFlow reads them."""
    ds = tf.data.TFRecordDataset(str(path), compression_type=TF_COMPRESSION[compression])
    return [r.numpy() for r in ds]


@pytest.mark.parametrize("out_compression", ["none", "gzip", "zlib"])
@pytest.mark.parametrize("in_compression", ["none", "gzip"])
def test_tfrecord_from_tensorflow(tmp_path, run_tower, in_compression, out_compression):
    records = [tf_image_example(i) for i in range(53)]
    src = tmp_path / "upload.tfrecord"
    tf_write(src, records, in_compression)
    out = tmp_path / "train.tfrecord"
    result = ok(run_tower("convert", "--tfrecord", src, "-o", out, "--compression", out_compression,
                          "--json"))
    summary = json.loads(result.stdout)
    assert summary["source"] == "tfrecord" and summary["train"] == {"path": str(out), "count": 53}
    assert tf_records(out, out_compression) == records  # TensorFlow reads back the very records
    spec = dict(IDX_SPEC)
    del spec["size"]
    parsed = read_examples(out, spec, out_compression)
    assert [r["label"] for r in parsed] == [i % 10 for i in range(53)]
    meta = json.loads((tmp_path / "train.meta.json").read_text())
    assert meta["format_version"] == 1 and meta["source"] == "tfrecord"
    assert meta["features"] == {"image_raw": "bytes", "label": "int64", "height": "int64",
                                "width": "int64", "depth": "int64"}
    assert meta["shape"] == [3, 2, 2] and meta["dtype"] == "uint8"
    assert meta["compression"] == out_compression
    assert meta["splits"]["train"]["count"] == 53
    assert meta["splits"]["train"]["label_histogram"] == {
        str(k): v for k, v in sorted(collections.Counter(i % 10 for i in range(53)).items())}
    assert leftovers(tmp_path) == ["train.meta.json", "train.tfrecord", "upload.tfrecord"]


def test_tfrecord_of_idx_conversion_round_trips(tmp_path, run_tower):
    """Our own IDX output, uploaded again, gives the same meta (but the source)."""
    images = np.arange(12 * 4 * 3, dtype=np.uint8).reshape(12, 4, 3)
    write(tmp_path / "img", idx_bytes(images))
    write(tmp_path / "lab", idx_bytes(np.arange(12, dtype=np.uint8) % 4))
    first = tmp_path / "a.tfrecord"
    ok(run_tower("convert", "--images", tmp_path / "img", "--labels", tmp_path / "lab", "-o", first))
    again = tmp_path / "b.tfrecord"
    ok(run_tower("convert", "--tfrecord", first, "-o", again, "--compression", "gzip"))
    assert tf_records(again, "gzip") == tf_records(first)
    meta_a = json.loads((tmp_path / "a.meta.json").read_text())
    meta_b = json.loads((tmp_path / "b.meta.json").read_text())
    for key in ["features", "shape", "dtype"]:
        assert meta_a[key] == meta_b[key]
    assert meta_a["splits"]["train"]["label_histogram"] == meta_b["splits"]["train"]["label_histogram"]


def test_tfrecord_float_features_and_labels(tmp_path, run_tower):
    rng = np.random.default_rng(4)
    feats = rng.standard_normal((9, 6)).astype(np.float32)
    labels = rng.standard_normal(9).astype(np.float32)
    records = [tf.train.Example(features=tf.train.Features(feature={
        "features": tf.train.Feature(float_list=tf.train.FloatList(value=f)),
        "label": tf.train.Feature(float_list=tf.train.FloatList(value=[y]))})).SerializeToString()
        for f, y in zip(feats, labels)]
    tf_write(tmp_path / "r.tfrecord", records)
    out = tmp_path / "o.tfrecord"
    ok(run_tower("convert", "--tfrecord", tmp_path / "r.tfrecord", "-o", out))
    assert tf_records(out) == records
    meta = json.loads((tmp_path / "o.meta.json").read_text())
    assert meta["shape"] == [6] and meta["dtype"] == "float32"
    assert meta["features"] == {"features": "float", "label": "float"}
    stats = meta["splits"]["train"]["label_stats"]
    assert stats["min"] == float(labels.min()) and stats["max"] == float(labels.max())
    assert stats["mean"] == pytest.approx(float(labels.astype(np.float64).mean()))


def test_tfrecord_test_fraction_and_test_file(tmp_path, run_tower):
    records = [tf_image_example(i) for i in range(40)]
    tf_write(tmp_path / "in.tfrecord", records, "gzip")
    train, test = tmp_path / "tr.tfrecord", tmp_path / "te.tfrecord"
    ok(run_tower("convert", "--tfrecord", tmp_path / "in.tfrecord", "-o", train, "--test-fraction",
                 "0.3", "--seed", "5", "--test-output", test))
    got_train, got_test = tf_records(train), tf_records(test)
    assert len(got_test) == 12 and len(got_train) == 28
    assert sorted(got_train + got_test) == sorted(records)
    assert [r for r in records if r in got_train] == got_train  # order kept
    meta = json.loads((tmp_path / "tr.meta.json").read_text())
    assert meta["splits"]["test"]["count"] == 12
    assert sum(meta["splits"]["test"]["label_histogram"].values()) == 12

    t10k = [tf_image_example(i) for i in range(100, 107)]
    tf_write(tmp_path / "t10k.tfrecord", t10k)
    ok(run_tower("convert", "--tfrecord", tmp_path / "in.tfrecord", "--test-tfrecord",
                 tmp_path / "t10k.tfrecord", "-o", train, "--test-output", test))
    assert tf_records(train) == records and tf_records(test) == t10k


def corrupt_at(path, offset, xor):
    data = bytearray(path.read_bytes())
    data[offset] ^= xor
    path.write_bytes(bytes(data))


def tfr_bad_length_crc(d):
    offsets = tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(8)])
    corrupt_at(d / "in.tfrecord", offsets[5] + 9, 0x10)
    return 5, offsets[5], "CORRUPT", "corrupted record: length CRC mismatch"


def tfr_bad_data_crc(d):
    offsets = tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(8)])
    corrupt_at(d / "in.tfrecord", offsets[2] + 20, 0x01)
    return 2, offsets[2], "CORRUPT", "corrupted record: data CRC mismatch"


def tfr_length_2_40(d):
    """A length field of 2^40 whose length CRC is right: refused before anything is allocated."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    offsets = tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(5)])
    path = d / "in.tfrecord"
    length = struct.pack("<Q", 1 << 40)
    header = length + struct.pack("<I", masked_crc32c(length))
    data = path.read_bytes()
    path.write_bytes(data[:offsets[4]] + header + data[offsets[4] + 12:])
    return (4, offsets[4], "TOO_LARGE",
            "record length 1099511627776 exceeds the cap of 67108864 bytes")


def tfr_torn_tail(d):
    offsets = tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(8)])
    path = d / "in.tfrecord"
    path.write_bytes(path.read_bytes()[:-10])
    return 7, offsets[7], "TRUNCATED", "truncated record"


def tfr_trailing_garbage(d):
    offsets = tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(8)])
    path = d / "in.tfrecord"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + b"garbage after the last record")
    assert offsets[-1] < size
    return 8, size, "CORRUPT", "corrupted record: length CRC mismatch"


def tfr_short_trailing_garbage(d):
    tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(8)])
    path = d / "in.tfrecord"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + b"\n")
    return 8, size, "TRUNCATED", "truncated record: header has 1 of 12 bytes"


def tfr_not_an_example(d):
    records = [tf_image_example(i) for i in range(6)]
    records.insert(3, b"\xff\xff\xff\xff not a protobuf")
    offsets = tf_write(d / "in.tfrecord", records)
    return 3, offsets[3], "CORRUPT", "not a tf.train.Example: its 19 bytes do not parse as one"


def tfr_events_file(d):
    event = tf.compat.v1.Event(wall_time=1.5, step=3, file_version="brain.Event:2")
    tf_write(d / "in.tfrecord", [event.SerializeToString()])
    return 0, 0, "CORRUPT", "not a tf.train.Example"


def tfr_schema_change(d):
    records = [tf_image_example(i) for i in range(6)]
    records.append(tf_image_example(6, skip=["depth"]))
    offsets = tf_write(d / "in.tfrecord", records)
    return (6, offsets[6], "INVALID_ARGUMENT",
            f"feature 'depth' (int64) of the first record of {d / 'in.tfrecord'} is missing")


def tfr_kind_change(d):
    records = [tf_image_example(i) for i in range(4)]
    records.append(tf.train.Example(features=tf.train.Features(feature={
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x"])),
        "label": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
        "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
        "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[2])),
        "depth": tf.train.Feature(int64_list=tf.train.Int64List(value=[2]))})).SerializeToString())
    offsets = tf_write(d / "in.tfrecord", records)
    return 4, offsets[4], "INVALID_ARGUMENT", "feature 'label' is float but int64 in the first record"


def tfr_torn_gzip(d):
    tf_write(d / "in.tfrecord", [tf_image_example(i) for i in range(300)], "gzip")
    path = d / "in.tfrecord"
    path.write_bytes(path.read_bytes()[:-100])
    return None, None, "TRUNCATED", "truncated gzip stream"


TFR_BAD = [tfr_bad_length_crc, tfr_bad_data_crc, tfr_length_2_40, tfr_torn_tail, tfr_trailing_garbage,
           tfr_short_trailing_garbage, tfr_not_an_example, tfr_events_file, tfr_schema_change,
           tfr_kind_change, tfr_torn_gzip]


@pytest.mark.parametrize("case", TFR_BAD, ids=lambda c: c.__name__[4:])
@pytest.mark.parametrize("split", [False, True])
def test_tfrecord_bad_input_names_record_and_offset(tmp_path, run_tower, case, split):
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    index, offset, code, want = case(inputs)
    src = inputs / "in.tfrecord"
    args = ["--tfrecord", src, "-o", outputs / "o.tfrecord", "--compression", "gzip", "--json"]
    if split:
        args += ["--test-fraction", "0.5", "--test-output", outputs / "t.tfrecord"]
    result = run_tower("convert", *args)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == code
    assert lines[0] == f"tower convert: {error['message']}"
    if index is None:  # somewhere inside the file: any record, but named with its offset
        prefix = re.match(rf"{re.escape(str(src))}: at byte (\d+): record (\d+): ", error["message"])
        assert prefix, error["message"]
    else:
        prefix = f"{src}: at byte {offset}: record {index}: "
        assert error["message"].startswith(prefix), error["message"]
    assert want in error["message"]
    assert leftovers(outputs) == []
    assert leftovers(inputs) == ["in.tfrecord"]


def test_tfrecord_empty_and_usage(tmp_path, run_tower):
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    result = run_tower("convert", "--tfrecord", tmp_path / "empty.tfrecord", "-o",
                       tmp_path / "o.tfrecord")
    assert result.returncode == 1
    assert result.stderr == (f"tower convert: {tmp_path / 'empty.tfrecord'}: no records: the file "
                             "holds no tf.train.Example\n")
    assert leftovers(tmp_path) == ["empty.tfrecord"]
    for args, want in [
            (["--tfrecord", "a", "--images", "b", "--labels", "c", "-o", "x"], "exactly one source"),
            (["--images", "b", "--labels", "c", "--test-tfrecord", "t", "-o", "x", "--test-output",
              "y"], "--test-tfrecord needs a TFRecord source"),
            (["--tfrecord", "a", "--test-tfrecord", "t", "-o", "x"], "--test-output is needed"),
            (["--tfrecord", "a", "--test-tfrecord", "t", "-o", "x", "--test-output", "y",
              "--test-fraction", "0.5"], "--test-fraction and --test-tfrecord exclude each other"),
            (["--images", "b", "--labels", "c", "-o", "x", "--max-record-bytes", "1K"],
             "--max-record-bytes needs --tfrecord"),
            (["--tfrecord", "a", "-o", "x", "--max-record-bytes", "0"],
             "--max-record-bytes: bad value '0'")]:
        result = run_tower("convert", *args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert want in result.stderr, (args, result.stderr)


def test_tfrecord_record_cap_option(tmp_path, run_tower):
    offsets = tf_write(tmp_path / "in.tfrecord", [tf_image_example(i, h=8, w=8, d=1)
                                                  for i in range(3)])
    out = tmp_path / "o.tfrecord"
    result = run_tower("convert", "--tfrecord", tmp_path / "in.tfrecord", "-o", out,
                       "--max-record-bytes", "64")
    assert result.returncode == 1
    assert f"at byte {offsets[0]}: record 0: record length" in result.stderr
    assert "exceeds the cap of 64 bytes" in result.stderr
    ok(run_tower("convert", "--tfrecord", tmp_path / "in.tfrecord", "-o", out,
                 "--max-record-bytes", "1K"))
    assert len(tf_records(out)) == 3
