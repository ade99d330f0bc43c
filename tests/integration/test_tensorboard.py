"""Event files written by eventlog/events.c (through tests/tools/tw_eventgen) are read by stock
TensorBoard: its Python loader (EventAccumulator), TensorFlow's own HistogramSummary kernel as the
reference for histogram encoding, and the real `tensorboard` server on the Rust data server
(--load_fast=true), queried over its HTTP data API. A resumed run (SessionLog START) must replace
the orphaned points.

Every expected value is recomputed here from the formulas documented at the top of tw_eventgen.c."""
import html
import os
import re
import subprocess
import time

import numpy as np
import pytest
import requests

import helpers
from helpers import poll

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
from google.protobuf import text_format  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_accumulator as pea  # noqa: E402
from tensorboard.compat.proto import graph_pb2, summary_pb2  # noqa: E402

STEPS = 12
RESUME_STEPS, RESUME_AT = 10, 5
HISTO_STEPS = [0, 5, 10]
CONFIG = '{"model": "mlp", "hidden": [500], "lr": 0.01, "towers": 2}'
NODES = ["input/x",
         "layer1/weights", "layer1/biases", "layer1/MatMul", "layer1/BiasAdd", "layer1/Relu",
         "layer2/weights", "layer2/biases", "layer2/MatMul", "layer2/BiasAdd",
         "output/Softmax"]


# ---- what tw_eventgen writes, recomputed ----

def loss(step, resumed=False):
    v = 2.0 / (1.0 + 0.1 * step)
    return float(np.float32(v / 2 if resumed else v))


def accuracy(step):
    return float(np.float32(1.0 - 0.5 / (1.0 + step)))


def histo_values(step):
    """The LCG of tw_eventgen.c, in the same float32 operations."""
    x = (12345 + step) & 0xFFFFFFFF
    out = np.empty(1000, np.float32)
    for i in range(1000):
        x = (1664525 * x + 1013904223) & 0xFFFFFFFF
        k = (x >> 8) - 8388608
        out[i] = np.float32(k) / np.float32(16777216.0) * np.float32(1 + step)
    return out


def tf_histogram(values):
    """HistogramProto from TF's HistogramSummary kernel (default buckets, EncodeToProto)."""
    raw = tf.raw_ops.HistogramSummary(tag="ref", values=tf.constant(values)).numpy()
    return summary_pb2.Summary.FromString(raw).value[0].histo


# ---- fixtures ----

