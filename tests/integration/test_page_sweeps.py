"""The status page's sweeps in headless Chromium at 1280×800 against a real `tower serve` with the fake trainer
(its "objective" switch: eval_loss a known function of the learning rate and the first layer's units). An ASHA
sweep run to its end: the sweeps list and the sweep's page show what GET /api/v1/sweeps/lrs has (each trial's
values, rung, results and run; the best trial marked; the rung ladder's counts; the steps trained against the
full grid; one chart point per trial with a result, on a log axis for the log-uniform learning rate), the best
trial's Fine-tune opens the submit form as the run page's does and its exports are the run page's, a trial's
run link opens the run, and neither page is wider than the window. A slow sweep cancelled from its page (first
without the token, which fails and says so, then with it) and resumed.

Needs Debian's chromium and chromium-driver and the selenium package (scripts/install-deps.sh --test)."""
import json
import math
import os

import pytest
import requests

import helpers
from test_page import CHROMEDRIVER, CHROMIUM, TOKEN, browser, js, severe, wait  # noqa: F401 (browser is a fixture)
from test_page_layout import viewport
from test_runs_control import upload_csv

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                                reason="needs chromium and chromium-driver (scripts/install-deps.sh --test)")

LR, UNITS = "optimizer.learning_rate", "model.layers[0].units"
BASE = {"dataset": "tab",
        "model": {"layers": [{"type": "dense", "units": 32, "activation": "relu"}, {"type": "dense", "units": 2}]},
        "optimizer": {"type": "sgd", "learning_rate": 0.05}, "batch_size": 16, "steps": 64, "eval_every": 4,
        "checkpoint_every": 4}
SWEEP = {"name": "lrs", "config": BASE,
         "space": {LR: {"type": "log_uniform", "min": 0.0001, "max": 1}, UNITS: [8, 16, 32, 64]},
         "searcher": {"type": "asha", "max_trials": 16, "reduction_factor": 2, "rungs": 3, "seed": 3,
                      "max_concurrent": 2},
         "metric": "eval_loss"}


@pytest.fixture
def fake_server(serve, tool):
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=2,objective"}, token=TOKEN)
    upload_csv(server)
    return server


