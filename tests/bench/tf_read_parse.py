"""TensorFlow's way of reading a TFRecord of Examples, for the benchmark only: tf.data.TFRecordDataset +
parse_single_example per record (the seed's input pipeline), or batched tf.io.parse_example (TF's
fastest documented path). Touches the label and the decoded pixels like a trainer would. Prints JSON.

usage: tf_read_parse.py FILE single|batched
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

SPEC = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "image_raw": tf.io.FixedLenFeature([], tf.string),
}


def touch(f):
    """(record count, pixel sum + label sum) of a parsed record or batch, computed inside TF."""
    pixels = tf.io.decode_raw(f["image_raw"], tf.uint8)
    return (tf.size(f["label"], out_type=tf.int64),
            tf.reduce_sum(tf.cast(pixels, tf.int64)) + tf.reduce_sum(f["label"]))


def main(path, mode):
    t0 = time.perf_counter()
    ds = tf.data.TFRecordDataset(path)
    if mode == "single":
        ds = ds.map(lambda r: touch(tf.io.parse_single_example(r, SPEC)))
    else:
        ds = ds.batch(1024).map(lambda r: touch(tf.io.parse_example(r, SPEC)))
    zero = tf.constant(0, tf.int64)
    records, checksum = ds.reduce((zero, zero), lambda acc, x: (acc[0] + x[0], acc[1] + x[1]))
    records, checksum = int(records), int(checksum)
    dt = time.perf_counter() - t0
    print(json.dumps({"records": records, "seconds": dt, "records_per_s": records / dt,
                      "checksum": checksum}))


if __name__ == "__main__":
    main(*sys.argv[1:])
