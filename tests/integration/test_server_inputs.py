"""Bad input and hostile clients against `tower serve` (docs/reliability.md rows H1-H14): every
one gets a clear error in the envelope, nothing already accepted is lost, nothing is left on disk."""
import gzip
import json
import os
import socket
import struct
import subprocess

import pytest
import requests

from conftest import FASHION
from helpers import poll
from test_server import FILES, curl_upload, seed_config, submit, upload_fashion, wait_dataset


def error_of(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]


def raw_request(server, data, source="127.0.0.1", read=True):
    """Sends bytes on a fresh socket; returns what came back before the server closed (or 5 s)."""
    host, port = server.url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))
    try:
        s.sendall(data)
        chunks = []
        while read:
            try:
                got = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not got:
                break
            chunks.append(got)
        return b"".join(chunks)
    finally:
        s.close()


def uploads_left(server):
    return os.listdir(server.data / "datasets")


# ---------------------------------------------------------------- H1, H2: bodies over the cap

def test_h1_content_length_over_cap_413_before_reading(serve):
    server = serve("--max-upload", "1000000")
    head = (f"POST /api/v1/datasets?name=big HTTP/1.1\r\nHost: {server.url[7:]}\r\n"
            "Content-Type: text/csv\r\nContent-Length: 10000000000\r\n\r\n").encode()
    reply = raw_request(server, head + b"a,b\n1,2\n")
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"PAYLOAD_TOO_LARGE" in reply
    assert uploads_left(server) == []
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: text/csv",
                        "-H", "Content-Length: 10000000000", "--data-binary", "x",
                        server.api("/datasets?name=big")], capture_output=True, text=True, timeout=30)
    assert r.stdout == "413"


def test_h2_chunked_body_over_cap_413_and_nothing_kept(serve):
    server = serve("--max-upload", "1000000")

    def chunks():
        for _ in range(40):  # 2.5 MB in all, 1 MB allowed
            yield b"1,2,3\n" * 10000
    r = requests.post(server.api("/datasets?name=big"), data=chunks(), headers={"Content-Type": "text/csv"},
                      timeout=60)
    error_of(r, 413, "PAYLOAD_TOO_LARGE")
    assert uploads_left(server) == []
    assert requests.get(server.api("/datasets"), timeout=10).json()["total"] == 0


# ---------------------------------------------------------------- H3: slow clients

def test_h3_slow_clients_are_cut_and_do_not_starve_others(serve):
    server = serve("--per-ip-limit", "3", "--conn-timeout", "5")
    host, port = server.url.split("//")[1].split(":")
    stalled = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    for s in stalled:
        s.sendall(b"GET /api/v1/health HTTP/1.1\r\n")  # and then nothing
    extra = socket.create_connection((host, int(port)), timeout=10)
    try:  # over the per-address limit: closed at once (a FIN or a reset, whichever the kernel sends)
        assert extra.recv(100) == b""
    except ConnectionResetError:
        pass
    extra.close()
    # another client address is served while the stalled ones still hang (they are open after its reply)
    other = raw_request(server, f"GET /api/v1/health HTTP/1.0\r\nHost: {server.url[7:]}\r\n\r\n".encode(),
                        source="127.0.0.2")
    assert other.startswith(b"HTTP/1.1 200") or other.startswith(b"HTTP/1.0 200"), other[:100]
    for s in stalled:
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(100)
        s.settimeout(30)
    for s in stalled:  # the server closes them after its timeout, without a reply
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
        s.close()

    def served():  # the per-address slots free once libmicrohttpd has cleaned the closed connections up
        try:
            return requests.get(server.api("/health"), timeout=5).status_code
        except requests.ConnectionError:
            return None
    assert poll("the address to be served again", served) == 200


# ---------------------------------------------------------------- H4-H6: JSON

def post_raw_json(server, body):
    return requests.post(server.api("/runs"), data=body, headers={"Content-Type": "application/json"},
                         timeout=10)


