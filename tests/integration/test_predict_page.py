"""The run page's "classify an image" box in headless Chromium against a real `tower serve`: choose a
PNG of one of the dataset's test images, see the top 5 with bars, the first the class NumPy computes from the
run's checkpoint (read with the `safetensors` package); an image of the wrong size shows the server's message.
Screenshots go to $TOWER_ARTIFACTS (default build/test-artifacts/).

Needs Debian's chromium and chromium-driver and the selenium package (scripts/install-deps.sh --test)."""
import numpy as np
import pytest

from test_page import browser, screenshot, severe, wait  # noqa: F401  (browser is a fixture)
from test_predict import numpy_logits, png, trained  # noqa: F401  (trained is a fixture)

from selenium.webdriver.common.by import By  # noqa: E402  (test_page skips without selenium)


def test_classify_one_image_shows_the_top_5(trained, browser, tmp_path):  # noqa: F811
    server, run_id, images, path = trained
    image = tmp_path / "sample.png"
    image.write_bytes(png(images[42]))
    want = int(np.argmax(numpy_logits(path, images[42].reshape(1, -1) / 255.0)[0]))
    d = browser
    d.get(f"{server.url}/#/runs/{run_id}")
    wait(d, lambda d: d.find_element(By.ID, "classify-file"), message="the classify box")
    d.find_element(By.ID, "classify-file").send_keys(str(image))
    rows = wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, "#classify-result .classify-row") or None,
                message="the top 5", detail=lambda d: d.find_element(By.ID, "classify-result").text)
    assert len(rows) == 5
    assert rows[0].find_element(By.CLASS_NAME, "classify-label").text == f"class {want}"
    widths = [r.find_element(By.CSS_SELECTOR, ".classify-bar .bar").size["width"] for r in rows]
    assert widths[0] > 0 and widths == sorted(widths, reverse=True)
    assert d.find_element(By.ID, "classify-preview").is_displayed()
    d.execute_script("document.getElementById('classify').scrollIntoView()")
    screenshot(d, "predict_classify.png")

    wrong = tmp_path / "wrong.png"
    wrong.write_bytes(png(np.zeros((40, 40), np.uint8)))
    d.find_element(By.ID, "classify-file").send_keys(str(wrong))
    msg = wait(d, lambda d: d.find_elements(By.ID, "classify-error") or None, message="the error")[0].text
    assert "40x40" in msg and "28x28" in msg
    assert not severe(d, allowed=("/predict?top_k=5 - Failed to load resource: the server responded with a status of 400",)), \
        "console errors beyond the refused image"
