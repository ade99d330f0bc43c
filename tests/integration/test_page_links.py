"""The status page's links by name in headless Chromium against a real `tower serve`: a run and a dataset
opened by names with '-', '.' and '_' (the demo's seed-mlp run and fashion-mnist dataset, and a run named
with all three) show their pages, not "Not found".

Needs Debian's chromium and chromium-driver and the selenium package (scripts/install-deps.sh --test)."""
import json

import pytest
import requests

from conftest import ROOT
from test_page import browser, js, poll_api, submit_run, wait  # noqa: F401 (browser is a fixture)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402


def open_hash(driver, server, fragment):
    """Opens the page at #FRAGMENT (a fresh load, as a pasted link does)."""
    driver.get(f"{server.url}/#{fragment}")


def heading(driver):
    return js(driver, "const e = document.querySelector('#view h2'); return e ? e.textContent : '';")


def test_run_and_dataset_pages_open_by_name(serve, browser):
    server = serve(demo=True)
    demo = poll_api(server.api("/runs/seed-mlp"), lambda b: b.get("dataset") is not None, 60, "the demo run")
    dataset = poll_api(server.api("/datasets/fashion-mnist"), lambda b: b["status"] != "converting", 300,
                       "the demo dataset's conversion")
    requests.post(server.api(f"/runs/{demo['id']}/cancel"), timeout=30)  # the page needs none of its training
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    dotted = submit_run(server, dict(seed, dataset="fashion-mnist", name="mlp_v1.2-b", steps=10))
    d = browser

    open_hash(d, server, "/runs/seed-mlp")
    wait(d, lambda d: d.find_element(By.ID, "run-name").text == "seed-mlp", message="the seed-mlp run page",
         detail=heading)
    wait(d, lambda d: demo["id"] in d.find_element(By.ID, "run-facts").text, message="the run's id in its facts")

    open_hash(d, server, "/runs/mlp_v1.2-b")
    wait(d, lambda d: d.find_element(By.ID, "run-name").text == "mlp_v1.2-b", message="the mlp_v1.2-b run page",
         detail=heading)
    assert dotted in d.find_element(By.ID, "run-facts").text

    open_hash(d, server, "/datasets/fashion-mnist")
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f"#dataset-row-{dataset['id']}.selected"),
         message="the fashion-mnist row selected", detail=heading)
    wait(d, lambda d: d.find_element(By.ID, "dataset-detail").text.strip() != "", message="the dataset's detail")
    assert "Not found" not in heading(d)
