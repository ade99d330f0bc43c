"""Image-folder datasets: a .tar.gz, .tar or .zip whose top-level folders are the classes, uploaded to a real
`tower serve`, becomes a TFRecord dataset of the stored size (read back with TensorFlow's reader and compared
with Pillow's resize of the same files), with the folders' names as class names and a stratified validation
split; a run trains on it. Each bad archive is refused naming the entry inside it."""
import io
import json
import tarfile
import zipfile

import numpy as np
import pytest
import requests

from test_dataset_splits import upload
from test_server import submit, wait_dataset, wait_run

tf = pytest.importorskip("tensorflow")
Image = pytest.importorskip("PIL.Image")

CLASSES = ["bag", "boot", "shirt"]  # sorted: class 0 is "bag"


def picture(k, i, size, mode):
    """A class-dependent picture: a bright square whose place says the class, noise for the rest."""
    rng = np.random.default_rng(100 * k + i)
    w, h = size
    a = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
    y0, x0 = [(0, 0), (h // 2, 0), (0, w // 2)][k]
    a[y0:y0 + h // 2, x0:x0 + w // 2] = 230
    img = Image.fromarray(a, "RGB")
    return img.convert(mode) if mode != "RGB" else img


def encoded(img, fmt):
    b = io.BytesIO()
    img.save(b, format=fmt)
    return b.getvalue()


# (size, mode, format) per example: mixed sizes (the stored size too), colour types and formats
KINDS = [((28, 28), "L", "PNG"), ((40, 32), "RGB", "PNG"), ((64, 64), "RGBA", "PNG"), ((20, 36), "P", "PNG"),
         ((50, 30), "RGB", "JPEG"), ((28, 28), "L", "JPEG"), ((33, 47), "LA", "PNG")]


def folder_files(n=14):
    """{path in the archive: bytes} and [(path, class, PIL image as stored)]."""
    files, items = {}, []
    for k, c in enumerate(CLASSES):
        for i in range(n):
            size, mode, fmt = KINDS[i % len(KINDS)]
            img = picture(k, i, size, mode)
            path = f"{c}/img{i:03d}.{'png' if fmt == 'PNG' else 'jpg'}"
            files[path] = encoded(img, fmt)
            items.append((path, k))
    files[".DS_Store"] = b"junk"           # hidden: skipped
    files["README.txt"] = b"about the data"  # outside a class folder: skipped
    return files, items


def tar_bytes(files, gz=True, extra=None):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w:gz" if gz else "w") as t:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for info in extra or []:
            t.addfile(info)
    return b.getvalue()


def zip_bytes(files):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return b.getvalue()


def pillow_stored(data, h, w):
    """What the stored example should be: gray, the shorter side scaled to the target (Pillow's bicubic),
    the middle cut out."""
    img = Image.open(io.BytesIO(data))
    img = img.convert("RGB").convert("L")
    s = max(h / img.height, w / img.width)
    rw, rh = max(w, int(img.width * s + 0.5)), max(h, int(img.height * s + 0.5))
    if (rw, rh) != img.size:
        img = img.resize((rw, rh), Image.BICUBIC)
    x0, y0 = (rw - w) // 2, (rh - h) // 2
    return np.asarray(img.crop((x0, y0, x0 + w, y0 + h)), dtype=np.uint8)


def records(path):
    out = []
    for rec in tf.data.TFRecordDataset(str(path)):
        f = tf.train.Example.FromString(rec.numpy()).features.feature
        out.append((np.frombuffer(f["image_raw"].bytes_list.value[0], np.uint8), f["label"].int64_list.value[0],
                    (f["height"].int64_list.value[0], f["width"].int64_list.value[0], f["depth"].int64_list.value[0])))
    return out


def test_an_image_folder_archive_becomes_a_dataset_and_trains(serve, tmp_path):
    server = serve()
    files, items = folder_files()
    (tmp_path / "images.tar.gz").write_bytes(tar_bytes(files))
    code, d = upload(server, "pics", {"archive": tmp_path / "images.tar.gz"},
                     {"image_size": "28x28", "channels": "1", "validation_split": "0.25", "split_seed": "4"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    assert d["status"] == "ready", d
    assert d["class_names"] == CLASSES
    assert (d["train_examples"], d["test_examples"]) == (31, 11)  # 42 images, round(10.5) held out
    folder = server.data / "datasets" / d["id"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["source"] == "archive" and meta["shape"] == [28, 28, 1] and meta["skipped_files"] == 2
    got = records(folder / "train.tfrecord") + records(folder / "test.tfrecord")
    assert len(got) == len(items) and all(dims == (28, 28, 1) for _, _, dims in got)
    # each stored example is Pillow's resize of its file, within a few grey levels (two bicubic kernels)
    by_pixels = {tuple(px): label for px, label, _ in got}
    worst = 0
    for path, k in items:
        want = pillow_stored(files[path], 28, 28).ravel()
        match = min(by_pixels, key=lambda px: np.abs(np.int16(px) - want).mean())
        assert by_pixels[match] == k, path
        worst = max(worst, np.abs(np.int16(match) - want).mean())
    assert worst <= 3.0, worst  # mean absolute difference per pixel, in grey levels of 255
    # an image already of the stored size is stored exactly
    exact = pillow_stored(files["bag/img000.png"], 28, 28).ravel()
    assert any(np.array_equal(px, exact) for px, _, _ in got)
    # the counts per class are stratified: 14 each, 3.5 held out of each
    test_labels = [label for _, label, _ in records(folder / "test.tfrecord")]
    assert sorted(np.bincount(test_labels, minlength=3)) == [3, 4, 4]
    r = submit(server, {"name": "pics-cnn", "dataset": "pics",
                        "model": {"layers": [{"type": "conv2d", "filters": 4, "kernel": 3, "activation": "relu"},
                                             {"type": "global_avg_pool"}, {"type": "dense", "units": 3}]},
                        "optimizer": {"type": "adam", "learning_rate": 0.01}, "batch_size": 8, "steps": 20,
                        "summary_every": 10, "eval_every": 10, "checkpoint_every": 20})
    assert r.status_code == 201, r.text
    run = wait_run(server, r.json()["id"])
    assert run["status"] == "succeeded", run
    assert run["class_names"] == CLASSES and "eval_accuracy" in run["metrics"]


def test_zip_and_plain_tar_archives_and_pad(serve, tmp_path):
    server = serve()
    files, items = folder_files(n=4)
    (tmp_path / "a.zip").write_bytes(zip_bytes(files))
    (tmp_path / "a.tar").write_bytes(tar_bytes(files, gz=False))
    for name, path, values in (("z", "a.zip", {"image_size": "16", "resize": "pad"}),
                               ("t", "a.tar", {"image_size": "16x20", "channels": "3"})):
        code, d = upload(server, name, {"archive": tmp_path / path}, values)
        assert code == 202, d
        d = wait_dataset(server, d["id"])
        assert d["status"] == "ready", d
        assert d["train_examples"] == len(items) and d["class_names"] == CLASSES
        meta = json.loads((server.data / "datasets" / d["id"] / "meta.json").read_text())
        assert meta["shape"] == ([16, 16, 3] if name == "z" else [16, 20, 3])
        assert meta["resize"] == ("pad" if name == "z" else "crop")


def failed(server, tmp_path, name, data, values=None):
    (tmp_path / name).write_bytes(data)
    code, d = upload(server, name.replace(".", "-"), {"archive": tmp_path / name},
                     {"image_size": "28", **(values or {})})
    if code != 202:
        return d["error"]["message"]
    d = wait_dataset(server, d["id"])
    assert d["status"] == "failed", d
    return d["error"]["message"]


def test_bad_archives_are_refused_naming_the_entry(serve, tmp_path):
    server = serve()
    good, _ = folder_files(n=2)
    link = tarfile.TarInfo("bag/link.png")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    up = tarfile.TarInfo("../evil.png")
    up.size = 0
    empty = tarfile.TarInfo("dress")
    empty.type = tarfile.DIRTYPE
    png = good["bag/img000.png"]
    cases = {
        "link.tar.gz": (tar_bytes(good, extra=[link]), "archive entry 'bag/link.png': a symbolic link"),
        "up.tar.gz": (tar_bytes(good, extra=[up]), "archive entry '../evil.png': a path out of the archive"),
        "text.tar.gz": (tar_bytes({**good, "bag/notes.txt": b"hello"}),
                        "archive entry 'bag/notes.txt': not a PNG or JPEG image"),
        "cut.tar.gz": (tar_bytes({**good, "bag/cut.png": png[:len(png) // 2]}), "archive entry 'bag/cut.png'"),
        "empty.tar.gz": (tar_bytes(good, extra=[empty]), "class folder 'dress' holds no PNG or JPEG images"),
        "none.tar.gz": (tar_bytes({"README.txt": b"x"}), "no images"),
        "junk.tar.gz": (b"this is not an archive at all" * 10, "not a .tar, .tar.gz or .zip archive"),
    }
    for name, (data, words) in cases.items():
        msg = failed(server, tmp_path, name, data)
        assert words in msg, (name, msg)
    # a decompression bomb: 300 MB of zeros in 300 KB, against a server that takes 64 MB datasets
    bomb_server = serve("--max-dataset", str(64 << 20), data=tmp_path / "bomb-data")
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w:gz") as t:
        info = tarfile.TarInfo("bag/huge.png")
        info.size = 300 << 20
        t.addfile(info, io.BytesIO(bytes(info.size)))
    msg = failed(bomb_server, tmp_path, "bomb.tar.gz", b.getvalue())
    assert "larger than 64 MiB" in msg or "unpacks to more than" in msg, msg
    # options: refused at once, naming the field
    for values, words in (({"image_size": "big"}, "image_size must be HxW"), ({"channels": "2"}, "channels must be"),
                          ({"resize": "stretch"}, "resize must be crop")):
        (tmp_path / "ok.tar.gz").write_bytes(tar_bytes(good))
        code, d = upload(server, "opts", {"archive": tmp_path / "ok.tar.gz"}, {"image_size": "28", **values})
        assert code == 400 and words in d["error"]["message"], (values, d)
    code, d = upload(server, "nosize", {"archive": tmp_path / "ok.tar.gz"})
    assert code == 400 and "image_size" in d["error"]["message"], d


def test_tower_upload_of_a_folder_streams_it_as_an_archive(serve, tower_bin, tmp_path):
    """`tower upload NAME DIR/` sends the folder as a tar made as it is sent: the dataset equals the one the same
    files make as a .tar.gz (example for example, labels, class names, skipped files); a link inside is left out
    and said so; an empty folder and a folder of no images are refused by name."""
    from test_client import client
    server = serve()
    files, items = folder_files(n=5)
    root = tmp_path / "photos"
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / "bag" / "elsewhere.png").symlink_to(tmp_path / "outside.png")
    (tmp_path / "outside.png").write_bytes(files["boot/img000.png"])
    r = client(tower_bin, server, "upload", "from-folder", f"{root}/", "--image-size", "24", "--channels", "1",
               "--validation-split", "0.2", "--split-seed", "3")
    assert r.returncode == 0, r.stderr
    assert "from-folder ready: archive, 12 train + 3 test examples; classes bag, boot, shirt" in r.stdout, r.stdout
    assert "1 entries that are not regular files" in r.stderr, r.stderr
    (tmp_path / "same.tar.gz").write_bytes(tar_bytes(files))
    code, d = upload(server, "from-tar", {"archive": tmp_path / "same.tar.gz"},
                     {"image_size": "24", "channels": "1", "validation_split": "0.2", "split_seed": "3"})
    assert code == 202, d
    assert wait_dataset(server, d["id"])["status"] == "ready"
    sets = {}
    for name in ("from-folder", "from-tar"):
        ds = requests.get(server.api(f"/datasets/{name}"), timeout=30).json()
        folder = server.data / "datasets" / ds["id"]
        sets[name] = ([(px.tobytes(), label) for px, label, _ in records(folder / "train.tfrecord")],
                      [(px.tobytes(), label) for px, label, _ in records(folder / "test.tfrecord")],
                      json.loads((folder / "meta.json").read_text())["skipped_files"], ds["class_names"])
    assert sets["from-folder"] == sets["from-tar"]
    (tmp_path / "empty").mkdir()
    r = client(tower_bin, server, "upload", "nothing", tmp_path / "empty", "--image-size", "24")
    assert r.returncode == 1 and "no files in the folder" in r.stderr, r.stderr
    (tmp_path / "notes" / "a").mkdir(parents=True)
    (tmp_path / "notes" / "a" / "x.txt").write_text("not an image")
    r = client(tower_bin, server, "upload", "notes", tmp_path / "notes", "--image-size", "24")
    assert r.returncode == 1 and "a/x.txt" in r.stderr, r.stderr


def test_tower_convert_of_an_archive_equals_the_servers(serve, tower_bin, tmp_path):
    """`tower convert --image-archive` writes the examples the upload of the same archive stores; its image
    options are usage errors when malformed or given without an archive."""
    import subprocess
    server = serve()
    files, _ = folder_files(n=4)
    (tmp_path / "a.tar.gz").write_bytes(tar_bytes(files))
    r = subprocess.run([str(tower_bin), "convert", "--image-archive", tmp_path / "a.tar.gz", "--image-size", "12x16",
                        "--channels", "3", "--resize", "pad", "-o", tmp_path / "cli.tfrecord"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    code, d = upload(server, "srv", {"archive": tmp_path / "a.tar.gz"},
                     {"image_size": "12x16", "channels": "3", "resize": "pad"})
    assert code == 202, d
    d = wait_dataset(server, d["id"])
    srv = records(server.data / "datasets" / d["id"] / "train.tfrecord")
    cli = records(tmp_path / "cli.tfrecord")
    assert [(px.tobytes(), label, dims) for px, label, dims in cli] == \
        [(px.tobytes(), label, dims) for px, label, dims in srv] and cli[0][2] == (12, 16, 3)
    meta = json.loads((tmp_path / "cli.meta.json").read_text())
    assert meta["class_names"] == CLASSES and meta["resize"] == "pad"
    for args, says in ((["--image-size", "12"], "--image-size needs --image-archive"),
                       (["--image-archive", tmp_path / "a.tar.gz", "--image-size", "0x3"], "--image-size: bad value"),
                       (["--image-archive", tmp_path / "a.tar.gz", "--image-size", "8", "--channels", "2"],
                        "--channels: bad value '2'")):
        r = subprocess.run([str(tower_bin), "convert", *map(str, args), "-o", tmp_path / "x.tfrecord"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_tower_convert_hands_out_many_batches_in_archive_order(tower_bin, tmp_path):
    """An archive of more entries than several of the converter's batches (each at most 256 entries; one is
    decoded while the next is read): the records come out in the archive's order with their classes, each
    the image its entry holds, in every channel layout; a truncated file deep in the archive is the entry
    named, and nothing is written."""
    import subprocess
    names, files = ["b", "a", "c"], {}
    for i in range(700):  # folders interleaved, so a wrong hand-out order shows in the labels too
        files[f"{names[i % 3]}/{i:04d}.png"] = encoded(Image.fromarray(np.full((6, 5), i % 251, np.uint8), "L"), "PNG")
    (tmp_path / "many.tar").write_bytes(tar_bytes(files, gz=False))
    for channels in ("1", "3"):
        out = tmp_path / f"many{channels}.tfrecord"
        r = subprocess.run([str(tower_bin), "convert", "--image-archive", tmp_path / "many.tar", "--image-size",
                            "6x5", "--channels", channels, "-o", out], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = records(out)
        assert len(got) == 700
        for i, (px, label, dims) in enumerate(got):
            assert label == sorted(names).index(names[i % 3]) and dims == (6, 5, int(channels))
            assert (px == i % 251).all(), i
    bad = dict(files)
    bad["a/0601.png"] = bad["a/0601.png"][:30]
    (tmp_path / "bad.tar").write_bytes(tar_bytes(bad, gz=False))
    r = subprocess.run([str(tower_bin), "convert", "--image-archive", tmp_path / "bad.tar", "--image-size", "6x5",
                        "--channels", "1", "-o", tmp_path / "bad.tfrecord"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "archive entry 'a/0601.png'" in r.stderr, r.stderr
    assert not (tmp_path / "bad.tfrecord").exists()


def test_an_entry_whose_bytes_fail_their_check_is_named(tower_bin, tmp_path):
    """A .zip entry whose stored bytes are damaged past its first ones: the listing pass reads only an
    entry's start, so the writing pass (the part that runs while the listing does, or a batch) finds it,
    by the entry's CRC-32, and names it; nothing is written."""
    import subprocess
    files = {f"{c}/{i:04d}.png": encoded(picture(k, i, (28, 28), "L"), "PNG")
             for k, c in enumerate(CLASSES) for i in range(4)}
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", compression=zipfile.ZIP_STORED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    data = bytearray(b.getvalue())
    target = files["boot/0002.png"]
    at = bytes(data).index(target) + len(target) // 2  # the entry's middle, past the bytes the listing reads
    data[at] ^= 0xFF
    (tmp_path / "bad.zip").write_bytes(bytes(data))
    r = subprocess.run([str(tower_bin), "convert", "--image-archive", tmp_path / "bad.zip", "--image-size", "28",
                        "--channels", "1", "-o", tmp_path / "bad.tfrecord"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "archive entry 'boot/0002.png'" in r.stderr, r.stderr
    assert not (tmp_path / "bad.tfrecord").exists()
