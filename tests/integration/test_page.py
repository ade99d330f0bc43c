"""The status page (static/) in headless Chromium against a real `tower serve`: upload Fashion-MNIST through
the upload form, see its sample images drawn, submit a run through the submit form, watch its charts grow
from the SSE-driven metrics, cancel it, find it in the runs table; and, with Chart.js blocked, the same
metrics as a table. Two short real runs compared (overlaid curves, the differing hparams, final metrics), the
runs table sorted and filtered, a cancelled run resumed and a run cloned and fine-tuned from the run page. No console errors beyond the ones a case provokes on purpose. Screenshots go to
$TOWER_ARTIFACTS (default build/test-artifacts/).

Needs Debian's chromium and chromium-driver and the selenium package (scripts/install-deps.sh --test)."""
import json
import os
import pathlib
import shutil
import time

import pytest
import requests

from conftest import FASHION, ROOT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = pathlib.Path(os.environ.get("TOWER_ARTIFACTS", ROOT / "build" / "test-artifacts"))
TOKEN = "page-test-token"
IDX = {"images": "train-images-idx3-ubyte.gz", "labels": "train-labels-idx1-ubyte.gz",
       "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}

pytestmark = pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                                reason="needs chromium and chromium-driver (scripts/install-deps.sh --test)")


@pytest.fixture
def browser():
    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100",
                "--disable-gpu"):
        opts.add_argument(arg)
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def wait(driver, what, timeout=30, message="", detail=None):
    """WebDriverWait(driver).until(what); on a timeout the message names what did not happen, and
    detail(driver), if given, adds what the page shows then."""
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(what)
    except TimeoutException:
        extra = ""
        if detail:
            try:
                extra = f" (page: {detail(driver)!r})"
            except WebDriverException as e:
                extra = f" (page: {e.msg})"
        raise TimeoutException(f"timed out after {timeout} s waiting for {message}{extra}") from None


def severe(driver, allowed=()):
    """SEVERE console entries since the last call, less those containing one of `allowed`."""
    return [e for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def poll_api(url, ok, timeout, what, **kw):
    """GETs url until ok(json) holds; returns that JSON."""
    deadline = time.monotonic() + timeout
    while True:
        reply = requests.get(url, timeout=10, **kw)
        reply.raise_for_status()
        body = reply.json()
        if ok(body):
            return body
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {body}"
        time.sleep(0.25)


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def chart_points(driver, chart, series=0):
    return js(driver, "const c = (window.towerCharts || {})[arguments[0]];"
                      "return c ? c.data.datasets[arguments[1]].data.length : 0;", chart, series)


def navigate(driver, nav, element):
    """Clicks the header link `nav` and waits for the view's element `element` (routing is on hashchange)."""
    driver.find_element(By.ID, nav).click()
    return wait(driver, lambda d: d.find_element(By.ID, element), message=f"{element} after clicking {nav}")


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(ARTIFACTS / name)), f"could not save {ARTIFACTS / name}"


def non_blank_pixels(driver, canvas_id):
    """Pixels of the canvas that are drawn (opaque) and not black."""
    return js(driver, """
        const c = document.getElementById(arguments[0]);
        if (!c || !c.width || !c.height) return 0;
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 3] && (d[i] || d[i + 1] || d[i + 2])) n++;
        return n;""", canvas_id)


def upload_fashion(server):
    """Uploads Fashion-MNIST over the API as "fashion-mnist" and waits for it to be ready; returns its id."""
    files = {field: (name, open(FASHION / name, "rb")) for field, name in IDX.items()}
    try:
        reply = requests.post(server.api("/datasets?name=fashion-mnist"), files=files, headers=server.headers(),
                              timeout=300)
    finally:
        for _, f in files.values():
            f.close()
    assert reply.status_code == 202, reply.text
    dataset_id = reply.json()["id"]
    dataset = poll_api(server.api(f"/datasets/{dataset_id}"), lambda b: b["status"] != "converting", 300,
                       "the conversion")
    assert dataset["status"] == "ready", dataset
    return dataset_id