def test_h4_deep_nesting(serve):
    server = serve()
    e = error_of(post_raw_json(server, b'{"a":' + b"[" * 10000 + b"]" * 10000 + b"}"), 400, "JSON_TOO_DEEP")
    assert "depth" in e["message"]
    assert requests.get(server.api("/health"), timeout=5).status_code == 200


@pytest.mark.parametrize("body,words", [
    (b'{"steps": 1, "steps": 2}', "duplicate"),
    (b'{"steps": 1} trailing', "end of file expected"),
    (b'{"name": "a\\u0000b"}', "\\u0000"),
    (b'{"name": "\xff\xfe"}', "byte 0xff"),
    (b'[1, 2]', "JSON object"),
    (b'', "end of file"),
])
def test_h5_malformed_json_named(serve, body, words):
    server = serve()
    e = error_of(post_raw_json(server, body), 400, "INVALID_ARGUMENT")
    assert words in e["message"]


@pytest.mark.parametrize("change,key", [
    ('"batch_size": 1e400', "1e400"),
    ('"steps": 9223372036854775808', "too big"),
    ('"batch_size": 2147483648', "batch_size"),
    ('"max_restarts": 4294967297', "max_restarts"),
    ('"deadline_s": -1', "deadline_s"),
])
def test_h6_numbers_out_of_range_named(serve, change, key):
    server = serve()
    upload_fashion(server)
    text = json.dumps(seed_config())
    body = text[:-1] + ", " + change + "}"
    body = body.replace('"batch_size": 32, ', "") if "batch_size" in change else body
    body = body.replace('"steps": 30000, ', "") if '"steps"' in change else body
    e = error_of(post_raw_json(server, body.encode()), 400, "INVALID_ARGUMENT")
    assert key in e["message"]
    assert requests.get(server.api("/runs"), timeout=10).json()["total"] == 0


# ---------------------------------------------------------------- H7: names

