"""The README's coverage command: scripts/coverage.sh builds a gcov configuration, runs its unit tests and prints
a table of line and branch coverage per source folder, read here as a person would (every folder a row, the
figures percentages of real counts). It needs lcov (scripts/install-deps.sh --test)."""
import re
import shutil
import subprocess

import pytest

from conftest import ROOT


def test_the_coverage_command_prints_a_table_per_folder(tmp_path):
    if not shutil.which("lcov"):
        pytest.skip("lcov is missing: scripts/install-deps.sh --test installs it")
    r = subprocess.run([str(ROOT / "scripts" / "coverage.sh"), str(tmp_path / "build-coverage")], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].split() == ["folder", "lines", "line", "%", "branches", "branch", "%"], r.stdout
    rows = {}
    for line in lines[1:]:
        m = re.match(r"([\w/]+)\s+(\d+) of (\d+)\s+([\d.]+)%\s+(\d+) of (\d+)\s+([\d.]+)%$", line)
        assert m, line
        name, lh, lf, lp, bh, bf, bp = m.groups()
        rows[name] = (int(lh), int(lf), float(lp), int(bh), int(bf), float(bp))
    assert list(rows) == ["base", "eventlog", "world", "kernels/cpu", "engine", "server", "client"], r.stdout
    for name, (lh, lf, lp, bh, bf, bp) in rows.items():
        assert lf > 0 and bf > 0 and lh <= lf and bh <= bf, (name, rows[name])  # every file counted
        assert lp == pytest.approx(100 * lh / lf, abs=0.06) and bp == pytest.approx(100 * bh / bf, abs=0.06)
        if name != "client":  # the client has no unit tests: its row is the integration suite's (--integration)
            assert lh > 0 and bh > 0, (name, rows[name])
