"""safetensors against the real implementation (the `safetensors` package: the Rust reader and writer).

What Tower writes (tests/tools/tw_ckptgen, through the public C API) the package reads exactly, and it is
byte for byte what the package itself would write; what the package writes `tower inspect` reports with
the right dtypes, shapes, offsets and values; every corrupt file makes inspect exit 1 naming the file and
the byte offset, and the package refuses the same files. A TFRecord whose bytes 8..9 happen to read '{"'
is still inspected as a TFRecord.

Run: TOWER_BUILD=build-ckpt /opt/tower-venv/bin/python -m pytest tests/integration/test_safetensors.py
"""
import json
import struct
import subprocess

import numpy as np
import pytest

st_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import safe_open  # noqa: E402  (after the skip check)

F32 = np.float32
META = {"format": "tower-checkpoint-1", "step": "7", "config": '{"a": [1, 2]}',
        "ünï": "côdé \"quoted\"\n"}


# ----------------------------------------------------------------------------------------------- helpers

def ckptgen_tensors():
    """The tensors tw_ckptgen writes (see its header comment), computed the same way in float32."""
    return {
        "dense/kernel": (np.arange(12, dtype=F32) * F32(0.25) - F32(1)).reshape(3, 4),
        "dense/bias": np.array([1e-8, -0.0, np.finfo(F32).max, np.finfo(F32).tiny], dtype=F32),
        "scalar": np.array(42.5, dtype=F32),
        "empty": np.zeros((0, 5), dtype=F32),
        "special": np.array([np.nan, np.inf, -np.inf], dtype=F32),
        "big": ((np.arange(2100) % 97).astype(F32) * F32(0.5) - F32(7)).reshape(300, 7),
        'ü "quoted"/x': np.array([1, 2], dtype=F32),
    }


