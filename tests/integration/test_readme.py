"""README.md is executable: its shell blocks run as they are, in order, in a fresh folder (doc_blocks.py).

The folder holds what a checkout has beside the README that its blocks use: `build` (a link to the suite's
build folder) and a copy of `examples/` (the example configs read `tower-data/` next to their folder, so
it is a copy, never a link into the checkout). Ports 8080, 8081 and 6006 become free ones; RUN_ID becomes
`fashion-seed`, the name the README's example run carries (names work wherever ids do).
"""
import shutil

import pytest

import doc_blocks
from conftest import BUILD, ROOT

README = ROOT / "README.md"


@pytest.fixture
def shell(tmp_path):
    (tmp_path / "build").symlink_to(BUILD)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    sh = doc_blocks.Shell(tmp_path, placeholders={"RUN_ID": "fashion-seed"})
    yield sh
    sh.close()


def test_every_readme_shell_block_runs_or_says_why_not(shell):
    ran = doc_blocks.run_document(README, shell)
    found = doc_blocks.blocks(README)
    assert ran == sum(1 for b in found if b.lang == "sh" and not b.skip) and ran >= 4


def test_markers_name_a_reason_and_synopses_stay_synopses():
    found = doc_blocks.blocks(README)
    doc_blocks.check_kinds(README, found)
    skipped = [b for b in found if b.skip]
    assert all(len(b.skip) > 10 for b in skipped)
    assert any("Docker" in b.skip for b in skipped)
    assert any(b.lang == "" and b.text.startswith("tower upload") for b in found)  # the client synopsis
