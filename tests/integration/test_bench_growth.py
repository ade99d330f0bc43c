"""tests/bench/bench_growth.py (the benchmark of what grows with the work) keeps running: its quick sizes of the cheap rows, as
JSON. Nothing timed is asserted; only that every row came out and that the request after an append read
exactly the bytes appended (the Prometheus counter the benchmark reads)."""
import json
import subprocess
import sys

from conftest import BUILD, ROOT


def test_quick_rows_run():
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "bench" / "bench_growth.py"), "--build", str(BUILD),
                          "--quick", "--only", "startup,run_metrics", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout)
    assert got["startup"][0]["peak_rss_mib"] > 0
    assert len(got["run_metrics"]) == 3
    for row in got["run_metrics"]:
        assert row["bytes_read_for_append"] == row["append_bytes"] > 0, row
