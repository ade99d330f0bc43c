"""examples/fashion_cnn.json's model in TensorFlow's graph mode, on the CPU, for the benchmark only
(bench_train.py --cnn): conv 5x5x32 SAME relu, max-pool 2, conv 5x5x64 SAME relu, max-pool 2, dense 1024
relu, dropout 0.4, dense 10; sparse softmax cross-entropy, Adam 0.001 with exponential decay, EMA 0.999
of every variable. The input is the seeds' pipeline: TFRecordDataset -> parse_single_example ->
shuffle(10000) -> repeat -> batch. Prints one JSON line.

usage: tf_fashion_cnn.py TRAIN.tfrecord STEPS [BATCH]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

from tf_timing import time_steps  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_eager_execution()
SPEC = {"label": tf.io.FixedLenFeature([], tf.int64), "image_raw": tf.io.FixedLenFeature([], tf.string)}


def parse(record):
    f = tf.io.parse_single_example(record, SPEC)
    x = tf.cast(tf.reshape(tf.io.decode_raw(f["image_raw"], tf.uint8), [28, 28, 1]), tf.float32) / 255.0
    return x, tf.cast(f["label"], tf.int32)


def model(x):
    glorot = tf1.glorot_uniform_initializer()
    h = x
    for name, k, cin, cout in [("conv1", 5, 1, 32), ("conv2", 5, 32, 64)]:
        w = tf1.get_variable(name + "/kernel", [k, k, cin, cout], initializer=glorot)
        b = tf1.get_variable(name + "/bias", [cout], initializer=tf1.zeros_initializer())
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, w, [1, 1, 1, 1], "SAME"), b))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.reshape(h, [-1, 7 * 7 * 64])
    for name, n, act in [("dense1", 1024, True), ("dense2", 10, False)]:
        w = tf1.get_variable(name + "/kernel", [h.shape[1], n], initializer=glorot)
        b = tf1.get_variable(name + "/bias", [n], initializer=tf1.zeros_initializer())
        h = tf.matmul(h, w) + b
        if act:
            h = tf.nn.dropout(tf.nn.relu(h), rate=0.4)
    return h


def main(path, steps, batch=100):
    steps, batch = int(steps), int(batch)
    ds = tf.data.TFRecordDataset(path).map(parse).shuffle(10000).repeat().batch(batch)
    x, y = tf1.data.make_one_shot_iterator(ds).get_next()
    global_step = tf1.train.get_or_create_global_step()
    lr = tf1.train.exponential_decay(0.001, global_step, 600, 0.9)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=model(x)))
    apply = tf1.train.AdamOptimizer(lr).minimize(loss, global_step=global_step)
    ema = tf1.train.ExponentialMovingAverage(0.999, global_step)
    with tf.control_dependencies([apply]):
        train_op = ema.apply(tf1.trainable_variables())
    time_steps(tf1, train_op, 10, steps, batch)


if __name__ == "__main__":
    main(*sys.argv[1:])