BAD_NAMES = ["../x", "a/b", "%2e%2e", "/etc/passwd", "a%00b", "x" * 300, ".hidden", "", "-rf", "a b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_h7_bad_dataset_names_touch_nothing(serve, name):
    server = serve()
    r = requests.post(server.api("/datasets"), params={"name": name}, data=b"a,label\n1,2\n",
                      headers={"Content-Type": "text/csv"}, timeout=10)
    error_of(r, 400, "INVALID_ARGUMENT")
    assert uploads_left(server) == []


def test_h7_bad_run_names(serve):
    server = serve()
    upload_fashion(server)
    for name in BAD_NAMES:
        error_of(submit(server, seed_config(name=name)), 400, "INVALID_ARGUMENT")
    assert os.listdir(server.data / "runs") == []


def test_h7_unknown_form_field_refused(serve, tmp_path):
    server = serve()
    f = tmp_path / "x"
    f.write_bytes(b"data")
    code, body = curl_upload(server, "x", {"../evil": f})
    assert code == 400 and "unknown form field" in body["error"]["message"]
    assert uploads_left(server) == []


# ---------------------------------------------------------------- H9: decompression bombs

def idx_header(n, rows=28, cols=28):
    return struct.pack(">iiii", 0x803, n, rows, cols)


def test_h9_gzip_bomb_stops_at_the_budget(serve, tmp_path):
    server = serve("--max-dataset", "50000000")
    n = 400000  # 313 MB of pixels from < 1 MB of gzip
    images = tmp_path / "images.gz"
    with gzip.open(images, "wb", compresslevel=9) as f:
        f.write(idx_header(n))
        zeros = bytes(1 << 20)
        for _ in range(n * 784 // len(zeros)):
            f.write(zeros)
    labels = tmp_path / "labels.gz"
    with gzip.open(labels, "wb") as f:
        f.write(struct.pack(">ii", 0x801, n) + bytes(n))
    assert images.stat().st_size < 2_000_000
    code, d = curl_upload(server, "bomb", {"images": images, "labels": labels})
    assert code == 202
    done = wait_dataset(server, d["id"])
    assert done["status"] == "failed" and done["error"]["code"] == "PAYLOAD_TOO_LARGE", done
    left = os.listdir(server.data / "datasets" / d["id"])
    assert left == [], left
    with open(f"/proc/{server.proc.pid}/status") as f:
        peak_kb = int(next(line for line in f if line.startswith("VmHWM")).split()[1])
    assert peak_kb < 300 * 1024  # memory stayed flat: nothing near the 313 MB was held


def test_h9_zip_upload_is_not_a_dataset(serve, tmp_path):
    import zipfile
    server = serve()
    z = tmp_path / "x.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("../../evil", "boom")
    code, d = curl_upload(server, "zipped", {"images": z, "labels": z})
    assert code == 202
    done = wait_dataset(server, d["id"])
    assert done["status"] == "failed" and done["error"]["code"] == "DATASET_CORRUPT"
    assert not (server.data.parent / "evil").exists()


# ---------------------------------------------------------------- H10: multipart boundary

def test_h10_nul_in_the_boundary_header(serve):
    """CVE-2023-27371's shape: libmicrohttpd hands the header over cut at the NUL ("ab"), so Tower's own
    parser (not the PostProcessor) sees a valid boundary; what matters is that nothing crashes or leaks."""
    server = serve()
    body = b"--ab\r\nContent-Disposition: form-data; name=\"csv\"\r\n\r\na,label\n1,2\n\r\n--ab--\r\n"
    head = (b"POST /api/v1/datasets?name=m HTTP/1.1\r\nHost: " + server.url[7:].encode() +
            b"\r\nContent-Type: multipart/form-data; boundary=ab\x00cd\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
    reply = raw_request(server, head + body)
    assert reply.split(b" ")[1] in (b"202", b"400", b"415"), reply[:300]
    assert requests.get(server.api("/health"), timeout=5).status_code == 200


@pytest.mark.parametrize("ctype", [b"multipart/form-data",
                                   b'multipart/form-data; boundary="a\x00b"', b"multipart/form-data; boundary=" + b"x" * 71])
def test_h10_bad_boundaries_refused(serve, ctype):
    server = serve()
    body = b"--ab\r\nContent-Disposition: form-data; name=\"csv\"\r\n\r\nx\r\n--ab--\r\n"
    head = (b"POST /api/v1/datasets?name=m HTTP/1.1\r\nHost: " + server.url[7:].encode() +
            b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n")
    reply = raw_request(server, head + body)
    assert reply.split(b" ")[1] in (b"400", b"415"), reply[:300]
    assert uploads_left(server) == []


def test_h10_truncated_multipart_is_400(serve):
    server = serve()
    body = b"--ab\r\nContent-Disposition: form-data; name=\"csv\"\r\n\r\na,label\n1,2\n"
    r = requests.post(server.api("/datasets?name=m"), data=body,
                      headers={"Content-Type": "multipart/form-data; boundary=ab"}, timeout=10)
    e = error_of(r, 400, "INVALID_ARGUMENT")
    assert "multipart" in e["message"]
    assert uploads_left(server) == []


# ---------------------------------------------------------------- H11: corrupt TFRecords

def tfrecord(records):
    import tensorflow as tf
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".tfrecord", delete=False) as f:
        path = f.name
    with tf.io.TFRecordWriter(path) as w:
        for rec in records:
            w.write(rec)
    data = open(path, "rb").read()
    os.unlink(path)
    return data


def examples(n):
    import tensorflow as tf
    out = []
    for i in range(n):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes([i % 256]) * 4])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
            "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[2])),
            "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[2])),
            "depth": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}))
        out.append(ex.SerializeToString())
    return out


