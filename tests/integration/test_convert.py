"""`tower convert` against the real readers: TensorFlow parses what we write (plain, GZIP and ZLIB), the
real Fashion-MNIST files convert exactly, the test split is exact, the meta JSON is right, and every bad
input fails with one message naming the file and the byte offset or line, leaving no file behind.

Run: TOWER_BUILD=build-conv python -m pytest tests/integration/test_convert.py
"""
import collections
import gzip
import json
import os
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
                   "--label-column", "--npy-features", "--npy-labels", "-o, --output",
                   "--test-output", "--test-fraction", "--seed", "--compression", "--meta",
                   "--max-bytes", "--json", "--help"]:
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
