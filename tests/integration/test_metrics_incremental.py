"""GET /api/v1/runs/{id}/metrics reads only what was appended since the last request
(server/scalars_cache.c over eventlog/events_read.h's tw_events_scalars). A real `tower serve` (the fake
trainer makes the run); its folder's event files are then grown by hand, record by record, as a trainer
appends them: after each append the Prometheus counter tower_event_bytes_read_total grew by exactly the
bytes appended (a torn record is read again once whole), a request with nothing new reads nothing, a new
attempt's file (with its SessionLog START) is picked up, a replaced file is read again from the start, and
every reply's series equal a full read by TensorBoard's EventAccumulator. Not timed."""
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
import subprocess

import requests

import helpers
from test_events_read import preempted, record_ends, same, tensorboard
from test_server import seed_config, submit, wait_dataset, wait_run

FAST = ("--backoff", "0.2", "--backoff-cap", "1", "--grace", "1", "--max-restarts", "0")
CSV = "a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(40))


def generated(tool, folder, *args):
    folder.mkdir()
    path = subprocess.run([tool("tw_eventgen"), folder, *args], capture_output=True, text=True,
                          check=True).stdout.strip()
    return open(path, "rb").read()


def bytes_read(server):
    text = requests.get(server.url + "/metrics", timeout=10).text
    return int(re.search(r"^tower_event_bytes_read_total (\d+)$", text, re.M).group(1))


def served(server, run_id):
    """The reply's series as {tag: [(step, value, wall_time)]}."""
    r = requests.get(server.api(f"/runs/{run_id}/metrics"), timeout=30)
    assert r.status_code == 200, r.text
    return {tag: [(s, float(v), w) for s, v, w in points] for tag, points in r.json()["scalars"].items()}


def test_metrics_read_only_what_was_appended(serve, tool, tmp_path):
    first = generated(tool, tmp_path / "a", "--steps", "40")
    resumed = generated(tool, tmp_path / "b", "--steps", "60", "--resume-at", "25")
    server = serve("--trainer", tool("tw_faketrain"), *FAST, env={"TW_FAKE": "step_ms=1"})
    r = requests.post(server.api("/datasets?name=tab&label_column=label"), data=CSV,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert wait_dataset(server, r.json()["id"])["status"] == "ready"
    run = submit(server, seed_config(dataset="tab", steps=5)).json()
    assert wait_run(server, run["id"])["status"] == "succeeded"
    folder = helpers.run_dir(server.data.resolve(), run["id"])
    for path in folder.glob("events.out.tfevents.*"):  # the run's files are replaced by ours
        path.unlink()
    shutil.rmtree(folder / "eval_ema", ignore_errors=True)
    one, two = folder / "events.out.tfevents.0000000001.host", folder / "events.out.tfevents.0000000002.host"

    def check(grown_by):
        before = bytes_read(server)
        got = served(server, run["id"])
        assert bytes_read(server) - before == grown_by
        # the first file has no START: the data server's preemption rule (as test_events_read.py)
        same(got, {tag: preempted(points) for tag, points in tensorboard(folder).items()})
        return got

    ends = record_ends(first)
    one.write_bytes(first[:ends[10]])
    assert len(check(ends[10])["loss"]) > 0
    check(0)  # nothing new: nothing read
    with open(one, "ab") as f:  # the trainer appends
        f.write(first[ends[10]:ends[30]])
    check(ends[30] - ends[10])
    with open(one, "ab") as f:
        f.write(first[ends[30]:])
    assert [p[0] for p in check(len(first) - ends[30])["loss"]] == list(range(40))

    ends = record_ends(resumed)  # a new attempt: a START at 25 purges the steps from 25 on
    two.write_bytes(resumed[:ends[5] + 7])  # 7 bytes of a torn record
    before = bytes_read(server)
    served(server, run["id"])
    assert bytes_read(server) - before == ends[5] + 7
    with open(two, "ab") as f:
        f.write(resumed[ends[5] + 7:])
    loss = check(len(resumed) - ends[5])["loss"]  # the torn record again, and what follows
    assert [p[0] for p in loss] == list(range(60))

    tmp = folder / "replacement"  # replaced (another inode, shorter): read again from the start
    tmp.write_bytes(resumed[:ends[8]])
    tmp.rename(two)
    check(len(first) + ends[8])

    # Requests from many threads while the file grows record by record: every reply is whole, and the
    # bytes read add up to what was appended (the run's entry is read by one request at a time).
    before = bytes_read(server)
    with ThreadPoolExecutor(8) as pool:
        replies = []
        with open(two, "ab") as f:
            for k in range(8, len(ends) - 1):
                f.write(resumed[ends[k]:ends[k + 1]])
                f.flush()
                replies += [pool.submit(served, server, run["id"]) for _ in range(4)]
        assert all("loss" in r.result() for r in replies)
    check(0)
    assert bytes_read(server) - before == len(resumed) - ends[8]
    requests.delete(server.api(f"/runs/{run['id']}"), timeout=10).raise_for_status()
    assert requests.get(server.api(f"/runs/{run['id']}/metrics"), timeout=10).status_code == 404