def create(server, body):
    r = requests.post(server.api("/sweeps"), json=body, headers=server.headers(), timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def sweep(server, ref):
    r = requests.get(server.api(f"/sweeps/{ref}"), timeout=30)
    r.raise_for_status()
    return r.json()


def last_result(trial):
    """(rung, value) of the trial's highest rung with a metric, or None."""
    found = [(k, v) for k, v in enumerate(trial["results"]) if v is not None]
    return found[-1] if found else None


def steps_text(sw):
    """The page's "512 of 1,024 steps, 50%": the percentage to one decimal, rounded half up as JS does."""
    trained, full = sw["steps_trained"], sw["steps_full"]
    pct = math.floor(1000 * trained / full + 0.5) / 10
    return f"{trained:,} of {full:,} steps, {pct:g}%"


def no_overflow(driver):
    return js(driver, "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];")


def trial_rows(driver):
    """Every row of the trials table as the page shows it, from its cells' data attributes."""
    return js(driver, """
        return [...document.querySelectorAll('#sweep-trials tbody tr')].map((tr) => ({
          trial: Number(tr.dataset.trial), best: tr.classList.contains('best'),
          values: Object.fromEntries([...tr.querySelectorAll('td.col-value')].map(
            (td) => [td.dataset.key, JSON.parse(td.dataset.value)])),
          rung: Number(tr.querySelector('td.col-rung').dataset.value),
          results: [...tr.querySelectorAll('td.col-result')].map((td) => td.dataset.value === '' ? null
            : Number(td.dataset.value)),
          result_text: [...tr.querySelectorAll('td.col-result')].map((td) => td.textContent),
          run: tr.querySelector('td.col-run a').getAttribute('href'),
          run_name: tr.querySelector('td.col-run a').textContent,
          status: tr.querySelector('td.col-status .status').textContent}));""")


def chart_points(driver, key):
    return js(driver, """const c = (window.towerCharts || {})[arguments[0]];
        return c ? {xtype: c.scales.x.type, xmin: c.scales.x.min, xmax: c.scales.x.max,
                    points: c.data.datasets.flatMap((ds, r) => ds.data.map((p) => [p.trial, p.x, p.y, r]))} : null;""",
              key)


def test_sweep_list_and_page_show_the_api(fake_server, browser):
    server = fake_server
    created = create(server, SWEEP)
    sw = helpers.poll("the sweep to finish",
                      lambda: (lambda s: s if s["status"] != "running" else None)(sweep(server, "lrs")), 180)
    assert sw["status"] == "succeeded", sw
    trials = sw["trials"]
    assert len(trials) == 16 and sw["best"] is not None and sw["rung_steps"] == [16, 32, 64], sw
    assert sw["steps_trained"] < sw["steps_full"], sw  # ASHA stopped most trials early
    best = sw["best"]

    d = browser
    viewport(d, 1280, 800)
    d.get(f"{server.url}/#/runs")
    d.find_element(By.ID, "nav-sweeps").click()
    row = wait(d, lambda d: d.find_element(By.ID, f"sweep-row-{created['id']}"), message="the sweep in the list")
    assert "active" in d.find_element(By.ID, "nav-sweeps").get_attribute("class")
    wait(d, lambda d: row.find_element(By.CSS_SELECTOR, ".col-trials").get_attribute("data-value") == "16",
         message="the trials count", detail=lambda d: row.text)
    assert row.get_attribute("data-status") == "succeeded"
    assert row.find_element(By.CSS_SELECTOR, ".col-searcher").text == "ASHA · η 2 · 3 rungs"
    assert row.find_element(By.CSS_SELECTOR, ".col-metric").text.startswith("eval_loss")
    assert row.find_element(By.CSS_SELECTOR, ".col-trials").text == "16 of 16"
    assert float(row.find_element(By.CSS_SELECTOR, ".col-best").get_attribute("data-value")) == last_result(best)[1]
    assert row.find_element(By.CSS_SELECTOR, ".col-steps").text == steps_text(sw)
    page, view = no_overflow(d)
    assert page <= view, f"the sweeps list is wider than the window: {page} > {view}"

    # The sweep's page: one row per trial, as the API has them.
    d.find_element(By.ID, f"sweep-link-{created['id']}").click()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sweep-trials tbody tr")) == 16,
         message="the 16 trials' rows")
    assert d.execute_script("return location.hash") == "#/sweeps/lrs"
    assert d.find_element(By.ID, "sweep-name").text == "lrs"
    assert d.find_element(By.ID, "sweep-status").text == "succeeded"
    assert not d.find_element(By.ID, "sweep-cancel").is_displayed()
    rows = trial_rows(d)
    assert [r["trial"] for r in rows] == [t["trial"] for t in trials]
    for r, t in zip(rows, trials):
        assert r["values"] == t["values"], (r, t)
        assert r["rung"] == t["rung"], (r, t)
        assert r["results"] == t["results"] + [None] * (3 - len(t["results"])), (r, t)
        assert [x != "" for x in r["result_text"]] == [k < len(t["results"]) for k in range(3)], (r, t)
        assert r["run"] == f"#/runs/{t['run']['id']}" and r["run_name"] == t["run"]["name"], (r, t)
        assert r["status"] == t["run"]["status"], (r, t)

    # The best trial: its row alone marked, with the API's values; the box above names it.
    marked = [r for r in rows if r["best"]]
    assert [r["trial"] for r in marked] == [best["trial"]], marked
    assert marked[0]["values"] == best["values"]
    assert d.find_element(By.ID, "sweep-best-text").get_attribute("data-trial") == str(best["trial"])
    assert d.find_element(By.ID, "sweep-best-run").text == best["run"]["name"]

    # The rung ladder: its steps, and the trials that reached and finished each rung.
    for k, steps in enumerate(sw["rung_steps"]):
        tr = d.find_element(By.ID, f"sweep-rung-{k}")
        cells = [tr.find_element(By.CSS_SELECTOR, f".col-{c}").text for c in ("steps", "reached", "finished")]
        want = [steps, sum(t["rung"] >= k for t in trials), sum(len(t["results"]) > k for t in trials)]
        assert [int(c.replace(",", "")) for c in cells] == want, (k, cells, want)
    reached = [sum(t["rung"] >= k for t in trials) for k in range(3)]
    assert reached[0] == 16 and reached[2] < reached[1] < reached[0], reached  # a ladder, not a flat line
    assert d.find_element(By.ID, "sweep-steps").text == steps_text(sw)

    # One chart per searched key: a point per trial with a result, at its value and its latest result, inside
    # the axis; the learning rate (log_uniform) on a log axis, the units (a choice) by position.
    with_result = {t["trial"]: t for t in trials if last_result(t)}
    assert with_result
    for key in (LR, UNITS):
        got = wait(d, lambda d: chart_points(d, key), message=f"the chart of {key}")
        assert sorted(p[0] for p in got["points"]) == sorted(with_result), (key, got)
        for trial, x, y, rung in got["points"]:
            t = with_result[trial]
            value = t["values"][key]
            assert x == (value if key == LR else SWEEP["space"][UNITS].index(value)), (key, trial, x)
            assert (rung, y) == last_result(t), (key, trial, rung, y)
            assert got["xmin"] <= x <= got["xmax"], (key, trial, x, got["xmin"], got["xmax"])  # drawn, not cut off
        assert got["xtype"] == ("logarithmic" if key == LR else "linear"), got["xtype"]
    page, view = no_overflow(d)
    assert page <= view, f"the sweep page is wider than the window: {page} > {view}"
    assert severe(d) == []

    # Export: the best trial's links are the run page's for its run.
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, "#sweep-best a.run-export"), message="the best's exports")
    exports = {a.text: a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "#sweep-best a.run-export")}
    download = d.find_element(By.ID, "sweep-best-checkpoint").get_attribute("href")
    assert set(exports) == {"TensorFlow", "TensorFlow (the seed's names)", "ONNX (EMA)", "ONNX (raw)"}, exports

    # Fine-tune: the submit form opens on the best trial's config, initialised from its run.
    d.find_element(By.ID, "sweep-best-finetune").click()
    wait(d, lambda d: d.execute_script("return location.hash") == "#/submit", message="the submit form")
    tune = json.loads(wait(d, lambda d: d.find_element(By.ID, "submit-config").get_attribute("value"),
                           message="the fine-tune config"))
    assert tune["init_from"] == {"run": best["run"]["id"], "checkpoint": "latest", "weights": "ema"}, tune
    assert tune["name"] == f"{best['run']['name']}-ft", tune
    assert tune["optimizer"]["learning_rate"] == best["values"][LR], tune
    assert tune["model"]["layers"][0]["units"] == best["values"][UNITS], tune

    d.get(f"{server.url}/#/runs/{best['run']['id']}")
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, "a.run-export"), message="the run page's exports")
    assert {a.text: a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "a.run-export")} == exports
    assert d.find_element(By.ID, "run-checkpoint").get_attribute("href") == download

    # A trial's run link opens that run's page.
    other = next(t for t in trials if t["trial"] != best["trial"])
    d.get(f"{server.url}/#/sweeps/lrs")
    wait(d, lambda d: d.find_elements(By.ID, f"sweep-run-link-{other['trial']}"), message="the run links")
    d.find_element(By.ID, f"sweep-run-link-{other['trial']}").click()
    wait(d, lambda d: d.find_element(By.ID, "run-name").text == other["run"]["name"], message="the trial's run page",
         detail=lambda d: d.find_element(By.ID, "run-name").text)
    assert d.execute_script("return location.hash") == f"#/runs/{other['run']['id']}"
    assert severe(d, allowed=("/evaluation",)) == []  # the fake trainer's runs have no evaluation: a 404


