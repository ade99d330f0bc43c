"""`tower inspect` reads what TensorFlow wrote: TFRecords of tf.train.Example (plain, GZIP, ZLIB), and
event files from tf.summary. Values must come back exactly; bad files must fail with file and offset."""
import json
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")


def make_examples(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        pixels = rng.integers(0, 256, size=784, dtype=np.uint8).tobytes()
        floats = rng.standard_normal(5).astype(np.float32)
        ints = [i, -i * 1000003, 2**62 + i]
        out.append((pixels, floats, ints))
    return out


def write_with_tf(path, examples, compression):
    opts = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(str(path), opts) as w:
        for pixels, floats, ints in examples:
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels])),
                "f": tf.train.Feature(float_list=tf.train.FloatList(value=floats)),
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ints)),
            }))
            w.write(ex.SerializeToString())


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_reads_tensorflow_tfrecords_exactly(tmp_path, run_tower, compression):
    examples = make_examples(40)
    path = tmp_path / "tf.tfrecord"
    write_with_tf(path, examples, compression)
    res = run_tower("inspect", path, "--json", "--limit", "1000")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["type"] == "tfrecord"
    assert info["compression"] == (compression.lower() or "none")
    assert info["records"] == len(examples)
    assert info["schema"]["image_raw"] == {"kind": "bytes", "min_count": 1, "max_count": 1,
                                           "present": 40}
    assert info["schema"]["f"]["kind"] == "float" and info["schema"]["f"]["max_count"] == 5
    assert info["schema"]["ids"]["kind"] == "int64"
    for got, (pixels, floats, ints) in zip(info["first_records"], examples, strict=True):
        assert bytes.fromhex(got["image_raw"]["values"][0]) == pixels
        assert np.array(got["f"]["values"], dtype=np.float32).tobytes() == floats.tobytes()
        assert got["ids"]["values"] == ints


def test_forced_compression_mismatch_fails(tmp_path, run_tower):
    path = tmp_path / "tf.tfrecord"
    write_with_tf(path, make_examples(3), "GZIP")
    res = run_tower("inspect", path, "--compression", "zlib")
    assert res.returncode == 1
    assert str(path) in res.stderr and "zlib" in res.stderr


def test_record_that_is_not_an_example(tmp_path, run_tower):
    path = tmp_path / "junk.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        w.write(tf.train.Example().SerializeToString())
        w.write(b"\x0a\x50\x01 definitely not a protobuf")
    res = run_tower("inspect", path)
    assert res.returncode == 1
    assert f"{path}: at byte 16:" in res.stderr  # record 0: 12 + 0 + 4 bytes (an empty Example)
    assert "not a valid tf.train.Example" in res.stderr


def test_corrupted_record_names_offset(tmp_path, run_tower):
    path = tmp_path / "bad.tfrecord"
    write_with_tf(path, make_examples(3), "")
    raw = bytearray(path.read_bytes())
    first = 12 + int.from_bytes(raw[:8], "little") + 4
    raw[first + 20] ^= 0xFF  # inside the payload of record 1
    path.write_bytes(bytes(raw))
    res = run_tower("inspect", path)
    assert res.returncode == 1
    assert f"{path}: at byte {first}: corrupted record: data CRC mismatch" in res.stderr


def test_reads_tensorflow_event_file(tmp_path, run_tower):
    logdir = tmp_path / "logs"
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for step in range(5):
            tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
            tf.summary.histogram("w", np.arange(10.0) * step, step=step)
            tf.summary.text("note", f"step {step}", step=step)
    writer.close()
    (event_file,) = logdir.iterdir()
    res = run_tower("inspect", event_file, "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["type"] == "tfevents"
    assert info["file_version"] == "brain.Event:2"
    assert info["tags"]["loss"] == {"kind": "scalars", "count": 5, "first_step": 0, "last_step": 4}
    assert info["tags"]["w"]["kind"] == "histograms"
    assert info["tags"]["note"]["kind"] == "text"
    assert info["records"] == 16
