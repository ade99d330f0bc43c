"""server/API.md's curl examples run as they are against a live `tower serve` (doc_blocks.py).

They run in a folder holding a copy of `examples/` and `rows.npy` (an [8, 4] float32 array, what the
prediction example sends), on the server's port instead of 8080, with RUN_ID the id of a run of
examples/runs/blobs_mlp.json that the test trains first on examples/blobs.csv (uploaded as `setup-blobs` with
the raw-body form). A block waits for nothing the document does not: an upload is converted in the
background, so the submission after it needs the server to queue a run on a converting dataset. After the
blocks, every dataset they uploaded must be ready and every run they submitted must succeed (an upload's
202 and a submission's 201 alone would hide a conversion that fails, e.g. a multipart form's query
ignored)."""
import json
import shutil

import numpy as np
import requests

import doc_blocks
from conftest import ROOT
from test_server import wait_run

API = ROOT / "server" / "API.md"


def test_every_api_shell_block_runs_or_says_why_not(serve, tmp_path):
    server = serve()
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples")
    np.save(work / "rows.npy", np.random.default_rng(0).normal(1, 1, size=(8, 4)).astype(np.float32))
    r = requests.post(server.api("/datasets?name=setup-blobs&label_column=kind&validation_split=0.2"),
                      data=(work / "examples" / "blobs.csv").read_bytes(), headers={"Content-Type": "text/csv"},
                      timeout=30)
    assert r.status_code == 202, r.text
    body = {**json.loads((work / "examples" / "runs" / "blobs_mlp.json").read_text()), "dataset": "setup-blobs"}
    ready = wait_dataset(server, r.json()["id"])
    assert ready["status"] == "ready", ready
    r = requests.post(server.api("/runs"), json=body, timeout=30)
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    assert wait_run(server, run_id)["status"] == "succeeded"
    port = server.url.rsplit(":", 1)[1]
    shell = doc_blocks.Shell(work, ports={"8080": port, "8081": port, "6006": port},
                             placeholders={"RUN_ID": run_id})
    try:
        assert doc_blocks.run_document(API, shell) >= 2
    finally:
        shell.close()
    datasets = requests.get(server.api("/datasets"), timeout=10).json()["datasets"]
    assert len(datasets) >= 3
    for d in datasets:
        d = wait_dataset(server, d["id"])
        assert d["status"] == "ready", d
    runs = requests.get(server.api("/runs?fields=id,name,status"), timeout=10).json()["runs"]
    assert len(runs) >= 2
    for r in runs:
        assert wait_run(server, r["id"])["status"] == "succeeded", r


def wait_dataset(server, dataset_id):
    from helpers import poll

    def done():
        d = requests.get(server.api(f"/datasets/{dataset_id}"), timeout=10).json()
        return d if d["status"] != "converting" else None
    return poll("the dataset's conversion", done)