def post_tfrecord(server, name, data):
    return requests.post(server.api(f"/datasets?name={name}"), data=data,
                         headers={"Content-Type": "application/x-tfrecord"}, timeout=30)


def corruptions(good):
    """name -> corrupt bytes (the third record damaged in each way)."""
    first_len = struct.unpack("<Q", good[:8])[0]
    rec = 8 + 4 + first_len + 4  # every record has the same length here
    third = 2 * rec
    flip = lambda data, at: data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]  # noqa: E731
    huge = good[:third] + struct.pack("<Q", 1 << 40) + good[third + 8:]
    return {
        "length_crc": flip(good, third + 8),
        "data_crc": flip(good, third + 12 + 1),
        "length_2_40": huge,
        "torn_tail": good[:-5],
        "trailing_garbage": good + b"garbage!",
    }, rec


def test_h11_corrupt_tfrecord_422_and_previous_version_intact(serve):
    pytest.importorskip("tensorflow")
    server = serve()
    good = tfrecord(examples(6))
    r = post_tfrecord(server, "recs", good)
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["status"] == "ready" and first["train_examples"] == 6 and first["shape"] == [2, 2, 1]
    bad, rec = corruptions(good)
    for kind, data in bad.items():
        r = post_tfrecord(server, "recs", data)
        e = error_of(r, 422, "DATASET_CORRUPT")
        assert "record" in e["message"] and "offset" in e and "record" in e, (kind, e)
        if kind not in ("torn_tail", "trailing_garbage"):
            assert e["offset"] == 2 * rec and e["record"] == 2, (kind, e)  # the third record, counted from 0
        assert e["record"] == int(e["message"].split("record ")[1].split(":")[0]), e
    listed = requests.get(server.api("/datasets"), timeout=10).json()["datasets"]
    assert [d["id"] for d in listed if d["status"] == "ready"] == [first["id"]]
    assert (server.data / "datasets" / first["id"] / "train.tfrecord").read_bytes() == good
    for d in listed:  # the failed versions keep no files
        if d["status"] == "failed":
            assert os.listdir(server.data / "datasets" / d["id"]) == []


# ---------------------------------------------------------------- H12, H14: auth and binding

def test_h12_token_on_every_mutating_route(serve):
    server = serve(token="s3cret-token")
    fake = "r0000000000000000"
    mutating = [("post", "/api/v1/runs"), ("post", "/api/v1/datasets?name=x"), ("delete", f"/api/v1/runs/{fake}"),
                ("post", f"/api/v1/runs/{fake}/cancel"), ("delete", "/api/v1/datasets/d000")]
    for method, path in mutating:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"},
                        {"Authorization": "Bearer s3cret-token-and-more"}):
            r = requests.request(method, server.url + path, headers=headers, timeout=10)
            error_of(r, 401, "UNAUTHENTICATED")
    ok = {"Authorization": "Bearer s3cret-token"}
    assert requests.delete(server.url + f"/api/v1/runs/{fake}", headers=ok, timeout=10).status_code == 404
    for path in ("/api/v1/runs", "/api/v1/datasets", "/api/v1/health", "/", "/metrics"):
        assert requests.get(server.url + path, timeout=10).status_code == 200, path


def test_h12_token_from_the_environment(serve):
    server = serve(env={"TOWER_TOKEN": "from-env"})
    error_of(requests.post(server.api("/runs"), json={}, timeout=10), 401, "UNAUTHENTICATED")
    r = requests.post(server.api("/runs"), json={}, headers={"Authorization": "Bearer from-env"}, timeout=10)
    assert r.status_code == 400


