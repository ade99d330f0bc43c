"""Races and limits of `POST /api/v1/runs` : concurrent posts with one Idempotency-Key get the
one run, a used key with another body is refused (422), a key is capped (400), and a dataset delete racing a
submission never leaves a run whose dataset is gone; a store that cannot be read answers 500, never 404.
Runs use the fake trainer with slow steps, so a run stays queued or running (and holds its dataset) for the
whole test; nothing trains for real."""
import sqlite3
import threading

import pytest
import requests

from test_server import seed_config, submit, wait_dataset

CSV = "a,b,label\n" + "".join(f"{i % 7}.5,{i % 3}.25,{i % 2}\n" for i in range(30))


@pytest.fixture
def server(serve, tool):
    return serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=1000"})


def csv_dataset(server, name):
    r = requests.post(server.api(f"/datasets?name={name}&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv", **server.headers()}, timeout=30)
    assert r.status_code in (201, 202), r.text
    d = wait_dataset(server, r.json()["id"])
    assert d["status"] == "ready", d
    return d


def all_runs(server):
    page = requests.get(server.api("/runs?limit=1000"), timeout=10).json()
    assert page["total"] == len(page["runs"])
    return page["runs"]


def run_folders(server):
    folder = server.data / "runs"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def together(*calls):
    """Runs the calls on threads released at once by a barrier; their results, in order."""
    barrier = threading.Barrier(len(calls))
    out = [None] * len(calls)

    def one(i, call):
        barrier.wait()
        out[i] = call()
    threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_concurrent_posts_with_one_key_make_one_run(server):
    csv_dataset(server, "tab")
    cfg = seed_config(dataset="tab")
    key = {"Idempotency-Key": "twelve-at-once"}
    replies = together(*[lambda: submit(server, cfg, key)] * 12)
    assert [r.status_code for r in replies if r.status_code not in (200, 201)] == [], \
        [r.text for r in replies if r.status_code not in (200, 201)]
    assert sum(r.status_code == 201 for r in replies) == 1
    assert len({r.json()["id"] for r in replies}) == 1
    runs = all_runs(server)
    assert [r["id"] for r in runs] == [replies[0].json()["id"]]
    assert run_folders(server) == [runs[0]["id"]]  # the losers' folders (config.json) are gone
    again = submit(server, cfg, key)  # later, the same key and body: the same run, 200
    assert again.status_code == 200 and again.json()["id"] == runs[0]["id"]


def test_used_key_with_another_body_is_refused(server):
    csv_dataset(server, "tab")
    key = {"Idempotency-Key": "k-1"}
    first = submit(server, seed_config(dataset="tab", steps=100), key)
    assert first.status_code == 201, first.text
    # The same body with its keys in another order is the same body.
    reordered = dict(reversed(list(seed_config(dataset="tab", steps=100).items())))
    assert submit(server, reordered, key).json()["id"] == first.json()["id"]
    r = submit(server, seed_config(dataset="tab", steps=101), key)
    assert r.status_code == 422, r.text
    e = r.json()["error"]
    assert e["code"] == "IDEMPOTENCY_MISMATCH" and "Idempotency-Key" in e["message"]
    assert len(all_runs(server)) == 1


@pytest.mark.parametrize("key", ["k" * 300, "", "a\tb"])
def test_bad_key_is_refused_and_nothing_stored(server, key):
    csv_dataset(server, "tab")
    r = submit(server, seed_config(dataset="tab"), {"Idempotency-Key": key})
    assert r.status_code == 400, r.text
    assert "Idempotency-Key" in r.json()["error"]["message"]
    assert all_runs(server) == [] and run_folders(server) == []
    ok = submit(server, seed_config(dataset="tab"), {"Idempotency-Key": "k" * 255})  # the cap itself is fine
    assert ok.status_code == 201, ok.text


def test_dataset_delete_racing_a_submission(server):
    for i in range(25):
        d = csv_dataset(server, f"race{i}")
        delete, post = together(
            lambda: requests.delete(server.api(f"/datasets/{d['id']}"), headers=server.headers(), timeout=30),
            lambda: submit(server, seed_config(dataset=d["id"])))
        gone = requests.get(server.api(f"/datasets/{d['id']}"), timeout=10).status_code == 404
        if post.status_code == 201:  # the run won: the delete was refused, the dataset stays
            assert delete.status_code == 409, (i, delete.text)
            assert not gone
        else:  # the delete won: the submission failed cleanly, naming the dataset
            assert delete.status_code == 204, (i, delete.text)
            assert post.status_code in (400, 404, 409), (i, post.text)  # 404: it names a dataset now gone
            assert d["id"] in post.json()["error"]["message"] or "dataset" in post.json()["error"]["message"]
            assert gone
    runs = all_runs(server)
    datasets = {d["id"] for d in requests.get(server.api("/datasets"), timeout=10).json()["datasets"]}
    assert all(r["dataset"]["id"] in datasets for r in runs)
    assert run_folders(server) == sorted(r["id"] for r in runs)  # a refused submission left no folder


def test_unreadable_store_answers_500_not_404(server):
    d = csv_dataset(server, "tab")
    run = submit(server, seed_config(dataset="tab")).json()
    missing = requests.get(server.api("/runs/r000000000000000"), timeout=10)
    assert missing.status_code == 404  # not found is still 404
    db = sqlite3.connect(server.data / "tower.db")  # a second connection takes the tables away
    db.executescript("DROP TABLE runs; DROP TABLE datasets; DROP TABLE run_counts;")
    db.close()
    for path in (f"/runs/{run['id']}", "/runs/r000000000000000", f"/datasets/{d['id']}", "/runs", "/datasets",
                 f"/runs/{run['id']}/log", f"/datasets/{d['id']}/samples", "/health"):
        r = requests.get(server.api(path), timeout=10)
        assert r.status_code == 500, (path, r.status_code, r.text)
        e = r.json()["error"]
        assert e["code"] == "INTERNAL" and "no such table" in e["message"], (path, e)
    r = requests.delete(server.api(f"/runs/{run['id']}"), headers=server.headers(), timeout=10)
    assert r.status_code == 500, r.text
