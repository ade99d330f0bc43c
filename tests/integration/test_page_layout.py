"""The status page's layout in headless Chromium at 1280×800, 1400×1000 and 1920×1080 against a real
`tower serve`, by element rectangles: the run page's confusion matrix shows its last column without scrolling
(and a wider one would scroll in its own box, never cut by the page), and the compare table of 4 runs shows its final-accuracy columns without
scrolling. Screenshots of a run page, the compare view and the dataset page at 1280×800 go to
$TOWER_SCREENSHOTS (default: the test's tmp folder).

Needs Debian's chromium and chromium-driver and the selenium package (scripts/install-deps.sh --test)."""
import json
import os
import pathlib

import pytest
import requests

from conftest import ROOT
from test_page import browser, js, poll_api, submit_run, wait  # noqa: F401 (browser is a fixture)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

SIZES = [(1280, 800), (1400, 1000), (1920, 1080)]
# Four configs that differ in many hparams, so that the compare table has many columns.
VARIANTS = [
    {"name": "baseline-sgd", "optimizer": {"type": "sgd", "learning_rate": 0.01}},
    {"name": "momentum_0.9-wide", "optimizer": {"type": "momentum", "learning_rate": 0.005, "momentum": 0.9},
     "batch_size": 64, "l2": 0.0005},
    {"name": "adam.small-batch", "optimizer": {"type": "adam", "learning_rate": 0.001}, "batch_size": 16,
     "ema_decay": 0.999, "lr_decay": None},
    {"name": "sgd-long-name-for-width", "optimizer": {"type": "sgd", "learning_rate": 0.002},
     "l2": 0.0, "ema_decay": 0.9},
]


def viewport(driver, width, height):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


def visible_in_scroll_box(driver, element_id, last_cell_css):
    """{cell, box, view, page}: the rectangle of the element's last cell, that of the element's nearest
    horizontally scrolling ancestor (not scrolled), the viewport's width and the document's scroll width."""
    return js(driver, """
        const el = document.getElementById(arguments[0]);
        const cell = el.querySelector(arguments[1]);
        let box = el.parentElement;
        while (box && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
        const r = (e) => { const b = e.getBoundingClientRect(); return {left: b.left, right: b.right}; };
        return {cell: r(cell), box: r(box), view: document.documentElement.clientWidth,
                page: document.documentElement.scrollWidth};""", element_id, last_cell_css)


def shots_dir(tmp_path):
    folder = pathlib.Path(os.environ.get("TOWER_SCREENSHOTS", tmp_path / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_confusion_matrix_and_compare_fit(serve, browser, tmp_path):
    server = serve(demo=True)
    demo = poll_api(server.api("/runs/seed-mlp"), lambda b: b.get("dataset") is not None, 60, "the demo run")
    requests.post(server.api(f"/runs/{demo['id']}/cancel"), timeout=30)
    dataset = poll_api(server.api("/datasets/fashion-mnist"), lambda b: b["status"] != "converting", 300,
                       "the demo dataset's conversion")
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    short = dict(seed, dataset="fashion-mnist", steps=40, summary_every=10, eval_every=20, checkpoint_every=40)
    ids = []
    for v in VARIANTS:
        cfg = dict(short, **v)
        if cfg.get("lr_decay") is None:
            cfg.pop("lr_decay")
        ids.append(submit_run(server, cfg))
    for run_id in ids:
        run = poll_api(server.api(f"/runs/{run_id}"), lambda b: b["status"] not in ("queued", "running"), 300,
                       "a short run to finish")
        assert run["status"] == "succeeded", run
    d = browser
    shots = shots_dir(tmp_path)

    for width, height in SIZES:
        viewport(d, width, height)
        d.get(f"{server.url}/#/runs/{ids[0]}")
        wait(d, lambda d: d.find_elements(By.ID, "confusion-matrix"), timeout=60, message="the confusion matrix")
        got = visible_in_scroll_box(d, "confusion-matrix", "thead tr th:last-child")
        where = f"at {width}×{height}: {got}"
        assert got["page"] <= got["view"], f"the run page is wider than the window {where}"
        assert 0 <= got["box"]["left"] and got["box"]["right"] <= got["view"], f"the scroll box is cut {where}"
        assert got["box"]["left"] - 1 <= got["cell"]["left"] and got["cell"]["right"] <= got["box"]["right"] + 1, \
            f"the last column is out of sight {where}"
        if (width, height) == (1280, 800):
            js(d, "document.getElementById('run-evaluation').scrollIntoView();")
            d.save_screenshot(str(shots / "run-1280x800.png"))

        d.get(f"{server.url}/#/compare/{','.join(ids)}")
        wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")) == 4,
             message="the compare table of 4 runs")
        for col in ("final_accuracy", "final_accuracy_ema"):
            got = js(d, """
                const th = document.getElementById('compare-sort-' + arguments[0]);
                const b = th.getBoundingClientRect(), w = th.closest('.table-wrap').getBoundingClientRect();
                return {left: b.left, right: b.right, box_left: w.left, box_right: w.right,
                        view: document.documentElement.clientWidth, page: document.documentElement.scrollWidth};""",
                     col)
            where = f"{col} at {width}×{height}: {got}"
            assert got["page"] <= got["view"], f"the compare page is wider than the window: {where}"
            assert got["box_left"] <= got["left"] and got["right"] <= min(got["box_right"], got["view"]), \
                f"the column is off-screen without scrolling: {where}"
        if (width, height) == (1280, 800):
            # the table marks each final metric's best value: the highest accuracy, the lowest loss
            finals = {run_id: requests.get(server.api(f"/runs/{run_id}"), timeout=10).json()["metrics"]
                      for run_id in ids}
            for col, key, pick in (("final_accuracy_ema", "eval_accuracy_ema", max), ("final_loss", "loss", min)):
                values = [finals[i][key] for i in ids]
                marked = js(d, "return [...document.querySelectorAll('#compare-table tbody tr')].map((tr) =>"
                               " [tr.id.slice(12), tr.querySelector('td.col-' + arguments[0]).classList"
                               ".contains('best')])", col)
                want = {i for i in ids if finals[i][key] == pick(values)} if len(set(values)) > 1 else set()
                assert {i for i, b in marked if b} == want, (col, marked, values)
            d.save_screenshot(str(shots / "compare-1280x800.png"))
            d.get(f"{server.url}/#/datasets/{dataset['id']}")
            wait(d, lambda d: d.find_element(By.ID, "dataset-detail").text.strip() != "",
                 message="the dataset's detail")
            d.save_screenshot(str(shots / "dataset-1280x800.png"))