def test_upload_submit_and_live_charts(serve, browser):
    server = serve(token=TOKEN)
    d = browser
    d.get(server.url + "/")
    wait(d, lambda d: d.find_element(By.ID, "runs-empty").is_displayed(), message="empty runs table")
    assert "Tower" in d.title
    assert js(d, "return window.towerPage.chartjs") is True, "Chart.js was not loaded from /static/chart.js"
    assert severe(d) == []

    # Without the token a mutating request fails and the page shows the error envelope's message.
    status = navigate(d, "nav-submit", "submit-status")
    d.find_element(By.ID, "submit-run").click()
    wait(d, lambda d: "error" in status.get_attribute("class") and "UNAUTHENTICATED" in status.text,
         message="the 401 envelope shown on the submit form")
    assert [e for e in severe(d) if "401" not in e["message"]] == []  # only the refused request itself

    d.find_element(By.ID, "token").send_keys(TOKEN)
    assert js(d, "return localStorage.getItem('tower.token')") == TOKEN

    # Upload Fashion-MNIST through the form.
    navigate(d, "nav-upload", "upload-name").send_keys("fashion-mnist")
    for field, name in IDX.items():
        d.find_element(By.ID, "upload-idx-" + field.replace("_", "-")).send_keys(str(FASHION / name))
    d.find_element(By.ID, "upload-submit").click()
    wait(d, lambda d: d.execute_script("return location.hash").startswith("#/datasets/d"), timeout=120,
         message="the upload to finish and the page to open the dataset",
         detail=lambda d: d.find_element(By.ID, "upload-status").text)
    dataset_id = js(d, "return location.hash").split("/")[-1]
    dataset = poll_api(server.api(f"/datasets/{dataset_id}"), lambda b: b["status"] != "converting", 300,
                       "the conversion")
    assert dataset["status"] == "ready", dataset
    assert (dataset["train_examples"], dataset["test_examples"]) == (60000, 10000)

    # The dataset page: counts, the label histogram and the sample grid on a canvas.
    wait(d, lambda d: non_blank_pixels(d, "dataset-samples") > 2000, timeout=30,
         message="the sample images drawn on the canvas")
    row = d.find_element(By.ID, f"dataset-row-{dataset_id}")
    assert "60,000" in row.text and "10,000" in row.text, row.text
    hist = d.find_element(By.ID, "dataset-histogram")
    assert len(hist.find_elements(By.CSS_SELECTOR, "tbody tr")) == 10
    assert "6,000" in hist.text and "1,000" in hist.text
    screenshot(d, "page-dataset.png")

    # Submit a run through the form: the seed config, made long enough to be watched and then cancelled.
    navigate(d, "nav-submit", "submit-dataset")
    wait(d, lambda d: d.find_element(By.ID, "submit-dataset").get_attribute("value") == dataset_id,
         message="the dataset dropdown to select the uploaded dataset")
    text = d.find_element(By.ID, "submit-config")
    config = json.loads(text.get_attribute("value"))
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    assert config == {**seed, "name": "seed-mlp", "dataset": "fashion-mnist"}, "the prefill drifted from the seed"
    config.update(steps=200000, summary_every=100, eval_every=1000, checkpoint_every=1000)
    js(d, "arguments[0].value = arguments[1];"
          "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", text, json.dumps(config, indent=2))
    d.find_element(By.ID, "submit-run").click()
    wait(d, lambda d: d.execute_script("return location.hash").startswith("#/runs/r"), timeout=30,
         message="the page to open the new run", detail=lambda d: d.find_element(By.ID, "submit-status").text)
    run_id = js(d, "return location.hash").split("/")[-1]

    # The run page: charts fed by SSE + metrics grow while it trains.
    wait(d, lambda d: chart_points(d, "loss") > 0, timeout=120, message="loss points on the chart")
    first = chart_points(d, "loss")
    wait(d, lambda d: chart_points(d, "loss") > first, timeout=60, message=f"more than {first} loss points")
    wait(d, lambda d: chart_points(d, "accuracy", 0) > 0 and chart_points(d, "accuracy", 1) > 0, timeout=60,
         message="eval accuracy points, raw and EMA")
    for chart in ("lr", "throughput"):
        assert chart_points(d, chart) > 0, chart
    assert d.find_element(By.ID, "run-status").text.startswith("running")
    assert "tensorboard --logdir" in d.find_element(By.ID, "run-tensorboard").text
    assert json.loads(d.find_element(By.ID, "run-config").text)["steps"] == 200000
    wait(d, lambda d: d.find_element(By.ID, "run-log").text.strip() not in ("", "(empty)"), timeout=30,
         message="the log tail")
    screenshot(d, "page.png")

    # Cancel from the run page; a cancelled run keeps its checkpoint, which the page links to.
    d.find_element(By.ID, "run-cancel").click()
    wait(d, lambda d: d.find_element(By.ID, "run-status").text.startswith("cancelled"), timeout=60,
         message="the run to show as cancelled")
    wait(d, lambda d: d.find_elements(By.ID, "run-checkpoint"), timeout=30, message="the checkpoint link")
    href = d.find_element(By.ID, "run-checkpoint").get_attribute("href")
    assert href.endswith(f"/api/v1/runs/{run_id}/checkpoints/latest")
    ckpt = requests.get(href, timeout=30)
    assert ckpt.status_code == 200 and len(ckpt.content) > 8
    exports = {a.text: a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "a.run-export")}
    assert set(exports) == {"TensorFlow", "TensorFlow (the seed's names)", "ONNX (EMA)", "ONNX (raw)"}, exports  # test_export.py checks the bytes
    tar = requests.get(exports["TensorFlow"], timeout=60)
    assert tar.status_code == 200 and tar.content[257:262] == b"ustar", tar.text[:200]
    seed = requests.get(exports["TensorFlow (the seed's names)"], timeout=60)  # test_export_seed.py restores it
    assert seed.status_code == 200 and seed.content[257:262] == b"ustar" and seed.content != tar.content

    # The runs table lists it with its dataset, devices and progress.
    navigate(d, "nav-runs", "runs-table")
    row = wait(d, lambda d: d.find_element(By.ID, f"run-row-{run_id}"), message="the run in the runs table")
    wait(d, lambda d: row.get_attribute("data-status") == "cancelled", message="the row's status")
    assert "seed-mlp" in row.text and "fashion-mnist" in row.text, row.text
    devices = row.find_element(By.CSS_SELECTOR, ".col-devices").text
    assert devices and devices != "—", row.text
    progress = row.find_element(By.CSS_SELECTOR, ".col-progress .progress")
    assert 0 < float(progress.get_attribute("aria-valuenow")) < 100, progress.text
    screenshot(d, "page-runs.png")
    assert severe(d) == []


