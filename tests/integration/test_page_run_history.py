"""The run page tells a run's history and what it uses, and the dataset page a CSV's own column names
(headless Chromium against a real `tower serve`, a real trainer): the attempt table after a cancel and
resume (each attempt's start, steps and why it ended), the time across attempts, the running run's CPU and
memory; the feature columns as the CSV's header names them."""
import re

import numpy as np
import pytest
import requests

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

from helpers import poll  # noqa: E402
from test_page import browser, pytestmark, severe, wait  # noqa: E402,F401  (fixtures and the skip mark)
from test_server import wait_dataset  # noqa: E402


def upload_csv(server):
    rng = np.random.default_rng(2)
    y = np.arange(120) % 3
    x = rng.normal(size=(120, 3)) + y[:, None]
    text = "height,kind,width,depth\n" + "".join(f"{a:.3f},{k},{b:.3f},{c:.3f}\n" for (a, b, c), k in zip(x, y))
    r = requests.post(server.api("/datasets?name=boxes&label_column=kind&validation_split=0.25"), data=text,
                      headers={"Content-Type": "text/csv"}, timeout=30)
    assert r.status_code == 202, r.text
    return wait_dataset(server, r.json()["id"])


ROWS = ("return [...document.querySelectorAll('#run-attempts tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))")  # read at once: the page redraws on events


def run(server, ref):
    return requests.get(server.api(f"/runs/{ref}"), timeout=10).json()


def test_run_history_resources_and_csv_columns(serve, browser):  # noqa: F811
    server = serve(env={"CUDA_VISIBLE_DEVICES": ""})
    d = upload_csv(server)
    browser.get(f"{server.url}/#/datasets/{d['id']}")
    wait(browser, lambda b: b.find_elements(By.ID, "dataset-features"), message="the features table")
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#dataset-features thead th")]
    assert heads == ["label", "height", "width", "depth"], heads
    cfg = {"dataset": "boxes", "name": "boxes-mlp", "model": {"layers": [{"type": "dense", "units": 32,
           "activation": "relu"}, {"type": "dense", "units": 3}]}, "batch_size": 8, "steps": 50_000_000,
           "summary_every": 100000, "eval_every": 0, "checkpoint_every": 500000}
    rid = requests.post(server.api("/runs"), json=cfg, timeout=30).json()["id"]
    browser.get(f"{server.url}/#/runs/boxes-mlp")
    wait(browser, lambda b: b.find_elements(By.ID, "run-resources"), 60, message="the run's resource use",
         detail=lambda b: (b.find_element(By.ID, "run-facts").text, severe(b), run(server, rid)["status"]))
    shown = browser.execute_script("return document.getElementById('run-resources').textContent")
    assert re.fullmatch(r"CPU \d+% · memory [\d.]+ [KMG]i?B", shown), shown
    assert [r[2] for r in browser.execute_script(ROWS)] == ["running"]
    # a second run waits behind it: its page says where it stands in the queue
    queued = requests.post(server.api("/runs"), json={**cfg, "name": "boxes-next", "steps": 10}, timeout=30).json()
    assert queued.get("status") == "queued", queued
    browser.get(f"{server.url}/#/runs/boxes-next")
    wait(browser, lambda b: b.find_elements(By.ID, "run-queue"), 30, message="the queued run's place")
    assert browser.execute_script("return document.getElementById('run-queue').textContent").startswith("#1")
    requests.post(server.api(f"/runs/{queued['id']}/cancel"), timeout=10)
    browser.get(f"{server.url}/#/runs/boxes-mlp")
    requests.post(server.api(f"/runs/{rid}/cancel"), timeout=10)
    poll("the cancel", lambda: run(server, rid)["status"] == "cancelled" or None, 60)
    r = requests.post(server.api(f"/runs/{rid}/resume"), json={}, timeout=10)
    assert r.status_code == 202, r.text
    poll("the resumed run", lambda: run(server, rid)["status"] == "running" or None, 60)
    requests.post(server.api(f"/runs/{rid}/cancel"), timeout=10)
    done = poll("the second cancel", lambda: (lambda x: x if x["status"] == "cancelled" else None)(run(server, rid)),
                60)
    browser.refresh()  # resumed from the API, not the page: its stream ended with the cancel
    rows = wait(browser, lambda b: (lambda rows: rows if len(rows) == 2 and rows[1][5] != "—" else None)(
        b.execute_script(ROWS)), 30, message="two ended attempts on the page")
    a1, a2 = done["attempts"]
    assert [r[0] for r in rows] == ["1", "2"] and [r[5] for r in rows] == ["cancelled", "cancelled"], rows
    assert a2["step_start"] == a1["step_end"]
    assert rows[1][4].replace(",", "").split(" → ") == [str(a2["step_start"]), str(a2["step_end"])], rows
    assert not browser.find_elements(By.ID, "run-resources")  # finished: nothing runs
    assert severe(browser) == []
