"""The one timing loop of the TensorFlow side of the benchmarks (tf_seed_train.py, tf_fashion_cnn.py,
tf_seed_cnn3d.py): initialise, `warmup` untimed steps, `steps` timed ones, then one JSON line with the
examples/s and the process's peak RSS. Kept apart so the three scripts time TensorFlow the same way."""
import json
import resource
import time


def time_steps(tf1, train_op, warmup, steps, examples_per_step, **extra):
    """Runs train_op in a new tf1.Session and prints {**extra, steps, examples_per_sec, peak_rss_mib}."""
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        for _ in range(warmup):
            sess.run(train_op)
        t0 = time.perf_counter()
        for _ in range(steps):
            sess.run(train_op)
        dt = time.perf_counter() - t0
    print(json.dumps({**extra, "steps": steps, "examples_per_sec": steps * examples_per_step / dt,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