def test_without_chartjs_metrics_are_a_table(serve, browser):
    server = serve()
    dataset_id = upload_fashion(server)
    config = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    config.update(dataset=dataset_id, name="no-charts", steps=2000, summary_every=100, eval_every=1000,
                  checkpoint_every=1000)
    reply = requests.post(server.api("/runs"), json=config, timeout=30)
    assert reply.status_code == 201, reply.text
    run_id = reply.json()["id"]
    run = poll_api(server.api(f"/runs/{run_id}"), lambda b: b["status"] not in ("queued", "running"), 300,
                   "the run to finish")
    assert run["status"] == "succeeded", run

    d = browser
    d.execute_cdp_cmd("Network.enable", {})
    d.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/static/chart.js"]})
    d.get(f"{server.url}/#/runs/{run_id}")
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#metrics-table tbody tr")) >= 20, timeout=30,
         message="the metrics table with one row per summary step")
    assert js(d, "return typeof window.Chart") == "undefined"
    assert js(d, "return window.towerPage.chartjs") is False
    assert d.find_elements(By.CSS_SELECTOR, "#charts canvas") == []
    first = d.find_element(By.CSS_SELECTOR, "#metrics-table tbody tr").text.split()
    assert first[0] == "2,000" and float(first[1]) > 0, first  # newest first: step, loss, ...
    assert "Chart.js is not available" in d.find_element(By.ID, "metrics-note").text
    screenshot(d, "page-nochart.png")
    navigate(d, "nav-runs", "runs-table")
    wait(d, lambda d: d.find_elements(By.ID, f"run-row-{run_id}"), message="the runs table without Chart.js")
    # The blocked request is the only error.
    assert severe(d, allowed=("static/chart.js",)) == []


