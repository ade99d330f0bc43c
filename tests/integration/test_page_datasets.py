"""The status page's dataset view shows the class names and how the test split was made, the label
histogram names each class, and the run page warns when the run's dataset has no test split (headless
Chromium against a real `tower serve`; needs what tests/integration/test_page.py needs)."""
import numpy as np
import pytest
import requests

pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from test_page import browser, pytestmark, severe, wait  # noqa: E402,F401  (fixtures and the skip mark)
from test_server import wait_dataset  # noqa: E402


def upload_npy(server, tmp_path, name, **values):
    rng = np.random.default_rng(1)
    x = rng.random((60, 3), dtype=np.float32)
    y = (np.arange(60) % 4).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    with open(tmp_path / "x.npy", "rb") as fx, open(tmp_path / "y.npy", "rb") as fy:
        r = requests.post(server.api(f"/datasets?name={name}"), files={"features": fx, "labels": fy},
                          data=values, timeout=60)
    assert r.status_code == 202, r.text
    return wait_dataset(server, r.json()["id"])


def text_of(driver, element_id):
    return driver.find_element(By.ID, element_id).text


def test_dataset_view_shows_class_names_and_split(serve, browser, tmp_path):  # noqa: F811
    server = serve()
    d = upload_npy(server, tmp_path, "pets", validation_split="0.25", split_seed="5",
                   class_names='["cat", "dog", "bird", "fish"]')
    assert d["status"] == "ready", d
    browser.get(f"{server.url}/#/datasets/{d['id']}")
    wait(browser, lambda b: "held out" in text_of(b, "dataset-split"), message="the split fact")
    assert text_of(browser, "dataset-split") == "25.00% held out, seed 5, stratified by class"
    assert text_of(browser, "dataset-classes") == "cat, dog, bird, fish"
    wait(browser, lambda b: b.find_elements(By.ID, "dataset-histogram"), message="the histogram")
    labels = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#dataset-histogram tbody td:first-child")]
    assert labels == ["0 · cat", "1 · dog", "2 · bird", "3 · fish"]
    assert severe(browser) == []


def test_run_page_warns_without_a_test_split(serve, browser, tmp_path):  # noqa: F811
    server = serve()
    d = upload_npy(server, tmp_path, "plain")
    browser.get(f"{server.url}/#/datasets/{d['id']}")
    wait(browser, lambda b: b.find_elements(By.ID, "dataset-split"), message="the split fact")
    assert text_of(browser, "dataset-split").startswith("none: runs on this dataset are never evaluated")
    cfg = {"dataset": "plain", "model": {"layers": [{"type": "dense", "units": 4}]}, "batch_size": 8, "steps": 2,
           "summary_every": 1, "eval_every": 1, "checkpoint_every": 2}
    r = requests.post(server.api("/runs"), json=cfg, timeout=30)
    assert r.status_code == 201, r.text
    browser.get(f"{server.url}/#/runs/{r.json()['id']}")

    def warned(b):  # the run page redraws as the run moves on: a warning read mid-redraw is read again
        try:
            return "has no test split: this run is never evaluated" in text_of(b, "run-warnings")
        except (NoSuchElementException, StaleElementReferenceException):
            return False
    wait(browser, warned, message="the run's warning")
    assert severe(browser) == []


def test_upload_page_takes_a_seed_tfrecord_with_its_last_examples_held_out(serve, browser, tmp_path):  # noqa: F811
    """The seed converter's records (size, label, image_raw: no height or width) uploaded through the page's
    form with "test: the last N": the dataset view says which examples were held out and how the shape was
    found."""
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "output.tfrecord"
    rng = np.random.default_rng(2)
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(200):
            feature = {"size": tf.train.Feature(int64_list=tf.train.Int64List(value=[784])),
                       "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
                       "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(
                           value=[rng.integers(0, 256, 784, dtype=np.uint8).tobytes()]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    server = serve()
    browser.get(f"{server.url}/#/upload")
    wait(browser, lambda b: b.find_elements(By.ID, "upload-form"), message="the upload form")
    browser.find_element(By.ID, "upload-name").send_keys("seed")
    browser.find_element(By.CSS_SELECTOR, "#upload-kind option[value=tfrecord]").click()
    browser.find_element(By.ID, "upload-tfrecord-tfrecord").send_keys(str(path))
    browser.find_element(By.ID, "upload-tfrecord-test-last").send_keys("50")
    browser.find_element(By.ID, "upload-submit").click()
    wait(browser, lambda b: "#/datasets/" in b.current_url, message="the uploaded dataset's page")
    dataset_id = browser.current_url.rsplit("/", 1)[1]
    assert wait_dataset(server, dataset_id)["status"] == "ready"
    browser.refresh()
    wait(browser, lambda b: "examples" in text_of(b, "dataset-split"), message="the split fact")
    assert text_of(browser, "dataset-split") == "the last 50 examples"
    assert text_of(browser, "dataset-shape") == ("28 × 28 × 1 uint8 (the feature size: 784 = 28 x 28, a square "
                                                 "image of one channel)")
    assert severe(browser) == []