def test_h14_non_loopback_needs_a_token(tower_bin, tmp_path):
    r = subprocess.run([tower_bin, "serve", "--listen", "0.0.0.0:0", "--data", tmp_path / "d", "--no-demo"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--token" in r.stderr


def test_h14_loopback_host_check(serve):
    server = serve()
    r = requests.get(server.api("/health"), headers={"Host": "evil.example:80"}, timeout=10)
    error_of(r, 403, "PERMISSION_DENIED")
    port = server.url.rsplit(":", 1)[1]
    assert requests.get(server.api("/health"), headers={"Host": f"localhost:{port}"}, timeout=10).ok


def test_default_listen_is_loopback(tower_bin):
    help_text = subprocess.run([tower_bin, "serve", "--help"], capture_output=True, text=True).stdout
    assert "default 127.0.0.1:8080" in help_text


# ---------------------------------------------------------------- uploads that work

def test_curl_numpy_and_csv_uploads(serve, tmp_path):
    import numpy as np
    server = serve()
    x = (np.arange(50 * 12) % 256).astype(np.uint8).reshape(50, 3, 4, 1)
    y = (np.arange(50) % 5).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    code, d = curl_upload(server, "np", {"features": tmp_path / "x.npy", "labels": tmp_path / "y.npy"})
    assert code == 202
    done = wait_dataset(server, d["id"])
    assert done["status"] == "ready" and done["train_examples"] == 50 and done["shape"] == [3, 4, 1]
    csv = tmp_path / "d.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(30)))
    r = subprocess.run(["curl", "-sS", "--data-binary", f"@{csv}", "-H", "Content-Type: text/csv",
                        server.api("/datasets?name=tab&label_column=label")], capture_output=True, text=True,
                       check=True)
    d = json.loads(r.stdout)
    done = wait_dataset(server, d["id"])
    assert done["status"] == "ready" and done["train_examples"] == 30 and done["shape"] == [2]
    s = requests.get(server.api(f"/datasets/{d['id']}/samples?n=2"), timeout=10).json()
    assert s["samples"][1]["features"] == [1.0, 2.0] and s["samples"][1]["label"] == 1


def test_conversion_interrupted_by_kill_9_restarts(serve, tmp_path):
    server = serve()
    code, d = curl_upload(server, "fm", {k: FASHION / v for k, v in FILES.items()})
    assert code == 202
    server.proc.kill()  # maybe mid-conversion: the upload was accepted, so it must not be lost
    server.proc.wait()
    again = serve(data=server.data)
    done = wait_dataset(again, d["id"])
    assert done["status"] == "ready" and done["train_examples"] == 60000


def test_p5_new_work_refused_when_the_disk_is_short(serve):
    """Redis's stop-writes rule: below --min-free, uploads and submissions get 507; reads still work."""
    server = serve("--min-free", "1e17")
    r = requests.post(server.api("/datasets?name=x"), data=b"a,label\n1,2\n", headers={"Content-Type": "text/csv"},
                      timeout=10)
    error_of(r, 507, "INSUFFICIENT_STORAGE")
    error_of(submit(server, seed_config()), 507, "INSUFFICIENT_STORAGE")
    assert requests.get(server.api("/runs"), timeout=10).status_code == 200
    assert uploads_left(server) == []


def test_demo_registers_fashion_and_queues_the_seed(serve):
    """The README's run command on a fresh data folder: Fashion-MNIST registered, the seed MLP training."""
    server = serve(demo=True)
    datasets = requests.get(server.api("/datasets"), timeout=10).json()["datasets"]
    assert [(d["name"], d["status"], d["train_examples"]) for d in datasets] == [("fashion-mnist", "ready", 60000)]
    runs = requests.get(server.api("/runs"), timeout=10).json()["runs"]
    assert [(r["name"], r["dataset"]["name"], r["steps"]) for r in runs] == [("seed-mlp", "fashion-mnist", 30000)]
    poll("the seed MLP to train", lambda: True if requests.get(server.api(f"/runs/{runs[0]['id']}"), timeout=10)
         .json()["step"] > 0 else None)
    assert requests.post(server.api(f"/runs/{runs[0]['id']}/cancel"), timeout=10).status_code == 202