def run_ckptgen(tool, *args):
    res = subprocess.run([str(tool("tw_ckptgen")), *map(str, args)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return res


def meta_args(meta):
    return [f"{k}={v}" for k, v in meta.items()]


def assert_same_tensors(got, want):
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert g.tobytes() == w.tobytes(), name  # exact, NaN and -0.0 included


def header_of(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    return n, json.loads(raw[8:8 + n])


def inspect_json(run_tower, path, *extra):
    res = run_tower("inspect", path, "--json", *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# ------------------------------------------------------------------------------ the package reads ours

def test_package_reads_our_file_exactly(tmp_path, tool):
    path = tmp_path / "ours.safetensors"
    run_ckptgen(tool, path, *meta_args(META))
    assert_same_tensors(st_numpy.load_file(str(path)), ckptgen_tensors())
    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == META
        assert sorted(f.keys()) == sorted(ckptgen_tensors())
        assert f.get_tensor("scalar").shape == ()
        assert f.get_slice("big")[10:12].tobytes() == ckptgen_tensors()["big"][10:12].tobytes()
    n, header = header_of(path.read_bytes())
    assert n % 8 == 0
    assert list(header) == ["__metadata__", *sorted(ckptgen_tensors())]


@pytest.mark.parametrize("meta", [{}, {"format": "pt"}], ids=["no-metadata", "one-key"])
def test_same_bytes_as_the_package_writes(tmp_path, tool, meta):
    # With at most one metadata key the package's output order is fixed, so the files must be equal.
    path = tmp_path / "ours.safetensors"
    run_ckptgen(tool, path, *meta_args(meta))
    theirs = st_numpy.save(ckptgen_tensors(), metadata=meta or None)
    assert path.read_bytes() == theirs


def test_checkpoint_folder_is_readable(tmp_path, tool):
    folder = tmp_path / "checkpoints"
    for step in (5, 6, 7):
        run_ckptgen(tool, "--dir", folder, step, 2, f"step={step}")
    assert sorted(p.name for p in folder.iterdir()) == [
        "ckpt-0000000006.safetensors", "ckpt-0000000007.safetensors", "latest"]
    latest = (folder / "latest").read_text()
    assert latest == "ckpt-0000000007.safetensors\n"
    path = folder / latest.strip()
    want = ckptgen_tensors()
    del want["special"]  # a checkpoint never holds NaN or Inf: tw_ckptgen --dir leaves it out
    assert_same_tensors(st_numpy.load_file(str(path)), want)
    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == {"step": "7"}


# --------------------------------------------------------------------------- inspect reads the package's

def package_tensors():
    rng = np.random.default_rng(7)
    return {
        "conv/kernel": rng.standard_normal((3, 3, 2, 4)).astype(F32),
        "dense/bias": rng.standard_normal(10).astype(F32),
        "big": (rng.standard_normal(5000) * 100).astype(F32),
        "scalar": np.array(-3.25, dtype=F32),
        "empty": np.zeros((0, 3), dtype=F32),
        "step": np.array([7, -1, 2**40], dtype=np.int64),
        "half": np.array([1.5, -2, 65504, 0], dtype=np.float16),
        "double": np.array([[1e300, -1e-300]], dtype=np.float64),
        "bytes": np.arange(7, dtype=np.uint8),  # odd size: the F32 data after it is not 4-aligned
        "mask": np.array([True, False, True]),
        "i8": np.array([-128, 127], dtype=np.int8),
    }


DTYPE_NAMES = {"float32": "F32", "int64": "I64", "float16": "F16", "float64": "F64", "uint8": "U8",
               "bool": "BOOL", "int8": "I8"}


def test_inspect_reports_package_file(tmp_path, run_tower):
    tensors = package_tensors()
    meta = {"framework": "np", "note": "written by safetensors.numpy"}
    path = tmp_path / "theirs.safetensors"
    st_numpy.save_file(tensors, str(path), metadata=meta)
    raw = path.read_bytes()
    n, header = header_of(raw)
    info = inspect_json(run_tower, path, "--limit", "1000")
    assert info["type"] == "safetensors"
    assert info["file"] == str(path)
    assert info["header_bytes"] == n
    assert info["metadata"] == meta
    assert sorted(info["tensors"]) == sorted(tensors)
    order = sorted(tensors, key=lambda k: tuple(header[k]["data_offsets"]))
    assert list(info["tensors"]) == order  # listed in data order
    for name, a in tensors.items():
        t = info["tensors"][name]
        begin, end = header[name]["data_offsets"]
        assert t["dtype"] == DTYPE_NAMES[str(a.dtype)], name
        assert t["shape"] == list(a.shape), name
        assert t["count"] == a.size, name
        assert t["offset"] == 8 + n + begin and t["bytes"] == end - begin, name
        if a.dtype != F32:
            assert "min" not in t and "first" not in t, name
            continue
        assert np.array(t["first"], dtype=F32).tobytes() == a.ravel()[:1000].tobytes(), name
        assert t["nan"] == 0 and t["inf"] == 0
        if a.size == 0:
            assert t["min"] is None and t["max"] is None and t["mean"] is None and t["sum"] == 0
            continue
        assert F32(t["min"]) == a.min() and F32(t["max"]) == a.max(), name
        exact = a.astype(np.float64)
        tol = 1e-8 * np.abs(exact).sum()
        assert abs(t["sum"] - exact.sum()) <= tol, name
        assert abs(t["mean"] - exact.mean()) <= tol / a.size, name


def test_inspect_limit_nonfinite_and_text(tmp_path, tool, run_tower):
    path = tmp_path / "ours.safetensors"
    run_ckptgen(tool, path, "format=x")
    info = inspect_json(run_tower, path, "--limit", "2")
    special = info["tensors"]["special"]
    assert special["first"] == ["NaN", "Infinity"]
    assert special["nan"] == 1 and special["inf"] == 2
    assert special["min"] == "-Infinity" and special["max"] == "Infinity"
    assert info["tensors"]["scalar"]["shape"] == [] and info["tensors"]["scalar"]["first"] == [42.5]
    assert info["tensors"]["big"]["first"] == [-7.0, -6.5]
    res = run_tower("inspect", path)
    assert res.returncode == 0, res.stderr
    assert f"{path}: safetensors, 7 tensors" in res.stdout
    assert "metadata format = x" in res.stdout
    assert "dense/kernel" in res.stdout and "min -1 max 1.75" in res.stdout


# ------------------------------------------------------------------------------------- corrupt files

def file_with_header(header, data_len):
    """The file "<N><compact JSON header><data_len bytes 0, 1, 2, ...>"."""
    text = json.dumps(header, separators=(",", ":")).encode()
    data = bytes(i % 256 for i in range(data_len))
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


GOOD = {"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 8, 12)}


def corrupt_cases():
    good = file_with_header(GOOD, 12)
    n = struct.unpack("<Q", good[:8])[0]
    dup = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' \
          b'"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    return {
        # name: (bytes, text expected in the message, does the package refuse it too?)
        "N past the end": (struct.pack("<Q", len(good)) + good[8:], "runs past the end", True),
        "N = 2^63": (struct.pack("<Q", 2**63) + good[8:], "above the cap", True),
        "not JSON": (struct.pack("<Q", 14) + b'{"a":{"dtype":' + bytes(12), "not valid JSON", True),
        "entry not an object": (file_with_header({"a": [1, 2]}, 0),
                                "tensor 'a': the entry is not a JSON object", True),
        # without '{' at byte 8 the file is not recognised as safetensors: inspect reads a TFRecord
        "header an array": (struct.pack("<Q", 6) + b"[1, 2]", "is this a TFRecord file?", True),
        # serde keeps the last duplicate; Tower refuses any duplicate key
        "duplicate key": (struct.pack("<Q", len(dup)) + dup + bytes(8), "duplicate", False),
        "bad dtype": (file_with_header({**GOOD, "b": entry("F33", [1], 8, 12)}, 12),
                      "tensor 'b': unknown dtype 'F33'", True),
        "gap": (file_with_header({**GOOD, "b": entry("F32", [1], 12, 16)}, 16),
                "tensor 'b' starts at data byte 12, leaving a gap", True),
        "overlap": (file_with_header({**GOOD, "b": entry("F32", [1], 4, 8)}, 8),
                    "tensor 'b' at data bytes [4, 8) overlaps tensor 'a'", True),
        "size not matching the shape": (file_with_header({**GOOD, "b": entry("F32", [2], 8, 12)}, 12),
                                        "needs 8", True),
        "trailing bytes": (good + b"xyz", "3 trailing bytes", True),
        "truncated data": (good[:8 + n + 10], "tensor 'b' ends at byte", True),
    }


@pytest.mark.parametrize("case", list(corrupt_cases()))
def test_corrupt_file_fails_naming_file_and_offset(tmp_path, run_tower, case):
    data, want, package_refuses = corrupt_cases()[case]
    path = tmp_path / "corrupt.safetensors"
    path.write_bytes(data)
    res = run_tower("inspect", path, "--json")
    assert res.returncode == 1, res.stdout
    assert res.stdout == ""
    assert f"tower inspect: {path}: at byte " in res.stderr
    assert want in res.stderr
    if package_refuses:
        with pytest.raises(Exception):
            st_numpy.load(data)
    else:
        st_numpy.load(data)


# ------------------------------------------------------------------- a TFRecord that starts like one

def _crc_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example_of_size(size):
    """A tf.train.Example {"x": bytes_list [b"\\0" * k]} of exactly `size` serialized bytes."""
    for k in range(size, -1, -1):
        msg = field(1, field(1, field(1, b"x") + field(2, field(1, field(1, bytes(k))))))
        if len(msg) == size:
            return msg
    raise AssertionError(size)


def test_tfrecord_starting_with_a_brace_is_still_a_tfrecord(tmp_path, run_tower):
    # Find a record length whose masked length-CRC starts with the bytes '{"' (about 1 in 65536).
    length = next(n for n in range(100, 1 << 20)
                  if masked_crc(struct.pack("<Q", n)) & 0xFFFF == 0x227B)
    payload = example_of_size(length)
    record = (struct.pack("<Q", length) + struct.pack("<I", masked_crc(struct.pack("<Q", length)))
              + payload + struct.pack("<I", masked_crc(payload)))
    assert record[8:10] == b'{"'
    path = tmp_path / "brace.tfrecord"
    path.write_bytes(record)
    info = inspect_json(run_tower, path)
    assert info["type"] == "tfrecord" and info["records"] == 1