def event_stamp(path):
    return int(re.search(r"tfevents\.(\d{10})\.", os.path.basename(path)).group(1))


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, tool):
    """logdir/main: one run of STEPS steps. logdir/resumed: RESUME_STEPS steps, then a second writer
    that resumes at RESUME_AT with halved losses, in a file whose name sorts after the first."""
    root = tmp_path_factory.mktemp("tb")
    gen = str(tool("tw_eventgen"))

    def run(*args):
        res = subprocess.run([gen, *map(str, args)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        path = res.stdout.strip()
        assert os.path.isfile(path)
        return path

    run(root / "main", "--steps", STEPS)
    first = run(root / "resumed", "--steps", RESUME_STEPS)
    # Names order by their 10-digit second first; pids need not sort. Let the second tick over so
    # the resumed file is later whatever the pids are.
    end = time.monotonic() + 5
    while int(time.time()) <= event_stamp(first) and time.monotonic() < end:
        time.sleep(0.05)
    second = run(root / "resumed", "--steps", RESUME_STEPS, "--resume-at", RESUME_AT)
    assert sorted([first, second]) == [first, second]
    return root


def accumulator(path):
    acc = ea.EventAccumulator(str(path), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    return acc


# ---- (a) the Python loader ----

def test_accumulator_scalars(logdir):
    acc = accumulator(logdir / "main")
    assert set(acc.Tags()["scalars"]) == {"loss", "eval/accuracy"}
    got = [(e.step, e.value) for e in acc.Scalars("loss")]
    assert got == [(s, loss(s)) for s in range(STEPS)]
    got = [(e.step, e.value) for e in acc.Scalars("eval/accuracy")]
    assert got == [(s, accuracy(s)) for s in range(STEPS)]


def check_buckets_against_numpy(h, values):
    """Each (limit, count) entry covers [previous limit, limit): count it with numpy."""
    v = values.astype(np.float64)
    assert len(h.bucket) == len(h.bucket_limit)
    assert list(h.bucket_limit) == sorted(h.bucket_limit)
    prev = -np.inf
    for limit, count in zip(h.bucket_limit, h.bucket):
        assert count == np.count_nonzero((v >= prev) & (v < limit)), (prev, limit)
        prev = limit
    assert h.bucket_limit[-1] == np.finfo(np.float64).max
    zero_runs = [a == 0 and b == 0 for a, b in zip(h.bucket, h.bucket[1:])]
    assert not any(zero_runs), "consecutive empty buckets must be merged"


def test_accumulator_histograms(logdir):
    acc = accumulator(logdir / "main")
    events = acc.Histograms("layer1/weights")
    assert [e.step for e in events] == HISTO_STEPS
    for e in events:
        h = e.histogram_value
        values = histo_values(e.step)
        assert h.min == float(values.min())
        assert h.max == float(values.max())
        assert h.num == len(values) == sum(h.bucket)
        assert h.sum == pytest.approx(float(values.astype(np.float64).sum()), rel=1e-12)
        assert h.sum_squares == pytest.approx(float((values.astype(np.float64) ** 2).sum()),
                                              rel=1e-12)
        check_buckets_against_numpy(h, values)


def test_histograms_equal_tensorflow_kernel(logdir):
    """Bit for bit what TF1's tf.summary.histogram writes for the same values."""
    acc = accumulator(logdir / "main")
    raw = {e.step: e for e in acc.Histograms("layer1/weights")}
    for step in HISTO_STEPS:
        ours = raw[step].histogram_value
        ref = tf_histogram(histo_values(step))
        assert list(ours.bucket_limit) == list(ref.bucket_limit)
        assert list(ours.bucket) == list(ref.bucket)
        assert (ours.min, ours.max, ours.num) == (ref.min, ref.max, ref.num)
        assert (ours.sum, ours.sum_squares) == (ref.sum, ref.sum_squares)


def test_accumulator_graph(logdir):
    acc = accumulator(logdir / "main")
    assert acc.Tags()["graph"]
    graph = acc.Graph()
    assert [n.name for n in graph.node] == NODES
    by_name = {n.name: n for n in graph.node}
    assert list(by_name["layer1/MatMul"].input) == ["input/x", "layer1/weights"]
    assert list(by_name["layer2/MatMul"].input) == ["layer1/Relu", "layer2/weights"]
    shape = by_name["layer1/weights"].attr["_output_shapes"].list.shape[0]
    assert [d.size for d in shape.dim] == [784, 500]


def test_accumulator_text(logdir):
    acc = accumulator(logdir / "main")
    (event,) = acc.Tensors("config")
    assert event.step == 0
    assert event.tensor_proto.dtype == tf.string.as_datatype_enum
    assert [s.decode() for s in event.tensor_proto.string_val] == [CONFIG]
    # The plugin-aware loader routes it to the text plugin as a tensor time series.
    pacc = pea.EventAccumulator(str(logdir / "main"), size_guidance={"tensors": 0})
    pacc.Reload()
    assert "config" in pacc.PluginTagToContent("text")
    meta = pacc.SummaryMetadata("config")
    assert meta.data_class == summary_pb2.DATA_CLASS_TENSOR
    (tensor,) = pacc.Tensors("config")
    assert tf.make_ndarray(tensor.tensor_proto).item().decode() == CONFIG


# ---- (c) resume ----

def test_resume_replaces_orphaned_points(logdir):
    acc = accumulator(logdir / "resumed")
    got = [(e.step, e.value) for e in acc.Scalars("loss")]
    want = [(s, loss(s, resumed=s >= RESUME_AT)) for s in range(RESUME_STEPS)]
    assert got == want
    assert [e.step for e in acc.Scalars("eval/accuracy")] == list(range(RESUME_STEPS))
    assert [e.step for e in acc.Histograms("layer1/weights")] == [0, 5]


# ---- (b) the tensorboard server on the Rust data server ----

def children_cmdlines(pid):
    """Command lines of every process whose parent is pid (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return out


@pytest.fixture(scope="module")
def tensorboard(logdir, tmp_path_factory):
    with helpers.tensorboard(logdir, tmp_path_factory.mktemp("tblog")) as tb:
        yield tb


def get_json(base, path, ready):
    """Polls base+path until it answers 200 and ready(json) holds; returns the json."""
    def attempt():
        r = requests.get(base + path, timeout=10)
        if r.status_code != 200:
            return None
        body = r.json()
        return body if ready(body) else None
    return poll(path, attempt)


def test_server_uses_rust_data_server(tensorboard):
    base, pid = tensorboard
    env = get_json(base, "/data/environment", lambda b: True)
    assert env["debug"]["flags"]["load_fast"] == "true"
    assert env["debug"]["data_provider"].startswith("GrpcDataProvider"), env["debug"]
    assert any("tensorboard_data_server" in c for c in children_cmdlines(pid)), \
        children_cmdlines(pid)


def test_server_scalars(tensorboard):
    base, _ = tensorboard
    rows = get_json(base, "/data/plugin/scalars/scalars?run=main&tag=loss",
                    lambda b: len(b) == STEPS)
    assert [(step, value) for _, step, value in rows] == [(s, loss(s)) for s in range(STEPS)]
    rows = get_json(base, "/data/plugin/scalars/scalars?run=resumed&tag=loss",
                    lambda b: len(b) == RESUME_STEPS and b[-1][2] == loss(9, resumed=True))
    assert [(step, value) for _, step, value in rows] == \
        [(s, loss(s, resumed=s >= RESUME_AT)) for s in range(RESUME_STEPS)]


def test_server_histograms(tensorboard, logdir):
    base, _ = tensorboard
    rows = get_json(base, "/data/plugin/histograms/histograms?run=main&tag=layer1/weights",
                    lambda b: len(b) == len(HISTO_STEPS))
    assert [step for _, step, _ in rows] == HISTO_STEPS
    for _, step, buckets in rows:
        values = histo_values(step)
        ref = tf_histogram(values)
        lefts, rights, counts = zip(*buckets)
        assert sum(counts) == len(values)
        assert list(counts) == list(ref.bucket)
        # RustBoard: left edge of the first bucket = min, right edge of the last = max, inner edges
        # are the bucket limits (docs/formats.md §3.6).
        assert lefts[0] == float(values.min()) and rights[-1] == float(values.max())
        assert list(rights[:-1]) == list(ref.bucket_limit[:-1])
        assert list(lefts[1:]) == list(ref.bucket_limit[:-1])


def test_server_graph(tensorboard):
    base, _ = tensorboard
    get_json(base, "/data/plugin/graphs/info", lambda b: b.get("main", {}).get("run_graph"))

    def graph():
        r = requests.get(base + "/data/plugin/graphs/graph?run=main&conceptual=false", timeout=10)
        return r.text if r.status_code == 200 else None
    parsed = text_format.Parse(poll("the graph", graph), graph_pb2.GraphDef())
    assert [n.name for n in parsed.node] == NODES
    assert {n.name: n.op for n in parsed.node}["layer1/Relu"] == "Relu"


def test_server_text(tensorboard):
    base, _ = tensorboard
    rows = get_json(base, "/data/plugin/text/text?run=main&tag=config", lambda b: len(b) == 1)
    assert rows[0]["step"] == 0
    shown = html.unescape(re.sub(r"<[^>]+>", "", rows[0]["text"])).strip()
    assert shown == CONFIG
