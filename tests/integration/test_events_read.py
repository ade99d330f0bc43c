"""The scalar series Tower's status page charts (eventlog/events_read.c, through tests/tools/tw_scalars)
equal what TensorBoard's own loader (plugin_event_accumulator, which also turns TF1 simple_values into
tensors) reads from files TensorFlow wrote: TF2 tf.summary.scalar tensors, TF1 simple_values through
tf.compat.v1.summary.FileWriter and tf.summary.experimental.write_raw_pb, a resumed run with SessionLog
START, files cut short as by a kill -9, and a record too long to hold (a large image). Steps, values and
wall times must match exactly; a damaged record is an error naming file and offset."""
import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
from tensorboard.backend.event_processing import plugin_event_accumulator as pea  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

STEPS = 30
RESUME_STEPS, RESUME_AT, RESUMED_TO = 20, 12, 30
MAX_RECORD = 1 << 20


def ours(tool, logdir, max_points=None):
    """{tag: [(step, value, wall_time)]} from tw_scalars, "NaN"/"Infinity" strings made floats."""
    args = [str(tool("tw_scalars")), str(logdir)] + ([str(max_points)] if max_points else [])
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return {tag: [(step, float(value), wall) for step, value, wall in points]
            for tag, points in json.loads(res.stdout).items()}


def tensorboard(logdir):
    """The same, from TensorBoard's loader: every tag of the scalars plugin, every point kept."""
    acc = pea.EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    if "scalars" not in acc.ActivePlugins():
        return {}
    return {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item(), e.wall_time)
                  for e in acc.Tensors(tag)]
            for tag in acc.PluginTagToContent("scalars")}


def preempted(series):
    """The Rust data server's rule (tensorboard/data/server/reservoir.rs, "Preemption"): a point at
    step s drops the points of its series at steps >= s that came before it."""
    out = []
    for point in series:
        while out and out[-1][0] >= point[0]:
            out.pop()
        out.append(point)
    return out


def same(a, b):
    """Equal series, NaN equal to NaN."""
    assert a.keys() == b.keys()
    for tag in a:
        assert len(a[tag]) == len(b[tag]), tag
        for (s1, v1, w1), (s2, v2, w2) in zip(a[tag], b[tag]):
            assert (s1, w1) == (s2, w2), tag
            assert v1 == v2 or (math.isnan(v1) and math.isnan(v2)), (tag, s1, v1, v2)


def f32(x):
    return float(np.float32(x))


def simple(tag, value):
    return tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag=tag, simple_value=value)])


def start_log():
    return tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START)


# ---- files written by TensorFlow ----

