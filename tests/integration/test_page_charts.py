"""The run page's charts in headless Chromium against a real `tower serve`: the hover readout lists every
series' value at the step under the cursor (equal to GET /runs/{id}/metrics there), the step-0 toggle rescales
the y axis to the data, TensorBoard's debiased smoothing, the log scale, zoom by a drag on x and reset by a
double-click, and the picker listing every series of the run.

Needs Debian's chromium and chromium-driver and the selenium package (scripts/install-deps.sh --test)."""
import json

import pytest
import requests

from conftest import ROOT
from test_page import browser, chart_points, js, poll_api, submit_run, wait  # noqa: F401 (browser is a fixture)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402


def tb_smooth(values, w):
    """TensorBoard's debiased exponential moving average."""
    last, out = 0.0, []
    for n, y in enumerate(values, 1):
        last = last * w + (1 - w) * y
        out.append(last / (1 - w ** n))
    return out


def chart_state(driver, key):
    return js(driver, """const c = window.towerCharts[arguments[0]];
        return {ymin: c.scales.y.min, xmax: c.scales.x.max, ytype: c.scales.y.type,
                data: c.data.datasets.map((s) => s.data.map((p) => [p.x, p.y]))};""", key)


def test_hover_smoothing_scale_zoom_and_picker(serve, browser):
    server = serve(demo=True)
    demo = poll_api(server.api("/runs/seed-mlp"), lambda b: b.get("dataset") is not None, 60, "the demo run")
    requests.post(server.api(f"/runs/{demo['id']}/cancel"), timeout=30)
    poll_api(server.api("/datasets/fashion-mnist"), lambda b: b["status"] != "converting", 300, "the conversion")
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    run_id = submit_run(server, dict(seed, dataset="fashion-mnist", name="charts", steps=60, summary_every=10,
                                     eval_every=20, checkpoint_every=60))
    run = poll_api(server.api(f"/runs/{run_id}"), lambda b: b["status"] not in ("queued", "running"), 300,
                   "the run to finish")
    assert run["status"] == "succeeded", run
    scalars = requests.get(server.api(f"/runs/{run_id}/metrics"), timeout=10).json()["scalars"]
    d = browser
    d.get(f"{server.url}/#/runs/{run_id}")
    wait(d, lambda d: chart_points(d, "accuracy", 0) == len(scalars["eval/accuracy"]), message="the accuracy chart")

    # Hover: the readout names the step under the cursor and every series' value there, as the API has them.
    canvas = d.find_element(By.ID, "chart-accuracy")
    ActionChains(d).move_to_element_with_offset(canvas, canvas.size["width"] // 4, 0).perform()
    readout = d.find_element(By.ID, "chart-accuracy-readout")
    wait(d, lambda d: readout.get_attribute("data-step"), message="the hover readout")
    step = int(readout.get_attribute("data-step"))
    rows = readout.find_elements(By.CSS_SELECTOR, ".readout-row")
    assert [r.text.split(":")[0] for r in rows] == ["raw", "EMA"]
    for row, tag in zip(rows, ("eval/accuracy", "eval/accuracy_ema")):
        expected = next(v for s, v, _ in scalars[tag] if s == step)
        assert float(row.get_attribute("data-value")) == pytest.approx(expected, rel=1e-6), (tag, step)

    # Step 0 (the untrained 10%) excluded on request: the y axis is then scaled to the trained values.
    first = scalars["eval/accuracy"][0]
    assert first[0] == 0 and chart_state(d, "accuracy")["ymin"] <= first[1]
    d.find_element(By.ID, "chart-skip0").click()
    wait(d, lambda d: chart_state(d, "accuracy")["ymin"] > first[1], message="the y axis without step 0",
         detail=lambda d: chart_state(d, "accuracy"))
    d.find_element(By.ID, "chart-skip0").click()

    # Smoothing 0.6: the drawn loss is TensorBoard's debiased EMA of the run's loss.
    js(d, """const s = document.getElementById('chart-smoothing'); s.value = '0.6';
             s.dispatchEvent(new Event('input'));""")
    drawn = [y for _, y in chart_state(d, "loss")["data"][0]]
    assert drawn == pytest.approx(tb_smooth([v for _, v, _ in scalars["loss"]], 0.6), rel=1e-6)
    js(d, """const s = document.getElementById('chart-smoothing'); s.value = '0';
             s.dispatchEvent(new Event('input'));""")

    d.find_element(By.ID, "chart-log").click()
    wait(d, lambda d: chart_state(d, "loss")["ytype"] == "logarithmic", message="the log scale")
    d.find_element(By.ID, "chart-log").click()

    # Zoom: a drag across the middle half of the loss chart narrows x; a double-click restores it.
    canvas = d.find_element(By.ID, "chart-loss")
    full = chart_state(d, "loss")["xmax"]
    ActionChains(d).move_to_element_with_offset(canvas, -canvas.size["width"] // 4, 0).click_and_hold() \
        .move_by_offset(canvas.size["width"] // 3, 0).release().perform()
    wait(d, lambda d: chart_state(d, "loss")["xmax"] < full, message="the zoom",
         detail=lambda d: chart_state(d, "loss"))
    ActionChains(d).double_click(canvas).perform()
    wait(d, lambda d: chart_state(d, "loss")["xmax"] == full, message="the zoom reset")

    # The picker lists every series of the run (per-class ones too).
    picker = Select(d.find_element(By.ID, "chart-picker"))
    wait(d, lambda d: len(picker.options) == len(scalars) + 1, message="every series in the picker")

    # Picking a per-class series adds its chart, drawn with the run's values of that tag (the metrics reload
    # that fills it also updates the loss chart just zoomed and reset: Chart.js replays that chart's last event).
    tag = next(t for t in sorted(scalars) if "recall" in t)
    picker.select_by_value(tag)
    key = f"tag-{tag}"
    wait(d, lambda d: js(d, "return !!(window.towerCharts[arguments[0]]);", key), message="the picked chart")
    wait(d, lambda d: chart_state(d, key)["data"][0] == [[s, v] for s, v, _ in scalars[tag]],
         message=f"the picked chart's points ({tag})", detail=lambda d: chart_state(d, key))
