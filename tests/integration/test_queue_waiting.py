"""Runs submitted on a dataset that is still converting (the README's upload-then-submit typed quickly or
scripted): accepted and queued, `waiting_for` naming the conversion, started once the dataset is ready (the
config completed then); a conversion that fails fails the run with reason bad_dataset, naming the upload's
error. A real `tower serve` on its one CPU device with the real trainer; the CSV is large enough that its
conversion takes the server a second or more (the tests check that the submission found it converting)."""
import requests

from helpers import poll

MLP = {"loss": "softmax_cross_entropy", "batch_size": 8, "seed": 1,
       "model": {"layers": [{"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense", "units": 2}]},
       "optimizer": {"type": "sgd", "learning_rate": 0.05}, "eval_every": 0, "checkpoint_every": 0}
SHORT = {**MLP, "steps": 200, "summary_every": 100}


def get(server, path):
    r = requests.get(server.api(path), timeout=30)
    assert r.status_code == 200, (path, r.text)
    return r.json()


def big_csv(rows, last=None):
    """A CSV of rows rows (a, b, c, label) that takes the server a second or more to convert, so that a run
    submitted right after the upload finds it converting; `last` appended as the final row."""
    body = "a,b,c,label\n" + "".join(f"{i % 7},{(i * 3) % 5},{(i * 7) % 11},{i % 2}\n" for i in range(rows))
    return body + (last or "")


def upload_then_submit(server, name, csv):
    """Uploads csv as dataset name and submits a short run on it at once -> (upload reply, run reply)."""
    up = requests.post(server.api(f"/datasets?name={name}&label_column=label"), data=csv,
                       headers={"Content-Type": "text/csv"}, timeout=60)
    assert up.status_code in (201, 202), up.text
    run = requests.post(server.api("/runs"), json={**SHORT, "dataset": name}, timeout=30)
    return up.json(), run


def test_a_run_submitted_on_a_converting_dataset_waits_for_it(serve):
    server = serve(env={"CUDA_VISIBLE_DEVICES": ""})
    up, r = upload_then_submit(server, "big", big_csv(300_000))
    assert up["status"] == "converting", up
    assert r.status_code == 201 and r.json()["status"] == "queued", r.text
    run = get(server, f"/runs/{r.json()['id']}")
    assert run["status"] == "queued" and run["waiting_for"] == "dataset big is converting", run
    listed = get(server, "/runs")["runs"][0]
    assert listed["id"] == run["id"] and "waiting_for" in listed
    done = poll("the run to end", lambda: (lambda x: x if x["status"] in ("succeeded", "failed") else None)(
        get(server, f"/runs/{run['id']}")), 120)
    assert done["status"] == "succeeded" and done["waiting_for"] is None, done
    assert done["step"] == SHORT["steps"]


def test_a_run_on_a_conversion_that_fails_fails_bad_dataset(serve):
    server = serve(env={"CUDA_VISIBLE_DEVICES": ""})
    up, r = upload_then_submit(server, "broken", big_csv(300_000, last="1,2,oops,0\n"))
    assert up["status"] == "converting", up
    assert r.status_code == 201, r.text
    assert get(server, f"/runs/{r.json()['id']}")["waiting_for"] == "dataset broken is converting"
    dataset = poll("the conversion to fail", lambda: (lambda d: d if d["status"] != "converting" else None)(
        get(server, "/datasets/broken")))
    assert dataset["status"] == "failed", dataset
    run = poll("the run to end", lambda: (lambda x: x if x["status"] not in ("queued", "running") else None)(
        get(server, f"/runs/{r.json()['id']}")))
    assert run["status"] == "failed" and run["reason"] == "bad_dataset", run
    assert dataset["error"]["message"] in run["error"]["message"] and "broken" in run["error"]["message"], run
    # a submission after the failure is refused at once, naming the upload's error
    again = requests.post(server.api("/runs"), json={**SHORT, "dataset": "broken"}, timeout=30)
    assert again.status_code == 409 and dataset["error"]["message"] in again.json()["error"]["message"], again.text