def test_cancel_and_resume_a_running_sweep(fake_server, browser):
    server = fake_server
    slow = dict(BASE, steps=200000, eval_every=1000, checkpoint_every=1000)
    create(server, {"name": "slow", "config": slow, "space": {UNITS: [8, 16, 32]},
                    "searcher": {"type": "grid", "max_concurrent": 2}, "metric": "eval_loss"})
    helpers.poll("a trial of the slow sweep to train",
                 lambda: True if any(t["run"]["status"] == "running" and t["run"]["step"] > 0
                                     for t in sweep(server, "slow")["trials"]) else None)
    d = browser
    viewport(d, 1280, 800)
    d.get(f"{server.url}/#/sweeps/slow")
    wait(d, lambda d: d.find_element(By.ID, "sweep-cancel").is_displayed(), message="the Cancel button")
    assert d.find_element(By.ID, "sweep-status").text == "running"
    assert not d.find_element(By.ID, "sweep-resume").is_displayed()

    # Without the token the server refuses, and the page says so.
    d.find_element(By.ID, "sweep-cancel").click()
    wait(d, lambda d: d.find_element(By.ID, "error").is_displayed(), message="the refusal",
         detail=lambda d: d.find_element(By.ID, "sweep-status").text)
    assert "UNAUTHENTICATED" in d.find_element(By.ID, "error-text").text or \
        "token" in d.find_element(By.ID, "error-text").text.lower(), d.find_element(By.ID, "error-text").text
    assert sweep(server, "slow")["status"] == "running"

    # With it, the sweep and its trials' runs are cancelled.
    d.find_element(By.ID, "token").send_keys(TOKEN)
    d.find_element(By.ID, "sweep-cancel").click()
    wait(d, lambda d: d.find_element(By.ID, "sweep-status").text == "cancelled", message="the page to say cancelled")
    assert not d.find_element(By.ID, "error").is_displayed(), d.find_element(By.ID, "error-text").text
    sw = sweep(server, "slow")
    assert sw["status"] == "cancelled", sw
    done = helpers.poll("the trials' runs to stop",
                        lambda: (lambda s: s if all(t["run"]["status"] in ("cancelled", "succeeded", "failed")
                                                    for t in s["trials"]) else None)(sweep(server, "slow")))
    assert any(t["run"]["status"] == "cancelled" for t in done["trials"]), done["trials"]
    wait(d, lambda d: d.find_element(By.ID, "sweep-resume").is_displayed(), message="the Resume button")
    assert not d.find_element(By.ID, "sweep-cancel").is_displayed()

    # Resume: the sweep runs again, its cancelled trials continued.
    d.find_element(By.ID, "sweep-resume").click()
    wait(d, lambda d: d.find_element(By.ID, "sweep-status").text == "running", message="the page to say running")
    assert not d.find_element(By.ID, "error").is_displayed(), d.find_element(By.ID, "error-text").text
    assert sweep(server, "slow")["status"] == "running"
    helpers.poll("a trial to train again", lambda: True if any(
        t["run"]["status"] in ("queued", "running") for t in sweep(server, "slow")["trials"]) else None)
    assert severe(d, allowed=("401", "403")) == []