EVIL_PAGE = """<!doctype html><title>evil</title>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="cancel" method="post" target="sink1" enctype="text/plain" action="%(api)s/runs/%(run)s/cancel">
  <input name="x" value="y"></form>
<form id="upload" method="post" target="sink2" enctype="multipart/form-data"
      action="%(api)s/datasets?name=evil&amp;label_column=label">
  <input type="hidden" name="x" value="y"></form>
<script>
(async () => {
  const tries = [
    fetch('%(api)s/runs', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
                           body: %(config)s}),
    fetch('%(api)s/runs/%(run)s/cancel', {method: 'POST', mode: 'no-cors'}),
    fetch('%(api)s/datasets/%(dataset)s', {method: 'DELETE', mode: 'cors'}),
    navigator.sendBeacon('%(api)s/runs', new Blob([%(config)s], {type: 'text/plain'})),
  ];
  await Promise.allSettled(tries);
  document.getElementById('cancel').submit();
  document.getElementById('upload').submit();
  window.evilDone = true;
})();
</script>"""


def test_foreign_page_cannot_act_and_own_page_can_without_token(serve, browser, tool, tmp_path):
    """In a real browser: a page on another origin (another port of 127.0.0.1) sends every
    "simple" request shape a browser allows without a preflight (text/plain fetch, sendBeacon, form posts
    as text/plain and multipart) plus a DELETE; none acts. Then the status page itself, on the server's own
    origin and with no token configured, cancels the run."""
    import http.server
    import threading
    server = serve("--trainer", tool("tw_faketrain"), env={"TW_FAKE": "step_ms=50"})
    csv = "a,b,label\n" + "".join(f"{i % 5}.5,{i % 3}.5,{i % 2}\n" for i in range(20))
    reply = requests.post(server.api("/datasets?name=tab&label_column=label"), data=csv,
                          headers={"Content-Type": "text/csv"}, timeout=30)
    assert reply.status_code in (201, 202), reply.text
    dataset = poll_api(server.api(f"/datasets/{reply.json()['id']}"), lambda b: b["status"] != "converting", 60,
                       "the CSV conversion")
    config = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    config.update(dataset="tab", steps=1000000)
    run = requests.post(server.api("/runs"), json=config, timeout=30).json()
    poll_api(server.api(f"/runs/{run['id']}"), lambda b: b["status"] == "running", 60, "the run to start")
    (tmp_path / "evil.html").write_text(EVIL_PAGE % {
        "api": server.api(""), "run": run["id"], "dataset": dataset["id"],
        "config": json.dumps(json.dumps({**config, "steps": 5}))})
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        d = browser
        d.get(f"http://127.0.0.1:{evil.server_address[1]}/evil.html")
        wait(d, lambda d: js(d, "return window.evilDone === true"), message="the foreign page's requests")
        # each form post lands in its own frame, which turns cross-origin once the answer has come
        for frame in ("sink1", "sink2"):
            wait(d, lambda d: js(d, f"try {{ return frames.{frame}.location.href; }} catch (e) {{ return 'x'; }}")
                 == "x", message=f"the answer of the form post in {frame}")
    finally:
        evil.shutdown()
    runs = requests.get(server.api("/runs"), timeout=10).json()
    assert runs["total"] == 1 and runs["runs"][0]["status"] == "running", runs
    datasets = requests.get(server.api("/datasets"), timeout=10).json()["datasets"]
    assert [x["name"] for x in datasets] == ["tab"]

    # Our own page acts, with no token configured.
    d.get(f"{server.url}/#/runs/{run['id']}")
    wait(d, lambda d: d.find_element(By.ID, "run-status").text.startswith("running"), message="the run page")
    d.find_element(By.ID, "run-cancel").click()
    wait(d, lambda d: d.find_element(By.ID, "run-status").text.startswith("cancelled"), timeout=60,
         message="the run to show as cancelled")
    assert requests.get(server.api(f"/runs/{run['id']}"), timeout=10).json()["status"] == "cancelled"


def chart_datasets(driver, chart):
    """[(label, number of points)] of each dataset of window.towerCharts[chart]."""
    return js(driver, "const c = (window.towerCharts || {})[arguments[0]];"
                      "return c ? c.data.datasets.map((s) => [s.label, s.data.length]) : [];", chart)