@pytest.fixture(scope="module")
def tf2_run(tmp_path_factory):
    """TF2 summaries: scalars (as rank-0 float tensors), a double and an int cast by tf.summary.scalar,
    NaN and infinities, raw TF1 simple_values through write_raw_pb, and what is not a scalar:
    histograms, text and one image PNG longer than the 1 MiB record cap."""
    d = tmp_path_factory.mktemp("tf2")
    writer = tf.summary.create_file_writer(str(d))
    rng = np.random.default_rng(0)
    with writer.as_default():
        for step in range(STEPS):
            tf.summary.scalar("loss", 2.0 / (1.0 + 0.1 * step), step=step)
            tf.summary.scalar("eval/accuracy", np.float64(1 - 0.5 / (1 + step)), step=step)
            if step % 5 == 0:
                tf.summary.scalar("lr", 0.1 * 0.5 ** (step // 5), step=step)
                tf.summary.histogram("weights", rng.standard_normal(100), step=step)
                tf.summary.text("notes", f"step {step}", step=step)
            tf.summary.experimental.write_raw_pb(
                simple("raw/simple", step * 0.25).SerializeToString(), step=step)
        for step, v in enumerate([float("nan"), float("inf"), float("-inf"), 1.0]):
            tf.summary.scalar("odd", v, step=step)
        image = rng.integers(0, 256, size=(1, 700, 700, 3), dtype=np.uint8)
        tf.summary.image("big", image, step=0)
        tf.summary.scalar("after_big", 7.0, step=0)
    writer.close()
    (path,) = [p for p in d.iterdir()]
    return d, path


@pytest.fixture(scope="module")
def tf1_resumed(tmp_path_factory):
    """TF1 FileWriter: a run to step RESUME_STEPS - 1, then a second writer (a later file: the suffix
    sorts after the bare name) that starts with SessionLog START at RESUME_AT and logs on with other
    values. "eval" is logged every 4 steps by the first run only."""
    d = tmp_path_factory.mktemp("tf1")
    with tf.Graph().as_default():
        w = tf.compat.v1.summary.FileWriter(str(d))
        w.add_session_log(start_log(), 0)
        for step in range(RESUME_STEPS):
            w.add_summary(simple("loss", 1.0 / (1 + step)), step)
            if step % 4 == 0:
                w.add_summary(simple("eval", step / 100), step)
        w.close()
        w = tf.compat.v1.summary.FileWriter(str(d), filename_suffix=".resumed")
        w.add_session_log(start_log(), RESUME_AT)
        for step in range(RESUME_AT, RESUMED_TO):
            w.add_summary(simple("loss", -1.0 / (1 + step)), step)
        w.close()
    names = sorted(p.name for p in d.iterdir())
    assert len(names) == 2 and names[1].endswith(".resumed")
    return d


# ---- tests ----

def test_tf2_scalars_equal_tensorboard(tool, tf2_run):
    d, path = tf2_run
    assert path.stat().st_size > MAX_RECORD  # the image record is stepped over, not fatal
    got = ours(tool, d)
    same(got, tensorboard(d))
    assert set(got) == {"loss", "eval/accuracy", "lr", "raw/simple", "odd", "after_big"}
    assert [(s, v) for s, v, _ in got["loss"]] == [(s, f32(2.0 / (1.0 + 0.1 * s))) for s in range(STEPS)]
    assert [(s, v) for s, v, _ in got["eval/accuracy"]] == [(s, f32(1 - 0.5 / (1 + s)))
                                                            for s in range(STEPS)]
    assert [s for s, _, _ in got["lr"]] == list(range(0, STEPS, 5))
    assert [(s, v) for s, v, _ in got["raw/simple"]] == [(s, s * 0.25) for s in range(STEPS)]
    odd = [v for _, v, _ in got["odd"]]
    assert math.isnan(odd[0]) and odd[1:] == [math.inf, -math.inf, 1.0]
    assert [(s, v) for s, v, _ in got["after_big"]] == [(0, 7.0)]
    walls = [w for _, _, w in got["loss"]]
    assert walls == sorted(walls) and abs(walls[0] - path.stat().st_mtime) < 600


def test_non_finite_values_are_strings(tool, tf2_run):
    res = subprocess.run([str(tool("tw_scalars")), str(tf2_run[0])], capture_output=True, text=True,
                         timeout=60)
    odd = json.loads(res.stdout)["odd"]
    assert [v for _, v, _ in odd] == ["NaN", "Infinity", "-Infinity", 1.0]


def test_tf1_resume_equals_tensorboard(tool, tf1_resumed):
    got = ours(tool, tf1_resumed)
    same(got, tensorboard(tf1_resumed))
    want = [(s, f32((-1.0 if s >= RESUME_AT else 1.0) / (1 + s))) for s in range(RESUMED_TO)]
    assert [(s, v) for s, v, _ in got["loss"]] == want
    # the first run's eval points at or after the restart are orphans
    assert [s for s, _, _ in got["eval"]] == [s for s in range(0, RESUME_STEPS, 4) if s < RESUME_AT]


def record_ends(data):
    ends, at = [], 0
    while at < len(data):
        at += 12 + int.from_bytes(data[at:at + 8], "little") + 4
        ends.append(at)
    assert at == len(data)
    return ends


def test_torn_tail_equals_tensorboard(tool, tf2_run, tmp_path):
    """A TF file cut inside its last records (header, payload, footer, the long image record) and at
    record boundaries: the same points as TensorBoard reads, which also stops quietly there."""
    data = tf2_run[1].read_bytes()
    ends = record_ends(data)
    cuts = {ends[-1] - 1, ends[-2] + 5, ends[-2] + 12, ends[-2] + 20, ends[-3], ends[-3] - 2,
            ends[-3] + 100000, ends[len(ends) // 2] + 3, ends[1] + 1, 7}
    for cut in sorted(cuts):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / tf2_run[1].name).write_bytes(data[:cut])
        same(ours(tool, d), tensorboard(d))
        shutil.rmtree(d)


def test_kill_during_training_then_resume(tool, tmp_path):
    """A TF2 writer's file torn mid-record (the process killed), then the resumed run's file starting
    with START at 10: no step appears twice, the resumed values replace the old ones. The first file
    has no START of its own, so TensorBoard's Python loader takes this one for the run's beginning and
    keeps both copies of steps 10..18; the data server (TensorBoard's default) replaces them by its
    preemption rule, which is what Tower shows."""
    d = tmp_path / "run"
    w = tf.summary.create_file_writer(str(d), filename_suffix=".a")
    with w.as_default():
        for step in range(20):
            tf.summary.scalar("loss", float(step), step=step)
    w.close()
    (first,) = d.iterdir()
    data = first.read_bytes()
    first.write_bytes(data[:record_ends(data)[-1] - 7])
    with tf.Graph().as_default():
        w = tf.compat.v1.summary.FileWriter(str(d), filename_suffix=".b")
        w.add_session_log(start_log(), 10)
        for step in range(10, 25):
            w.add_summary(simple("loss", -float(step)), step)
        w.close()
    names = sorted(p.name for p in d.iterdir())
    assert names[0] == first.name
    got = ours(tool, d)
    same(got, {tag: preempted(points) for tag, points in tensorboard(d).items()})
    assert [(s, v) for s, v, _ in got["loss"]] == [(s, float(s) if s < 10 else -float(s))
                                                   for s in range(25)]


def test_damaged_record_names_file_and_offset(tool, tf2_run, tmp_path):
    data = bytearray(tf2_run[1].read_bytes())
    ends = record_ends(bytes(data))
    at = ends[4]
    data[at + 20] ^= 0x55
    d = tmp_path / "bad"
    d.mkdir()
    path = d / tf2_run[1].name
    path.write_bytes(bytes(data))
    res = subprocess.run([str(tool("tw_scalars")), str(d)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stderr.startswith("CORRUPT: ")
    assert str(path) in res.stderr and f"at byte {at}" in res.stderr
    assert "CRC" in res.stderr
    # TensorFlow's own reader rejects the same record
    with pytest.raises(tf.errors.DataLossError):
        for _ in tf.data.TFRecordDataset(str(path)):
            pass


def test_max_points_samples_the_real_series(tool, tmp_path):
    """1000 TF2 points cut to 50: a subset of TensorBoard's points, strictly ascending, evenly strided,
    the first and the newest included."""
    d = tmp_path / "long"
    w = tf.summary.create_file_writer(str(d))
    with w.as_default():
        for step in range(1000):
            tf.summary.scalar("loss", 1.0 / (1 + step), step=step)
    w.close()
    full = tensorboard(d)["loss"]
    assert ours(tool, d, 1000)["loss"] == full
    got = ours(tool, d, 50)["loss"]
    assert 25 <= len(got) <= 50
    assert set(got) <= set(full)
    assert got[0] == full[0] and got[-1] == full[-1]
    steps = [s for s, _, _ in got[:-1]]
    stride = steps[1] - steps[0]
    assert steps == list(range(0, stride * len(steps), stride))
