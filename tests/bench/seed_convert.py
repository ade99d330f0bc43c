"""The seed's way of making a TFRecord (its create_tfrecord.py), for the benchmark only:
read the MNIST-style IDX .gz files into numpy (as tensorflow.examples.tutorials.mnist did), then a Python
loop of tf.train.Example + tf.io.TFRecordWriter.write. Prints one JSON line with the loop's own time.

usage: seed_convert.py IMAGES.gz LABELS.gz OUT.tfrecord
"""
import gzip
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def int64_feature(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def bytes_feature(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def main(images_path, labels_path, out):
    t0 = time.perf_counter()
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    size = images.shape[1] * images.shape[2]
    with tf.io.TFRecordWriter(out) as writer:
        for i in range(images.shape[0]):
            example = tf.train.Example(features=tf.train.Features(feature={
                "size": int64_feature(size),
                "label": int64_feature(int(labels[i])),
                "image_raw": bytes_feature(images[i].tobytes()),
            }))
            writer.write(example.SerializeToString())
    print(json.dumps({"records": int(images.shape[0]), "loop_seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main(*sys.argv[1:])
