"""The seed's multi-tower MNIST MLP in TensorFlow's graph mode, on the CPU, for the
benchmark only: towers each take batch examples of the step, gradients are averaged, one SGD update with
exponential decay, L2 1e-4 on the weights, EMA 0.99 of every variable. The input is the seed's pipeline:
TFRecordDataset -> parse_single_example -> shuffle(10000) -> repeat -> batch. Prints one JSON line.

usage: tf_seed_train.py TRAIN.tfrecord TOWERS STEPS [BATCH]
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
    x = tf.cast(tf.reshape(tf.io.decode_raw(f["image_raw"], tf.uint8), [784]), tf.float32) / 255.0
    return x, tf.cast(f["label"], tf.int32)


def inference(x):
    reg = []
    h = x
    for name, shape, act in [("layer1", [784, 500], True), ("layer2", [500, 10], False)]:
        with tf1.variable_scope(name):
            w = tf1.get_variable("weights", shape,
                                 initializer=tf1.truncated_normal_initializer(stddev=0.1))
            b = tf1.get_variable("biases", [shape[1]])
            reg.append(1e-4 * tf.nn.l2_loss(w))
            h = tf.matmul(h, w) + b
            if act:
                h = tf.nn.relu(h)
    return h, tf.add_n(reg)


def main(path, towers, steps, batch=32):
    towers, steps, batch = int(towers), int(steps), int(batch)
    ds = tf.data.TFRecordDataset(path).map(parse).shuffle(10000).repeat().batch(batch * towers)
    x, y = tf1.data.make_one_shot_iterator(ds).get_next()
    global_step = tf1.train.get_or_create_global_step()
    lr = tf1.train.exponential_decay(0.001, global_step, 55000 / 32, 0.99)
    opt = tf1.train.GradientDescentOptimizer(lr)
    tower_grads, losses = [], []
    for i in range(towers):
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=i > 0):
            logits, reg = inference(x[i * batch:(i + 1) * batch])
            xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y[i * batch:(i + 1) * batch], logits=logits))
            loss = xent + reg
            losses.append(loss)
            tower_grads.append(opt.compute_gradients(loss))
    grads = [(tf.reduce_mean(tf.stack([g for g, _ in gv]), 0), gv[0][1]) for gv in zip(*tower_grads)]
    apply = opt.apply_gradients(grads, global_step=global_step)
    ema = tf1.train.ExponentialMovingAverage(0.99, global_step)
    with tf.control_dependencies([apply]):
        train_op = ema.apply(tf1.trainable_variables())
    time_steps(tf1, train_op, 100, steps, batch * towers, towers=towers)


if __name__ == "__main__":
    main(*sys.argv[1:])