def column_texts(driver, table_id, col):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr td.col-{col}")]


def submit_run(server, config):
    reply = requests.post(server.api("/runs"), json=config, headers=server.headers(), timeout=30)
    assert reply.status_code == 201, reply.text
    return reply.json()["id"]


def test_tensorboard_url_must_be_http(run_tower, tmp_path):
    result = run_tower("serve", "--data", tmp_path / "data", "--no-demo", "--tensorboard-url", "tb.example:6006")
    assert result.returncode == 2 and "--tensorboard-url needs an http://" in result.stderr, result.stderr


def test_compare_sort_filter_resume_and_finetune(serve, browser):
    tb_url = "http://tensorboard.example:6006/"
    server = serve("--tensorboard-url", tb_url, token=TOKEN)
    dataset_id = upload_fashion(server)
    seed = json.loads((ROOT / "examples" / "seed_mlp.json").read_text())
    short = dict(seed, dataset=dataset_id, steps=300, summary_every=50, eval_every=100, checkpoint_every=100)
    small = submit_run(server, dict(short, name="lr-small", optimizer={"type": "sgd", "learning_rate": 0.001}))
    big = submit_run(server, dict(short, name="lr-big", optimizer={"type": "sgd", "learning_rate": 0.01}))
    long = submit_run(server, dict(short, name="long", steps=1000000, optimizer={"type": "sgd", "learning_rate": 0.005}))
    for run_id in (small, big):
        run = poll_api(server.api(f"/runs/{run_id}"), lambda b: b["status"] not in ("queued", "running"), 300,
                       "the short run to finish")
        assert run["status"] == "succeeded", run
    poll_api(server.api(f"/runs/{long}"), lambda b: b["status"] == "running", 120, "the long run to start")
    reply = requests.post(server.api(f"/runs/{long}/cancel"), headers=server.headers(), timeout=30)
    assert reply.status_code == 202, reply.text
    poll_api(server.api(f"/runs/{long}"), lambda b: b["status"] == "cancelled", 120, "the long run to stop")

    d = browser
    d.get(server.url + "/")
    js(d, "localStorage.setItem('tower.token', arguments[0]);", TOKEN)
    d.refresh()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 3, message="three runs listed")

    # The runs table: hparam columns (from each run's config: the list leaves it out, the page asks each run
    # once), sorting by learning rate both ways, the filter box.
    assert "config" not in requests.get(server.api("/runs"), timeout=10).json()["runs"][0]
    row = d.find_element(By.ID, f"run-row-{small}")
    wait(d, lambda d: row.find_element(By.CSS_SELECTOR, ".col-optimizer").text == "sgd", message="the run's config")
    assert row.find_element(By.CSS_SELECTOR, ".col-batch").text == "32"
    assert row.find_element(By.CSS_SELECTOR, ".col-created").text not in ("", "—")
    d.find_element(By.ID, "runs-sort-lr").click()
    wait(d, lambda d: column_texts(d, "runs-table", "lr") == ["0.001000", "0.005000", "0.010000"],
         message="the runs sorted by learning rate", detail=lambda d: column_texts(d, "runs-table", "lr"))
    d.find_element(By.ID, "runs-sort-lr").click()
    wait(d, lambda d: column_texts(d, "runs-table", "lr") == ["0.010000", "0.005000", "0.001000"],
         message="the runs sorted by learning rate, descending")
    search = d.find_element(By.ID, "runs-search")
    search.send_keys("cancelled")
    wait(d, lambda d: [e.get_attribute("id") for e in d.find_elements(By.CSS_SELECTOR, "#runs-body tr")]
         == [f"run-row-{long}"], message="the filter by status")
    search.clear()
    search.send_keys("lr-")
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 2, message="the filter by name")
    screenshot(d, "page-runs-sorted.png")

    # Compare the two short runs: one dataset per run on each chart, the differing hparam, final metrics.
    d.find_element(By.ID, f"pick-{small}").click()
    d.find_element(By.ID, f"pick-{big}").click()
    d.find_element(By.ID, "runs-compare").click()
    wait(d, lambda d: js(d, "return location.hash").startswith("#/compare/"), message="the compare view")
    for chart in ("loss", "accuracy", "accuracy_ema", "eval_loss"):
        wait(d, lambda d: sorted(label for label, n in chart_datasets(d, chart) if n > 0) == ["lr-big", "lr-small"],
             message=f"both runs on the {chart} chart", detail=lambda d: chart_datasets(d, chart))
    assert d.find_element(By.ID, "compare-differs").is_selected()
    headers = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#compare-table thead th")]
    assert "learning rate" in headers and "optimizer" not in headers and "batch" not in headers, headers
    assert sorted(column_texts(d, "compare-table", "learning_rate")) == ["0.001", "0.01"]
    for acc in column_texts(d, "compare-table", "final_accuracy_ema"):
        acc = acc.removesuffix(" ★")  # the best of the compared runs is marked
        assert acc.endswith("%") and 10 < float(acc[:-1]) <= 100, acc
    for loss in column_texts(d, "compare-table", "final_loss"):
        assert float(loss.removesuffix(" ★")) > 0, loss
    d.find_element(By.ID, "compare-sort-learning_rate").click()
    assert column_texts(d, "compare-table", "name") == ["lr-small", "lr-big"]
    d.find_element(By.ID, "compare-sort-learning_rate").click()
    assert column_texts(d, "compare-table", "name") == ["lr-big", "lr-small"]
    screenshot(d, "page-compare.png")
    d.find_element(By.ID, "compare-differs").click()
    headers = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#compare-table thead th")]
    assert "optimizer" in headers and "batch" in headers, headers

    # The run page: eval loss charted, the accuracy axis fitted to the data, TensorBoard as a link.
    d.get(f"{server.url}/#/runs/{small}")
    wait(d, lambda d: chart_points(d, "eval_loss", 0) > 0 and chart_points(d, "eval_loss", 1) > 0,
         message="eval loss, raw and EMA, on the run page")
    wait(d, lambda d: chart_points(d, "accuracy", 1) > 0, message="eval accuracy points")
    assert js(d, "return window.towerCharts.accuracy.scales.y.min") > 0, "the accuracy axis starts at 0"
    link = d.find_element(By.ID, "run-tensorboard-link")
    assert link.get_attribute("href") == tb_url
    screenshot(d, "page-run-finished.png")

    # Clone and fine-tune open the submit form prefilled.
    d.find_element(By.ID, "run-clone").click()
    wait(d, lambda d: d.find_elements(By.ID, "submit-config"), message="the submit form")
    clone = json.loads(d.find_element(By.ID, "submit-config").get_attribute("value"))
    assert clone["name"] == "lr-small-clone" and clone["optimizer"]["learning_rate"] == 0.001, clone
    assert "init_from" not in clone
    d.get(f"{server.url}/#/runs/{small}")
    wait(d, lambda d: d.find_element(By.ID, "run-finetune").is_displayed(), message="the fine-tune button")
    d.find_element(By.ID, "run-finetune").click()
    wait(d, lambda d: d.find_elements(By.ID, "submit-config"), message="the submit form")
    tune = json.loads(d.find_element(By.ID, "submit-config").get_attribute("value"))
    assert tune["init_from"] == {"run": small, "checkpoint": "latest", "weights": "ema"}, tune
    d.find_element(By.ID, "submit-run").click()
    wait(d, lambda d: js(d, "return location.hash").startswith("#/runs/r"), timeout=30,
         message="the fine-tune run submitted", detail=lambda d: d.find_element(By.ID, "submit-status").text)

    # Resume the cancelled run from its page: it runs again.
    d.get(f"{server.url}/#/runs/{long}")
    wait(d, lambda d: d.find_element(By.ID, "run-resume").is_displayed(), message="the resume button")
    d.find_element(By.ID, "run-resume").click()
    wait(d, lambda d: d.find_element(By.ID, "run-status").text.startswith("running"), timeout=120,
         message="the resumed run running", detail=lambda d: d.find_element(By.ID, "run-status").text)
    assert requests.get(server.api(f"/runs/{long}"), timeout=10).json()["status"] in ("running", "succeeded")
    screenshot(d, "page-run-resumed.png")
    assert severe(d) == []
